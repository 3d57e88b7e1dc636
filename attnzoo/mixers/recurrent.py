"""The recurrent mixers: a state that decays and takes in one key-value product per token,

    S_t = diag(α_t) S_{t−1} + k_t v_tᵀ,    o_t = scale · S_tᵀ q_t,

all run through the op `attnzoo.kernels.gated_linear_attention` (a chunked Triton kernel on GPU):
RetNet's retention (a fixed decay per head) and gated linear attention (GLA: a decay per token
and key dimension); Mamba-2 (a decay per token and head) is in `attnzoo.mixers.state_space`.

Unrolled, o_i = Σ_{j ≤ i} M_ij v_j with the hidden attention matrix
M_ij = scale · q_iᵀ diag(∏_{k=j+1..i} α_k) k_j (Ali et al. 2024, arXiv 2403.01590), which
`attention_probs` gives. Its rows are not distributions (entries of either sign, no normaliser),
so the attention-entropy measure reads n/a for these mixers (`rows_are_distributions = False`).

On a bidirectional task (causal=False) each runs the scan over the sequence and over its reverse
and sums the two (as bidirectional state-space encoders do); the token itself is then counted in
both. docs/mixers.md gives each one's formula, paper, options and where attnzoo departs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from attnzoo import kernels
from attnzoo.mixers.base import _check_heads, _check_input, _positive
from attnzoo.mixers.registry import register


def segment_sums(log_decay: torch.Tensor) -> torch.Tensor:
    """(..., N) -> (..., N, N): entry (i, j) is Σ_{k=j+1..i} log_decay_k for j ≤ i (0 on the
    diagonal) and −inf above it; each sum over its own stretch, not a difference of cumulative
    sums, so its rounding is relative to it (Mamba-2's `segsum`)."""
    n = log_decay.shape[-1]
    below = torch.ones(n, n, dtype=torch.bool, device=log_decay.device).tril(-1)
    stretch = log_decay[..., :, None].expand(*log_decay.shape, n).masked_fill(~below, 0.0)
    sums = stretch.cumsum(dim=-2)
    return sums.masked_fill(~below.logical_or(below.T.logical_not()), float("-inf"))


def hidden_attention(
    q_bhnk: torch.Tensor, k_bhnk: torch.Tensor, log_decay: torch.Tensor, scale: float
) -> torch.Tensor:
    """The causal hidden attention matrix, (B, H, N, N): M_ij = scale · Σ_d q_id k_jd
    exp(Σ_{k=j+1..i} log_decay_kd) for j ≤ i, 0 above the diagonal. `log_decay` (B, H, N) is
    one decay per token, (B, H, N, K) one per key dimension. Memory B·H·N²(·K): for N small
    enough to materialise."""
    compute = torch.promote_types(q_bhnk.dtype, torch.float32)
    q, k, g = q_bhnk.to(compute), k_bhnk.to(compute), log_decay.to(compute)
    if g.dim() == 3:
        return scale * (q @ k.transpose(-1, -2)) * segment_sums(g).exp()
    decay_bhkij = segment_sums(rearrange(g, "b h n k -> b h k n")).exp()
    return scale * torch.einsum("bhik,bhjk,bhkij->bhij", q, k, decay_bhkij)


def scan_flops(heads: int, key_width: int, value_width: int, causal: bool) -> float:
    """Forward matmul FLOPs per token of the recurrence, in its recurrent form: the state update
    k_t v_tᵀ and the read-out S_tᵀ q_t, 2 · K_h · V_h multiply-adds each per head (the decay is
    elementwise, not counted; the chunked form costs about as much); twice with the reversed
    scan of a bidirectional task."""
    return (1 if causal else 2) * 4 * heads * key_width * value_width


class _Recurrent(nn.Module):
    """What the recurrent mixers share: `operands(x, mask)` gives the op's q, k, v, log decay and
    scale; `mixing` runs the op on them (both directions when not causal), `attention_probs` is
    the matrix M with M·v = `mixing`; `finish(o, x, mask)` is the rest (norm, gate, output
    projection)."""

    rows_are_distributions = False  # the hidden attention matrix: no normaliser, either sign
    drops_attention = False  # attn_dropout is accepted and unused: no probabilities to drop

    def _init_common(self, dim: int, heads: int, causal: bool, impl: str) -> None:
        _check_heads(dim, heads)
        self.dim, self.heads, self.causal, self.impl = dim, heads, causal, impl

    def operands(self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None):
        raise NotImplementedError

    def finish(
        self, o_bhnv: torch.Tensor, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None
    ) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def _masked(x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
        """x with padding tokens zeroed: they then give no key and no value."""
        if key_padding_mask is None:
            return x_bnd
        return x_bnd.masked_fill(key_padding_mask[..., None].to(torch.bool), 0.0)

    def _scan(self, q, k, v, log_decay, scale) -> torch.Tensor:
        return kernels.gated_linear_attention(q, k, v, log_decay, scale=scale, impl=self.impl)

    def mixing(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The sequence-mixing output Σ_j M_ij v_j, (B, H, N, V): the op's, before `finish`."""
        return self._mix(*self.operands(x_bnd, key_padding_mask))

    def _mix(self, q, k, v, g, scale) -> torch.Tensor:
        out = self._scan(q, k, v, g, scale)
        if not self.causal:  # the scan over the reversed sequence, flipped back
            flip = lambda t: tuple(map(flip, t)) if isinstance(t, tuple) else t.flip(2)
            out = out + flip(self._scan(flip(q), flip(k), flip(v), flip(g), scale))
        return out

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The hidden attention matrix M, (B, H, N, N), with M·v = `mixing` (v the op's values):
        lower-triangular when causal; when not, plus the reversed scan's upper-triangular one.
        Not a distribution per row."""
        q, k, _, g, scale = self.operands(x_bnd, key_padding_mask)
        m = hidden_attention(q, k, g, scale)
        if not self.causal:
            m = m + hidden_attention(q.flip(2), k.flip(2), g.flip(2), scale).flip(2, 3)
        return m

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.finish(self.mixing(x_bnd, key_padding_mask), x_bnd, key_padding_mask)


def _swish_gate_out(
    mixer: nn.Module, o_bhnv: torch.Tensor, x_bnd: torch.Tensor, norm: nn.Module
) -> torch.Tensor:
    """out(norm(o) ⊙ swish(x W_g)): the per-head norm, the output gate and projection that
    retention and GLA share; `norm` takes (B, N, H, V)."""
    o_bnhv = norm(rearrange(o_bhnv, "b h n v -> b n h v"))
    gated = rearrange(o_bnhv, "b n h v -> b n (h v)") * F.silu(mixer.gate(x_bnd))
    return mixer.proj(gated)


class _HeadNorm(nn.Module):
    """RetNet's GroupNorm with one group per head (a LayerNorm over each head's V channels, one
    affine pair per channel), or, with `rms`, an RMSNorm over each head's channels with one
    weight per channel shared by the heads (GLA's, as flash-linear-attention's)."""

    def __init__(self, heads: int, width: int, rms: bool, eps: float = 1e-5) -> None:
        super().__init__()
        self.rms, self.eps = rms, eps
        self.weight = nn.Parameter(torch.ones(width if rms else heads * width))
        self.bias = None if rms else nn.Parameter(torch.zeros(heads * width))

    def forward(self, o_bnhv: torch.Tensor) -> torch.Tensor:
        o_bnhv = o_bnhv.to(torch.promote_types(o_bnhv.dtype, self.weight.dtype))
        if self.rms:
            return F.rms_norm(o_bnhv, o_bnhv.shape[-1:], self.weight, self.eps)
        h, v = o_bnhv.shape[-2:]
        normed = F.layer_norm(o_bnhv, (v,), eps=self.eps)
        return normed * self.weight.view(h, v) + self.bias.view(h, v)


def _xavier_(weights_gains) -> None:
    for w, gain in weights_gains:
        nn.init.xavier_normal_(w, gain=gain)


@register("retention")
class Retention(_Recurrent):
    """RetNet's multi-scale retention (Sun et al. 2023, arXiv 2307.08621), its recurrent form per
    head h:

        S_n = γ_h S_{n−1} + k_nᵀ v_n,   o_n = q_n S_n / √dk,   γ_h = 1 − 2^(−5−h),

    i.e. (Q Kᵀ ⊙ D) V with D_nm = γ^(n−m) for n ≥ m; then GroupNorm per head, the swish gate and
    the output projection: out(GroupNorm(o) ⊙ swish(x W_G)). No xPos: positions come from the
    model's position embedding. Values have width D (the paper's 2D) so that it has 5 D²
    parameters (and 2 D in the norm). `attn_dropout` is accepted and unused, as linear's.
    """

    def __init__(
        self, dim: int, heads: int, causal: bool, impl: str, attn_dropout: float = 0.0
    ) -> None:
        super().__init__()
        self._init_common(dim, heads, causal, impl)
        self.dk = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.gate = nn.Linear(dim, dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm = _HeadNorm(heads, self.dk, rms=False)
        self.register_buffer("log_gamma", self.gammas(heads).log(), persistent=False)

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """q, k, v, gate and output projections 10 D²; the scan (`scan_flops`, K_h = V_h = dk)."""
        return 10 * dim * dim + scan_flops(heads, dim // heads, dim // heads, causal)

    @staticmethod
    def gammas(heads: int) -> torch.Tensor:
        """The per-head decays γ_h = 1 − 2^(−5−h), h = 0..H−1 (RetNet's multi-scale schedule)."""
        return 1 - 2.0 ** (-5 - torch.arange(heads, dtype=torch.float64))

    def operands(self, x_bnd, key_padding_mask=None):
        _check_input(x_bnd, self.dim)
        x_bnd = self._masked(x_bnd, key_padding_mask)
        q, k, v = rearrange(
            self.qkv(x_bnd), "b n (three h k) -> three b h n k", three=3, h=self.heads
        )
        b, n = x_bnd.shape[:2]
        g = self.log_gamma.to(device=x_bnd.device)[None, :, None].expand(b, self.heads, n)
        return q, k, v, g, self.dk**-0.5

    def finish(self, o_bhnv, x_bnd, key_padding_mask=None):
        return _swish_gate_out(self, o_bhnv, x_bnd, self.norm)

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init: gain 1 on Wq, Wk and the gate, `beta` on Wv and the output."""
        w_q, w_k, w_v = self.qkv.weight.data.chunk(3, dim=0)
        _xavier_(
            [
                (w_q, 1.0),
                (w_k, 1.0),
                (w_v, beta),
                (self.gate.weight.data, 1.0),
                (self.proj.weight.data, beta),
            ]
        )


@register("gla")
class GatedLinearAttention(_Recurrent):
    """Gated linear attention (Yang et al. 2023, arXiv 2312.06635), per head:

        S_t = diag(α_t) S_{t−1} + k_t v_tᵀ,   o_t = S_tᵀ q_t / √dk,
        α_t = σ(x_t W₁ W₂ + b)^(1/τ)   (one decay per key dimension; low rank r, τ = 16),

    so log α_t = logsigmoid(x_t W₁ W₂ + b) / τ; then an RMSNorm per head, the swish output gate
    and the output projection: out(RMSNorm(o) ⊙ swish(x W_G)). Queries and keys have width
    `expand_k` · D (the paper's 0.5), values D. `attn_dropout` is accepted and unused.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        expand_k: float = 0.5,
        gate_low_rank: int = 16,
        gate_normalizer: float = 16.0,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self._init_common(dim, heads, causal, impl)
        _positive(expand_k, "expand_k", float)
        _positive(gate_low_rank, "gate_low_rank")
        _positive(gate_normalizer, "gate_normalizer", float)
        key_dim = round(dim * expand_k)
        if key_dim < heads or key_dim % heads:
            raise ValueError(
                f"expand_k={expand_k} gives keys of width {key_dim} for dim={dim}, which must be a "
                f"positive multiple of heads={heads}"
            )
        self.key_dim, self.dk, self.tau = key_dim, key_dim // heads, float(gate_normalizer)
        self.qk = nn.Linear(dim, 2 * key_dim, bias=False)
        self.value = nn.Linear(dim, dim, bias=False)
        self.decay = nn.Sequential(
            nn.Linear(dim, gate_low_rank, bias=False), nn.Linear(gate_low_rank, key_dim)
        )
        self.gate = nn.Linear(dim, dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm = _HeadNorm(heads, dim // heads, rms=True)

    @staticmethod
    def flops_per_token(
        dim: int,
        heads: int,
        seq_len: int,
        causal: bool,
        expand_k: float = 0.5,
        gate_low_rank: int = 16,
        **options: object,
    ) -> float:
        """q and k 4 D K (K = expand_k · D), value, gate and output projections 6 D², the decay's
        low-rank projection 2 r (D + K); the scan (`scan_flops`, K_h = K / H, V_h = D / H)."""
        key_dim = round(dim * expand_k)
        projections = 4 * dim * key_dim + 6 * dim * dim + 2 * gate_low_rank * (dim + key_dim)
        return projections + scan_flops(heads, key_dim // heads, dim // heads, causal)

    def operands(self, x_bnd, key_padding_mask=None):
        _check_input(x_bnd, self.dim)
        x_bnd = self._masked(x_bnd, key_padding_mask)
        split = lambda t: rearrange(t, "b n (h k) -> b h n k", h=self.heads)
        q, k = (split(t) for t in self.qk(x_bnd).chunk(2, dim=-1))
        log_alpha = (
            F.logsigmoid(self.decay(x_bnd).to(torch.promote_types(x_bnd.dtype, torch.float32)))
            / self.tau
        )
        return q, k, split(self.value(x_bnd)), split(log_alpha), self.dk**-0.5

    def finish(self, o_bhnv, x_bnd, key_padding_mask=None):
        return _swish_gate_out(self, o_bhnv, x_bnd, self.norm)

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init: gain 1 on Wq, Wk, the decay's and the gate, `beta` on Wv and the
        output."""
        _xavier_(
            [
                (self.qk.weight.data, 1.0),
                (self.value.weight.data, beta),
                (self.gate.weight.data, 1.0),
                (self.proj.weight.data, beta),
            ]
        )
