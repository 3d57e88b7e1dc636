"""The relative residual of a pure stack measured past float64's floor: the token mean and the
residual are propagated separately, so the residual is never formed by cancellation.

A plain float64 forward forms each block's output H = 1μᵀ + R and then R = H − 1·mean(H): once
‖R‖/‖H‖ nears 1e-16 that subtraction returns rounding error, and a doubly exponential collapse
reaches it within two or three blocks. Here the state is the pair (μ, R), R's token mean zero by
construction, and each mixer's formula is rewritten so that nothing that is O(‖R‖^k) is ever
obtained as the difference of two O(1) numbers. The algebra is exact: the pair gives the same
H as the plain forward (tests check the two agree where both are above the floor), only rounded
differently. What each mixer needs, with a row-stochastic P applied to H = 1μᵀ + R giving
P·H = 1μᵀ + P·R:

- softmax attention (scaled_dot, quadratic, metric, local, the frozen stochastic control): with
  q_i = q_μ + q_ri and k_j = k_μ + k_rj, the score q_i·k_j is a row constant (dropped: softmax
  does not see it) plus a_j = q_μ·k_rj plus b_ij = q_ri·k_rj. Then P = 1wᵀ + D with w = softmax(a)
  and D_ij = w_j (E_ij − z_i) / Z_i, E = expm1(b − max_j b), z_i = Σ_k w_k E_ik,
  Z_i = Σ_k w_k exp(b_ik − max b_i), every entry accurate to rounding however small b is (masked
  keys: b = −inf). The values v = v_μ + v_r give P v = 1(v_μ + wᵀv_r) + D v_r: the residual is
  res(D v_r), the mean v_μ + wᵀv_r + mean(D v_r).
- linear attention and FAVOR+ (y_i = φ(q_i)ᵀS / (φ(q_i)ᵀz + eps)): the features are split as
  φ(q_i) = φ̄ + g_i with g_i from expm1 (FAVOR+, including the per-query largest exponent it
  subtracts) or piecewise (elu + 1, relu), and S = z v_μᵀ + Σ_j g'_j v_rjᵀ (Σ_j v_rj = 0 is used
  exactly). The eps makes each row sum to c_i / (c_i + eps), not 1, so the mean leaks into the
  residual in proportion to eps (a real property of the mixer: its collapse turns singly
  exponential, by a factor of order eps / c per layer, once the residual is small enough);
  1/(c_i + eps) − 1/(c_0 + eps) = −(g_i·z) / ((c_i + eps)(c_0 + eps)) keeps that term exact.
- Nyström: its three softmax kernels are split as softmax attention is; the pseudo-inverse Z of
  the landmark kernel is formed in float64 as the mixer forms it, so the departure of Z·1 from 1
  (what a finite number of iterations leaves) is read to float64's rounding of it. Where the
  mixer computes exact softmax attention for the sequence (its short-sequence case), the
  softmax-attention rule is used instead.

Mixers whose stacks keep their residual (pooling, identity, fourier, token_mlp) never come near
the floor and are not rewritten: `split_residual_profile` refuses them, and a study measures them
by the plain float64 forward. A residual below float64's smallest normal number (about 1e-308)
cannot be held, so the measurement floor here is SPLIT_FLOOR.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
from einops import rearrange
from torch import nn

from attnzoo.analysis.controls import FrozenStochastic
from attnzoo.kernels.attention.naive import allowed_keys
from attnzoo.mixers.kernelized import Favor, LinearAttention
from attnzoo.mixers.nystrom import Nystrom, iterative_pinv
from attnzoo.mixers.softmax import (
    MetricTensorAttention,
    QuadraticFormAttention,
    ScaledDotAttention,
)
from attnzoo.rank import composite_norm

# Below this the split computation's own products (the residual cubed, for the cubic rate) leave
# float64's normal range: a residual under it is not read.
SPLIT_FLOOR = 1e-250

Split = tuple[torch.Tensor, torch.Tensor]  # (mean (B, ..., K), residual (B, ..., N, K))


def _center(r: torch.Tensor) -> torch.Tensor:
    return r - r.mean(dim=-2, keepdim=True)


def _linear(x: Split, layer: nn.Linear) -> Split:
    mu, r = x
    w = layer.weight.to(torch.float64)
    mu = mu @ w.T + (layer.bias.to(torch.float64) if layer.bias is not None else 0.0)
    return mu, r @ w.T


def _heads(x: Split, heads: int) -> Split:
    mu, r = x
    return (
        rearrange(mu, "b (h k) -> b h k", h=heads),
        rearrange(r, "b n (h k) -> b h n k", h=heads),
    )


def _merge(x: Split) -> Split:
    mu, r = x
    return rearrange(mu, "b h k -> b (h k)"), rearrange(r, "b h n k -> b n (h k)")


def _qkv(mixer: nn.Module, x: Split) -> tuple[Split, Split, Split]:
    mu, r = _linear(x, mixer.qkv)
    mus = rearrange(mu, "b (three h k) -> three b h k", three=3, h=mixer.heads)
    rs = rearrange(r, "b n (three h k) -> three b h n k", three=3, h=mixer.heads)
    return (mus[0], rs[0]), (mus[1], rs[1]), (mus[2], rs[2])


def softmax_split(
    a_k: torch.Tensor, b_qk: torch.Tensor, allowed: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """P = softmax_k(a_k + b_qk) over the allowed keys as w (…, K) and D (…, Q, K) with
    P = 1wᵀ + D exactly, every entry of D accurate to rounding however small b is."""
    w_k = a_k.softmax(dim=-1)
    if allowed is not None:
        b_qk = b_qk.masked_fill(~allowed, -math.inf)
    t_qk = b_qk - b_qk.amax(dim=-1, keepdim=True)
    e_qk = torch.expm1(t_qk)
    w_1k = w_k[..., None, :]
    big_z = (w_1k * torch.exp(t_qk)).sum(dim=-1, keepdim=True)
    small_z = (w_1k * e_qk).sum(dim=-1, keepdim=True)
    return w_k, w_1k * (e_qk - small_z) / big_z


def _attend(q: Split, k: Split, v: Split, scale: float, allowed: torch.Tensor | None) -> Split:
    """softmax(q kᵀ · scale) v on split inputs, per head: (mean (B, H, dv), residual)."""
    (q_mu, q_r), (_, k_r), (v_mu, v_r) = q, k, v
    a = torch.einsum("bhk,bhnk->bhn", q_mu, k_r) * scale
    b = (q_r @ k_r.transpose(-1, -2)) * scale
    w, d = softmax_split(a, b, allowed)
    dv = d @ v_r
    mean = v_mu + torch.einsum("bhn,bhnk->bhk", w, v_r) + dv.mean(dim=-2)
    return mean, _center(dv)


def _project(mixer: nn.Module, heads_out: Split) -> Split:
    return _linear(_merge(heads_out), mixer.proj)


def _scaled_dot(mixer: ScaledDotAttention, x: Split) -> Split:
    q, k, v = _qkv(mixer, x)
    n = x[1].shape[1]
    allowed = allowed_keys(n, mixer.causal, None, x[1].device, mixer.reach())
    return _project(mixer, _attend(q, k, v, q[0].shape[-1] ** -0.5, allowed))


def _quadratic(mixer: QuadraticFormAttention, x: Split) -> Split:
    mu, r = x
    u = mixer.u.to(torch.float64)
    q = (torch.einsum("bd,hde->bhe", mu, u), torch.einsum("bnd,hde->bhne", r, u))
    k = (mu[:, None].expand_as(q[0]), r[:, None].expand_as(q[1]))
    v = _heads(_linear(x, mixer.value), mixer.heads)
    allowed = allowed_keys(r.shape[1], mixer.causal, None, r.device)
    return _project(mixer, _attend(q, k, v, mixer.dim**-0.5, allowed))


def _metric(mixer: MetricTensorAttention, x: Split) -> Split:
    p = _heads(_linear(x, mixer.p), mixer.heads)
    m = mixer.metric().to(torch.float64)
    q = (torch.einsum("bhk,hkl->bhl", p[0], m), p[1] @ m[None])
    allowed = allowed_keys(x[1].shape[1], mixer.causal, None, x[1].device)
    return _project(mixer, _attend(q, p, p, mixer.dk**-0.5, allowed))


def _control(mixer: FrozenStochastic, x: Split) -> Split:
    mu, r = x
    n = r.shape[1]
    logits = mixer.logits_nn[:n, :n].to(torch.float64)
    allowed = allowed_keys(n, mixer.causal, None, r.device)
    w, d = softmax_split(torch.zeros(n, dtype=torch.float64), logits, allowed)
    dr = d @ r
    return mu + torch.einsum("n,bnd->bd", w, r) + dr.mean(dim=-2), _center(dr)


def _feature_split(mixer: nn.Module, t: Split, queries: bool) -> Split:
    """φ(t_i) = φ̄ + g_i for the mixer's feature map: (φ̄ (B, H, F), g (B, H, N, F))."""
    t_mu, t_r = t
    if isinstance(mixer, Favor):
        scale = mixer.dk**-0.25
        omega = mixer.omega_mk.to(torch.float64)
        t_mu, t_r = t_mu * scale, t_r * scale
        u_mu = t_mu @ omega.T - t_mu.pow(2).sum(-1, keepdim=True) / 2  # (B, H, F)
        du = t_r @ omega.T - (
            (t_mu[:, :, None] * t_r).sum(-1, keepdim=True) + t_r.pow(2).sum(-1, keepdim=True) / 2
        )
        root_m = math.sqrt(mixer.features)
        if not queries:
            base = u_mu.exp() / root_m
            return base, base[:, :, None] * torch.expm1(du)
        # each query's largest exponent is subtracted: exp(u_i − u_i[m_i]) / √m, m_i its argmax
        top = u_mu.argmax(-1, keepdim=True)
        base = (u_mu - u_mu.gather(-1, top)).exp() / root_m
        m_i = (u_mu[:, :, None] + du).argmax(-1, keepdim=True)  # (B, H, N, 1)
        u_mu_n = u_mu[:, :, None].expand_as(du)
        shift = du.gather(-1, m_i) + (u_mu_n.gather(-1, m_i) - u_mu.gather(-1, top)[:, :, None])
        return base, base[:, :, None] * torch.expm1(du - shift)
    x, h = t_mu[:, :, None].expand_as(t_r), t_r
    after = x + h
    if mixer.feature_map == "identity":
        return t_mu, t_r
    if mixer.feature_map == "relu":
        g = torch.where((x > 0) & (after > 0), h, torch.zeros_like(h))
        cross = (x > 0) != (after > 0)
        g = torch.where(cross, torch.relu(after) - torch.relu(x), g)
        return torch.relu(t_mu), g
    # elu + 1: x + 1 above 0, exp(x) at or below
    g = torch.where(x > 0, h, torch.exp(x) * torch.expm1(h))
    g = torch.where((x <= 0) & (after > 0), after - torch.expm1(x), g)
    g = torch.where((x > 0) & (after <= 0), torch.expm1(after) - x, g)
    return torch.nn.functional.elu(t_mu) + 1, g


def _kernelized(mixer: LinearAttention | Favor, x: Split) -> Split:
    if mixer.causal:
        raise NotImplementedError("the split rule for linear attention is written non-causal")
    q, k, (v_mu, v_r) = _qkv(mixer, x)
    fq, gq = _feature_split(mixer, q, queries=True)
    fk, gk = _feature_split(mixer, k, queries=False)
    n = x[1].shape[1]
    z = n * fk + gk.sum(dim=2)  # (B, H, F)
    t = torch.einsum("bhnf,bhnv->bhfv", gk, v_r)  # Σ_j φ(k_j) v_rjᵀ, using Σ_j v_rj = 0
    c0 = (fq * z).sum(-1, keepdim=True)  # (B, H, 1)
    dc = torch.einsum("bhnf,bhf->bhn", gq, z)
    inv0 = 1.0 / (c0 + mixer.eps)
    inv = 1.0 / (c0 + dc + mixer.eps)
    dinv = -dc * inv * inv0  # 1/(c_i + eps) − 1/(c_0 + eps), exactly
    dinv_c = dinv - dinv.mean(-1, keepdim=True)
    base_t = torch.einsum("bhf,bhfv->bhv", fq, t)  # φ̄ᵀ T
    g_t = torch.einsum("bhnf,bhfv->bhnv", gq, t) * inv[..., None]  # g_iᵀT / (c_i + eps)
    # y_i = v_μ · c_i/(c_i + eps) + (φ̄ᵀT + g_iᵀT) / (c_i + eps)
    resid = (
        (-mixer.eps * dinv_c)[..., None] * v_mu[:, :, None]
        + base_t[:, :, None] * dinv_c[..., None]
        + _center(g_t)
    )
    share = (c0 + dc) * inv  # c_i / (c_i + eps)
    mean = (
        v_mu * share.mean(-1, keepdim=True) + base_t * inv.mean(-1, keepdim=True) + g_t.mean(dim=-2)
    )
    return _project(mixer, (mean, _center(resid)))


def _nystrom_is_exact(mixer: Nystrom, n: int) -> bool:
    """Whether the mixer computes exact softmax attention for n tokens (its short-sequence case),
    read off its own output on a random input."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, n, mixer.dim, generator=gen, dtype=torch.float64)
    q, k, v = mixer._qkv(x)
    want = ((q @ k.transpose(-1, -2)) * mixer.dk**-0.5).softmax(-1) @ v
    got = mixer.attend(x)
    return bool((got - want).abs().max() <= 1e-10 * want.abs().max())


def _nystrom(mixer: Nystrom, x: Split) -> Split:
    n = x[1].shape[1]
    if _nystrom_is_exact(mixer, n):
        q, k, v = _qkv(mixer, x)
        return _project(mixer, _attend(q, k, v, mixer.dk**-0.5, None))
    (q_mu, q_r), (k_mu, k_r), (v_mu, v_r) = _qkv(mixer, x)
    m = min(mixer.landmarks, n)
    segment_n = torch.arange(n) * m // n
    seg_mn = (segment_n[None, :] == torch.arange(m)[:, None]).to(torch.float64)
    seg_mn = seg_mn / seg_mn.sum(-1, keepdim=True)  # rows sum to 1: the landmark means
    ql_r = torch.einsum("mn,bhnk->bhmk", seg_mn, q_r)
    kl_r = torch.einsum("mn,bhnk->bhmk", seg_mn, k_r)
    scale = mixer.dk**-0.5

    def kernel(rows_r: torch.Tensor, cols_r: torch.Tensor):
        a = torch.einsum("bhk,bhnk->bhn", q_mu, cols_r) * scale
        return softmax_split(a, (rows_r @ cols_r.transpose(-1, -2)) * scale)

    w1, d1 = kernel(q_r, kl_r)  # (B, H, N, m)
    w2, d2 = kernel(ql_r, kl_r)  # (B, H, m, m)
    w3, d3 = kernel(ql_r, k_r)  # (B, H, m, N)
    pinv = iterative_pinv(w2[..., None, :] + d2, mixer.pinv_iterations)
    y3_mu = v_mu + torch.einsum("bhn,bhnk->bhk", w3, v_r)  # K3 v = 1 y3_μᵀ + D3 v_r
    y3_r = d3 @ v_r
    zeta_1 = pinv.sum(-1) - 1.0  # Z·1 − 1
    z_y3 = pinv @ y3_r
    # K1 Z K3 v = 1(w1ᵀ(Z1))y3_μᵀ + 1 w1ᵀ Z y3_r + D1(Z1 − 1) y3_μᵀ + D1 Z y3_r  (D1·1 = 0)
    leak = torch.einsum("bhnm,bhm->bhn", d1, zeta_1)[..., None] * y3_mu[:, :, None]
    rest = d1 @ z_y3
    mean = (
        y3_mu * (1.0 + torch.einsum("bhm,bhm->bh", w1, zeta_1))[..., None]
        + torch.einsum("bhm,bhmk->bhk", w1, z_y3)
        + (leak + rest).mean(dim=-2)
    )
    return _project(mixer, (mean, _center(leak + rest)))


# The rule per mixer class; a subclass uses its nearest listed base's (LocalAttention,
# ScaledDotAttention within a window, uses ScaledDotAttention's).
RULES: dict[type, Callable[[nn.Module, Split], Split]] = {
    ScaledDotAttention: _scaled_dot,
    QuadraticFormAttention: _quadratic,
    MetricTensorAttention: _metric,
    LinearAttention: _kernelized,
    Favor: _kernelized,
    Nystrom: _nystrom,
    FrozenStochastic: _control,
}


def rule_for(mixer: nn.Module) -> Callable[[nn.Module, Split], Split] | None:
    """The split rule for `mixer`, None for a mixer without one. A softmax with a sink has rows
    that sum to less than 1, which the rules assume they do not, and an output gate multiplies
    each head's output by a function of its input, which no rule propagates: neither has one."""
    if getattr(mixer, "sink_logit", None) is not None:
        return None
    if getattr(mixer, "output_gate", "none") != "none":
        return None
    return next((rule for cls, rule in RULES.items() if isinstance(mixer, cls)), None)


def supports_split(model: nn.Module) -> bool:
    """Whether `model` is a pure stack (no skip, MLP, norm or depth mixing) of mixers with a rule."""
    c = model.config
    return (
        model.residual.kind == "none"
        and not c.mlp
        and c.norm == "none"
        and model.depth_mixing is None
        and all(rule_for(b.mixer) is not None for b in model.blocks)
    )


@torch.no_grad()
def split_residual_profile(model: nn.Module, tokens: torch.Tensor) -> list[float]:
    """The relative residual ‖R‖/‖1μᵀ + R‖ (attnzoo.rank.relative_residual, composite norm) of
    the embedding and of every block's output of a pure stack, batch mean, in float64 with the
    mean and residual propagated separately (module docstring): depth + 1 values, comparable with
    `rank_profile(model, tokens, dtype=torch.float64).mean` and readable down to SPLIT_FLOOR."""
    if not supports_split(model):
        raise ValueError(
            "split_residual_profile needs a pure stack (residual none, no MLP, norm none) of "
            f"mixers with a split rule ({', '.join(c.__name__ for c in RULES)})"
        )
    model = copy.deepcopy(model).to(torch.float64).eval()  # as the plain float64 probe does
    h = model.embed(tokens)
    if model.pos is not None:
        h = h + model.pos[: tokens.shape[1]]
    mu = h.mean(dim=1)
    x: Split = (mu, h - mu[:, None])
    out = [_relative(x)]
    for block in model.blocks:
        x = rule_for(block.mixer)(block.mixer, x)
        x = (x[0], _center(x[1]))
        out.append(_relative(x))
    return out


def _relative(x: Split) -> float:
    mu, r = x
    # the norm multiplies two abs-sums: scaled to 1 first, so that it does not underflow at 1e-154
    scale = r.abs().amax(dim=(1, 2)).clamp_min(torch.finfo(torch.float64).tiny)
    ratio = composite_norm(r / scale[:, None, None]) * scale / composite_norm(mu[:, None] + r)
    return float(ratio.mean())


__all__ = ["SPLIT_FLOOR", "softmax_split", "split_residual_profile", "supports_split"]
