"""Flash attention in Triton: one kernel family, three prologues (scaled-dot, quadratic, metric).

The scheme is FlashAttention-2's: a program owns a tile of queries, walks the keys tile by tile
with an online softmax (running max and running sum), and never holds the N×N score matrix in
memory. The forward saves the log-sum-exp of every row (in base-2 units); the backward recomputes
the probabilities from it in two kernels, one per key tile (dk, dv) and one per query tile (dq),
so no gradient needs an atomic add. Before them a small kernel forms delta = rowsum(dO ∘ O), in
fp32 from one read of O and dO in their own dtype (it was four PyTorch ops on fp32 copies).

What the inner loops leave out, because it is per element of every score tile:
- Masks. Causal and padding are compile-time switches (CAUSAL, HAS_MASK), and each kernel walks
  its tiles in two loops: the tiles that need the per-element mask (on the causal diagonal, the
  ragged last key tile) and the rest, which run without one. Bidirectional attention over whole
  tiles runs no mask at all; causal attention masks one or two tiles per row of tiles. The dk/dv
  kernel needs the mask only on the diagonal: a query past the end reads lse = +inf (P = 0) and a
  key past the end or padding only touches its own rows of dk and dv (not stored, or zeroed).
- Transposes of register tiles. The dk/dv kernel computes its scores transposed, k·qᵀ (keys ×
  queries), as FlashAttention-2 and Triton's fused-attention tutorial do: Pᵀ and dSᵀ then come
  out of their dots already in the layout of the left operand of dv += Pᵀ·dO and dk += dSᵀ·q.
  Untransposed, each tile pair sent P and dS through shared memory to transpose them.

What the three ops feed the same kernels:

- `scaled_dot_attention`: q, k, v as given.
- `quadratic_attention`: q = x·U[h] and k = x for every head. q is formed *before* the kernel, as
  one batched matmul. Why, from the counts (B batch, H heads, N tokens, D width, dv value width):
  forming q costs 2·B·H·N·D² FLOPs wherever it happens. Inside the kernel, every query tile would
  multiply its BLOCK_M×D slice of x by the whole D×D matrix U[h], reading U once per tile
  (B·H·⌈N/BLOCK_M⌉·D² elements: at N = 4096, BLOCK_M = 128 that is 32·D² per head against N·D
  for q itself, 4× more at D = 512) and holding a BLOCK_M×D fp32 product in registers, which does
  not fit once D > 128. Outside, cuBLAS runs the product near peak and the price is one write and
  one read of q, 2·B·H·N·D elements, next to the attention's 2·B·H·N²·(D + dv) FLOPs: about N
  FLOPs per element of extra traffic, far above any GPU's FLOP-to-byte ratio. k = x is read for
  all heads through a zero head-stride view (`x[:, None].expand(...)`), never copied per head.
  Scores run over the full width D, which may exceed 128: the forward loops over feature chunks
  of the value width (`CHUNKED`); the backward holds the whole q/k width in one tile (below).
- `metric_attention` (fused prologue): reads only p (B, H, N, dk) and M (H, dk, dk). q = p·M is
  formed in registers (16 columns of p against 16 rows of M at a time, so M never sits in
  registers whole), and k = v = p: one tile load per key block serves both the scores and the
  weighted sum. Against running scaled-dot on (p·M, p, p) this saves the q tensor (one write and
  one read of B·H·N·dk elements, and the matmul launch), one of the two key/value streams of the
  inner loop (B·H·N·dk elements per query tile: half the K/V traffic and shared memory), and in
  the backward one gradient tensor: dk and dv are summed in the kernel. The backward forms q = p·M
  again per tile rather than storing it.

Attention dropout (`DROPOUT`, a compile-time switch: p = 0 compiles the kernels without it):
after the softmax, each probability is kept where a Philox draw `tl.rand(seed + b·H + h,
query·N + key)` is ≥ p and scaled by 1/(1 - p). The row sums of the softmax (and so the saved
log-sum-exp) are those before dropout; the backward draws the same mask from the same counters
in both kernels, so the mask is never stored. dv uses the dropped probabilities and dP is masked
and scaled alike; delta = rowsum(dO ∘ O) holds unchanged because O already includes the mask.

Feature widths: the value width dv is padded to a power of two `HEAD` in [16, 128]. In the forward
the q/k width is walked in chunks of `HEAD` (so any dk works for scaled-dot and quadratic; metric
needs dk ≤ 128): a query tile sums its scores over the chunks once, nothing is recomputed. The
backward's q/k tile is `QK_HEAD` wide: HEAD when dk ≤ HEAD (scaled-dot and metric then compile to
the same code as without QK_HEAD), else dk rounded up to a power of two up to 512 (`qk_tile_width`,
the `wide` variants). Each backward program then computes the scores of a tile pair once,
`tl.dot(q, kᵀ)` over the whole width, and accumulates dk (resp. dq) for the whole width, a [BLOCK,
QK_HEAD] fp32 tile that fits in registers at QK_HEAD = 512 with 32-row tiles on 8 warps (16-row for
fp32 inputs; one fp32 variant spills 8 bytes, see _GPU_CONFIGS). Why, from the counts (C = ⌈D/HEAD⌉
chunks): chunked like the forward, the backward's grid had one program per (tile, chunk), and each
program needs the full scores to form P and dS, so it computed them over all C chunks: C score
computations per tile pair in each of the two backward kernels (C² HEAD-wide chunk dots), 2C in all
(16 at D = 512, dv = 64), against 2 now, as in scaled-dot's backward. In FLOPs per head, in units
of 2·N² (D = 512, dv = HEAD = 64, C = 8): the forward is D + dv = 576; the chunked backward was
C·(D + 2·dv + HEAD) for dk/dv (scores, dP, dV again in every chunk's program, the dk chunk) plus
C·(D + dv + HEAD) for dq, 5632 + 5120 = 10752; the wide backward is (D + 2·dv + D) + (D + dv + D) =
1152 + 1088 = 2240. Forward and backward together, 11328 → 2816: 4.0× fewer FLOPs. So we expect the
D = 512 case measured at 63 ms on an H100 (N = 4096, batch 2, 8 heads, bf16; `sdpa(x @ U[h], x, v)`
takes 44 ms) to take about a quarter of that, ~16 ms, if the wide tiles keep the chunked ones' FLOP
rate (both use 32×32 tiles without wgmma); not yet measured on a GPU. A width that is not a power
of two pays its padding (D = 160 runs 256-wide dots, 1.6× its FLOPs, where the chunked backward
computed the scores 5 times per kernel at dv = 32). Above 512 the backward falls back to HEAD-wide
chunks, with the C-fold recomputation: a [BLOCK, 1024] fp32 accumulator would not fit.

Inputs fp16/bf16/fp32, accumulation in fp32 (fp32 inputs use IEEE fp32 dots, not TF32).
A query whose every key is masked (causal and padding together) gets zeros, and zero gradients.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Iterator

import numpy
import torch
import triton
import triton.language as tl

from ._aot import AotSpec
from ._checks import TRITON_DTYPES
from ._host import INTERPRET, cdiv, check_interpreter, next_power_of_2

if INTERPRET:
    check_interpreter(triton.__version__, numpy.__version__)
LOG2E = 1.4426950408889634
MAX_HEAD = 128
HEADS_PADDED = (16, 32, 64, 128)
# The widest q/k tile the backward holds whole (QK_HEAD); a wider q/k width is chunked.
MAX_QK_HEAD = 512

# Tests set this to True: outputs are then allocated full of NaN, so an element the kernel never
# writes shows up as NaN instead of as whatever memory held before.
POISON_OUTPUTS = False


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@triton.jit
def _load_rows(base, offs_r, stride_r, offs_f, n_rows, n_feat):
    """A (rows, features) tile; rows past n_rows and features past n_feat read as zero."""
    ptrs = base + offs_r[:, None] * stride_r + offs_f[None, :]
    return tl.load(ptrs, mask=(offs_r[:, None] < n_rows) & (offs_f[None, :] < n_feat), other=0.0)


@triton.jit
def _query_tile(
    Q,
    M,
    q_base,
    m_base,
    offs_m,
    sqn,
    smr,
    offs_d,
    N,
    d_qk,
    METRIC: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """First feature chunk of the queries; for the metric prologue q = p·M, formed in registers
    16 rows of M at a time, so M (up to 128×128) never sits in registers whole."""
    if METRIC:
        HEAD: tl.constexpr = offs_d.shape[0]
        q = tl.zeros([offs_m.shape[0], HEAD], tl.float32)
        for c in tl.static_range(0, HEAD, 16):
            offs_k = c + tl.arange(0, 16)
            p_c = _load_rows(Q + q_base, offs_m, sqn, offs_k, N, d_qk)
            m_c = _load_rows(M + m_base, offs_k, smr, offs_d, d_qk, d_qk)
            q += tl.dot(p_c, m_c, input_precision=DOT_PREC)
        q = q.to(Q.dtype.element_ty)
    else:
        q = _load_rows(Q + q_base, offs_m, sqn, offs_d, N, d_qk)
    return q


@triton.jit
def _scores(
    a0,
    b0,
    A,
    B,
    a_base,
    b_base,
    offs_a,
    offs_b,
    sa,
    sb,
    offs_d,
    N,
    d_qk,
    n_chunks,
    HEAD: tl.constexpr,
    CHUNKED: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """a·bᵀ over the full q/k width, rows of A against rows of B (queries against keys, or keys
    against queries for the transposed scores of the dk/dv kernel): chunk 0 from registers, the
    other chunks (if the width exceeds HEAD) streamed. CHUNKED is a compile-time switch because
    the chunk loop nested in the key loop costs registers even when it runs zero times."""
    s = tl.dot(a0, tl.trans(b0), input_precision=DOT_PREC)
    if CHUNKED:
        for c in range(1, n_chunks):
            offs_c = c * HEAD + offs_d
            ac = _load_rows(A + a_base, offs_a, sa, offs_c, N, d_qk)
            bc = _load_rows(B + b_base, offs_b, sb, offs_c, N, d_qk)
            s += tl.dot(ac, tl.trans(bc), input_precision=DOT_PREC)
    return s


@triton.jit
def _visible(queries, keys, N, CAUSAL: tl.constexpr):
    """Which (query, key) pairs of a diagonal or ragged tile count: the key exists and, if causal,
    does not come after the query. `queries` and `keys` broadcast to the tile's 2-D shape."""
    ok = keys < N
    if CAUSAL:
        ok = ok & (queries >= keys)
    return ok


@triton.jit
def _padding(Mask, mask_base, offs_n, N):
    """True where a key is padding (the key-padding mask) or past the end."""
    return tl.load(Mask + mask_base + offs_n, mask=offs_n < N, other=1) != 0


@triton.jit
def _dropout_keep(seed, pid_bh, queries, keys, N, dropout_p):
    """Which probabilities dropout keeps: Philox keyed by seed + (batch·head) at counter
    query·N + key, so the forward and both backward kernels draw the same mask without storing
    it (and `dropout_keep_mask` below writes it out for tests). `queries` and `keys` broadcast to
    the tile's shape, (queries, keys) or transposed."""
    return tl.rand(seed + pid_bh, queries * N + keys) >= dropout_p


@triton.jit
def _key_tiles(pid_m, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """The key tiles a query tile visits, [0, hi), and the first of them that needs a mask,
    `full`: tiles before it lie inside the sequence and (causal) wholly at or before the tile's
    first query, so they run without any per-element mask."""
    if CAUSAL:
        hi = tl.minimum(N, (pid_m + 1) * BLOCK_M)
        full = tl.minimum(N, pid_m * BLOCK_M + 1) // BLOCK_N * BLOCK_N
    else:
        hi = N
        full = N // BLOCK_N * BLOCK_N
    return full, hi


@triton.jit
def _fwd_loop(
    acc, l_i, m_i, q0, Q, K, V, Mask, seed,
    q_base, k_base, v_base, mask_base, pid_bh, offs_m, offs_d, sqn, skn, svn,
    N, d_qk, d_v, n_chunks, scale2, dropout_p, lo, hi,
    METRIC: tl.constexpr, HEAD: tl.constexpr, CHUNKED: tl.constexpr, DROPOUT: tl.constexpr,
    HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
    BLOCK_N: tl.constexpr, DOT_PREC: tl.constexpr,
):  # fmt: skip
    """The online softmax over key tiles [lo, hi). MASKED: the tiles on the causal diagonal and
    the ragged last tile, which need the per-element mask; the others skip it."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k0 = _load_rows(K + k_base, offs_n, skn, offs_d, N, d_qk)
        s = _scores(q0, k0, Q, K, q_base, k_base, offs_m, offs_n, sqn, skn, offs_d, N, d_qk,
                    n_chunks, HEAD, CHUNKED, DOT_PREC)  # fmt: skip
        s = s * scale2
        if MASKED:
            s = tl.where(_visible(offs_m[:, None], offs_n[None, :], N, CAUSAL), s, float("-inf"))
        if HAS_MASK:
            s = tl.where(_padding(Mask, mask_base, offs_n, N)[None, :], float("-inf"), s)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row that has seen no key yet keeps m = -inf (a finite stand-in would shift the next
        # tile's exp2 by it: scores far below it would underflow to an empty row); only the
        # exponent uses 0 in its place, away from -inf - -inf.
        if MASKED or HAS_MASK:  # noqa: SIM108 (a compile-time branch)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_use = m_new
        alpha = tl.exp2(m_i - m_use)
        p = tl.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)  # the softmax's sum: before dropout
        if METRIC:  # noqa: SIM108 (a compile-time branch: the else side is never traced)
            v = k0
        else:
            v = _load_rows(V + v_base, offs_n, svn, offs_d, N, d_v)
        if DROPOUT:
            keep = _dropout_keep(seed, pid_bh, offs_m[:, None], offs_n[None, :], N, dropout_p)
            p = tl.where(keep, p / (1.0 - dropout_p), 0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PREC)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(
    Q, K, V, M, Out, Lse, Mask, Seed,
    sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, smh, smr, sob, soh, son, smb,
    H, N, d_qk, d_v, n_chunks, scale2, dropout_p, n_bucket,
    METRIC: tl.constexpr, HEAD: tl.constexpr, CHUNKED: tl.constexpr, DROPOUT: tl.constexpr,
    HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PREC: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    q_base = b * sqb + h * sqh
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD)
    q0 = _query_tile(Q, M, q_base, h * smh, offs_m, sqn, smr, offs_d, N, d_qk, METRIC, DOT_PREC)

    seed = 0
    if DROPOUT:
        seed = tl.load(Seed)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD], tl.float32)
    k_base, v_base, mask_base = b * skb + h * skh, b * svb + h * svh, b * smb
    full, hi = _key_tiles(pid_m, N, BLOCK_M, BLOCK_N, CAUSAL)
    acc, l_i, m_i = _fwd_loop(
        acc, l_i, m_i, q0, Q, K, V, Mask, seed,
        q_base, k_base, v_base, mask_base, pid_bh, offs_m, offs_d, sqn, skn, svn,
        N, d_qk, d_v, n_chunks, scale2, dropout_p, 0, full,
        METRIC, HEAD, CHUNKED, DROPOUT, HAS_MASK, CAUSAL, False, BLOCK_N, DOT_PREC,
    )  # fmt: skip
    acc, l_i, m_i = _fwd_loop(
        acc, l_i, m_i, q0, Q, K, V, Mask, seed,
        q_base, k_base, v_base, mask_base, pid_bh, offs_m, offs_d, sqn, skn, svn,
        N, d_qk, d_v, n_chunks, scale2, dropout_p, full, hi,
        METRIC, HEAD, CHUNKED, DROPOUT, HAS_MASK, CAUSAL, True, BLOCK_N, DOT_PREC,
    )  # fmt: skip

    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = tl.where(empty, float("inf"), m_i + tl.log2(l_safe))
    o_ptrs = Out + b * sob + h * soh + offs_m[:, None] * son + offs_d[None, :]
    o_mask = (offs_m[:, None] < N) & (offs_d[None, :] < d_v)
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=o_mask)
    tl.store(Lse + pid_bh.to(tl.int64) * N + offs_m, lse, mask=offs_m < N)


@triton.jit
def _attn_bwd_delta(
    Out, DO, Delta, sob, soh, son, sdob, sdoh, sdon, H, N, d_v,
    HEAD: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """delta = rowsum(O ∘ dO) in fp32 for one tile of rows, what both backward kernels subtract
    from dP: one read of O and dO in their own dtype. (Computed inside the dq kernel instead, the
    extra tiles and their reduction sent ptxas to the stack for fp32 with a 512-wide dq tile:
    32 registers and 33 KB of spills where the kernel without them needs 169 and none.)"""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD)
    o = _load_rows(Out + b * sob + h * soh, offs_m, son, offs_d, N, d_v).to(tl.float32)
    do = _load_rows(DO + b * sdob + h * sdoh, offs_m, sdon, offs_d, N, d_v).to(tl.float32)
    tl.store(Delta + pid_bh.to(tl.int64) * N + offs_m, tl.sum(o * do, 1), mask=offs_m < N)


@triton.jit
def _dq_loop(
    dq, q0, do, lse, delta, Q, K, V, Mask, seed,
    q_base, k_base, v_base, mask_base, pid_bh, offs_m, offs_k, offs_c, offs_d, sqn, skn, svn,
    N, d_qk, d_v, n_chunks, scale2, dropout_p, lo, hi,
    METRIC: tl.constexpr, QK_HEAD: tl.constexpr, CHUNKED: tl.constexpr, DROPOUT: tl.constexpr,
    HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr, MASKED: tl.constexpr,
    BLOCK_N: tl.constexpr, DOT_PREC: tl.constexpr,
):  # fmt: skip
    """dq over key tiles [lo, hi); MASKED as in the forward's loop."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k0 = _load_rows(K + k_base, offs_n, skn, offs_k, N, d_qk)
        s = _scores(q0, k0, Q, K, q_base, k_base, offs_m, offs_n, sqn, skn, offs_k, N, d_qk,
                    n_chunks, QK_HEAD, CHUNKED, DOT_PREC)  # fmt: skip
        p = tl.exp2(s * scale2 - lse[:, None])
        if MASKED:
            p = tl.where(_visible(offs_m[:, None], offs_n[None, :], N, CAUSAL), p, 0.0)
        if HAS_MASK:
            p = tl.where(_padding(Mask, mask_base, offs_n, N)[None, :], 0.0, p)
        if METRIC:  # noqa: SIM108 (a compile-time branch: the else side is never traced)
            v = k0
        else:
            v = _load_rows(V + v_base, offs_n, svn, offs_d, N, d_v)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PREC)
        if DROPOUT:
            keep = _dropout_keep(seed, pid_bh, offs_m[:, None], offs_n[None, :], N, dropout_p)
            dp = tl.where(keep, dp / (1.0 - dropout_p), 0.0)
        ds = p * (dp - delta[:, None])
        if CHUNKED:  # noqa: SIM108
            kc = _load_rows(K + k_base, offs_n, skn, offs_c, N, d_qk)
        else:
            kc = k0
        dq += tl.dot(ds.to(kc.dtype), kc, input_precision=DOT_PREC)
    return dq


@triton.jit
def _attn_bwd_dq(
    Q, K, V, M, DO, Lse, Delta, DQ, Mask, Seed,
    sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, smh, smr, sdob, sdoh, sdon,
    sdqb, sdqh, sdqn, smb,
    H, N, d_qk, d_v, n_chunks, scale2, scale, dropout_p, n_bucket,
    METRIC: tl.constexpr, HEAD: tl.constexpr, QK_HEAD: tl.constexpr, CHUNKED: tl.constexpr,
    DROPOUT: tl.constexpr, HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PREC: tl.constexpr,
):  # fmt: skip
    """One query tile and one q/k feature chunk (QK_HEAD wide, as in the dk/dv kernel):
    dq = scale · dS · k for that chunk."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    pid_c = tl.program_id(2)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    q_base = b * sqb + h * sqh
    row_base = pid_bh.to(tl.int64) * N
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD)
    offs_k = tl.arange(0, QK_HEAD)
    offs_c = pid_c * QK_HEAD + offs_k
    q0 = _query_tile(Q, M, q_base, h * smh, offs_m, sqn, smr, offs_k, N, d_qk, METRIC, DOT_PREC)
    do = _load_rows(DO + b * sdob + h * sdoh, offs_m, sdon, offs_d, N, d_v)
    delta = tl.load(Delta + row_base + offs_m, mask=offs_m < N, other=0.0)
    lse = tl.load(Lse + row_base + offs_m, mask=offs_m < N, other=float("inf"))
    seed = 0
    if DROPOUT:
        seed = tl.load(Seed)

    dq = tl.zeros([BLOCK_M, QK_HEAD], tl.float32)
    k_base, v_base, mask_base = b * skb + h * skh, b * svb + h * svh, b * smb
    full, hi = _key_tiles(pid_m, N, BLOCK_M, BLOCK_N, CAUSAL)
    dq = _dq_loop(
        dq, q0, do, lse, delta, Q, K, V, Mask, seed,
        q_base, k_base, v_base, mask_base, pid_bh, offs_m, offs_k, offs_c, offs_d, sqn, skn, svn,
        N, d_qk, d_v, n_chunks, scale2, dropout_p, 0, full,
        METRIC, QK_HEAD, CHUNKED, DROPOUT, HAS_MASK, CAUSAL, False, BLOCK_N, DOT_PREC,
    )  # fmt: skip
    dq = _dq_loop(
        dq, q0, do, lse, delta, Q, K, V, Mask, seed,
        q_base, k_base, v_base, mask_base, pid_bh, offs_m, offs_k, offs_c, offs_d, sqn, skn, svn,
        N, d_qk, d_v, n_chunks, scale2, dropout_p, full, hi,
        METRIC, QK_HEAD, CHUNKED, DROPOUT, HAS_MASK, CAUSAL, True, BLOCK_N, DOT_PREC,
    )  # fmt: skip

    dq = dq * scale
    dq_ptrs = DQ + b * sdqb + h * sdqh + offs_m[:, None] * sdqn + offs_c[None, :]
    dq_mask = (offs_m[:, None] < N) & (offs_c[None, :] < d_qk)
    tl.store(dq_ptrs, dq.to(DQ.dtype.element_ty), mask=dq_mask)


@triton.jit
def _dkdv_loop(
    dk, dv, k0, v, Q, K, M, DO, Lse, Delta, seed,
    q_base, k_base, m_base, do_base, row_base, pid_bh, offs_n, offs_k, offs_c, offs_d,
    sqn, skn, smr, sdon, N, d_qk, d_v, n_chunks, scale2, dropout_p, lo, hi,
    METRIC: tl.constexpr, QK_HEAD: tl.constexpr, CHUNKED: tl.constexpr, DROPOUT: tl.constexpr,
    CAUSAL: tl.constexpr, MASKED: tl.constexpr, BLOCK_M: tl.constexpr, DOT_PREC: tl.constexpr,
):  # fmt: skip
    """dk and dv of one key tile over query tiles [lo, hi), in transposed form: the scores are
    k·qᵀ (keys × queries), so Pᵀ and dSᵀ come out of their dots in the layout that dv += Pᵀ·dO
    and dk += dSᵀ·q take as their left operand, with no transpose of a register tile between.
    MASKED: the tiles on the causal diagonal. No other tile needs a mask: a query past the end
    reads lse = +inf (so P = 0), and a key past the end (or padding) only touches its own row of
    dk and dv, which is not stored (resp. zeroed)."""
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q0 = _query_tile(Q, M, q_base, m_base, offs_m, sqn, smr, offs_k, N, d_qk, METRIC,
                         DOT_PREC)  # fmt: skip
        s_t = _scores(k0, q0, K, Q, k_base, q_base, offs_n, offs_m, skn, sqn, offs_k, N, d_qk,
                      n_chunks, QK_HEAD, CHUNKED, DOT_PREC)  # fmt: skip
        lse = tl.load(Lse + row_base + offs_m, mask=offs_m < N, other=float("inf"))
        p_t = tl.exp2(s_t * scale2 - lse[None, :])
        if MASKED:
            p_t = tl.where(_visible(offs_m[None, :], offs_n[:, None], N, CAUSAL), p_t, 0.0)
        do = _load_rows(DO + do_base, offs_m, sdon, offs_d, N, d_v)
        dp_t = tl.dot(v, tl.trans(do), input_precision=DOT_PREC)
        if DROPOUT:
            # out = (P∘Z/(1-p)) v: dv sees the dropped probabilities, dP the same mask.
            keep_t = _dropout_keep(seed, pid_bh, offs_m[None, :], offs_n[:, None], N, dropout_p)
            p_drop_t = tl.where(keep_t, p_t / (1.0 - dropout_p), 0.0)
            dv += tl.dot(p_drop_t.to(do.dtype), do, input_precision=DOT_PREC)
            dp_t = tl.where(keep_t, dp_t / (1.0 - dropout_p), 0.0)
        else:
            dv += tl.dot(p_t.to(do.dtype), do, input_precision=DOT_PREC)
        delta = tl.load(Delta + row_base + offs_m, mask=offs_m < N, other=0.0)
        ds_t = p_t * (dp_t - delta[None, :])
        if CHUNKED:  # noqa: SIM108
            qc = _load_rows(Q + q_base, offs_m, sqn, offs_c, N, d_qk)
        else:
            qc = q0
        dk += tl.dot(ds_t.to(qc.dtype), qc, input_precision=DOT_PREC)
    return dk, dv


@triton.jit
def _attn_bwd_dkdv(
    Q, K, V, M, DO, Lse, Delta, DK, DV, Mask, Seed,
    sqb, sqh, sqn, skb, skh, skn, svb, svh, svn, smh, smr, sdob, sdoh, sdon,
    sdkb, sdkh, sdkn, sdvb, sdvh, sdvn, smb,
    H, N, d_qk, d_v, n_chunks, scale2, scale, dropout_p, n_bucket,
    METRIC: tl.constexpr, HEAD: tl.constexpr, QK_HEAD: tl.constexpr, CHUNKED: tl.constexpr,
    DROPOUT: tl.constexpr, HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PREC: tl.constexpr,
):  # fmt: skip
    """One key tile and one q/k feature chunk: dk for that chunk, dv (chunk 0 stores it).

    The q/k tiles are QK_HEAD wide: HEAD when d_qk ≤ HEAD (plain and metric) or when the width is
    chunked, else the whole padded q/k width in one tile (`wide`: one chunk, the scores once).

    Metric (k = v = p): stores dk + dv into DK, the two roles' sum."""
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    pid_c = tl.program_id(2)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    k_base = b * skb + h * skh
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD)
    offs_k = tl.arange(0, QK_HEAD)
    offs_c = pid_c * QK_HEAD + offs_k
    k0 = _load_rows(K + k_base, offs_n, skn, offs_k, N, d_qk)
    if METRIC:  # noqa: SIM108 (a compile-time branch: the else side is never traced)
        v = k0
    else:
        v = _load_rows(V + b * svb + h * svh, offs_n, svn, offs_d, N, d_v)
    seed = 0
    if DROPOUT:
        seed = tl.load(Seed)

    dk = tl.zeros([BLOCK_N, QK_HEAD], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD], tl.float32)
    q_base, do_base, row_base = b * sqb + h * sqh, b * sdob + h * sdoh, pid_bh.to(tl.int64) * N
    if CAUSAL:  # query tiles [lo, mid) cross the diagonal; from mid on every query sees the tile
        lo = pid_n * BLOCK_N // BLOCK_M * BLOCK_M
        mid = tl.minimum(N, tl.cdiv(pid_n * BLOCK_N + BLOCK_N - 1, BLOCK_M) * BLOCK_M)
    else:
        lo = 0
        mid = 0
    dk, dv = _dkdv_loop(
        dk, dv, k0, v, Q, K, M, DO, Lse, Delta, seed,
        q_base, k_base, h * smh, do_base, row_base, pid_bh, offs_n, offs_k, offs_c, offs_d,
        sqn, skn, smr, sdon, N, d_qk, d_v, n_chunks, scale2, dropout_p, lo, mid,
        METRIC, QK_HEAD, CHUNKED, DROPOUT, CAUSAL, True, BLOCK_M, DOT_PREC,
    )  # fmt: skip
    dk, dv = _dkdv_loop(
        dk, dv, k0, v, Q, K, M, DO, Lse, Delta, seed,
        q_base, k_base, h * smh, do_base, row_base, pid_bh, offs_n, offs_k, offs_c, offs_d,
        sqn, skn, smr, sdon, N, d_qk, d_v, n_chunks, scale2, dropout_p, mid, N,
        METRIC, QK_HEAD, CHUNKED, DROPOUT, CAUSAL, False, BLOCK_M, DOT_PREC,
    )  # fmt: skip

    dk = dk * scale
    if METRIC:
        dk = dk + dv
    if HAS_MASK:  # a padding key gets no gradient
        pad = _padding(Mask, b * smb, offs_n, N)
        dk = tl.where(pad[:, None], 0.0, dk)
        dv = tl.where(pad[:, None], 0.0, dv)
    dk_ptrs = DK + b * sdkb + h * sdkh + offs_n[:, None] * sdkn + offs_c[None, :]
    dk_mask = (offs_n[:, None] < N) & (offs_c[None, :] < d_qk)
    tl.store(dk_ptrs, dk.to(DK.dtype.element_ty), mask=dk_mask)
    if not METRIC:  # noqa: SIM102 (compile-time test, then a runtime one)
        if pid_c == 0:
            dv_ptrs = DV + b * sdvb + h * sdvh + offs_n[:, None] * sdvn + offs_d[None, :]
            dv_mask = (offs_n[:, None] < N) & (offs_d[None, :] < d_v)
            tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=dv_mask)


# --------------------------------------------------------------------------------------------
# Configurations: the one table the autotuner and the ahead-of-time report both read
# --------------------------------------------------------------------------------------------

KERNELS = {"attn_fwd": _attn_fwd, "attn_bwd_dkdv": _attn_bwd_dkdv, "attn_bwd_dq": _attn_bwd_dq}


def _dtype_kind(dtype: torch.dtype) -> str:
    return "fp32" if dtype == torch.float32 else "half"


def spec_cases() -> Iterator[tuple[str, torch.dtype, int, int, bool, bool]]:
    """(kernel, dtype, head, qk_head, metric, chunked) for every variant the launchers can compile.

    Causal or not, padding mask or not, and the sequence length are runtime arguments: they do
    not multiply the variants. Metric attention is never chunked (dk = dv ≤ 128). The forward's
    q/k tiles are always HEAD wide; the backward's are wider (`wide`, qk_head > head) when the
    q/k width fits in one tile of at most MAX_QK_HEAD (see `qk_tile_width`)."""
    for kernel in KERNELS:
        for dtype in TRITON_DTYPES:
            for head in HEADS_PADDED:
                for metric, chunked in ((False, False), (False, True), (True, False)):
                    yield kernel, dtype, head, head, metric, chunked
                if kernel != "attn_fwd":
                    for qk_head in (w for w in _QK_HEADS if w > head):
                        yield kernel, dtype, head, qk_head, False, False


_QK_HEADS = tuple(2**i for i in range(4, MAX_QK_HEAD.bit_length()))  # 16 .. MAX_QK_HEAD


def qk_tile_width(d_qk: int, head: int) -> int:
    """The backward's q/k feature tile (QK_HEAD): HEAD when the q/k width fits in it or is wider
    than MAX_QK_HEAD (then chunked, HEAD wide), else the q/k width rounded up to a power of two,
    so that each backward program computes the scores of a tile pair once."""
    return next_power_of_2(d_qk) if head < d_qk <= MAX_QK_HEAD else head


def variant_name(head: int, qk_head: int, metric: bool, chunked: bool) -> str:
    """The row of _GPU_CONFIGS: "plain", "metric", "chunked", or "wide<QK_HEAD>"."""
    if qk_head > head:
        return f"wide{qk_head}"
    return "metric" if metric else ("chunked" if chunked else "plain")


# (kernel, "half" | "fp32", "plain" | "metric" | "chunked") -> {HEAD: configs}, each config
# (BLOCK_M, BLOCK_N, num_warps, num_stages); the autotuner measures the ones of a variant's row on
# the first call per length bucket and keeps the fastest. The rows began as the largest tiles
# that do not spill on sm_80/sm_90 (ptxas's register allocation is not monotone in the tile size,
# hence the irregular entries). On an H100 (2026-11-23 baseline) full-size tiles won although they
# spilled: 128×64, 4 warps, 3 stages forward and 2 backward took the bf16 head-64 scaled-dot
# forward+backward from 0.47× to 0.70× of flash SDPA. The half-precision head-64 rows now hold
# full-size tiles that compile without spills for sm_90 with the masks split out of the loops
# and the transposed dk/dv kernel (ptxas, divisibility as the JIT sees it): forward 128×64 on 4
# and 8 warps (254 / 114 registers) and 128×128 on 8 (212); dk/dv 64 queries × 128 keys on 8
# warps (191) and the tutorial's 32×128 on 4 (255); dq 128×64 on 8 (125) and the tutorial's
# 128×32 on 4 (164). The 8-warp tiles are there for the causal + padding + dropout variants
# (nanoGPT's recipe), which spill on 4 warps (dq 128×64: 5.4 KB); the autotuner times each.
_A, _B = (128, 64, 4, 3), (64, 64, 4, 3)
_GPU_CONFIGS: dict[tuple[str, str, str], dict[int, list[tuple[int, int, int, int]]]] = {
    ("attn_fwd", "half", "plain"): {
        16: [_A, _B],
        32: [_A, _B],
        64: [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), _B],
        128: [(128, 64, 8, 2), (64, 32, 8, 1)],
    },
    ("attn_fwd", "half", "metric"): {
        16: [_A, _B],
        32: [_A, _B],
        64: [(128, 64, 8, 3), (64, 32, 8, 2)],
        128: [(64, 32, 8, 1)],
    },
    ("attn_fwd", "half", "chunked"): {
        16: [(128, 64, 8, 2), (64, 64, 4, 2)],
        32: [(128, 64, 8, 2), (64, 64, 4, 2)],
        64: [(64, 32, 8, 2)],
        128: [(32, 32, 8, 1), (32, 16, 4, 1)],
    },
    ("attn_fwd", "fp32", "plain"): {
        16: [(64, 32, 8, 2)],
        32: [(64, 32, 8, 2)],
        64: [(64, 32, 8, 2)],
        128: [(32, 32, 8, 1)],
    },
    ("attn_fwd", "fp32", "metric"): {
        16: [(64, 32, 8, 2)],
        32: [(64, 32, 8, 2)],
        64: [(32, 32, 8, 1)],
        128: [(32, 32, 8, 1)],
    },
    ("attn_fwd", "fp32", "chunked"): {
        16: [(64, 32, 8, 2)],
        32: [(64, 32, 8, 2)],
        64: [(32, 16, 4, 1)],
        128: [(32, 32, 8, 1)],
    },
    ("attn_bwd_dkdv", "half", "plain"): {
        16: [(64, 64, 4, 2)],
        32: [(64, 64, 4, 2)],
        64: [(64, 128, 8, 2), (32, 128, 4, 3), (64, 64, 4, 2), (32, 64, 4, 2)],
        128: [(32, 128, 8, 2), (32, 32, 8, 1)],
    },
    ("attn_bwd_dkdv", "half", "chunked"): {
        16: [(32, 32, 8, 1)],
        32: [(32, 32, 4, 1)],
        64: [(32, 32, 4, 1)],
        128: [(32, 32, 8, 1)],
    },
    ("attn_bwd_dkdv", "fp32", "plain"): {
        16: [(16, 32, 4, 1)],
        32: [(16, 32, 4, 1)],
        64: [(16, 32, 4, 1)],
        128: [(16, 16, 4, 1)],
    },
    ("attn_bwd_dkdv", "fp32", "chunked"): {
        16: [(16, 16, 8, 1)],
        32: [(16, 32, 4, 1)],
        64: [(16, 16, 8, 1)],
        128: [(16, 16, 4, 1)],
    },
    ("attn_bwd_dq", "half", "plain"): {
        16: [(64, 64, 4, 2)],
        32: [(64, 64, 4, 2)],
        64: [(128, 64, 8, 2), (128, 32, 4, 3), (128, 64, 4, 2), (64, 64, 4, 2)],
        128: [(128, 32, 8, 2), (32, 32, 8, 1)],
    },
    ("attn_bwd_dq", "half", "chunked"): {
        16: [(32, 32, 4, 1)],
        32: [(32, 32, 4, 1)],
        64: [(32, 32, 4, 1)],
        128: [(32, 32, 8, 1)],
    },
    ("attn_bwd_dq", "fp32", "plain"): {
        16: [(16, 32, 4, 1)],
        32: [(16, 32, 4, 1)],
        64: [(16, 32, 4, 1)],
        128: [(16, 16, 8, 1)],
    },
    ("attn_bwd_dq", "fp32", "chunked"): {
        16: [(16, 32, 4, 1)],
        32: [(16, 32, 4, 1)],
        64: [(16, 32, 4, 1)],
        128: [(16, 16, 8, 1)],
    },
}
# The backward's wide variants (QK_HEAD > HEAD: the whole q/k width in one tile), "wide<QK_HEAD>"
# -> {HEAD: configs}. From QK_HEAD = 128 the fp32 dk (dq) accumulator, [BLOCK, QK_HEAD], takes
# 32-row tiles on 8 warps (16-row for fp32 inputs); the irregular fp32 entries are where 8 warps
# spilled. One spills still: fp32 dk/dv at HEAD = 128, QK_HEAD = 512, 8 bytes on sm_90 with
# dropout (every other 4-, 8- and 16-warp config we tried spilled 8-56 bytes on sm_80 or sm_90).
_T64, _T32 = (64, 64, 8, 2), (32, 32, 8, 1)  # 64×64 and 32×32 tiles, 8 warps
_GPU_CONFIGS.update(
    {
        ("attn_bwd_dkdv", "half", "wide32"): {16: [_T64]},
        ("attn_bwd_dkdv", "half", "wide64"): {16: [_T64], 32: [(64, 32, 8, 2)]},
        ("attn_bwd_dkdv", "half", "wide128"): {16: [_T32], 32: [_T32], 64: [_T32]},
        ("attn_bwd_dkdv", "half", "wide256"): {h: [_T32] for h in HEADS_PADDED},
        ("attn_bwd_dkdv", "half", "wide512"): {16: [_T32], 32: [_T32], 64: [_T32],
                                              128: [(32, 16, 8, 1)]},
        ("attn_bwd_dq", "half", "wide32"): {16: [(64, 64, 4, 2)]},
        ("attn_bwd_dq", "half", "wide64"): {16: [_T64], 32: [_T64]},
        ("attn_bwd_dq", "half", "wide128"): {16: [_T32], 32: [_T32], 64: [_T32]},
        ("attn_bwd_dq", "half", "wide256"): {h: [_T32] for h in HEADS_PADDED},
        ("attn_bwd_dq", "half", "wide512"): {h: [_T32] for h in HEADS_PADDED},
        ("attn_bwd_dkdv", "fp32", "wide32"): {16: [(16, 32, 4, 1)]},
        ("attn_bwd_dkdv", "fp32", "wide64"): {16: [(16, 16, 8, 1)], 32: [(16, 32, 4, 1)]},
        ("attn_bwd_dkdv", "fp32", "wide128"): {h: [(16, 16, 8, 1)] for h in (16, 32, 64)},
        ("attn_bwd_dkdv", "fp32", "wide256"): {16: [(16, 16, 8, 1)], 32: [(16, 16, 16, 1)],
                                              64: [(16, 16, 8, 1)], 128: [(16, 16, 4, 1)]},
        ("attn_bwd_dkdv", "fp32", "wide512"): {16: [(16, 16, 8, 1)], 32: [(16, 16, 8, 1)],
                                              64: [(16, 16, 16, 1)], 128: [(16, 32, 16, 1)]},
        ("attn_bwd_dq", "fp32", "wide32"): {16: [(16, 32, 4, 1)]},
        ("attn_bwd_dq", "fp32", "wide64"): {16: [(16, 32, 4, 1)], 32: [(16, 32, 4, 1)]},
        ("attn_bwd_dq", "fp32", "wide128"): {h: [(16, 16, 8, 1)] for h in (16, 32, 64)},
        ("attn_bwd_dq", "fp32", "wide256"): {16: [(16, 16, 4, 1)], 32: [(16, 16, 8, 1)],
                                            64: [(16, 16, 8, 1)], 128: [(16, 16, 8, 1)]},
        ("attn_bwd_dq", "fp32", "wide512"): {16: [(16, 16, 8, 1)], 32: [(16, 16, 4, 1)],
                                            64: [(16, 16, 8, 1)], 128: [(16, 16, 8, 1)]},
    }
)  # fmt: skip
# The backward's metric variant uses the plain tables (verified by the report like the rest).
for _kernel in ("attn_bwd_dkdv", "attn_bwd_dq"):
    for _kind in ("half", "fp32"):
        _GPU_CONFIGS[(_kernel, _kind, "metric")] = _GPU_CONFIGS[(_kernel, _kind, "plain")]


def block_configs(
    kernel: str,
    dtype: torch.dtype,
    head: int,
    metric: bool,
    chunked: bool,
    interpret: bool = INTERPRET,
    qk_head: int | None = None,
) -> list[tuple[int, int, int, int]]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) the autotuner may try for one kernel variant
    (`qk_head`, the backward's q/k tile, defaults to `head`).

    One config under the interpreter: it only checks semantics, and 32×32 tiles make sequences
    of 17..257 tokens span one to nine ragged tiles."""
    if interpret:
        return [(32, 32, 4, 1)]
    kind = "fp32" if dtype == torch.float32 else "half"
    variant = variant_name(head, qk_head or head, metric, chunked)
    return _GPU_CONFIGS[(kernel, kind, variant)][head]


def _as_triton_configs(kernel: str, interpret: bool = INTERPRET) -> list[triton.Config]:
    """Every config of `kernel` in the table, for the autotuner; the pruner narrows it per call."""
    seen: dict[tuple[int, int, int, int], triton.Config] = {}
    for name, dtype, head, qk_head, metric, chunked in spec_cases():
        if name != kernel:
            continue
        for bm, bn, w, s in block_configs(
            kernel, dtype, head, metric, chunked, interpret, qk_head=qk_head
        ):
            seen[(bm, bn, w, s)] = triton.Config(
                {"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s
            )
    return list(seen.values())


def _pruner(kernel: str, interpret: bool = INTERPRET):
    def prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
        dtype, head = named_args["Q"].dtype, kwargs["HEAD"]
        metric, chunked, qk_head = kwargs["METRIC"], kwargs["CHUNKED"], kwargs.get("QK_HEAD")
        wanted = set(
            block_configs(kernel, dtype, head, metric, chunked, interpret, qk_head=qk_head)
        )
        keep = [
            c
            for c in configs
            if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) in wanted
        ]
        return keep

    return prune


def n_bucket(n: int) -> int:
    """The sequence length as the autotuner sees it: the next power of two, between 64 and 16384.
    One tuning serves every length in a bucket (a new length used to re-tune every kernel, about
    30 s before a run's first step), and the best tile depends on N only through its scale."""
    return min(max(64, next_power_of_2(max(n, 1))), 16384)


# Keep the autotuner's choice on disk (Triton's cache directory), so a new process with the same
# kernels, GPU and bucket does not tune again; the argument exists from triton 3.2.
_CACHE_RESULTS = (
    {"cache_results": True}
    if "cache_results" in inspect.signature(triton.autotune).parameters
    else {}
)


# Elements of O (and of dO) per program of the delta kernel: 4096 // HEAD rows, 32 to 256.
_DELTA_TILE = 4096


def _autotuned(kernel: str):
    return triton.autotune(
        configs=_as_triton_configs(kernel),
        # The tensors' dtypes are part of the key too (Triton adds them).
        key=["n_bucket", "n_chunks", "HEAD", "CHUNKED", "METRIC", "DROPOUT", "HAS_MASK", "CAUSAL"],
        prune_configs_by={"early_config_prune": _pruner(kernel)},
        **_CACHE_RESULTS,
    )(KERNELS[kernel])


_fwd = _autotuned("attn_fwd")
_bwd_dkdv = _autotuned("attn_bwd_dkdv")
_bwd_dq = _autotuned("attn_bwd_dq")


# --------------------------------------------------------------------------------------------
# Launchers: the kernels' own limits, the grid
# --------------------------------------------------------------------------------------------
# The arguments arrive checked (shapes, dtypes, devices, mask, scale: kernels/_checks.py, at the
# public op or the torch.ops.attnzoo operator the call came in by); what is left here are the
# limits of these kernels: head widths, unit feature strides, int32 row offsets, the dropout
# counter.


def head_width(d_v: int) -> int:
    """The padded feature tile: the value width rounded up to a power of two, at least 16."""
    return max(16, next_power_of_2(d_v))


def _check_reach(name: str, t: torch.Tensor) -> None:
    """The kernels read features contiguously and index rows within a head in int32."""
    stride = t.stride()
    if stride[-1] != 1 and t.numel() > 0:
        raise ValueError(
            f"{name} must have unit stride in its last (feature) dim, got strides {stride}; "
            "call .contiguous()"
        )
    reach = sum((n - 1) * s for n, s in zip(t.shape, stride, strict=True))
    if reach >= 2**31:
        raise ValueError(f"{name} spans {reach} elements; the kernels index rows with int32")


def _alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if POISON_OUTPUTS:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


@functools.cache
def _placeholder(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A one-element tensor passed where a kernel argument is switched off (no padding mask, no
    dropout seed): the kernel never reads it. Made once per device, not per call."""
    return torch.zeros(1, dtype=dtype, device=device)


def _dot_precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"


class _Problem:
    """Everything the three kernels share for one call: operands, sizes, flags, mask, dropout."""

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        m: torch.Tensor | None,
        causal: bool,
        mask: torch.Tensor | None,
        scale: float,
        dropout_p: float = 0.0,
        seed: torch.Tensor | None = None,
    ) -> None:
        b, h, n, d_qk = q.shape
        d_v = v.shape[-1]
        if d_v > MAX_HEAD or d_v < 1:
            raise ValueError(f"v's head dim is {d_v}; the kernels take 1..{MAX_HEAD}")
        for name, t in (("q", q), ("k", k), ("v", v), ("m", m)):
            if t is not None:
                _check_reach(name, t)
        _check_dropout(dropout_p, seed, n, q)
        self.q, self.k, self.v, self.m = q, k, v, m
        self.b, self.h, self.n, self.d_qk, self.d_v = b, h, n, d_qk, d_v
        self.head = head_width(d_v)
        self.n_chunks = cdiv(d_qk, self.head)
        self.qk_head = qk_tile_width(d_qk, self.head)  # the backward's q/k tile
        self.causal, self.scale = causal, scale
        self.metric = m is not None
        self.has_mask = mask is not None
        if mask is None:
            self.mask_i8 = _placeholder(q.device, torch.int8)
        else:  # a bool is one byte: read it in place unless its tokens are strided
            self.mask_i8 = mask.view(torch.int8)
            if self.mask_i8.stride(1) != 1:
                self.mask_i8 = self.mask_i8.contiguous()
        self.dropout_p = float(dropout_p)
        self.n_bucket = n_bucket(n)
        self.seed = seed if dropout_p > 0.0 else _placeholder(q.device, torch.int64)
        self.m_or_q = m if m is not None else q
        self.m_strides = (m.stride(0), m.stride(1)) if m is not None else (0, 0)

    def inputs(self) -> tuple:
        return (self.q, self.k, self.v, self.m_or_q)

    def strides(self) -> tuple[int, ...]:
        q, k, v = self.q, self.k, self.v
        return (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *self.m_strides)

    def sizes(self) -> tuple:
        return (self.h, self.n, self.d_qk, self.d_v, self.n_chunks)

    def flags(self) -> dict:
        return {
            "METRIC": self.metric,
            "HEAD": self.head,
            "CHUNKED": self.n_chunks > 1,
            "DROPOUT": self.dropout_p > 0.0,
            "HAS_MASK": self.has_mask,
            "CAUSAL": self.causal,
            "DOT_PREC": _dot_precision(self.q.dtype),
        }

    def backward_flags(self) -> dict:
        """The forward's flags plus the backward's q/k tile: one tile (not chunked) when the
        q/k width fits in QK_HEAD."""
        return {**self.flags(), "QK_HEAD": self.qk_head, "CHUNKED": self.backward_chunks() > 1}

    def backward_chunks(self) -> int:
        """The backward grid's feature-chunk axis: one program per QK_HEAD-wide chunk."""
        return cdiv(self.d_qk, self.qk_head)


def _check_dropout(dropout_p: float, seed: torch.Tensor | None, n: int, like: torch.Tensor) -> None:
    """The seed a dropout call needs, and the int32 reach of its Philox counter."""
    if dropout_p == 0.0:
        return
    if not (isinstance(seed, torch.Tensor) and seed.dtype == torch.int64 and seed.numel() == 1):
        raise ValueError("dropout needs `seed`, a one-element int64 tensor (the Philox key)")
    if seed.device != like.device:
        raise ValueError(f"seed is on {seed.device}, expected {like.device}")
    if n * n >= 2**31:
        raise ValueError(
            f"attention dropout draws one int32 counter per (query, key): N = {n} tokens exceed "
            "46340; use dropout_p=0 for such lengths"
        )


def _check_interpretable(p: _Problem) -> None:
    if INTERPRET and p.q.dtype == torch.bfloat16:
        raise ValueError(
            "the attention kernels take no bfloat16 under TRITON_INTERPRET=1: the "
            "interpreter's tl.dot on bf16 tiles is wrong (relative errors ~1e9); use "
            "float16 or float32 there, or impl='torch'"
        )


def attention_forward(p: _Problem) -> tuple[torch.Tensor, torch.Tensor]:
    """out (B, H, N, dv) in the input dtype, and the base-2 log-sum-exp (B·H, N) in fp32."""
    _check_interpretable(p)
    out = _alloc((p.b, p.h, p.n, p.d_v), p.q.dtype, p.q.device)
    lse = _alloc((p.b * p.h, p.n), torch.float32, p.q.device)
    if p.n == 0 or p.b * p.h == 0:
        return out, lse
    grid = lambda meta: (cdiv(p.n, meta["BLOCK_M"]), p.b * p.h)
    _fwd[grid](
        *p.inputs(), out, lse, p.mask_i8, p.seed,
        *p.strides(), *out.stride()[:3], p.mask_i8.stride(0) if p.has_mask else 0,
        *p.sizes(), p.scale * LOG2E, p.dropout_p, p.n_bucket,
        **p.flags(),
    )  # fmt: skip
    return out, lse


def attention_backward(
    p: _Problem, out: torch.Tensor, lse: torch.Tensor, d_out: torch.Tensor, grad_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """dq and dk (B, H, N, dk) and dv (B, H, N, dv) in `grad_dtype`; for metric dv is None and
    dk holds the key and value roles' sum."""
    _check_interpretable(p)
    d_out, out = _unit_feature_stride(d_out), _unit_feature_stride(out)
    _check_reach("d_out", d_out)
    _check_reach("out", out)
    dq = _alloc((p.b, p.h, p.n, p.d_qk), grad_dtype, p.q.device)
    dk = _alloc((p.b, p.h, p.n, p.d_qk), grad_dtype, p.q.device)
    dv = None if p.metric else _alloc((p.b, p.h, p.n, p.d_v), grad_dtype, p.q.device)
    if p.n == 0 or p.b * p.h == 0:
        return dq, dk, dv
    delta = _alloc((p.b * p.h, p.n), torch.float32, p.q.device)
    dv_arg = dk if dv is None else dv
    smb = p.mask_i8.stride(0) if p.has_mask else 0
    common = (*p.sizes(), p.scale * LOG2E, p.scale, p.dropout_p, p.n_bucket)
    chunks = p.backward_chunks()
    rows = _DELTA_TILE // p.head
    _attn_bwd_delta[(cdiv(p.n, rows), p.b * p.h)](
        out, d_out, delta, *out.stride()[:3], *d_out.stride()[:3], p.h, p.n, p.d_v,
        HEAD=p.head, BLOCK_M=rows, num_warps=4, num_stages=1,
    )  # fmt: skip
    grid_n = lambda meta: (cdiv(p.n, meta["BLOCK_N"]), p.b * p.h, chunks)
    _bwd_dkdv[grid_n](
        *p.inputs(), d_out, lse, delta, dk, dv_arg, p.mask_i8, p.seed,
        *p.strides(), *d_out.stride()[:3], *dk.stride()[:3], *dv_arg.stride()[:3], smb,
        *common, **p.backward_flags(),
    )  # fmt: skip
    grid_m = lambda meta: (cdiv(p.n, meta["BLOCK_M"]), p.b * p.h, chunks)
    _bwd_dq[grid_m](
        *p.inputs(), d_out, lse, delta, dq, p.mask_i8, p.seed,
        *p.strides(), *d_out.stride()[:3], *dq.stride()[:3], smb,
        *common, **p.backward_flags(),
    )  # fmt: skip
    return dq, dk, dv


# --------------------------------------------------------------------------------------------
# Forward and backward of each op: what the custom ops in kernels/library.py run
# --------------------------------------------------------------------------------------------


def _unit_feature_stride(t: torch.Tensor) -> torch.Tensor:
    """The kernels read features contiguously; anything else is copied once, here."""
    return t if t.stride(-1) == 1 else t.contiguous()


def scaled_dot_forward(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ · scale) v per head: (out (B, H, N, dv), lse (B·H, N) fp32 for the backward)."""
    q_bhnk, k_bhnk, v_bhnv = (_unit_feature_stride(t) for t in (q_bhnk, k_bhnk, v_bhnv))
    prob = _Problem(q_bhnk, k_bhnk, v_bhnv, None, causal, key_padding_mask, scale, dropout_p, seed)
    return attention_forward(prob)


def scaled_dot_backward(
    d_out: torch.Tensor,
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv), each like its input; the dropout mask is drawn again from `seed`."""
    q_bhnk, k_bhnk, v_bhnv = (_unit_feature_stride(t) for t in (q_bhnk, k_bhnk, v_bhnv))
    prob = _Problem(q_bhnk, k_bhnk, v_bhnv, None, causal, key_padding_mask, scale, dropout_p, seed)
    dq, dk, dv = attention_backward(prob, out, lse, d_out, q_bhnk.dtype)
    assert dv is not None
    return dq, dk, dv


def metric_forward(
    p_bhnk: torch.Tensor,
    m_hkk: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores p[i] M[h] p[j] · scale with values p, from p and M alone (the fused prologue)."""
    if p_bhnk.dim() == 4 and p_bhnk.shape[-1] > MAX_HEAD:
        raise ValueError(f"p's head dim is {p_bhnk.shape[-1]}; metric attention takes ≤ {MAX_HEAD}")
    p_bhnk, m_hkk = _unit_feature_stride(p_bhnk), _unit_feature_stride(m_hkk)
    prob = _Problem(p_bhnk, p_bhnk, p_bhnk, m_hkk, causal, key_padding_mask, scale, dropout_p, seed)
    return attention_forward(prob)


def metric_backward(
    d_out: torch.Tensor,
    p_bhnk: torch.Tensor,
    m_hkk: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dp, dM). p plays three roles: q = p M (its gradient dq Mᵀ), and k and v (the kernel
    returns their sum)."""
    p_bhnk, m_hkk = _unit_feature_stride(p_bhnk), _unit_feature_stride(m_hkk)
    prob = _Problem(p_bhnk, p_bhnk, p_bhnk, m_hkk, causal, key_padding_mask, scale, dropout_p, seed)
    dq, dkv, _ = attention_backward(prob, out, lse, d_out, p_bhnk.dtype)
    # In the inputs' dtype, as PyTorch's autograd of q = p·M does (each product accumulates in
    # fp32 and rounds once; dM then sums the batch's (K, K) products): 14 bytes of traffic per
    # element of p in half precision, against 52 with fp32 copies of dq, dk+dv and p and 22 with
    # an einsum for dM (it copied p and dq into a (H, K, B·N) layout), three kernels + dM's sum.
    dp = dkv.add_(dq @ m_hkk.mT)
    dm = (p_bhnk.mT @ dq).sum(0)
    return dp, dm


@triton.jit
def _keep_mask_kernel(Seed, Keep, N, dropout_p, BLOCK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    offs_m = pid_m * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.arange(0, BLOCK)
    seed = tl.load(Seed)
    for start_n in range(0, N, BLOCK):
        cols = start_n + offs_n
        keep = _dropout_keep(seed, pid_bh, offs_m[:, None], cols[None, :], N, dropout_p)
        ptrs = Keep + pid_bh.to(tl.int64) * N * N + offs_m[:, None] * N + cols[None, :]
        tl.store(ptrs, keep.to(tl.int8), mask=(offs_m[:, None] < N) & (cols[None, :] < N))


def dropout_keep_mask(seed: torch.Tensor, b: int, h: int, n: int, dropout_p: float) -> torch.Tensor:
    """The keep mask (B, H, N, N), bool, that the attention kernels draw for `seed`: what the
    reference needs (`keep_bhnn`) to reproduce a Triton call with dropout exactly."""
    _check_dropout(dropout_p, seed, n, seed)
    keep = torch.empty((b, h, n, n), dtype=torch.int8, device=seed.device)
    if keep.numel():
        _keep_mask_kernel[(cdiv(n, 32), b * h)](seed, keep, n, dropout_p, BLOCK=32)
    return keep.bool()


# --------------------------------------------------------------------------------------------
# Ahead-of-time compilation specs (scripts/kernel_report.py)
# --------------------------------------------------------------------------------------------

_TRITON_DTYPE = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


_CONSTEXPRS = frozenset(
    [
        "METRIC",
        "HEAD",
        "QK_HEAD",
        "CHUNKED",
        "DROPOUT",
        "HAS_MASK",
        "CAUSAL",
        "BLOCK_M",
        "BLOCK_N",
        "DOT_PREC",
    ]
)


def _signature(fn, dtype: torch.dtype) -> dict[str, str]:
    ptr = f"*{_TRITON_DTYPE[dtype]}"
    sig: dict[str, str] = {}
    for name in fn.arg_names:
        if name in _CONSTEXPRS:
            sig[name] = "constexpr"
        elif name == "Mask":
            sig[name] = "*i8"
        elif name == "Seed":
            sig[name] = "*i64"
        elif name in ("Lse", "Delta"):
            sig[name] = "*fp32"
        elif name in ("Q", "K", "V", "M", "Out", "DO", "DQ", "DK", "DV"):
            sig[name] = ptr
        elif name in ("scale", "scale2", "dropout_p"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


# Integer arguments the JIT sees as multiples of 16 for contiguous operands whose token count and
# widths are multiples of 16 (the shapes people train with): it specialises such values, and
# that is what lets a row's loads be 16-byte vectors. The report compiles that common case;
# without the hint ptxas saw scalar loads and spilled where the real kernel does not (the bf16
# head-64 forward at 128×64 tiles, 4 warps: 255 registers and 496 spilled bytes on sm_90 without
# it, 216 and none with it).
_DIVISIBLE_INTS = frozenset(
    ("N", "d_qk", "d_v", "smh", "smr")
    + tuple(f"s{t}{d}" for t in ("q", "k", "v", "o", "do", "dq", "dk", "dv") for d in "bhn")
)


def _aligned(fn, sig: dict[str, str]) -> dict:
    """16-byte aligned pointers, as the JIT specialises them for tensors torch allocates, and the
    integer strides and sizes that are multiples of 16 in the common case (_DIVISIBLE_INTS)."""
    return {
        (i,): [["tt.divisibility", 16]]
        for i, name in enumerate(fn.arg_names)
        if sig[name].startswith("*") or name in _DIVISIBLE_INTS
    }


def aot_specs() -> list[AotSpec]:
    """One spec per kernel and per configuration the launchers can pick on a GPU (the GPU tables,
    also when this process runs the interpreter) with no mask and no dropout; and at the first
    configuration of each, the variant with causal, padding mask and dropout all on."""
    specs = []
    for (kernel, dtype, head, qk_head, metric, chunked), all_on in itertools.product(
        spec_cases(), (False, True)
    ):
        sig = _signature(KERNELS[kernel], dtype)
        aligned = _aligned(KERNELS[kernel], sig)
        configs = block_configs(
            kernel, dtype, head, metric, chunked, interpret=False, qk_head=qk_head
        )
        # The masks and dropout add elementwise work to a variant, no new tile shapes: the variant
        # with all three on (causal, padding mask, dropout: the most code) compiles at each row's
        # first config (what ptxas makes of it is in the report); on a GPU the autotuner still
        # times every config and skips one that runs out of resources.
        for bm, bn, warps, stages in configs[:1] if all_on else configs:
            constexprs = {
                "METRIC": metric,
                "HEAD": head,
                "CHUNKED": chunked,
                "DROPOUT": all_on,
                "HAS_MASK": all_on,
                "CAUSAL": all_on,
                "BLOCK_M": bm,
                "BLOCK_N": bn,
                "DOT_PREC": _dot_precision(dtype),
            }
            if "QK_HEAD" in KERNELS[kernel].arg_names:
                constexprs["QK_HEAD"] = qk_head
            prologue = variant_name(head, qk_head, metric, chunked)
            prologue += " causal mask dropout" if all_on else ""
            label = (
                f"{_TRITON_DTYPE[dtype]} {prologue} HEAD={head} "
                f"BLOCK_M={bm} BLOCK_N={bn} w{warps} s{stages}"
            )
            specs.append(
                AotSpec(
                    name=kernel,
                    fn=KERNELS[kernel],
                    signature=sig,
                    constexprs=constexprs,
                    num_warps=warps,
                    num_stages=stages,
                    label=label,
                    attrs=aligned,
                )
            )
    for dtype, head in itertools.product(TRITON_DTYPES, HEADS_PADDED):
        sig = _signature(_attn_bwd_delta, dtype)
        rows = _DELTA_TILE // head
        specs.append(
            AotSpec(
                name="attn_bwd_delta",
                fn=_attn_bwd_delta,
                signature=sig,
                constexprs={"HEAD": head, "BLOCK_M": rows},
                num_warps=4,
                num_stages=1,
                label=f"{_TRITON_DTYPE[dtype]} HEAD={head} BLOCK_M={rows} w4",
                attrs=_aligned(_attn_bwd_delta, sig),
            )
        )
    return specs
