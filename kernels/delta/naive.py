"""delta_rule in PyTorch: the recurrence as written, and the chunked (WY/UT) form.

Per batch and head, with q_t, k_t of width K, v_t of width V, a write strength β_t and a log
decay g_t ≤ 0 (0: DeltaNet; data-dependent: Gated DeltaNet), the state S (K × V) is

    S_t = exp(g_t) · (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,    o_t = scale · S_tᵀ q_t,

i.e. the decayed state's prediction for k_t is corrected towards v_t by a step β_t:
S_t = S̃ + β_t k_t (v_t − S̃ᵀ k_t)ᵀ with S̃ = exp(g_t) S_{t−1} (Schlag et al. 2021; Yang et al.
2024, arXiv 2406.06484; Yang et al. 2024, arXiv 2412.06464). This is the transpose of the
papers' V × K state; nothing else differs.

`recurrent` is that loop, one token at a time, in the dtype it is given (float64 makes it the
truth the tests hold everything else to). `chunked` is the PyTorch path of the op: inside a
chunk of C tokens, with b_t = g_1 + … + g_t the cumulative log decay from the chunk's start,
D_ti = exp(b_t − b_i) for i ≤ t and the chunk's start state S₀, the corrections u_t (rows of U,
with S_t = e^{b_t} S₀ + Σ_{i ≤ t} D_ti k_i u_iᵀ) solve the unit lower-triangular system

    (I + A) U = diag(β) V − diag(β e^{b}) K S₀,    A_ti = β_t D_ti k_tᵀ k_i  (i < t),

so U = U′ − W S₀ with U′ = (I + A)⁻¹ diag(β) V and W = (I + A)⁻¹ diag(β e^{b}) K, both for every
chunk at once (the UT transform; one batched triangular solve); then chunk by chunk

    O = scale · [ diag(e^{b}) Q S₀ + (Q Kᵀ ⊙ D) U ],    S_end = e^{b_C} S₀ + (D_C· ⊙ K)ᵀ U.

Every exponent is a sum of log decays over a stretch inside one chunk (≤ 0), summed over its own
stretch as the gated op's are. Computed in fp32 (fp64 for fp64 inputs); the output in q's
dtype, the final state in the compute dtype. Its backward is autograd through these operations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from .._op import accumulate_dtype

CHUNK = 64  # tokens per chunk of the PyTorch path


def recurrent(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    beta_bhn: torch.Tensor,
    log_decay_bhn: torch.Tensor | None,
    scale: float,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(o (B, H, N, V), final state (B, H, K, V)), one token at a time, in the inputs' dtype."""
    b, h, n, kd = q_bhnk.shape
    s_bhkv = q_bhnk.new_zeros(b, h, kd, v_bhnv.shape[-1])
    if initial_state is not None:
        s_bhkv = s_bhkv + initial_state
    outs = []
    for t in range(n):
        if log_decay_bhn is not None:
            s_bhkv = log_decay_bhn[:, :, t, None, None].exp() * s_bhkv
        k_bhk = k_bhnk[:, :, t]
        error_bhv = v_bhnv[:, :, t] - torch.einsum("bhkv,bhk->bhv", s_bhkv, k_bhk)
        s_bhkv = s_bhkv + beta_bhn[:, :, t, None, None] * k_bhk[..., None] * error_bhv[:, :, None]
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", q_bhnk[:, :, t], s_bhkv))
    o = torch.stack(outs, dim=2) if outs else v_bhnv.new_zeros(b, h, 0, v_bhnv.shape[-1])
    return o, s_bhkv


def _stretch_sums(g_bhct: torch.Tensor) -> torch.Tensor:
    """(…, C) -> (…, C, C): entry (t, i) is Σ_{i < u ≤ t} g_u for i ≤ t, −inf above."""
    c = g_bhct.shape[-1]
    idx = torch.arange(c, device=g_bhct.device)
    after = idx[:, None] > idx[None, :]  # [u, i]: u > i
    stretch = torch.where(after, g_bhct[..., :, None], 0.0).cumsum(dim=-2)
    return stretch.masked_fill(idx[:, None] < idx[None, :], float("-inf"))


def chunked(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    beta_bhn: torch.Tensor,
    log_decay_bhn: torch.Tensor | None,
    scale: float,
    initial_state: torch.Tensor | None = None,
    chunk: int = CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked form of `recurrent` (the module docstring): (o in q's dtype, final state in
    fp32, or fp64 for fp64 inputs)."""
    dtype, ct = q_bhnk.dtype, accumulate_dtype(q_bhnk)
    b, h, n, kd = q_bhnk.shape
    dv = v_bhnv.shape[-1]
    s_bhkv = q_bhnk.new_zeros(b, h, kd, dv, dtype=ct)
    if initial_state is not None:
        s_bhkv = s_bhkv + initial_state.to(ct)
    if n == 0:
        return v_bhnv.new_zeros(b, h, 0, dv), s_bhkv
    g_bhn = torch.zeros_like(beta_bhn, dtype=ct) if log_decay_bhn is None else log_decay_bhn
    # whole chunks: padded tokens have k = v = 0, β = 0 and decay 1, so they change nothing
    pad = -n % chunk
    q, k, v = (
        rearrange(F.pad(t.to(ct), (0, 0, 0, pad)), "b h (c t) d -> b h c t d", t=chunk)
        for t in (q_bhnk, k_bhnk, v_bhnv)
    )
    beta, g = (
        rearrange(F.pad(t.to(ct), (0, pad)), "b h (c t) -> b h c t", t=chunk)
        for t in (beta_bhn, g_bhn)
    )
    rel = _stretch_sums(g)  # (b, h, c, t, i): log D_ti
    decay = rel.exp()  # D, 0 above the diagonal
    start = g.cumsum(dim=-1)  # b_t, from the chunk's start
    strictly = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril(-1)
    a = (beta[..., None] * decay * (k @ k.transpose(-1, -2))).masked_fill(~strictly, 0.0)
    eye = torch.eye(chunk, dtype=ct, device=q.device)
    rhs = torch.cat([beta[..., None] * v, (beta * start.exp())[..., None] * k], dim=-1)
    solved = torch.linalg.solve_triangular(eye + a, rhs, upper=False, unitriangular=True)
    u_prime, w = solved.split([dv, kd], dim=-1)
    scores = (q @ k.transpose(-1, -2)) * decay  # Q Kᵀ ⊙ D, causal inside the chunk
    q_start = q * start.exp()[..., None]
    k_end = k * decay[..., -1, :, None]  # D_{C,i} k_i: decayed to the chunk's end
    end = start[..., -1].exp()
    outs = []
    for c in range(q.shape[2]):
        u = u_prime[:, :, c] - w[:, :, c] @ s_bhkv
        outs.append(scale * (q_start[:, :, c] @ s_bhkv + scores[:, :, c] @ u))
        s_bhkv = end[:, :, c, None, None] * s_bhkv + k_end[:, :, c].transpose(-1, -2) @ u
    o = rearrange(torch.stack(outs, dim=2), "b h c t v -> b h (c t) v")[:, :, :n]
    return o.to(dtype), s_bhkv
