"""gated_linear_attention in PyTorch: the recurrence as written, and the chunked form.

Per batch and head, with q_t, k_t of width K, v_t of width V and a log decay g_t ≤ 0 that is
one number per token (RetNet's constant, Mamba-2's Δ·A; shape (B, H, N)) or one per key
dimension (GLA; shape (B, H, N, K)):

    S_t = diag(exp(g_t)) S_{t−1} + k_t v_tᵀ    (K × V, S_{−1} = the initial state or 0)
    o_t = scale · S_tᵀ q_t

`recurrent` is that loop, one token at a time, in the dtype it is given (float64 makes it the
truth the tests hold everything else to). `chunked` is the PyTorch path of the op: chunks of
`chunk` tokens, a sequential walk over chunks for the state and, inside a chunk, with
b_t = g_1 + … + g_t the cumulative log decay from the chunk's start (b_0 = 0 before it),

    o_t = scale · [ (q_t ⊙ exp(b_t))ᵀ S_start + Σ_{s ≤ t} (q_t ⊙ exp(b_t − b_s)) · k_s v_s ]
    S_end = diag(exp(b_T)) S_start + Σ_s diag(exp(b_T − b_s)) k_s v_sᵀ

Every exponent is a sum of log decays over a stretch inside one chunk, so it is ≤ 0 and no
factor overflows, however long the sequence and however strong the decay. b_t − b_s is summed
over its own stretch (a cumulative sum that starts after s, as Mamba-2's `segsum` does), not
subtracted, so its rounding is relative to it rather than to b_t, and it is formed for s ≤ t
only (the other entries are exp(−inf) = 0, so no inf reaches a product or a gradient). The
factorisation q ⊙ exp(b_t) times k ⊙ exp(−b_s) that would make the block one matrix product is
not used: exp(−b_s) overflows fp32 beyond a cumulative decay of −88 inside a chunk.
Computed in fp32 (fp64 for fp64 inputs); the output in q's dtype, the final state in the compute
dtype. Its backward is autograd through these operations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from .._op import accumulate_dtype

# Tokens per chunk of the PyTorch path. A per-key decay materialises a chunk × chunk × K decay
# tensor, so its cost per token grows with the chunk; a per-token one is chunk × chunk, and there
# longer chunks mean fewer, larger matrix products and fewer steps of the loop over chunks. On a
# CPU (forward and backward, widths 8-32 per head, 64-1024 tokens) 16 was 2-2.7x faster than 32
# per key, and 32 the fastest per token.
CHUNK = 32
KEY_CHUNK = 16


def _per_key(log_decay: torch.Tensor) -> torch.Tensor:
    """(B, H, N) -> (B, H, N, 1); (B, H, N, K) as it is: a decay that broadcasts over K."""
    return log_decay[..., None] if log_decay.dim() == 3 else log_decay


def recurrent(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    log_decay: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(o (B, H, N, V), final state (B, H, K, V)), one token at a time, in the inputs' dtype."""
    b, h, n, kd = q_bhnk.shape
    g_bhnk = _per_key(log_decay)
    s_bhkv = q_bhnk.new_zeros(b, h, kd, v_bhnv.shape[-1])
    if initial_state is not None:
        s_bhkv = s_bhkv + initial_state
    outs = []
    for t in range(n):
        s_bhkv = (
            g_bhnk[:, :, t, :, None].exp() * s_bhkv
            + k_bhnk[:, :, t, :, None] * v_bhnv[:, :, t, None, :]
        )
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", q_bhnk[:, :, t], s_bhkv))
    o = torch.stack(outs, dim=2) if outs else v_bhnv.new_zeros(b, h, 0, v_bhnv.shape[-1])
    return o, s_bhkv


def sample_log_decay(*size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """A log decay as the mixers' gates give one: −softplus(x − 1), x standard normal, fp32 on
    the CPU, in about (−2.5, 0) with median −0.31. What the kernel benchmark times the op on; `size` (B, H, N) draws one decay per token, (B, H, N, K) one per key
    dimension."""
    return -F.softplus(torch.randn(*size, generator=generator) - 1)


def chunked(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    log_decay: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor | None = None,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked form of `recurrent` (the module docstring): (o in q's dtype, final state in
    fp32, or fp64 for fp64 inputs). `chunk` defaults to CHUNK for a per-token decay and KEY_CHUNK
    for a per-key one."""
    if chunk is None:
        chunk = CHUNK if log_decay.dim() == 3 else KEY_CHUNK
    dtype, ct = q_bhnk.dtype, accumulate_dtype(q_bhnk)
    b, h, n, kd = q_bhnk.shape
    dv = v_bhnv.shape[-1]
    q_bhnk, k_bhnk, v_bhnv = q_bhnk.to(ct), k_bhnk.to(ct), v_bhnv.to(ct)
    g_bhng = _per_key(log_decay).to(ct)  # g: 1 (one decay per token) or K
    # whole chunks: padded tokens have k = 0 and decay 1, so they change neither o nor S
    pad = (0, 0, 0, -n % chunk)
    q_bhctk, k_bhctk, v_bhctv, g_bhctg = (
        rearrange(F.pad(t, pad), "b h (c t) d -> b h c t d", t=chunk)
        for t in (q_bhnk, k_bhnk, v_bhnv, g_bhng)
    )
    b_bhctg = g_bhctg.cumsum(dim=3)  # log decay from the chunk's start, inclusive
    # rel[t, s] = Σ_{s < u ≤ t} g_u, summed over the stretch itself (not b_t − b_s, whose
    # rounding grows with |b_t|), −inf for s > t: the intra-chunk decay is exp(rel)
    t_idx = torch.arange(chunk, device=q_bhnk.device)
    after_s_tt1 = (t_idx[:, None] > t_idx[None, :])[..., None]  # [u, s]: u > s
    causal_tt1 = (t_idx[:, None] >= t_idx[None, :])[..., None]  # [t, s]: t ≥ s
    stretch_bhcusg = torch.where(after_s_tt1, g_bhctg[:, :, :, :, None], 0.0)
    rel_bhctsg = torch.where(causal_tt1, stretch_bhcusg.cumsum(dim=3), float("-inf"))
    decay_bhctsg = rel_bhctsg.exp()
    last_bhc1g = b_bhctg[:, :, :, -1:]
    if g_bhctg.shape[-1] == 1:  # one decay per token: the decay mask times q kᵀ
        scores_bhcts = (q_bhctk @ k_bhctk.transpose(-1, -2)) * decay_bhctsg[..., 0]
    else:  # one per key dimension: the decay sits inside the sum over K
        scores_bhcts = torch.einsum("bhctk,bhcsk,bhctsk->bhcts", q_bhctk, k_bhctk, decay_bhctsg)
    intra_bhctv = scores_bhcts @ v_bhctv
    # what each chunk adds to the state, decayed to the chunk's end
    add_bhckv = torch.einsum("bhctk,bhctv->bhckv", k_bhctk * rel_bhctsg[:, :, :, -1].exp(), v_bhctv)
    decay_bhck1 = last_bhc1g.exp().transpose(-1, -2)  # (…, g, 1): the chunk's whole decay
    s_bhkv = q_bhnk.new_zeros(b, h, kd, dv)
    if initial_state is not None:
        s_bhkv = s_bhkv + initial_state.to(ct)
    if n == 0:
        return v_bhnv.new_zeros(b, h, 0, dv).to(dtype), s_bhkv
    starts = []
    for c in range(q_bhctk.shape[2]):
        starts.append(s_bhkv)
        s_bhkv = decay_bhck1[:, :, c] * s_bhkv + add_bhckv[:, :, c]
    start_bhckv = torch.stack(starts, dim=2)
    inter_bhctv = (q_bhctk * b_bhctg.exp()) @ start_bhckv
    o_bhctv = scale * (inter_bhctv + intra_bhctv)
    o_bhnv = rearrange(o_bhctv, "b h c t v -> b h (c t) v")[:, :, :n]
    return o_bhnv.to(dtype), s_bhkv
