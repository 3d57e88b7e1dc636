"""Triton kernels for `pool_mix`: the mean over a window of real tokens, minus the token itself.

This is PoolFormer's token mixer on (batch, tokens, features) tensors, with the semantics of
`reference.pool_mix`: a centred window reaches `window // 2` tokens each side, a causal window
takes the token and the `window - 1` before it; tokens outside the sequence and padding tokens
(`key_padding_mask` True) are not counted (`count_include_pad=False`); padding positions get 0.

The op is memory-bound: per element it does `window` additions and moves one element in and one
out. Its speed is the bandwidth it reaches, so the design is about bytes.

Design: one program per tile of BLOCK_N tokens x BLOCK_D features of one sequence, features
contiguous (16-byte vector loads and stores, rows of 128-256 bytes), one read of the tile from
DRAM and one write. The program adds the `window` row-shifted copies of its tile into an fp32
accumulator: the first shift brings the tile (and `window - 1` halo rows that the neighbouring
program also reads) into L1/L2, the other shifts hit there, and the shift with offset 0 is the
token itself, so x is never loaded a second time for the "- x" (its weight is 1/count - 1, and
nothing but the accumulator stays live across the loop: 70-90 registers at 32 elements a thread).
Per token (not per element) the program computes the window's count of real tokens: in closed
form from the token index when there is no mask, from the shifted mask bytes when there is one.
The forward writes 1/count per token (0 on padding; fp32 (B, N): 4 bytes a token against the
output's 2D in bf16) for the backward. Nothing else is allocated per call: without a mask the mask
pointer is a dummy never read (HAS_MASK is a constexpr), not a tensor of zeros.

Bytes per element, bf16, no mask: 2 read + 2 written from DRAM, exactly a copy's; the halo adds
(window - 1) / BLOCK_N of a read from L2 (3% at window 3 and BLOCK_N = 64), and the mask, when
there is one, 1 byte per token (1/D per element). So the expectation on an H100 (HBM3, ~3.35 TB/s
peak, a device-to-device copy measured ~3 TB/s) is a forward and a backward each at 85-95% of
the copy's bandwidth once the tensors are well beyond the 50 MB L2 (e.g. x of 8 x 8192 x 1024
bf16, 134 MB each way: ~90-100 us per pass), against ~190 GB/s measured for the previous kernel.
The `avg_pool1d(x) - x` formulation moves at least 5 element-bytes per element each way (pool
reads x and writes the mean, the subtraction reads both and writes), so the kernel should be
>= 2x faster than it on the device at large shapes; at small shapes (a few MB) both are launch
latency, and what remains is the host path. These figures are expectations from the byte count,
not measurements: no GPU was available when this kernel was written.

Backward. With c_i the number of real tokens in token i's window W(i) and keep_j = not padding,
    out_i = keep_i * (sum_{j in W(i), keep_j} x_j / c_i - x_i)
so
    dx_j = keep_j * (sum_{i : j in W(i), keep_i} g_i / c_i - g_j).
j is in W(i) = [i - left, i - left + window - 1] exactly when i = j + left - o for a shift
o in [0, window): the same windowed sum over the mirrored window, on g_i * rcount_i (rcount_i =
keep_i / c_i, saved by the forward), so the backward needs neither x nor the mask: keep_j is
rcount_j > 0, since a real token always counts itself, and the shift o = left (i = j) carries the
"- g_j" with weight rcount_j - 1, as in the forward.

Layouts: x and the upstream gradient are read through their strides (any view: transposed,
sliced, expanded), so no copy is made; outputs are allocated contiguous. Offsets inside one
sequence are int32 (the launcher refuses a sequence spanning 2**31 elements or more), the batch
offset int64. Inputs fp16 / bf16 / fp32, accumulation fp32.
"""

from __future__ import annotations

import numpy
import torch
import triton
import triton.language as tl

from ._aot import AotSpec
from ._host import INTERPRET, cdiv, check_interpreter, next_power_of_2

if INTERPRET:
    check_interpreter(triton.__version__, numpy.__version__)
_TL_TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
# Tests set this to allocate outputs full of NaN, so an element a kernel never writes fails.
POISON_OUTPUTS = False


# ------------------------------------------------------------------------------------ kernels


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


# ------------------------------------------------------------------------------------ autotune

# Tiles of 4096 or 8192 elements, 32 per thread: enough bytes in flight per SM to cover DRAM
# latency, few enough registers for several programs per SM. Wide feature blocks make long
# contiguous rows; tall token blocks shrink the halo share ((window - 1) / BLOCK_N). Which wins
# depends on the width and on how many programs the batch makes, so the key is a power-of-two
# bucket of batch x tokens and of D (not their exact values: a new sequence length must not
# re-tune). Under the interpreter one small tile, so the tests cross several token and feature
# tiles with small tensors.
GPU_CONFIGS = [
    triton.Config({"BLOCK_N": 64, "BLOCK_D": 64}, num_warps=4, num_stages=1),
    triton.Config({"BLOCK_N": 32, "BLOCK_D": 128}, num_warps=4, num_stages=1),
    triton.Config({"BLOCK_N": 128, "BLOCK_D": 32}, num_warps=4, num_stages=1),
    triton.Config({"BLOCK_N": 128, "BLOCK_D": 64}, num_warps=8, num_stages=1),
    triton.Config({"BLOCK_N": 64, "BLOCK_D": 128}, num_warps=8, num_stages=1),
]
INTERPRETER_CONFIGS = [triton.Config({"BLOCK_N": 32, "BLOCK_D": 32}, num_warps=4, num_stages=1)]
CONFIGS = INTERPRETER_CONFIGS if INTERPRET else GPU_CONFIGS
KEY = ["rows_bucket", "d_bucket", "HAS_MASK"]  # the autotuner adds the tensors' dtypes


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """Keep the feature blocks that waste at most a quarter of their lanes on D (and always the
    narrowest, so something is left)."""
    d = int(named_args["D"])
    narrowest = min(c.kwargs["BLOCK_D"] for c in configs)
    kept = [
        c
        for c in configs
        if c.kwargs["BLOCK_D"] == narrowest
        or cdiv(d, c.kwargs["BLOCK_D"]) * c.kwargs["BLOCK_D"] <= 1.25 * d
    ]
    return kept


def _buckets(b: int, n: int, d: int) -> tuple[int, int]:
    """Power-of-two buckets of batch x tokens (capped at 2**20) and of D (capped at 4096)."""
    return min(next_power_of_2(b * n), 2**20), min(next_power_of_2(d), 4096)


_pool_fwd = triton.autotune(CONFIGS, key=KEY, prune_configs_by={"early_config_prune": _prune})(
    _pool_fwd_kernel
)
_pool_bwd = triton.autotune(CONFIGS, key=KEY[:2], prune_configs_by={"early_config_prune": _prune})(
    _pool_bwd_kernel
)


# ------------------------------------------------------------------------------------ launchers


def _check_limits(name: str, t: torch.Tensor, window: int) -> None:
    """The kernels' own limits (the arguments arrive checked, see kernels/_checks.py): the
    window is an int32 offset, and so is every element of one sequence (_check_int32_offsets)."""
    if window >= 2**31:
        raise ValueError(f"window must be below 2**31, got {window}")
    _check_int32_offsets(name, t)


def _check_int32_offsets(name: str, t: torch.Tensor) -> None:
    """The kernels index inside one sequence in int32 (the batch offset is int64), which halves
    the registers that 64-bit per-element addresses would take; refuse what would overflow."""
    _, n, d = t.shape
    if n == 0 or d == 0:
        return
    span = max(n * d, (n - 1) * t.stride(1) + (d - 1) * t.stride(2) + 1)
    if span >= 2**31:
        raise ValueError(
            f"{name}: one sequence spans {span} elements (shape {tuple(t.shape)}, strides "
            f"{t.stride()}); the Triton pool_mix indexes a sequence in int32, so at most 2**31 - 1"
        )


def _left(window: int, causal: bool) -> int:
    """How many tokens before the token its window starts."""
    return window - 1 if causal else window // 2


def _grid(b: int, n: int, d: int):
    return lambda meta: (b * cdiv(n, meta["BLOCK_N"]), cdiv(d, meta["BLOCK_D"]))


def _alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if POISON_OUTPUTS:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _launch_fwd(
    x_bnd: torch.Tensor, window: int, causal: bool, key_padding_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward launch on checked arguments: (out (B, N, D), rcount (B, N) fp32)."""
    b, n, d = x_bnd.shape
    out_bnd = _alloc((b, n, d), x_bnd.dtype, x_bnd.device)
    rcount_bn = _alloc((b, n), torch.float32, x_bnd.device)
    if out_bnd.numel() == 0:
        return out_bnd, rcount_bn.zero_()
    if key_padding_mask is None:  # a pointer the kernel never reads (HAS_MASK=False): no tensor
        pad_bn, stride_pb, stride_pn = x_bnd, 0, 0
    else:
        pad_bn = key_padding_mask.view(torch.uint8)  # a view: the same bytes, no copy
        stride_pb, stride_pn = pad_bn.stride()
    stride_xb, stride_xn, stride_xd = x_bnd.stride()
    _pool_fwd[_grid(b, n, d)](
        x_bnd,
        pad_bn,
        out_bnd,
        rcount_bn,
        n,
        d,
        window,
        _left(window, causal),
        stride_xb,
        stride_xn,
        stride_xd,
        stride_pb,
        stride_pn,
        *_buckets(b, n, d),
        HAS_MASK=key_padding_mask is not None,
    )
    return out_bnd, rcount_bn


def _launch_bwd(
    grad_bnd: torch.Tensor, rcount_bn: torch.Tensor, window: int, causal: bool
) -> torch.Tensor:
    """The backward launch on checked arguments: dx (B, N, D)."""
    b, n, d = grad_bnd.shape
    dx_bnd = _alloc((b, n, d), grad_bnd.dtype, grad_bnd.device)
    if dx_bnd.numel() == 0:
        return dx_bnd
    stride_gb, stride_gn, stride_gd = grad_bnd.stride()
    _pool_bwd[_grid(b, n, d)](
        grad_bnd,
        rcount_bn,
        dx_bnd,
        n,
        d,
        window,
        _left(window, causal),
        stride_gb,
        stride_gn,
        stride_gd,
        *_buckets(b, n, d),
    )
    return dx_bnd


def pool_mix_forward(
    x_bnd: torch.Tensor,
    window: int,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the forward kernel: returns (out (B, N, D) contiguous in x's dtype, rcount (B, N) fp32)."""
    _check_limits("x", x_bnd, window)
    return _launch_fwd(x_bnd, window, causal, key_padding_mask)


def pool_mix_backward(
    grad_bnd: torch.Tensor,
    rcount_bn: torch.Tensor,
    window: int,
    causal: bool,
) -> torch.Tensor:
    """Run the backward kernel: dx (B, N, D), contiguous, in grad's dtype, from the saved rcount."""
    _check_limits("grad", grad_bnd, window)
    return _launch_bwd(grad_bnd, rcount_bn, window, causal)


# ------------------------------------------------------------------------------------ AOT specs


def aot_specs() -> list[AotSpec]:
    """Every kernel x configuration the launchers can pick, for scripts/kernel_report.py.

    Causal and centred windows share one binary: the direction is the runtime `left` offset
    (window - 1 or window // 2), and so does every window, so they are not separate rows. The
    specs assume the common contiguous feature axis (stride 1, which Triton specialises as a
    constant at launch), 16-byte aligned pointers and a width D that is a multiple of 16, as a
    launch on a fresh tensor of a usual model width would (Triton specialises on both).
    """
    aligned = [["tt.divisibility", 16]]
    specs: list[AotSpec] = []
    for ty in _TL_TYPES.values():
        for cfg in GPU_CONFIGS:  # what a GPU launch can pick, whatever TRITON_INTERPRET says
            bn, bd, warps = cfg.kwargs["BLOCK_N"], cfg.kwargs["BLOCK_D"], cfg.num_warps
            tile = f"BLOCK_N={bn} BLOCK_D={bd} w{warps}"
            for has_mask in (False, True):
                specs.append(
                    AotSpec(
                        name="pool_fwd",
                        fn=_pool_fwd_kernel,
                        signature={
                            "x_ptr": f"*{ty}",
                            "pad_ptr": "*u8",
                            "out_ptr": f"*{ty}",
                            "rcount_ptr": "*fp32",
                            "N": "i32",
                            "D": "i32",
                            "window": "i32",
                            "left": "i32",
                            "stride_xb": "i32",
                            "stride_xn": "i32",
                            "stride_xd": "constexpr",
                            "stride_pb": "i32",
                            "stride_pn": "i32",
                            "rows_bucket": "i32",
                            "d_bucket": "i32",
                            "HAS_MASK": "constexpr",
                            "BLOCK_N": "constexpr",
                            "BLOCK_D": "constexpr",
                        },
                        constexprs={
                            "stride_xd": 1,
                            "HAS_MASK": has_mask,
                            "BLOCK_N": bn,
                            "BLOCK_D": bd,
                        },
                        num_warps=warps,
                        num_stages=cfg.num_stages,
                        label=f"{ty} {'mask' if has_mask else 'no-mask'} any-window {tile}",
                        # the pointers, D and x's batch and token strides: multiples of 16
                        attrs={(i,): aligned for i in (0, 1, 2, 3, 5, 8, 9)},
                    )
                )
            specs.append(
                AotSpec(
                    name="pool_bwd",
                    fn=_pool_bwd_kernel,
                    signature={
                        "g_ptr": f"*{ty}",
                        "rcount_ptr": "*fp32",
                        "dx_ptr": f"*{ty}",
                        "N": "i32",
                        "D": "i32",
                        "window": "i32",
                        "left": "i32",
                        "stride_gb": "i32",
                        "stride_gn": "i32",
                        "stride_gd": "constexpr",
                        "rows_bucket": "i32",
                        "d_bucket": "i32",
                        "BLOCK_N": "constexpr",
                        "BLOCK_D": "constexpr",
                    },
                    constexprs={"stride_gd": 1, "BLOCK_N": bn, "BLOCK_D": bd},
                    num_warps=warps,
                    num_stages=cfg.num_stages,
                    label=f"{ty} any-window {tile}",
                    attrs={(i,): aligned for i in (0, 1, 2, 4, 7, 8)},
                )
            )
    return specs
