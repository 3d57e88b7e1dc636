"""The linear_attention kernels: normalised linear attention (Katharopoulos et al. 2020), chunked.

Semantics (`reference.linear_attention`), per batch and head, on feature-mapped (non-negative)
q, k of width F and values v of width dv:

    y_i = (q_iᵀ S_i) / (q_iᵀ z_i + eps),   S_i = Σ_{j ∈ A(i)} k_j v_jᵀ (F × dv),   z_i = Σ_{j ∈ A(i)} k_j

where A(i) is every non-padding key (causal: the non-padding keys j ≤ i). The padding mask masks
keys only: a padding query is computed like any other query (a query with no visible key gets
S_i = 0, z_i = 0 and so y_i = 0 / eps = 0, without a special case).

Forward (one program per (batch, head), walking the sequence in chunks of BT tokens). The chunk
of queries c reads the state (S, z) of every chunk before it and computes its own chunk on chip:

    o_c = q_c S + tril(q_c k_cᵀ) v_c,    s_c = q_c z + rowsum(tril(q_c k_cᵀ)),    y_c = o_c / (s_c + eps)

then S += k_cᵀ v_c and z += colsum(k_c). Padding keys (and rows past N) are loaded as zero rows
of k, which removes them from the scores, S and z at once; no other mask is needed. The
non-causal forward makes one pass over the sequence for the global (S, z), then a second for the
outputs (no intra-chunk block). The forward also writes den_i = q_iᵀ z_i + eps (fp32) for the
backward.

Backward. With g_i = ∂L/∂y_i, the normaliser gives every query a vector and a scalar weight

    a_i = ∂L/∂num_i = g_i / den_i,    c_i = ∂L/∂den_i = -(g_i · num_i) / den_i² = -(g_i · y_i) / den_i

for num_i = S_iᵀ q_i and den_i = z_iᵀ q_i + eps. So ∂L/∂q_i = S_i a_i + c_i z_i, and S_i, z_i
receive ∂L/∂S_i = q_i a_iᵀ and ∂L/∂z_i = c_i q_i; since S_i = Σ k_j v_jᵀ and z_i = Σ k_j over
j ∈ A(i), key j collects (q_i a_iᵀ) v_j + c_i q_i and value j collects (q_i a_iᵀ)ᵀ k_j from
every query i that sees it:

    dq_i = S_i a_i + c_i z_i = (S_i g_i − (g_i · y_i) z_i) / den_i
    dk_j = keep_j Σ_{i : j ∈ A(i)} (a_i · v_j + c_i) q_i
    dv_j = keep_j Σ_{i : j ∈ A(i)} (q_i · k_j) a_i

(plain linear attention's gradients with v extended by a column of ones and the upstream
gradient by c_i). y_i is the saved output, so the backward needs (q, k, v, out, den, g).

- dq (`_linear_bwd_dq_kernel`) walks the chunks forwards with the same (S, z) as the forward:
  dq_c = (g_c Sᵀ − (g·y)_c zᵀ + M_c k_c) / den_c with M_c = tril(g_c v_cᵀ − (g·y)_c 1ᵀ); the
  division by den comes after the products, so a query with no visible key (den = eps, S = z = 0)
  gets an exact 0 rather than 0 × (g / eps).
- dk, dv (`_linear_bwd_dkdv_kernel`) walk the chunks backwards with the states of the queries
  after the chunk, dS = Σ q_i a_iᵀ (F × dv) and dz = Σ c_i q_i (F):
  dk_c = v_c dSᵀ + 1 dzᵀ + triu(v_c a_cᵀ + 1 c_cᵀ) q_c and dv_c = k_c dS + triu(k_c q_cᵀ) a_c
  (key rows × query columns: the query is at or after the key), then padding keys get 0. The
  non-causal dk/dv uses the global (dS, dz) of a first pass.

Every state and score accumulates in fp32. The products on tensor cores take their operands in
the inputs' dtype (fp32 inputs: IEEE fp32 dots): the states S and dS, the scores and the
weights a_i are rounded to it there, as FlashAttention rounds P. In fp16 the weights a_i, the
backward's scores and dS are saturated at ±65504 when rounded, so that a query with no visible
key (whose a_i = g_i / eps may overflow) contributes exact zeros through the masks instead of
0 × inf = NaN. The forward state S itself must stay within fp16's range (|S| < 65504: a sum of
N products of features and values) for fp16 inputs; bf16 and fp32 have fp32's range.

Limits: F and dv up to 128 (padded to powers of two ≥ 16 in the tiles), any strides, rows of one
head indexed in int32 (the launcher checks), the batch and head offsets in int64.
"""

from __future__ import annotations

import numpy
import triton
import triton.language as tl

from .._host import INTERPRET, check_interpreter

if INTERPRET:
    check_interpreter(triton.__version__, numpy.__version__)

MAX_WIDTH = 128  # F and dv, each (padded to a power of two >= 16 in the tiles)


@triton.jit
def _rows(base, rows_t, cols_c, stride_n, stride_c, C, keep_t):
    """The (BT, BC) tile base[rows_t, cols_c], zero where a row is not kept or past C."""
    ptrs = base + rows_t[:, None] * stride_n + cols_c[None, :] * stride_c
    return tl.load(ptrs, mask=keep_t[:, None] & (cols_c < C)[None, :], other=0.0)


@triton.jit
def _kept(pad_b, rows_t, N, stride_pn, HAS_MASK: tl.constexpr):
    """The rows_t inside [0, N) that are not padding (nothing is read without a mask)."""
    keep_t = rows_t < N
    if HAS_MASK:
        pad_t = tl.load(pad_b + rows_t * stride_pn, mask=keep_t, other=1)
        keep_t = keep_t & (pad_t == 0)
    return keep_t


@triton.jit
def _operand(x, dtype: tl.constexpr):
    """x rounded to a dot's operand dtype; fp16 saturates at its largest finite value."""
    if dtype == tl.float16:
        x = tl.minimum(tl.maximum(x, -65504.0), 65504.0)
    return x.to(dtype)


@triton.jit
def _weights(
    g_bh, out_bh, den_bh, rows_t, cols_v, stride_gn, stride_gd, stride_on, stride_od, N, DV
):
    """The upstream gradient g_c (as loaded), (g · y)_c and den_c of a chunk of queries; rows past
    N read g = 0 and den = 1, so they weigh nothing."""
    in_t = rows_t < N
    g_tv = _rows(g_bh, rows_t, cols_v, stride_gn, stride_gd, DV, in_t)
    y_tv = _rows(out_bh, rows_t, cols_v, stride_on, stride_od, DV, in_t)
    gy_t = tl.sum(g_tv.to(tl.float32) * y_tv.to(tl.float32), 1)
    den_t = tl.load(den_bh + rows_t, mask=in_t, other=1.0)
    return g_tv, gy_t, den_t


@triton.jit(do_not_specialize=["n_bucket"])
def _linear_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    pad_ptr,
    out_ptr,
    den_ptr,
    eps,
    H,
    N,
    F,
    DV,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_qf,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kf,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_pb,
    stride_pn,
    n_bucket,  # autotuning key only (N rounded up to a power of two), unused
    CAUSAL: tl.constexpr,
    HAS_MASK: tl.constexpr,
    DOT_PREC: tl.constexpr,
    BF: tl.constexpr,
    BV: tl.constexpr,
    BT: tl.constexpr,
):
    """out = normalised linear attention of one (batch, head); den = q·z + eps, fp32 (B·H, N)."""
    bh = tl.program_id(0).to(tl.int64)
    b = bh // H
    h = bh % H
    q_bh = q_ptr + b * stride_qb + h * stride_qh
    k_bh = k_ptr + b * stride_kb + h * stride_kh
    v_bh = v_ptr + b * stride_vb + h * stride_vh
    pad_b = pad_ptr + b * stride_pb
    out_bh = out_ptr + bh * N * DV
    den_bh = den_ptr + bh * N
    dt = q_ptr.dtype.element_ty
    offs_t = tl.arange(0, BT)
    cols_f = tl.arange(0, BF)
    cols_v = tl.arange(0, BV)
    n_chunks = tl.cdiv(N, BT)

    s_fv = tl.zeros((BF, BV), dtype=tl.float32)
    z_f = tl.zeros((BF,), dtype=tl.float32)
    if not CAUSAL:  # the global state first
        for c in range(0, n_chunks):
            rows_t = c * BT + offs_t
            keep_t = _kept(pad_b, rows_t, N, stride_pn, HAS_MASK)
            k_tf = _rows(k_bh, rows_t, cols_f, stride_kn, stride_kf, F, keep_t)
            v_tv = _rows(v_bh, rows_t, cols_v, stride_vn, stride_vd, DV, rows_t < N)
            s_fv += tl.dot(tl.trans(k_tf), v_tv, input_precision=DOT_PREC)
            z_f += tl.sum(k_tf.to(tl.float32), 0)

    for c in range(0, n_chunks):
        rows_t = c * BT + offs_t
        in_t = rows_t < N
        q_tf = _rows(q_bh, rows_t, cols_f, stride_qn, stride_qf, F, in_t)
        o_tv = tl.dot(q_tf, s_fv.to(dt), input_precision=DOT_PREC)
        den_t = tl.sum(q_tf.to(tl.float32) * z_f[None, :], 1)
        if CAUSAL:
            keep_t = _kept(pad_b, rows_t, N, stride_pn, HAS_MASK)
            k_tf = _rows(k_bh, rows_t, cols_f, stride_kn, stride_kf, F, keep_t)
            v_tv = _rows(v_bh, rows_t, cols_v, stride_vn, stride_vd, DV, in_t)
            a_tt = tl.dot(q_tf, tl.trans(k_tf), input_precision=DOT_PREC)
            a_tt = tl.where(offs_t[:, None] >= offs_t[None, :], a_tt, 0.0)
            o_tv += tl.dot(a_tt.to(dt), v_tv, input_precision=DOT_PREC)
            den_t += tl.sum(a_tt, 1)
            s_fv += tl.dot(tl.trans(k_tf), v_tv, input_precision=DOT_PREC)
            z_f += tl.sum(k_tf.to(tl.float32), 0)
        den_t += eps
        y_tv = o_tv / den_t[:, None]
        tl.store(
            out_bh + rows_t[:, None] * DV + cols_v[None, :],
            y_tv.to(out_ptr.dtype.element_ty),
            mask=in_t[:, None] & (cols_v < DV)[None, :],
        )
        tl.store(den_bh + rows_t, den_t, mask=in_t)


@triton.jit(do_not_specialize=["n_bucket"])
def _linear_bwd_dq_kernel(
    k_ptr,
    v_ptr,
    pad_ptr,
    g_ptr,
    out_ptr,
    den_ptr,
    dq_ptr,
    H,
    N,
    F,
    DV,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kf,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_pb,
    stride_pn,
    stride_gb,
    stride_gh,
    stride_gn,
    stride_gd,
    stride_ob,
    stride_oh,
    stride_on,
    stride_od,
    n_bucket,  # autotuning key only, unused
    CAUSAL: tl.constexpr,
    HAS_MASK: tl.constexpr,
    DOT_PREC: tl.constexpr,
    BF: tl.constexpr,
    BV: tl.constexpr,
    BT: tl.constexpr,
):
    """dq_i = (S_i g_i − (g_i·y_i) z_i) / den_i of one (batch, head); q itself is not needed."""
    bh = tl.program_id(0).to(tl.int64)
    b = bh // H
    h = bh % H
    k_bh = k_ptr + b * stride_kb + h * stride_kh
    v_bh = v_ptr + b * stride_vb + h * stride_vh
    g_bh = g_ptr + b * stride_gb + h * stride_gh
    o_bh = out_ptr + b * stride_ob + h * stride_oh
    pad_b = pad_ptr + b * stride_pb
    den_bh = den_ptr + bh * N
    dq_bh = dq_ptr + bh * N * F
    dt = k_ptr.dtype.element_ty
    offs_t = tl.arange(0, BT)
    cols_f = tl.arange(0, BF)
    cols_v = tl.arange(0, BV)
    n_chunks = tl.cdiv(N, BT)

    s_fv = tl.zeros((BF, BV), dtype=tl.float32)
    z_f = tl.zeros((BF,), dtype=tl.float32)
    if not CAUSAL:
        for c in range(0, n_chunks):
            rows_t = c * BT + offs_t
            keep_t = _kept(pad_b, rows_t, N, stride_pn, HAS_MASK)
            k_tf = _rows(k_bh, rows_t, cols_f, stride_kn, stride_kf, F, keep_t)
            v_tv = _rows(v_bh, rows_t, cols_v, stride_vn, stride_vd, DV, rows_t < N)
            s_fv += tl.dot(tl.trans(k_tf), v_tv, input_precision=DOT_PREC)
            z_f += tl.sum(k_tf.to(tl.float32), 0)

    for c in range(0, n_chunks):
        rows_t = c * BT + offs_t
        in_t = rows_t < N
        g_tv, gy_t, den_t = _weights(
            g_bh, o_bh, den_bh, rows_t, cols_v, stride_gn, stride_gd, stride_on, stride_od, N, DV
        )
        g_tv = g_tv.to(dt)
        dq_tf = tl.dot(g_tv, tl.trans(s_fv.to(dt)), input_precision=DOT_PREC)
        dq_tf -= gy_t[:, None] * z_f[None, :]
        if CAUSAL:
            keep_t = _kept(pad_b, rows_t, N, stride_pn, HAS_MASK)
            k_tf = _rows(k_bh, rows_t, cols_f, stride_kn, stride_kf, F, keep_t)
            v_tv = _rows(v_bh, rows_t, cols_v, stride_vn, stride_vd, DV, in_t)
            m_tt = tl.dot(g_tv, tl.trans(v_tv), input_precision=DOT_PREC) - gy_t[:, None]
            m_tt = tl.where(offs_t[:, None] >= offs_t[None, :], m_tt, 0.0)
            dq_tf += tl.dot(_operand(m_tt, dt), k_tf, input_precision=DOT_PREC)
            s_fv += tl.dot(tl.trans(k_tf), v_tv, input_precision=DOT_PREC)
            z_f += tl.sum(k_tf.to(tl.float32), 0)
        dq_tf = dq_tf / den_t[:, None]
        tl.store(
            dq_bh + rows_t[:, None] * F + cols_f[None, :],
            dq_tf.to(dq_ptr.dtype.element_ty),
            mask=in_t[:, None] & (cols_f < F)[None, :],
        )


@triton.jit(do_not_specialize=["n_bucket"])
def _linear_bwd_dkdv_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    pad_ptr,
    g_ptr,
    out_ptr,
    den_ptr,
    dk_ptr,
    dv_ptr,
    H,
    N,
    F,
    DV,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_qf,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kf,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_pb,
    stride_pn,
    stride_gb,
    stride_gh,
    stride_gn,
    stride_gd,
    stride_ob,
    stride_oh,
    stride_on,
    stride_od,
    n_bucket,  # autotuning key only, unused
    CAUSAL: tl.constexpr,
    HAS_MASK: tl.constexpr,
    DOT_PREC: tl.constexpr,
    BF: tl.constexpr,
    BV: tl.constexpr,
    BT: tl.constexpr,
):
    """dk and dv of one (batch, head), walking the chunks from the last (causal)."""
    bh = tl.program_id(0).to(tl.int64)
    b = bh // H
    h = bh % H
    q_bh = q_ptr + b * stride_qb + h * stride_qh
    k_bh = k_ptr + b * stride_kb + h * stride_kh
    v_bh = v_ptr + b * stride_vb + h * stride_vh
    g_bh = g_ptr + b * stride_gb + h * stride_gh
    o_bh = out_ptr + b * stride_ob + h * stride_oh
    pad_b = pad_ptr + b * stride_pb
    den_bh = den_ptr + bh * N
    dk_bh = dk_ptr + bh * N * F
    dv_bh = dv_ptr + bh * N * DV
    dt = q_ptr.dtype.element_ty
    offs_t = tl.arange(0, BT)
    cols_f = tl.arange(0, BF)
    cols_v = tl.arange(0, BV)
    n_chunks = tl.cdiv(N, BT)

    # the state of the queries after the chunk (causal) or of all of them: dS = Σ q aᵀ, dz = Σ c q
    ds_fv = tl.zeros((BF, BV), dtype=tl.float32)
    dz_f = tl.zeros((BF,), dtype=tl.float32)
    if not CAUSAL:
        for c in range(0, n_chunks):
            rows_t = c * BT + offs_t
            q_tf = _rows(q_bh, rows_t, cols_f, stride_qn, stride_qf, F, rows_t < N)
            g_tv, gy_t, den_t = _weights(
                g_bh,
                o_bh,
                den_bh,
                rows_t,
                cols_v,
                stride_gn,
                stride_gd,
                stride_on,
                stride_od,
                N,
                DV,
            )
            a_tv = _operand(g_tv.to(tl.float32) / den_t[:, None], dt)
            ds_fv += tl.dot(tl.trans(q_tf), a_tv, input_precision=DOT_PREC)
            dz_f -= tl.sum(q_tf.to(tl.float32) * (gy_t / den_t)[:, None], 0)

    for i in range(0, n_chunks):
        c = n_chunks - 1 - i if CAUSAL else i
        rows_t = c * BT + offs_t
        in_t = rows_t < N
        keep_t = _kept(pad_b, rows_t, N, stride_pn, HAS_MASK)
        k_tf = _rows(k_bh, rows_t, cols_f, stride_kn, stride_kf, F, keep_t)
        v_tv = _rows(v_bh, rows_t, cols_v, stride_vn, stride_vd, DV, in_t)
        ds_op = _operand(ds_fv, dt)
        # dv first, stored before dk is formed: its accumulator and the block k qᵀ are dead by
        # the time dk's block v aᵀ is live (fewer tiles at once: the kernel holds the most)
        dv_tv = tl.dot(k_tf, ds_op, input_precision=DOT_PREC)
        if CAUSAL:
            q_tf = _rows(q_bh, rows_t, cols_f, stride_qn, stride_qf, F, in_t)
            g_tv, gy_t, den_t = _weights(
                g_bh,
                o_bh,
                den_bh,
                rows_t,
                cols_v,
                stride_gn,
                stride_gd,
                stride_on,
                stride_od,
                N,
                DV,
            )
            a_tv = _operand(g_tv.to(tl.float32) / den_t[:, None], dt)
            c_t = -gy_t / den_t
            later_tt = offs_t[None, :] >= offs_t[:, None]  # [key j, query i]: i >= j
            pt_tt = tl.dot(k_tf, tl.trans(q_tf), input_precision=DOT_PREC)
            pt_tt = tl.where(later_tt, pt_tt, 0.0)
            dv_tv += tl.dot(_operand(pt_tt, dt), a_tv, input_precision=DOT_PREC)
        # padding keys (and rows past N) get 0: where, not a product, so no inf·0 reaches them
        dv_tv = tl.where(keep_t[:, None], dv_tv, 0.0)
        tl.store(
            dv_bh + rows_t[:, None] * DV + cols_v[None, :],
            dv_tv.to(dv_ptr.dtype.element_ty),
            mask=in_t[:, None] & (cols_v < DV)[None, :],
        )
        dk_tf = tl.dot(v_tv, tl.trans(ds_op), input_precision=DOT_PREC)
        dk_tf += dz_f[None, :]
        if CAUSAL:
            mt_tt = tl.dot(v_tv, tl.trans(a_tv), input_precision=DOT_PREC) + c_t[None, :]
            mt_tt = tl.where(later_tt, mt_tt, 0.0)
            dk_tf += tl.dot(_operand(mt_tt, dt), q_tf, input_precision=DOT_PREC)
            ds_fv += tl.dot(tl.trans(q_tf), a_tv, input_precision=DOT_PREC)
            dz_f += tl.sum(q_tf.to(tl.float32) * c_t[:, None], 0)
        dk_tf = tl.where(keep_t[:, None], dk_tf, 0.0)
        tl.store(
            dk_bh + rows_t[:, None] * F + cols_f[None, :],
            dk_tf.to(dk_ptr.dtype.element_ty),
            mask=in_t[:, None] & (cols_f < F)[None, :],
        )
