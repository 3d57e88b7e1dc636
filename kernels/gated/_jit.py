"""The gated_linear_attention kernels: linear attention with a decaying state, chunked.

Semantics (`naive.recurrent`), per batch and head, with q_t, k_t of width K, v_t of width V and
a log decay g_t ∈ R^K (a decay per token arrives as a zero-stride view over K):

    S_t = diag(exp(g_t)) S_{t−1} + k_t v_tᵀ,    o_t = scale · S_tᵀ q_t,    S_{−1} = h0 or 0

Chunks of BT tokens. Inside chunk c, b_t = g_1 + … + g_t is the log decay from the chunk's start
(inclusive) and rel(t, s) = Σ_{s < u ≤ t} g_u the decay from key s to query t, both ≤ 0: every
factor is relative to the chunk, so a long sequence never underflows the state and no factor
overflows. With S the state at the chunk's start:

    o_t   = scale · [ (q_t ⊙ exp(b_t))ᵀ S + Σ_{s ≤ t} A_ts v_s ],   A_ts = Σ_k q_tk k_sk exp(rel_k(t, s))
    S_end = diag(exp(b_T)) S + Σ_s (k_s ⊙ exp(rel(T, s))) v_sᵀ

The decay sits inside the sum over K, so the intra-chunk block A is not one matrix product (the
factorisation (q ⊙ exp(b_t)) (k ⊙ exp(−b_s))ᵀ overflows once b reaches −88). It is formed on
chip one key column s at a time: rel(·, s) is a cumulative sum of the g that come after s
(summed over its own stretch, not b_t − b_s), exp of it times q ⊙ k_s, summed over K. That is
BT² K multiply-adds per chunk off the tensor cores, against the BT K V of the products that use
them: BT is 16. The inter-chunk products and S v are `tl.dot`.

Backward. With d_t = scale · ∂L/∂o_t, and the state's gradient walked from the end (dS_N = the
final state's upstream gradient, or 0):

    dq_t = scale · S_t ∂L/∂o_t = exp(b_t) ⊙ (S d_t) + Σ_{s ≤ t} M_ts k_s ⊙ exp(rel(t, s)),  M_ts = d_t · v_s
    dk_s = exp(rel(T, s)) ⊙ (dS_end v_s) + Σ_{t ≥ s} M_ts q_t ⊙ exp(rel(t, s))
    dv_s = dS_endᵀ (k_s ⊙ exp(rel(T, s))) + Σ_{t ≥ s} A_ts d_t
    dS_start = diag(exp(b_T)) dS_end + Σ_t (q_t ⊙ exp(b_t)) d_tᵀ,     d h0 = dS_start of the first chunk

and the log decay's gradient without differentiating any exponential again: o and the final
state depend on the cumulative log decay B_t = g_0 + … + g_t only through q_t ⊙ exp(B_t),
k_s ⊙ exp(−B_s) and the final state's prefactor diag(exp(B_{N−1})), so

    ∂L/∂B_t = q_t ⊙ dq_t − k_t ⊙ dk_t  (+ Σ_v S_N ⊙ dS_N at t = N − 1),    dg_t = Σ_{u ≥ t} ∂L/∂B_u

(flash-linear-attention derives its dg the same way). `_gla_bwd_dq_kernel` walks the chunks
forwards with the forward's state; `_gla_bwd_dk_kernel` and `_gla_bwd_dv_kernel` (`_jit_dkdv.py`)
walk them backwards with dS, one intra-chunk block each. dg is formed by the launcher from dq and
dk (fp32 torch ops: a reverse cumulative sum over the sequence). A decay per token gets Σ_k dg_tk
(the launcher sums the zero-stride view's gradient).

The grid is (B·H, NV): program (bh, j) owns the K × BV slice of the state holding V columns
j·BV … (j+1)·BV − 1 (NV = cdiv(V, BV); launch.py picks BV, below the padded V where a whole state
would spill). o, the final state, dv and d h0 are per column: each program writes its own. The
intra-chunk block A, a sum over K, is formed again by every V tile.

Sums over K are taken in key tiles of BKA columns: A (each column's decays are its own), and the
products of the state (or dS) with the chunk's queries (or keys). The state's K × BV slice lives
in registers, which cannot be sliced, so each chunk the program stores it to memory it owns (its
final-state or d h0 output, or a scratch buffer) and reads it back a key tile at a time, between
two barriers. No tile of all K columns is live in those sums: an fp32 dot over K = 128 holds
every column of both operands in each thread and spilled. dq and dk are sums over V:
each program writes its tile's part to a (NV, B·H, N, K) buffer at `part` = j·B·H + bh, and the
launcher sums the parts; with one tile (NV = 1) the part is the whole and the buffer the gradient.

Every state, block and cumulative sum is fp32; the products on tensor cores take their operands
in the inputs' dtype (fp32: IEEE dots). Limits: K and V up to 128 (padded to powers of two ≥ 16
in the tiles), any strides for q, k, v, g and the upstream gradient, rows of one head indexed in
int32 (the launcher checks), the batch and head offsets in int64; states contiguous fp32.
"""

from __future__ import annotations

import numpy
import triton
import triton.language as tl

from .._host import INTERPRET, check_interpreter

if INTERPRET:
    check_interpreter(triton.__version__, numpy.__version__)

MAX_WIDTH = 128  # K and V, each (padded to a power of two >= 16 in the tiles)
BT = 16  # tokens a chunk


@triton.jit
def _tile(base, rows_t, cols_c, stride_n, stride_c, N, C):
    """The (BT, BC) tile base[rows_t, cols_c], zero past N rows or C columns."""
    ptrs = base + rows_t[:, None] * stride_n + cols_c[None, :] * stride_c
    return tl.load(ptrs, mask=(rows_t < N)[:, None] & (cols_c < C)[None, :], other=0.0)


@triton.jit
def _state_mask(cols_k, cols_v, K, V):
    return (cols_k < K)[:, None] & (cols_v < V)[None, :]


@triton.jit
def _decay_from(g_tk, s, offs_t):
    """exp(rel(t, s)) = exp(Σ_{s < u ≤ t} g_u) for t ≥ s, 0 for t < s: (BT, BK)."""
    rel_tk = tl.cumsum(tl.where(offs_t[:, None] > s, g_tk, 0.0), 0)
    return tl.where(offs_t[:, None] >= s, tl.exp(rel_tk), 0.0)


@triton.jit
def _row(x_tk, s, offs_t):
    """Row s of a tile, as a vector."""
    return tl.sum(tl.where(offs_t[:, None] == s, x_tk, 0.0), 0)


@triton.jit
def _to_end(g_tk):
    """rel(T, s) = Σ_{s < u ≤ T} g_u, the decay from each key to the chunk's end: (BT, BK)."""
    return tl.cumsum(g_tk, 0, reverse=True) - g_tk


@triton.jit
def _block_part(q_tk, k_tk, g_tk, offs_t, BT: tl.constexpr):
    """The part of the intra-chunk block A_ts = Σ_k q_tk k_sk exp(rel_k(t, s)) from the key
    columns of these tiles, (BT, BT) fp32, one key column s at a time: rel runs along the
    sequence, so each column's decays are its own and A is summed over column tiles."""
    a_tt = tl.zeros((BT, BT), dtype=tl.float32)
    for s in range(0, BT):
        col_t = tl.sum(q_tk * _row(k_tk, s, offs_t)[None, :] * _decay_from(g_tk, s, offs_t), 1)
        a_tt += tl.where(offs_t[None, :] == s, col_t[:, None], 0.0)
    return a_tt


@triton.jit
def _key_tile(
    q_bh,
    k_bh,
    g_bh,
    s_bh,
    rows_t,
    cols_a,
    cols_v,
    N,
    K,
    V,
    stride_qn,
    stride_qk,
    stride_kn,
    stride_kk,
    stride_gn,
    stride_gk,
):
    """The chunk's q, k and log decay in key columns cols_a (fp32, (BT, BKA)) and those rows of
    the state's copy at s_bh ((BKA, BV), this program's V columns)."""
    q_ta = _tile(q_bh, rows_t, cols_a, stride_qn, stride_qk, N, K).to(tl.float32)
    k_ta = _tile(k_bh, rows_t, cols_a, stride_kn, stride_kk, N, K).to(tl.float32)
    g_ta = _tile(g_bh, rows_t, cols_a, stride_gn, stride_gk, N, K).to(tl.float32)
    s_av = tl.load(
        s_bh + cols_a[:, None] * V + cols_v[None, :],
        mask=_state_mask(cols_a, cols_v, K, V),
        other=0.0,
    )
    return q_ta, k_ta, g_ta, s_av


@triton.jit
def _gla_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    h0_ptr,
    out_ptr,
    ht_ptr,
    scale,
    H,
    N,
    K,
    V,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_qk,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kk,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_gb,
    stride_gh,
    stride_gn,
    stride_gk,
    HAS_H0: tl.constexpr,
    DOT_PREC: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    BT: tl.constexpr,
    BKA: tl.constexpr,
):
    """out (B, H, N, V) and the final state ht (B·H, K, V) fp32 of one (batch, head), the
    columns of one V tile."""
    bh = tl.program_id(0).to(tl.int64)
    b = bh // H
    h = bh % H
    q_bh = q_ptr + b * stride_qb + h * stride_qh
    k_bh = k_ptr + b * stride_kb + h * stride_kh
    v_bh = v_ptr + b * stride_vb + h * stride_vh
    g_bh = g_ptr + b * stride_gb + h * stride_gh
    out_bh = out_ptr + bh * N * V
    dt = q_ptr.dtype.element_ty
    offs_t = tl.arange(0, BT)
    cols_k = tl.arange(0, BK)
    cols_v = tl.program_id(1) * BV + tl.arange(0, BV)  # this program's V tile
    state_kv = cols_k[:, None] * V + cols_v[None, :]
    in_kv = _state_mask(cols_k, cols_v, K, V)

    s_kv = tl.zeros((BK, BV), dtype=tl.float32)
    if HAS_H0:
        s_kv = tl.load(h0_ptr + bh * K * V + state_kv, mask=in_kv, other=0.0)
    ht_bh = ht_ptr + bh * K * V  # also where the state's K tiles are read back each chunk
    for c in range(0, tl.cdiv(N, BT)):
        rows_t = c * BT + offs_t
        v_tv = _tile(v_bh, rows_t, cols_v, stride_vn, stride_vd, N, V)
        # the inter-chunk term and the intra-chunk block, summed over K in tiles of BKA columns
        # (the state's from its copy in memory): no tile of all K columns is live in the sum
        tl.store(ht_bh + state_kv, s_kv, mask=in_kv)
        tl.debug_barrier()
        o_tv = tl.zeros((BT, BV), dtype=tl.float32)
        a_tt = tl.zeros((BT, BT), dtype=tl.float32)
        for kk in range(0, BK, BKA):
            cols_a = kk + tl.arange(0, BKA)
            q_ta, k_ta, g_ta, s_av = _key_tile(
                q_bh,
                k_bh,
                g_bh,
                ht_bh,
                rows_t,
                cols_a,
                cols_v,
                N,
                K,
                V,
                stride_qn,
                stride_qk,
                stride_kn,
                stride_kk,
                stride_gn,
                stride_gk,
            )
            q_start = (q_ta * tl.exp(tl.cumsum(g_ta, 0))).to(dt)
            o_tv += tl.dot(q_start, s_av.to(dt), input_precision=DOT_PREC)
            a_tt += _block_part(q_ta, k_ta, g_ta, offs_t, BT)
        tl.debug_barrier()  # every read of the state is done before it is stored again
        o_tv += tl.dot(a_tt.to(dt), v_tv, input_precision=DOT_PREC)
        tl.store(
            out_bh + rows_t[:, None] * V + cols_v[None, :],
            (scale * o_tv).to(out_ptr.dtype.element_ty),
            mask=(rows_t < N)[:, None] & (cols_v < V)[None, :],
        )
        # the state to the chunk's end (a product over the chunk's tokens: all K columns)
        k_tk = _tile(k_bh, rows_t, cols_k, stride_kn, stride_kk, N, K).to(tl.float32)
        g_tk = _tile(g_bh, rows_t, cols_k, stride_gn, stride_gk, N, K).to(tl.float32)
        k_end = (k_tk * tl.exp(_to_end(g_tk))).to(dt)
        s_kv = s_kv * tl.exp(tl.sum(g_tk, 0))[:, None]
        s_kv += tl.dot(tl.trans(k_end), v_tv, input_precision=DOT_PREC)
    tl.store(ht_bh + state_kv, s_kv, mask=in_kv)


@triton.jit
def _gla_bwd_dq_kernel(
    k_ptr,
    v_ptr,
    g_ptr,
    h0_ptr,
    do_ptr,
    dq_ptr,
    scale,
    H,
    N,
    K,
    V,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kk,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_gb,
    stride_gh,
    stride_gn,
    stride_gk,
    stride_ob,
    stride_oh,
    stride_on,
    stride_od,
    HAS_H0: tl.constexpr,
    DOT_PREC: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    BT: tl.constexpr,
):
    """dq of one (batch, head) through one V tile (the part of its sum over V; the whole dq
    when there is one tile), walking the chunks forwards with the forward's state."""
    bh = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1).to(tl.int64) * tl.num_programs(0) + bh  # (V tile, batch·head)
    b = bh // H
    h = bh % H
    k_bh = k_ptr + b * stride_kb + h * stride_kh
    v_bh = v_ptr + b * stride_vb + h * stride_vh
    g_bh = g_ptr + b * stride_gb + h * stride_gh
    do_bh = do_ptr + b * stride_ob + h * stride_oh
    dq_bh = dq_ptr + part * N * K
    dt = k_ptr.dtype.element_ty
    offs_t = tl.arange(0, BT)
    cols_k = tl.arange(0, BK)
    cols_v = tl.program_id(1) * BV + tl.arange(0, BV)  # this program's V tile
    state_kv = cols_k[:, None] * V + cols_v[None, :]
    in_kv = _state_mask(cols_k, cols_v, K, V)

    s_kv = tl.zeros((BK, BV), dtype=tl.float32)
    if HAS_H0:
        s_kv = tl.load(h0_ptr + bh * K * V + state_kv, mask=in_kv, other=0.0)
    for c in range(0, tl.cdiv(N, BT)):
        rows_t = c * BT + offs_t
        k_tk = _tile(k_bh, rows_t, cols_k, stride_kn, stride_kk, N, K).to(tl.float32)
        v_tv = _tile(v_bh, rows_t, cols_v, stride_vn, stride_vd, N, V)
        g_tk = _tile(g_bh, rows_t, cols_k, stride_gn, stride_gk, N, K).to(tl.float32)
        d_tv = _tile(do_bh, rows_t, cols_v, stride_on, stride_od, N, V).to(tl.float32) * scale
        d_tv = d_tv.to(dt)
        dq_tk = tl.dot(d_tv, tl.trans(s_kv.to(dt)), input_precision=DOT_PREC)
        dq_tk = dq_tk * tl.exp(tl.cumsum(g_tk, 0))
        m_tt = tl.dot(d_tv, tl.trans(v_tv), input_precision=DOT_PREC)  # [t, s] = d_t · v_s
        for s in range(0, BT):
            m_t = tl.sum(tl.where(offs_t[None, :] == s, m_tt, 0.0), 1)
            k_s = _row(k_tk, s, offs_t)
            dq_tk += m_t[:, None] * k_s[None, :] * _decay_from(g_tk, s, offs_t)
        tl.store(
            dq_bh + rows_t[:, None] * K + cols_k[None, :],
            dq_tk.to(dq_ptr.dtype.element_ty),
            mask=(rows_t < N)[:, None] & (cols_k < K)[None, :],
        )
        k_end = (k_tk * tl.exp(_to_end(g_tk))).to(dt)
        s_kv = s_kv * tl.exp(tl.sum(g_tk, 0))[:, None]
        s_kv += tl.dot(tl.trans(k_end), v_tv, input_precision=DOT_PREC)
