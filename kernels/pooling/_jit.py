"""The pool_mix kernels: the mean over a window of real tokens, minus the token itself.

This is PoolFormer's token mixer on (batch, tokens, features) tensors, with the semantics of
`reference.pool_mix`: a centred window reaches `window // 2` tokens each side, a causal window
takes the token and the `window - 1` before it (the runtime offset `left`); tokens outside the
sequence and padding tokens (`key_padding_mask` True) are not counted (`count_include_pad=False`);
padding positions get 0.

Forward. The op is memory-bound, so the design is about bytes. One program owns a tile of
BLOCK_N tokens × BLOCK_D features of one sequence, features contiguous, and reads it from DRAM
once: it adds the `window` row-shifted copies of its tile into an fp32 accumulator (the shifts
after the first hit L1/L2), and the shift with offset 0 is the token itself, weighted
1/count - 1, so x is never loaded a second time for the "- x" and only the accumulator stays
live across the loop. The window's count of real tokens is computed once per token: in closed
form without a mask, from the shifted mask bytes with one. The forward also writes
rcount = keep / count per token (fp32, contiguous (B, N); 0 on padding) for the backward.

Backward. With c_i the number of real tokens in token i's window W(i) and keep_j = not padding,
    out_i = keep_i * (sum_{j in W(i), keep_j} x_j / c_i - x_i)
so
    dx_j = keep_j * (sum_{i : j in W(i), keep_i} g_i / c_i - g_j).
j is in W(i) = [i - left, i - left + window - 1] exactly when i = j + left - o for a shift
o in [0, window): the same windowed sum over the mirrored window, on g_i * rcount_i, so the
backward needs neither x nor the mask: keep_j is rcount_j > 0, since a real token always counts
itself, and the shift o = left (i = j) carries the "- g_j" with weight rcount_j - 1.

Invariants: padding tokens and tokens past the end are never counted and get 0 (output and
gradient); elements outside (N, D) are never written; without a mask the mask pointer is never
read (HAS_MASK is a compile-time switch).

Limits: x and the upstream gradient are read through their strides (any view), outputs are
contiguous. Offsets inside one sequence are int32 (the launcher refuses a sequence spanning 2**31
elements or more), the batch offset int64. Inputs fp16 / bf16 / fp32, accumulation fp32.

docs/kernels.md has the byte count behind the design and the measurements.
"""

from __future__ import annotations

import numpy
import triton
import triton.language as tl

from .._host import INTERPRET, check_interpreter

if INTERPRET:
    check_interpreter(triton.__version__, numpy.__version__)


@triton.jit
def _real(pad_b, rows_n, N, stride_pn, HAS_MASK: tl.constexpr):
    """True for the rows_n inside [0, N) that are not padding (no load without a mask)."""
    real_n = (rows_n >= 0) & (rows_n < N)
    if HAS_MASK:
        pad_n = tl.load(pad_b + rows_n * stride_pn, mask=real_n, other=1)
        real_n = real_n & (pad_n == 0)
    return real_n


@triton.jit
def _span_count(rows_n, N, window, left):
    """Without a mask: how many of the tokens rows_n - left ... rows_n - left + window - 1 lie in
    [0, N), at least 1 (rows outside the sequence get a harmless 1; they are never used)."""
    lo_n = tl.maximum(rows_n - left, 0)
    hi_n = tl.minimum(rows_n - left + window, N)
    return tl.maximum(hi_n - lo_n, 1)


@triton.jit(do_not_specialize=["rows_bucket", "d_bucket"])
def _pool_fwd_kernel(
    x_ptr,
    pad_ptr,
    out_ptr,
    rcount_ptr,
    N,
    D,
    window,
    left,
    stride_xb,
    stride_xn,
    stride_xd,
    stride_pb,
    stride_pn,
    rows_bucket,  # autotuning key only (a power of two of batch x tokens), unused
    d_bucket,  # autotuning key only (D rounded up to a power of two), unused
    HAS_MASK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """out[b, n] = mean of the real x[b, n - left + o] for o < window, minus x[b, n]; 0 on padding.

    Also writes rcount[b, n] = keep / count (fp32, contiguous (B, N)) for the backward.
    """
    pid_bn = tl.program_id(0)
    pid_d = tl.program_id(1)
    n_blocks = tl.cdiv(N, BLOCK_N)
    b = (pid_bn // n_blocks).to(tl.int64)
    offs_n = (pid_bn % n_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    x_b = x_ptr + b * stride_xb
    cols_d = offs_d * stride_xd
    pad_b = pad_ptr + b * stride_pb

    # count of real tokens per window, once per token: weight 1/count on every shift, and the
    # shift o == left (the token itself) also carries the "- x", so x is loaded once
    if HAS_MASK:
        count_n = tl.zeros((BLOCK_N,), dtype=tl.int32)
        for o in range(0, window):
            count_n += _real(pad_b, offs_n - left + o, N, stride_pn, True).to(tl.int32)
    else:
        count_n = _span_count(offs_n, N, window, left)
    inv_n = 1.0 / tl.maximum(count_n, 1).to(tl.float32)

    out_nd = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for o in range(0, window):
        src_n = offs_n - left + o
        ok_n = _real(pad_b, src_n, N, stride_pn, HAS_MASK)
        xs_nd = tl.load(
            x_b + src_n[:, None] * stride_xn + cols_d[None, :],
            mask=ok_n[:, None] & d_ok[None, :],
            other=0.0,
        )
        w_n = tl.where(o == left, inv_n - 1.0, inv_n)
        out_nd += xs_nd.to(tl.float32) * w_n[:, None]

    if HAS_MASK:  # padding tokens get 0 (their x was not loaded, but their neighbours were)
        keep_n = _real(pad_b, offs_n, N, stride_pn, True)
        out_nd = tl.where(keep_n[:, None], out_nd, 0.0)
    n_ok = offs_n < N
    tl.store(
        out_ptr + b * N * D + offs_n[:, None] * D + offs_d[None, :],
        out_nd.to(out_ptr.dtype.element_ty),
        mask=n_ok[:, None] & d_ok[None, :],
    )
    if pid_d == 0:
        if HAS_MASK:
            inv_n = tl.where(keep_n, inv_n, 0.0)
        tl.store(rcount_ptr + b * N + offs_n, inv_n, mask=n_ok)


@triton.jit(do_not_specialize=["rows_bucket", "d_bucket"])
def _pool_bwd_kernel(
    g_ptr,
    rcount_ptr,
    dx_ptr,
    N,
    D,
    window,
    left,
    stride_gb,
    stride_gn,
    stride_gd,
    rows_bucket,  # autotuning key only, unused
    d_bucket,  # autotuning key only, unused
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """dx[b, j] = keep_j * (sum over o < window of (g * rcount)[b, j + left - o] - g[b, j])."""
    pid_bn = tl.program_id(0)
    pid_d = tl.program_id(1)
    n_blocks = tl.cdiv(N, BLOCK_N)
    b = (pid_bn // n_blocks).to(tl.int64)
    offs_n = (pid_bn % n_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    n_ok = offs_n < N
    d_ok = offs_d < D
    g_b = g_ptr + b * stride_gb
    cols_d = offs_d * stride_gd
    r_b = rcount_ptr + b * N

    dx_nd = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for o in range(0, window):
        dst_n = offs_n + left - o  # the tokens i whose window holds token j at offset o
        r_n = tl.load(r_b + dst_n, mask=(dst_n >= 0) & (dst_n < N), other=0.0)
        # weight keep_i / c_i (0 for padding, whose g is then not read), and the shift o == left
        # (i = j) also carries the "- g_j"
        gs_nd = tl.load(
            g_b + dst_n[:, None] * stride_gn + cols_d[None, :],
            mask=(r_n > 0.0)[:, None] & d_ok[None, :],
            other=0.0,
        )
        w_n = tl.where(o == left, r_n - 1.0, r_n)
        dx_nd += gs_nd.to(tl.float32) * w_n[:, None]

    keep_n = tl.load(r_b + offs_n, mask=n_ok, other=0.0) > 0.0  # a real token counts itself
    dx_nd = tl.where(keep_n[:, None], dx_nd, 0.0)
    tl.store(
        dx_ptr + b * N * D + offs_n[:, None] * D + offs_d[None, :],
        dx_nd.to(dx_ptr.dtype.element_ty),
        mask=n_ok[:, None] & d_ok[None, :],
    )
