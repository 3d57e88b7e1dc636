"""The attention kernels: one FlashAttention-2 family, three prologues (scaled-dot, quadratic,
metric), softmax weights (optionally with a sink) or sigmoid ones.

Algorithm. A program owns a tile of BLOCK_M queries and walks the key tiles with an online
softmax (a running max and a running sum, in base 2: scores arrive multiplied by scale·log2 e),
so the N×N score matrix is never in memory. The forward writes the output and the base-2
log-sum-exp of every row. The backward recomputes the probabilities from it in two kernels, one
per key tile (dk, dv: `_attn_bwd_dkdv`) and one per query tile (dq: `_attn_bwd_dq`), so no
gradient needs an atomic add; before them `_attn_bwd_delta` forms delta = rowsum(dO ∘ O) in
fp32, from one read of O and dO in their own dtype.

What the inner loops leave out, because it would be work on every element of every score tile:
- Masks. Causal and padding are compile-time switches (CAUSAL, HAS_MASK), and each kernel walks
  its tiles in two loops: the tiles that need the per-element mask (on the causal diagonal, the
  ragged last key tile) and the rest, which run without one.
- Tiles outside a sliding window. WINDOW (a compile-time switch; the reaches left and right are
  runtime ints, causal folded into them by the launcher) bounds both loops to the tiles the
  window reaches (`_window_tiles`), in one loop that decides per tile, with a scalar branch,
  whether the per-element mask applies: only the window's edges take it. Every other tile is
  never loaded.
- Transposes of register tiles. The dk/dv kernel computes its scores transposed, k·qᵀ (keys ×
  queries), so Pᵀ and dSᵀ come out of their dots in the layout of the left operand of
  dv += Pᵀ·dO and dk += dSᵀ·q.

Prologues (METRIC, a compile-time switch):
- scaled-dot and quadratic read q, k, v as given. Quadratic attention forms q = x·U[h] before
  the kernel (one batched matmul) and passes k = x for every head through a zero head stride.
- metric reads only p (B, H, N, dk) and M (H, dk, dk): q = p·M is formed in registers, 16 rows
  of M at a time, and one tile of p serves as key and value. Its dk/dv kernel stores dk + dv,
  the two roles' sum, and the backward forms q = p·M again per tile rather than storing it.

Sinks (SINK, a compile-time switch of the forward): one more logit per head (Sink, (H,), base 2)
in every row's softmax, with value zero. The online softmax starts from it (m = sink, l = 1,
acc = 0) instead of from nothing, so the log-sum-exp includes it and a row that sees no key gets
output 0 with lse = the sink's logit. The backward kernels are unchanged: exp2(s·scale2 − lse) are
already the with-sink probabilities, and dS = P ∘ (dP − delta) holds. The sink's own gradient,
dsink_h = −Σ_{b,i} p_sink · delta with p_sink = exp2(sink − lse) (raising the sink's logit moves
every probability of the row by −p_j · p_sink), is formed by the launcher from lse and delta.

Key bias (KEY_BIAS, a compile-time switch; KeyBias (B·H, N) fp32, base 2): a logit per key added
to every row's scores before the mask and the running max, so p_ij = exp2(s_ij·scale2 + kb_j −
lse_i) throughout: the forward and the dq kernel load the key tile's logits with its keys, the
dk/dv kernel loads its own tile's once. Its gradient, d key_bias_j = Σ_i dS_ij (dS = P ∘ (dP −
delta), in natural units like the scores), is a column sum of dS: the dk/dv kernel, which
walks every query tile of its key tile, sums its dSᵀ tiles' rows into a [BLOCK_N] fp32
accumulator and stores them (chunk 0; zero for a padding key), so no atomic add is needed. Rows
past the end, masked pairs and empty rows have P = 0, hence dS = 0: they add nothing.
A column sum amplifies an error that a row sum would not: delta = rowsum(dO ∘ O) from the
stored (fp16/bf16-rounded) O is off by a rounding ε_i, which puts −ε_i P_ij into every dS_ij
of row i; a row's dS sums to −ε_i instead of 0, and a cumulative sum of column sums (FoX's
d log f) gathers the ε_i of every later row. So with KEY_BIAS the dq kernel runs first and also
stores rowsum(P ∘ dP) from its fp32 tiles (the exact delta: dropout's mask included, a sink's
value being zero), and the dk/dv kernel uses that one (dq keeps the usual delta).

Sigmoid attention (SIGMOID, a compile-time switch; the bias a runtime fp32): no normalisation.
The forward sums σ(scale · q·k + bias) · v over the visible keys (a masked score is −inf, whose σ
is 0) with no running max or sum, and stores no lse. The backward recomputes P = σ from q and k,
dv = Pᵀ·dO and dS = dP ∘ P ∘ (1 − P), dq and dk as for the softmax (no delta kernel). Rows past
the end read dO = 0, so they add nothing to dv or dk.

Dropout (DROPOUT, a compile-time switch): after the softmax a probability is kept where the
Philox draw `tl.rand(seed + b·H + h, query·N + key)` is ≥ p, and scaled by 1/(1 - p). The row
sums (and so the log-sum-exp) are those before dropout; both backward kernels draw the same mask
from the same counters, so it is never stored. dv uses the dropped probabilities and dP is masked
and scaled alike; delta = rowsum(dO ∘ O) holds unchanged because O already includes the mask.

Feature widths. The value width dv is padded to a power of two HEAD in HEADS_PADDED. The forward
walks the q/k width in HEAD-wide chunks (CHUNKED), summing a query tile's scores over the chunks
once, so scaled-dot and quadratic take any q/k width. The backward's q/k tile is QK_HEAD wide:
HEAD when dk ≤ HEAD, else the q/k width rounded up to a power of two up to MAX_QK_HEAD, so each
backward program computes the scores of a tile pair once, over the whole width; wider than that,
the backward falls back to HEAD-wide chunks (a grid axis), and every chunk's program computes
the full scores again.

Invariants:
- A query whose every key is masked (causal or window, and padding) gets zeros and zero gradients:
  its log-sum-exp is +inf, so every recomputed probability is 0. With a sink its log-sum-exp is
  the sink's logit, and its pairs are masked where the backward recomputes them (the masked
  loops, the padding keys), as are every (sigmoid) weight of a masked pair.
- A query row past the end reads lse = +inf, and a key past the end or padding only touches its
  own rows of dk and dv (not stored, or zeroed): the dk/dv kernel masks only the causal diagonal.
- Elements outside (N, d) are never written.

Limits: value width 1..MAX_HEAD, metric's dk ≤ MAX_HEAD; rows within a head indexed in int32;
the dropout counter query·N + key in int32 (N ≤ 46340 with dropout); fp16/bf16/fp32 inputs with
fp32 accumulation, fp32 with IEEE dots (not TF32). The launchers (launch.py) check these. Under
TRITON_INTERPRET=1 the launchers refuse bf16: the interpreter's bf16 tl.dot is wrong.

docs/kernels.md has the cost arguments behind these choices and the measurements.
"""

from __future__ import annotations

import numpy
import triton
import triton.language as tl

from .._host import INTERPRET, check_interpreter

if INTERPRET:
    check_interpreter(triton.__version__, numpy.__version__)

# The kernels' feature tiles: the padded value widths, the widest one, and the widest q/k tile
# the backward holds whole (QK_HEAD); a wider q/k width is chunked.
HEADS_PADDED = (16, 32, 64, 128)
MAX_HEAD = 128
MAX_QK_HEAD = 512

# A window's reach is a runtime value the JIT must not specialise (on 1, or on a multiple of
# 16): one compiled variant serves every window.
_WINDOW_ARGS = ("left", "right")


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
def _visible(queries, keys, N, left, right, CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """Which (query, key) pairs of a diagonal, window-edge or ragged tile count: the key exists,
    and, if causal, does not come after the query; with a window, query − left ≤ key ≤ query +
    right. `queries` and `keys` broadcast to the tile's 2-D shape."""
    ok = keys < N
    if CAUSAL:
        ok = ok & (queries >= keys)
    if WINDOW:  # 0 <= key - query + left <= left + right, as one unsigned comparison
        span = (left + right).to(tl.uint32)
        ok = ok & ((keys - (queries - left)).to(tl.uint32, bitcast=True) <= span)
    return ok


@triton.jit
def _padding(Mask, mask_base, offs_n, N):
    """True where a key is padding (the key-padding mask) or past the end."""
    return tl.load(Mask + mask_base + offs_n, mask=offs_n < N, other=1) != 0


@triton.jit
def _dropout_keep(seed, pid_bh, queries, keys, N, dropout_p):
    """Which probabilities dropout keeps: Philox keyed by seed + (batch·head) at counter
    query·N + key, so the forward and both backward kernels draw the same mask without storing
    it (and `_keep_mask_kernel` writes it out for tests). `queries` and `keys` broadcast to
    the tile's shape, (queries, keys) or transposed."""
    return tl.rand(seed + pid_bh, queries * N + keys) >= dropout_p


@triton.jit
def _sigmoid2(x):
    """σ of a base-2 logit x = (scale · q·k + bias) · log2 e: 1 / (1 + 2^−x); 0 at x = −inf."""
    return 1.0 / (1.0 + tl.exp2(-x))


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
def _window_tiles(start, before, after, N, ROWS: tl.constexpr, TILE: tl.constexpr):
    """The column tiles that rows [start, start + ROWS) visit when row r sees the columns
    [r − before, r + after] (queries against keys: before = left, after = right; keys against
    queries in the dk/dv kernel: before = right, after = left). Returns lo ≤ full_lo ≤ full_hi ≤
    hi: tiles start at multiples of TILE from lo, those in [full_lo, full_hi) lie inside every
    row's window and inside the sequence (no per-element mask), those in [lo, full_lo) and
    [full_hi, hi) are the window's edges; every tile before lo or from hi on is invisible to every
    row, and is skipped. `before` and `after` are at most N (the launcher clips them), so
    nothing here overflows int32."""
    lo = tl.maximum(start - before, 0) // TILE * TILE
    hi = tl.minimum(N, start + ROWS + after)
    full_lo = tl.minimum(tl.cdiv(tl.maximum(start + ROWS - 1 - before, 0), TILE) * TILE, hi)
    full_hi = tl.minimum(tl.minimum(N, start + after + 1) // TILE * TILE, hi)
    full_hi = tl.maximum(full_hi, full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def _mask(
    x,
    queries,
    keys,
    start,
    N,
    left,
    right,
    inner_lo,
    inner_hi,
    fill,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
):
    """x where (query, key) is visible, else `fill`. A window's masked loop runs every tile the
    window reaches, contiguously (a loop whose tile address is affine in its counter, which the
    sm_90 software pipeliner keeps in few registers), and decides per tile at run time: the
    inner tiles [inner_lo, inner_hi) take no per-element mask."""
    if WINDOW:
        if (start < inner_lo) | (start >= inner_hi):
            x = tl.where(_visible(queries, keys, N, left, right, CAUSAL, WINDOW), x, fill)
    else:
        x = tl.where(_visible(queries, keys, N, left, right, CAUSAL, WINDOW), x, fill)
    return x


@triton.jit
def _fwd_loop(
    acc,
    l_i,
    m_i,
    q0,
    Q,
    K,
    V,
    Mask,
    KeyBias,
    seed,
    q_base,
    k_base,
    v_base,
    mask_base,
    kb_base,
    pid_bh,
    offs_m,
    offs_d,
    sqn,
    skn,
    svn,
    N,
    d_qk,
    d_v,
    n_chunks,
    scale2,
    bias2,
    dropout_p,
    lo,
    hi,
    inner_lo,
    inner_hi,
    left,
    right,
    METRIC: tl.constexpr,
    HEAD: tl.constexpr,
    CHUNKED: tl.constexpr,
    DROPOUT: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
    SIGMOID: tl.constexpr,
    KEY_BIAS: tl.constexpr,
    MASKED: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """The online softmax over key tiles [lo, hi) (SIGMOID: the plain sum of σ-weighted values,
    no running max or sum). MASKED: the tiles on the causal diagonal and the ragged last tile,
    which need the per-element mask, or with WINDOW every tile the window reaches, the mask
    applied outside [inner_lo, inner_hi) only; the other loop skips it. A masked score is −inf:
    weight 0 under either normalisation."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k0 = _load_rows(K + k_base, offs_n, skn, offs_d, N, d_qk)
        s = _scores(
            q0,
            k0,
            Q,
            K,
            q_base,
            k_base,
            offs_m,
            offs_n,
            sqn,
            skn,
            offs_d,
            N,
            d_qk,
            n_chunks,
            HEAD,
            CHUNKED,
            DOT_PREC,
        )
        s = s * scale2
        if KEY_BIAS:  # one logit per key (base 2), the same in every row, before the mask
            s += tl.load(KeyBias + kb_base + offs_n, mask=offs_n < N, other=0.0)[None, :]
        if MASKED:
            s = _mask(
                s,
                offs_m[:, None],
                offs_n[None, :],
                start_n,
                N,
                left,
                right,
                inner_lo,
                inner_hi,
                float("-inf"),
                CAUSAL,
                WINDOW,
            )
        if HAS_MASK:
            s = tl.where(_padding(Mask, mask_base, offs_n, N)[None, :], float("-inf"), s)
        if SIGMOID:
            p = _sigmoid2(s + bias2)
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # A row that has seen no key yet keeps m = -inf (a finite stand-in would shift the
            # next tile's exp2 by it: scores far below it would underflow to an empty row); only
            # the exponent uses 0 in its place, away from -inf - -inf.
            if MASKED or HAS_MASK:  # noqa: SIM108 (a compile-time branch)
                m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
            else:
                m_use = m_new
            alpha = tl.exp2(m_i - m_use)
            p = tl.exp2(s - m_use[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)  # the softmax's sum: before dropout
            m_i = m_new
        if METRIC:  # noqa: SIM108 (a compile-time branch: the else side is never traced)
            v = k0
        else:
            v = _load_rows(V + v_base, offs_n, svn, offs_d, N, d_v)
        if DROPOUT:
            keep = _dropout_keep(seed, pid_bh, offs_m[:, None], offs_n[None, :], N, dropout_p)
            p = tl.where(keep, p / (1.0 - dropout_p), 0.0)
        if SIGMOID:
            acc += tl.dot(p.to(v.dtype), v, input_precision=DOT_PREC)
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PREC)
    return acc, l_i, m_i


@triton.jit(do_not_specialize=_WINDOW_ARGS)
def _attn_fwd(
    Q,
    K,
    V,
    M,
    Out,
    Lse,
    Mask,
    Seed,
    Sink,
    KeyBias,
    sqb,
    sqh,
    sqn,
    skb,
    skh,
    skn,
    svb,
    svh,
    svn,
    smh,
    smr,
    sob,
    soh,
    son,
    smb,
    H,
    N,
    d_qk,
    d_v,
    n_chunks,
    scale2,
    bias2,
    dropout_p,
    n_bucket,
    left,
    right,
    METRIC: tl.constexpr,
    HEAD: tl.constexpr,
    CHUNKED: tl.constexpr,
    DROPOUT: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
    SINK: tl.constexpr,
    SIGMOID: tl.constexpr,
    KEY_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """One query tile of one (batch, head): its output rows, and their base-2 log-sum-exp
    (+inf for a row that sees no key, whose output is 0; with SINK the sink is in it, so such a
    row's is the sink's logit). SIGMOID: the output only, Lse is never written. WINDOW (never
    with CAUSAL, which the launcher folds into the window): only the key tiles that meet the
    tile's window run, the two edges with the per-element mask."""
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
    if SINK:  # the sink is a key seen first, of logit Sink[h] (base 2) and value zero
        m_i = tl.zeros([BLOCK_M], tl.float32) + tl.load(Sink + h)
        l_i = tl.full([BLOCK_M], 1.0, tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD], tl.float32)
    k_base, v_base, mask_base = b * skb + h * skh, b * svb + h * svh, b * smb
    kb_base = pid_bh.to(tl.int64) * N  # the key bias, (B·H, N) contiguous
    if WINDOW:  # one loop over the tiles the window reaches; the inner ones skip the mask
        lo, inner_lo, inner_hi, hi = _window_tiles(
            pid_m * BLOCK_M, left, right, N, BLOCK_M, BLOCK_N
        )
    else:  # the tiles that need no mask, then those that do
        full, hi = _key_tiles(pid_m, N, BLOCK_M, BLOCK_N, CAUSAL)
        acc, l_i, m_i = _fwd_loop(
            acc,
            l_i,
            m_i,
            q0,
            Q,
            K,
            V,
            Mask,
            KeyBias,
            seed,
            q_base,
            k_base,
            v_base,
            mask_base,
            kb_base,
            pid_bh,
            offs_m,
            offs_d,
            sqn,
            skn,
            svn,
            N,
            d_qk,
            d_v,
            n_chunks,
            scale2,
            bias2,
            dropout_p,
            0,
            full,
            0,
            0,
            left,
            right,
            METRIC,
            HEAD,
            CHUNKED,
            DROPOUT,
            HAS_MASK,
            CAUSAL,
            WINDOW,
            SIGMOID,
            KEY_BIAS,
            False,
            BLOCK_N,
            DOT_PREC,
        )
        lo, inner_lo, inner_hi = full, 0, 0
    acc, l_i, m_i = _fwd_loop(
        acc,
        l_i,
        m_i,
        q0,
        Q,
        K,
        V,
        Mask,
        KeyBias,
        seed,
        q_base,
        k_base,
        v_base,
        mask_base,
        kb_base,
        pid_bh,
        offs_m,
        offs_d,
        sqn,
        skn,
        svn,
        N,
        d_qk,
        d_v,
        n_chunks,
        scale2,
        bias2,
        dropout_p,
        lo,
        hi,
        inner_lo,
        inner_hi,
        left,
        right,
        METRIC,
        HEAD,
        CHUNKED,
        DROPOUT,
        HAS_MASK,
        CAUSAL,
        WINDOW,
        SIGMOID,
        KEY_BIAS,
        True,
        BLOCK_N,
        DOT_PREC,
    )

    o_ptrs = Out + b * sob + h * soh + offs_m[:, None] * son + offs_d[None, :]
    o_mask = (offs_m[:, None] < N) & (offs_d[None, :] < d_v)
    if SIGMOID:  # no normalisation: the weighted sum is the output
        tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=o_mask)
    else:
        empty = l_i == 0.0
        l_safe = tl.where(empty, 1.0, l_i)
        out = acc / l_safe[:, None]
        lse = tl.where(empty, float("inf"), m_i + tl.log2(l_safe))
        tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=o_mask)
        tl.store(Lse + pid_bh.to(tl.int64) * N + offs_m, lse, mask=offs_m < N)


@triton.jit
def _attn_bwd_delta(
    Out,
    DO,
    Delta,
    sob,
    soh,
    son,
    sdob,
    sdoh,
    sdon,
    H,
    N,
    d_v,
    HEAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    """delta = rowsum(O ∘ dO) in fp32 for one tile of rows, what both backward kernels subtract
    from dP: one read of O and dO in their own dtype. A kernel of its own, not a prologue of the
    dq kernel: there its extra tiles made the widest dq variants spill."""
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
    dq,
    pdp,
    q0,
    do,
    lse,
    delta,
    Q,
    K,
    V,
    Mask,
    KeyBias,
    seed,
    q_base,
    k_base,
    v_base,
    mask_base,
    kb_base,
    pid_bh,
    offs_m,
    offs_k,
    offs_c,
    offs_d,
    sqn,
    skn,
    svn,
    N,
    d_qk,
    d_v,
    n_chunks,
    scale2,
    bias2,
    dropout_p,
    lo,
    hi,
    inner_lo,
    inner_hi,
    left,
    right,
    METRIC: tl.constexpr,
    QK_HEAD: tl.constexpr,
    CHUNKED: tl.constexpr,
    DROPOUT: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
    SIGMOID: tl.constexpr,
    KEY_BIAS: tl.constexpr,
    MASKED: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """dq over key tiles [lo, hi); MASKED as in the forward's loop. dS = P ∘ (dP − delta), or
    with SIGMOID dS = dP ∘ P ∘ (1 − P) (`lse` and `delta` unused)."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k0 = _load_rows(K + k_base, offs_n, skn, offs_k, N, d_qk)
        s = _scores(
            q0,
            k0,
            Q,
            K,
            q_base,
            k_base,
            offs_m,
            offs_n,
            sqn,
            skn,
            offs_k,
            N,
            d_qk,
            n_chunks,
            QK_HEAD,
            CHUNKED,
            DOT_PREC,
        )
        if SIGMOID:
            p = _sigmoid2(s * scale2 + bias2)
        else:
            s = s * scale2
            if KEY_BIAS:
                s += tl.load(KeyBias + kb_base + offs_n, mask=offs_n < N, other=0.0)[None, :]
            p = tl.exp2(s - lse[:, None])
        if MASKED:
            p = _mask(
                p,
                offs_m[:, None],
                offs_n[None, :],
                start_n,
                N,
                left,
                right,
                inner_lo,
                inner_hi,
                0.0,
                CAUSAL,
                WINDOW,
            )
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
        if SIGMOID:  # noqa: SIM108
            ds = dp * p * (1.0 - p)
        else:
            ds = p * (dp - delta[:, None])
            if KEY_BIAS:  # rowsum(P ∘ dP): delta from fp32 products, for the dk/dv kernel
                pdp += tl.sum(p * dp, 1)
        if CHUNKED:  # noqa: SIM108
            kc = _load_rows(K + k_base, offs_n, skn, offs_c, N, d_qk)
        else:
            kc = k0
        dq += tl.dot(ds.to(kc.dtype), kc, input_precision=DOT_PREC)
    return dq, pdp


@triton.jit(do_not_specialize=_WINDOW_ARGS)
def _attn_bwd_dq(
    Q,
    K,
    V,
    M,
    DO,
    Lse,
    Delta,
    DQ,
    Mask,
    Seed,
    KeyBias,
    DeltaExact,
    sqb,
    sqh,
    sqn,
    skb,
    skh,
    skn,
    svb,
    svh,
    svn,
    smh,
    smr,
    sdob,
    sdoh,
    sdon,
    sdqb,
    sdqh,
    sdqn,
    smb,
    H,
    N,
    d_qk,
    d_v,
    n_chunks,
    scale2,
    scale,
    bias2,
    dropout_p,
    n_bucket,
    left,
    right,
    METRIC: tl.constexpr,
    HEAD: tl.constexpr,
    QK_HEAD: tl.constexpr,
    CHUNKED: tl.constexpr,
    DROPOUT: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
    SIGMOID: tl.constexpr,
    KEY_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """One query tile and one q/k feature chunk (QK_HEAD wide, as in the dk/dv kernel):
    dq = scale · dS · k for that chunk. WINDOW: the key tiles of the forward's window loops.
    SIGMOID: Lse and Delta are never read. KEY_BIAS: chunk 0 also stores DeltaExact =
    rowsum(P ∘ dP) from the fp32 products, which the dk/dv kernel (launched after this one)
    then uses as delta."""
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
    if SIGMOID:  # the weights need no row statistics
        lse, delta = 0.0, 0.0
    else:
        delta = tl.load(Delta + row_base + offs_m, mask=offs_m < N, other=0.0)
        lse = tl.load(Lse + row_base + offs_m, mask=offs_m < N, other=float("inf"))
    seed = 0
    if DROPOUT:
        seed = tl.load(Seed)

    dq = tl.zeros([BLOCK_M, QK_HEAD], tl.float32)
    if KEY_BIAS:  # noqa: SIM108 (a compile-time branch)
        pdp = tl.zeros([BLOCK_M], tl.float32)
    else:
        pdp = 0.0
    k_base, v_base, mask_base = b * skb + h * skh, b * svb + h * svh, b * smb
    kb_base = row_base
    if WINDOW:  # as in the forward
        lo, inner_lo, inner_hi, hi = _window_tiles(
            pid_m * BLOCK_M, left, right, N, BLOCK_M, BLOCK_N
        )
    else:
        full, hi = _key_tiles(pid_m, N, BLOCK_M, BLOCK_N, CAUSAL)
        dq, pdp = _dq_loop(
            dq,
            pdp,
            q0,
            do,
            lse,
            delta,
            Q,
            K,
            V,
            Mask,
            KeyBias,
            seed,
            q_base,
            k_base,
            v_base,
            mask_base,
            kb_base,
            pid_bh,
            offs_m,
            offs_k,
            offs_c,
            offs_d,
            sqn,
            skn,
            svn,
            N,
            d_qk,
            d_v,
            n_chunks,
            scale2,
            bias2,
            dropout_p,
            0,
            full,
            0,
            0,
            left,
            right,
            METRIC,
            QK_HEAD,
            CHUNKED,
            DROPOUT,
            HAS_MASK,
            CAUSAL,
            WINDOW,
            SIGMOID,
            KEY_BIAS,
            False,
            BLOCK_N,
            DOT_PREC,
        )
        lo, inner_lo, inner_hi = full, 0, 0
    dq, pdp = _dq_loop(
        dq,
        pdp,
        q0,
        do,
        lse,
        delta,
        Q,
        K,
        V,
        Mask,
        KeyBias,
        seed,
        q_base,
        k_base,
        v_base,
        mask_base,
        kb_base,
        pid_bh,
        offs_m,
        offs_k,
        offs_c,
        offs_d,
        sqn,
        skn,
        svn,
        N,
        d_qk,
        d_v,
        n_chunks,
        scale2,
        bias2,
        dropout_p,
        lo,
        hi,
        inner_lo,
        inner_hi,
        left,
        right,
        METRIC,
        QK_HEAD,
        CHUNKED,
        DROPOUT,
        HAS_MASK,
        CAUSAL,
        WINDOW,
        SIGMOID,
        KEY_BIAS,
        True,
        BLOCK_N,
        DOT_PREC,
    )

    dq = dq * scale
    dq_ptrs = DQ + b * sdqb + h * sdqh + offs_m[:, None] * sdqn + offs_c[None, :]
    dq_mask = (offs_m[:, None] < N) & (offs_c[None, :] < d_qk)
    tl.store(dq_ptrs, dq.to(DQ.dtype.element_ty), mask=dq_mask)
    if KEY_BIAS:  # noqa: SIM102 (compile-time test, then a runtime one)
        if pid_c == 0:
            tl.store(DeltaExact + row_base + offs_m, pdp, mask=offs_m < N)


@triton.jit
def _dkdv_loop(
    dk,
    dv,
    dkb,
    k0,
    v,
    kb,
    Q,
    K,
    M,
    DO,
    Lse,
    Delta,
    seed,
    q_base,
    k_base,
    m_base,
    do_base,
    row_base,
    pid_bh,
    offs_n,
    offs_k,
    offs_c,
    offs_d,
    sqn,
    skn,
    smr,
    sdon,
    N,
    d_qk,
    d_v,
    n_chunks,
    scale2,
    bias2,
    dropout_p,
    lo,
    hi,
    inner_lo,
    inner_hi,
    left,
    right,
    METRIC: tl.constexpr,
    QK_HEAD: tl.constexpr,
    CHUNKED: tl.constexpr,
    DROPOUT: tl.constexpr,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
    SIGMOID: tl.constexpr,
    KEY_BIAS: tl.constexpr,
    MASKED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """dk and dv of one key tile over query tiles [lo, hi), in transposed form: the scores are
    k·qᵀ (keys × queries), so Pᵀ and dSᵀ come out of their dots in the layout that dv += Pᵀ·dO
    and dk += dSᵀ·q take as their left operand, with no transpose of a register tile between.
    MASKED: the tiles on the causal diagonal, or with WINDOW every query tile that reaches the
    key tile (masked outside [inner_lo, inner_hi), as in the forward). No other tile needs a
    mask: a query past the end reads lse = +inf (so P = 0; with SIGMOID its dO row reads 0, so
    it adds nothing to dv or dS), and a key past the end (or padding) only touches its own row
    of dk and dv, which is not stored (resp. zeroed)."""
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q0 = _query_tile(Q, M, q_base, m_base, offs_m, sqn, smr, offs_k, N, d_qk, METRIC, DOT_PREC)
        s_t = _scores(
            k0,
            q0,
            K,
            Q,
            k_base,
            q_base,
            offs_n,
            offs_m,
            skn,
            sqn,
            offs_k,
            N,
            d_qk,
            n_chunks,
            QK_HEAD,
            CHUNKED,
            DOT_PREC,
        )
        if SIGMOID:
            p_t = _sigmoid2(s_t * scale2 + bias2)
        else:
            lse = tl.load(Lse + row_base + offs_m, mask=offs_m < N, other=float("inf"))
            s_t = s_t * scale2
            if KEY_BIAS:  # the key tile's own logits, one per row of the transposed scores
                s_t += kb[:, None]
            p_t = tl.exp2(s_t - lse[None, :])
        if MASKED:
            p_t = _mask(
                p_t,
                offs_m[None, :],
                offs_n[:, None],
                start_m,
                N,
                left,
                right,
                inner_lo,
                inner_hi,
                0.0,
                CAUSAL,
                WINDOW,
            )
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
        if SIGMOID:
            ds_t = dp_t * p_t * (1.0 - p_t)
        else:
            delta = tl.load(Delta + row_base + offs_m, mask=offs_m < N, other=0.0)
            ds_t = p_t * (dp_t - delta[None, :])
            if KEY_BIAS:  # d key_bias_j = Σ_i dS_ij: the key tile's row sums of dSᵀ
                dkb += tl.sum(ds_t, 1)
        if CHUNKED:  # noqa: SIM108
            qc = _load_rows(Q + q_base, offs_m, sqn, offs_c, N, d_qk)
        else:
            qc = q0
        dk += tl.dot(ds_t.to(qc.dtype), qc, input_precision=DOT_PREC)
    return dk, dv, dkb


@triton.jit(do_not_specialize=_WINDOW_ARGS)
def _attn_bwd_dkdv(
    Q,
    K,
    V,
    M,
    DO,
    Lse,
    Delta,
    DK,
    DV,
    Mask,
    Seed,
    KeyBias,
    DKeyBias,
    sqb,
    sqh,
    sqn,
    skb,
    skh,
    skn,
    svb,
    svh,
    svn,
    smh,
    smr,
    sdob,
    sdoh,
    sdon,
    sdkb,
    sdkh,
    sdkn,
    sdvb,
    sdvh,
    sdvn,
    smb,
    H,
    N,
    d_qk,
    d_v,
    n_chunks,
    scale2,
    scale,
    bias2,
    dropout_p,
    n_bucket,
    left,
    right,
    METRIC: tl.constexpr,
    HEAD: tl.constexpr,
    QK_HEAD: tl.constexpr,
    CHUNKED: tl.constexpr,
    DROPOUT: tl.constexpr,
    HAS_MASK: tl.constexpr,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
    SIGMOID: tl.constexpr,
    KEY_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    """One key tile and one q/k feature chunk: dk for that chunk, dv (chunk 0 stores it).

    WINDOW: key j is seen by the queries [j − right, j + left], so only the query tiles that
    meet the key tile's reach run, the two edges with the per-element mask.

    The q/k tiles are QK_HEAD wide: HEAD when d_qk ≤ HEAD (plain and metric) or when the width is
    chunked, else the whole padded q/k width in one tile (`wide`: one chunk, the scores once).

    Metric (k = v = p): stores dk + dv into DK, the two roles' sum. SIGMOID: Lse and Delta are
    never read."""
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
    if KEY_BIAS:  # the key tile's logits, loaded once, and their gradient's accumulator
        kb = tl.load(KeyBias + row_base + offs_n, mask=offs_n < N, other=0.0)
        dkb = tl.zeros([BLOCK_N], tl.float32)
    else:
        kb, dkb = 0.0, 0.0
    if WINDOW:  # one loop over the query tiles that reach the key tile; inner ones skip the mask
        lo, inner_lo, inner_hi, hi = _window_tiles(
            pid_n * BLOCK_N, right, left, N, BLOCK_N, BLOCK_M
        )
    elif CAUSAL:  # query tiles [lo, hi) cross the diagonal; from hi on every query sees the tile
        lo = pid_n * BLOCK_N // BLOCK_M * BLOCK_M
        hi = tl.minimum(N, tl.cdiv(pid_n * BLOCK_N + BLOCK_N - 1, BLOCK_M) * BLOCK_M)
        inner_lo, inner_hi = 0, 0
    else:
        lo, hi, inner_lo, inner_hi = 0, 0, 0, 0
    dk, dv, dkb = _dkdv_loop(
        dk,
        dv,
        dkb,
        k0,
        v,
        kb,
        Q,
        K,
        M,
        DO,
        Lse,
        Delta,
        seed,
        q_base,
        k_base,
        h * smh,
        do_base,
        row_base,
        pid_bh,
        offs_n,
        offs_k,
        offs_c,
        offs_d,
        sqn,
        skn,
        smr,
        sdon,
        N,
        d_qk,
        d_v,
        n_chunks,
        scale2,
        bias2,
        dropout_p,
        lo,
        hi,
        inner_lo,
        inner_hi,
        left,
        right,
        METRIC,
        QK_HEAD,
        CHUNKED,
        DROPOUT,
        CAUSAL,
        WINDOW,
        SIGMOID,
        KEY_BIAS,
        True,
        BLOCK_M,
        DOT_PREC,
    )
    if not WINDOW:
        dk, dv, dkb = _dkdv_loop(
            dk,
            dv,
            dkb,
            k0,
            v,
            kb,
            Q,
            K,
            M,
            DO,
            Lse,
            Delta,
            seed,
            q_base,
            k_base,
            h * smh,
            do_base,
            row_base,
            pid_bh,
            offs_n,
            offs_k,
            offs_c,
            offs_d,
            sqn,
            skn,
            smr,
            sdon,
            N,
            d_qk,
            d_v,
            n_chunks,
            scale2,
            bias2,
            dropout_p,
            hi,
            N,
            0,
            0,
            left,
            right,
            METRIC,
            QK_HEAD,
            CHUNKED,
            DROPOUT,
            CAUSAL,
            WINDOW,
            SIGMOID,
            KEY_BIAS,
            False,
            BLOCK_M,
            DOT_PREC,
        )

    dk = dk * scale
    if METRIC:
        dk = dk + dv
    if HAS_MASK:  # a padding key gets no gradient
        pad = _padding(Mask, b * smb, offs_n, N)
        dk = tl.where(pad[:, None], 0.0, dk)
        dv = tl.where(pad[:, None], 0.0, dv)
        if KEY_BIAS:
            dkb = tl.where(pad, 0.0, dkb)
    if KEY_BIAS:  # noqa: SIM102 (compile-time test, then a runtime one)
        if pid_c == 0:
            tl.store(DKeyBias + row_base + offs_n, dkb, mask=offs_n < N)
    dk_ptrs = DK + b * sdkb + h * sdkh + offs_n[:, None] * sdkn + offs_c[None, :]
    dk_mask = (offs_n[:, None] < N) & (offs_c[None, :] < d_qk)
    tl.store(dk_ptrs, dk.to(DK.dtype.element_ty), mask=dk_mask)
    if not METRIC:  # noqa: SIM102 (compile-time test, then a runtime one)
        if pid_c == 0:
            dv_ptrs = DV + b * sdvb + h * sdvh + offs_n[:, None] * sdvn + offs_d[None, :]
            dv_mask = (offs_n[:, None] < N) & (offs_d[None, :] < d_v)
            tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=dv_mask)


@triton.jit
def _keep_mask_kernel(Seed, Keep, N, dropout_p, BLOCK: tl.constexpr):
    """The dropout keep mask the attention kernels draw, written out as int8 (B·H, N, N): for
    tests, which hand it to the reference. One program per BLOCK rows of one (batch, head)."""
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


# The kernels that the autotuner wraps and the AOT report compiles, by the name the report shows.
KERNELS = {"attn_fwd": _attn_fwd, "attn_bwd_dkdv": _attn_bwd_dkdv, "attn_bwd_dq": _attn_bwd_dq}
