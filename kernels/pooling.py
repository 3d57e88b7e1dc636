"""Triton kernels for `pool_mix`: the mean over a window of real tokens, minus the token itself.

This is PoolFormer's token mixer on (batch, tokens, features) tensors, with the semantics of
`reference.pool_mix`: a centred window reaches `window // 2` tokens each side, a causal window
takes the token and the `window - 1` before it; tokens outside the sequence and padding tokens
(`key_padding_mask` True) are not counted (`count_include_pad=False`); padding positions get 0.

Design: direct windowed loads, one pass each way.
Each program owns a tile of BLOCK_N tokens x BLOCK_D features of one sequence and loops over the
`window` offsets, loading the shifted tile and adding it into an fp32 accumulator. Neighbouring
tiles read overlapping rows, but those re-reads hit L1/L2: DRAM traffic stays one read of x and one
write of the output, and the op is memory-bound, so the extra `window - 1` cached loads per element
are nearly free for PoolFormer's windows (3 to 7). The alternative, a running window sum along
tokens (add the row entering, subtract the row leaving), does O(1) work per element but serialises
each sequence into one program per feature block (B * D / BLOCK_D programs: too few to fill a GPU
at small batch) and accumulates add/subtract rounding along the whole sequence; the windowed loads
keep B * N * D / (BLOCK_N * BLOCK_D) independent programs and an error independent of N.

Backward. With c_i the number of real tokens in token i's window and keep_j = not padding,
    out_i = keep_i * (sum_{j in W(i), keep_j} x_j / c_i - x_i)
    dx_j  = keep_j * (sum_{i : j in W(i)} g_i * keep_i / c_i - g_j).
The forward saves r_i = keep_i / c_i, one fp32 per token ((B, N), negligible next to x), so the
backward is the same windowed sum run over the transposed window (i = j + left - o) on g * r, and
needs neither x nor the mask (keep_j is r_j > 0, since a real token always counts itself).

Layouts: x and the upstream gradient are read through their strides (any view: transposed,
sliced, expanded); outputs are allocated contiguous. Offsets inside one sequence are int32 (the
launcher refuses a sequence spanning 2**31 elements or more), the batch offset int64. Inputs
fp16 / bf16 / fp32, accumulation fp32.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from ._aot import AotSpec

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_TL_TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
# Tests set this to allocate outputs full of NaN, so an element a kernel never writes fails.
POISON_OUTPUTS = False


# ------------------------------------------------------------------------------------ kernels


@triton.jit
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
    n_ok = offs_n < N
    d_ok = offs_d < D
    x_b = x_ptr + b * stride_xb
    col_x = offs_d[None, :] * stride_xd
    pad_b = pad_ptr + b * stride_pb

    acc_nd = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    count_n = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for o in range(0, window):
        src_n = offs_n - left + o
        ok_n = (src_n >= 0) & (src_n < N)
        if HAS_MASK:
            pad_n = tl.load(pad_b + src_n * stride_pn, mask=ok_n, other=1)
            ok_n = ok_n & (pad_n == 0)
        count_n += ok_n.to(tl.float32)
        rows = src_n[:, None] * stride_xn
        xs_nd = tl.load(x_b + rows + col_x, mask=ok_n[:, None] & d_ok[None, :], other=0.0)
        acc_nd += xs_nd.to(tl.float32)

    keep_n = n_ok
    if HAS_MASK:
        own_pad_n = tl.load(pad_b + offs_n * stride_pn, mask=n_ok, other=1)
        keep_n = keep_n & (own_pad_n == 0)
    rows = offs_n[:, None] * stride_xn
    x_nd = tl.load(x_b + rows + col_x, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
    count_n = tl.maximum(count_n, 1.0)
    out_nd = acc_nd / count_n[:, None] - x_nd.to(tl.float32)
    out_nd = tl.where(keep_n[:, None], out_nd, 0.0)
    out_offs = offs_n[:, None] * D + offs_d[None, :]
    tl.store(
        out_ptr + b * N * D + out_offs,
        out_nd.to(out_ptr.dtype.element_ty),
        mask=n_ok[:, None] & d_ok[None, :],
    )
    if pid_d == 0:
        rcount_n = tl.where(keep_n, 1.0 / count_n, 0.0)
        tl.store(rcount_ptr + b * N + offs_n, rcount_n, mask=n_ok)


@triton.jit
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
    col_g = offs_d[None, :] * stride_gd
    r_b = rcount_ptr + b * N

    acc_nd = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for o in range(0, window):
        dst_n = offs_n + left - o
        ok_n = (dst_n >= 0) & (dst_n < N)
        r_n = tl.load(r_b + dst_n, mask=ok_n, other=0.0)
        rows = dst_n[:, None] * stride_gn
        gs_nd = tl.load(g_b + rows + col_g, mask=ok_n[:, None] & d_ok[None, :], other=0.0)
        acc_nd += gs_nd.to(tl.float32) * r_n[:, None]

    own_r_n = tl.load(r_b + offs_n, mask=n_ok, other=0.0)
    rows = offs_n[:, None] * stride_gn
    g_nd = tl.load(g_b + rows + col_g, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
    dx_nd = tl.where(own_r_n[:, None] > 0.0, acc_nd - g_nd.to(tl.float32), 0.0)
    dx_offs = offs_n[:, None] * D + offs_d[None, :]
    tl.store(
        dx_ptr + b * N * D + dx_offs,
        dx_nd.to(dx_ptr.dtype.element_ty),
        mask=n_ok[:, None] & d_ok[None, :],
    )


# ------------------------------------------------------------------------------------ autotune

# Memory-bound work: 4096 elements per program at 8 warps is 16 per thread, which ptxas fits in
# about 100 registers with no spills (4 warps, 32 per thread, took 170-250 registers and would
# halve occupancy); num_stages does not change the plain-load loop. The three tiles differ only in
# shape, so narrow models (D <= 32) do not waste lanes on a 128-wide feature block. Under the
# interpreter one small tile, so the tests cross several token and feature tiles with small tensors.
GPU_CONFIGS = [
    triton.Config({"BLOCK_N": 128, "BLOCK_D": 32}, num_warps=8, num_stages=1),
    triton.Config({"BLOCK_N": 64, "BLOCK_D": 64}, num_warps=8, num_stages=1),
    triton.Config({"BLOCK_N": 32, "BLOCK_D": 128}, num_warps=8, num_stages=1),
]
INTERPRETER_CONFIGS = [triton.Config({"BLOCK_N": 32, "BLOCK_D": 32}, num_warps=4, num_stages=1)]
CONFIGS = INTERPRETER_CONFIGS if INTERPRET else GPU_CONFIGS


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """Drop feature blocks wider than the (power-of-two rounded) model width; keep at least one."""
    width = max(32, triton.next_power_of_2(int(named_args["D"])))
    kept = [c for c in configs if c.kwargs["BLOCK_D"] <= width]
    return kept or configs[:1]


_pool_fwd = triton.autotune(
    CONFIGS, key=["D", "HAS_MASK"], prune_configs_by={"early_config_prune": _prune}
)(_pool_fwd_kernel)
_pool_bwd = triton.autotune(CONFIGS, key=["D"], prune_configs_by={"early_config_prune": _prune})(
    _pool_bwd_kernel
)


# ------------------------------------------------------------------------------------ launchers


def _check_device(name: str, t: torch.Tensor) -> None:
    if t.device.type == "cuda":
        return
    if t.device.type == "cpu" and INTERPRET:
        return
    raise ValueError(
        f"{name} is on {t.device}; the Triton pool_mix kernel needs a CUDA tensor "
        "(or a CPU tensor with TRITON_INTERPRET=1 set before triton is imported)"
    )


def check_pool_args(
    x_bnd: torch.Tensor,
    window: int,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
) -> None:
    """Raise ValueError naming the argument for anything the kernel cannot compute correctly."""
    if not isinstance(x_bnd, torch.Tensor):
        raise ValueError(
            f"x must be a torch.Tensor (batch, tokens, dim), got {type(x_bnd).__name__}"
        )
    if x_bnd.dim() != 3:
        raise ValueError(f"x must have 3 dims (batch, tokens, dim), got shape {tuple(x_bnd.shape)}")
    if x_bnd.dtype not in DTYPES:
        raise ValueError(f"x has dtype {x_bnd.dtype}; the Triton pool_mix takes {DTYPES}")
    _check_device("x", x_bnd)
    if any(s < 0 for s in x_bnd.stride()):
        raise ValueError(f"x has negative strides {x_bnd.stride()}")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {causal!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    if window >= 2**31:
        raise ValueError(f"window must be below 2**31, got {window}")
    if not causal and window % 2 == 0:
        raise ValueError(f"window must be odd for a centred (non-causal) pool, got {window}")
    if key_padding_mask is not None:
        if not isinstance(key_padding_mask, torch.Tensor) or key_padding_mask.dtype != torch.bool:
            got = getattr(key_padding_mask, "dtype", type(key_padding_mask).__name__)
            raise ValueError(f"key_padding_mask must be a bool tensor (True = padding), got {got}")
        want = tuple(x_bnd.shape[:2])
        if tuple(key_padding_mask.shape) != want:
            raise ValueError(
                f"key_padding_mask must have shape (batch, tokens) = {want}, "
                f"got {tuple(key_padding_mask.shape)}"
            )
        if key_padding_mask.device != x_bnd.device:
            raise ValueError(
                f"key_padding_mask is on {key_padding_mask.device} but x is on {x_bnd.device}"
            )


def _check_int32_offsets(name: str, t: torch.Tensor) -> None:
    """The kernels index inside one sequence in int32 (the batch offset is int64), which halves
    the registers that 64-bit per-element addresses would take; refuse what would overflow."""
    _, n, d = t.shape
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
    return lambda meta: (b * triton.cdiv(n, meta["BLOCK_N"]), triton.cdiv(d, meta["BLOCK_D"]))


def _alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if POISON_OUTPUTS:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def pool_mix_forward(
    x_bnd: torch.Tensor,
    window: int,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the forward kernel: returns (out (B, N, D) contiguous in x's dtype, rcount (B, N) fp32)."""
    check_pool_args(x_bnd, window, causal, key_padding_mask)
    b, n, d = x_bnd.shape
    out_bnd = _alloc((b, n, d), x_bnd.dtype, x_bnd.device)
    rcount_bn = _alloc((b, n), torch.float32, x_bnd.device)
    if x_bnd.numel() == 0:
        return out_bnd, rcount_bn.zero_()
    _check_int32_offsets("x", x_bnd)
    if key_padding_mask is None:
        pad_bn = torch.zeros((1, 1), dtype=torch.uint8, device=x_bnd.device)  # never read
    else:
        pad_bn = key_padding_mask.view(torch.uint8)
    _pool_fwd[_grid(b, n, d)](
        x_bnd,
        pad_bn,
        out_bnd,
        rcount_bn,
        n,
        d,
        window,
        _left(window, causal),
        *x_bnd.stride(),
        *pad_bn.stride(),
        HAS_MASK=key_padding_mask is not None,
    )
    return out_bnd, rcount_bn


def pool_mix_backward(
    grad_bnd: torch.Tensor,
    rcount_bn: torch.Tensor,
    window: int,
    causal: bool,
) -> torch.Tensor:
    """Run the backward kernel: dx (B, N, D), contiguous, in grad's dtype, from the saved rcount."""
    check_pool_args(grad_bnd, window, causal, None)
    b, n, d = grad_bnd.shape
    if (
        tuple(rcount_bn.shape) != (b, n)
        or rcount_bn.dtype != torch.float32
        or rcount_bn.device != grad_bnd.device
        or not rcount_bn.is_contiguous()
    ):
        raise ValueError(
            f"rcount_bn must be a contiguous float32 tensor of shape {(b, n)} on "
            f"{grad_bnd.device} (from pool_mix_forward), got {rcount_bn.dtype} "
            f"{tuple(rcount_bn.shape)} strides {rcount_bn.stride()} on {rcount_bn.device}"
        )
    dx_bnd = _alloc((b, n, d), grad_bnd.dtype, grad_bnd.device)
    if grad_bnd.numel() == 0:
        return dx_bnd
    _check_int32_offsets("grad", grad_bnd)
    _pool_bwd[_grid(b, n, d)](
        grad_bnd, rcount_bn, dx_bnd, n, d, window, _left(window, causal), *grad_bnd.stride()
    )
    return dx_bnd


# ------------------------------------------------------------------------------------ autograd


class PoolMix(torch.autograd.Function):
    """Autograd wrapper: the forward saves only rcount (B, N); x and the mask are not kept."""

    @staticmethod
    def forward(ctx, x_bnd, window, causal, key_padding_mask):  # type: ignore[override]
        out_bnd, rcount_bn = pool_mix_forward(x_bnd, window, causal, key_padding_mask)
        ctx.save_for_backward(rcount_bn)
        ctx.window, ctx.causal = window, causal
        return out_bnd

    @staticmethod
    @once_differentiable  # the backward kernel is not itself differentiable: say so, loudly
    def backward(ctx, grad_bnd):  # type: ignore[override]
        (rcount_bn,) = ctx.saved_tensors
        dx_bnd = pool_mix_backward(grad_bnd, rcount_bn, ctx.window, ctx.causal)
        return dx_bnd, None, None, None


def pool_mix(
    x_bnd: torch.Tensor,
    window: int,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
) -> torch.Tensor:
    """Triton pool_mix, (B, N, D) -> (B, N, D), differentiable in x; see `reference.pool_mix`."""
    check_pool_args(x_bnd, window, causal, key_padding_mask)
    return PoolMix.apply(x_bnd, window, causal, key_padding_mask)


# ------------------------------------------------------------------------------------ AOT specs


def aot_specs() -> list[AotSpec]:
    """Every kernel x configuration the launchers can pick, for scripts/kernel_report.py.

    Causal and centred windows share one binary: the direction is the runtime `left` offset
    (window - 1 or window // 2), so they are not separate rows. The specs assume the common
    contiguous feature axis (stride 1, which Triton specialises as a constant at launch) and
    16-byte aligned pointers, as a launch on a fresh tensor would.
    """
    configs = GPU_CONFIGS  # what a GPU launch can pick, whatever this process's TRITON_INTERPRET
    aligned = [["tt.divisibility", 16]]
    specs: list[AotSpec] = []
    for ty in _TL_TYPES.values():
        for cfg in configs:
            bn, bd = cfg.kwargs["BLOCK_N"], cfg.kwargs["BLOCK_D"]
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
                        num_warps=cfg.num_warps,
                        num_stages=cfg.num_stages,
                        label=(
                            f"{ty} {'mask' if has_mask else 'no-mask'} causal|centred "
                            f"BLOCK_N={bn} BLOCK_D={bd}"
                        ),
                        attrs={(0,): aligned, (1,): aligned, (2,): aligned, (3,): aligned},
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
                        "BLOCK_N": "constexpr",
                        "BLOCK_D": "constexpr",
                    },
                    constexprs={"stride_gd": 1, "BLOCK_N": bn, "BLOCK_D": bd},
                    num_warps=cfg.num_warps,
                    num_stages=cfg.num_stages,
                    label=f"{ty} causal|centred BLOCK_N={bn} BLOCK_D={bd}",
                    attrs={(0,): aligned, (1,): aligned, (2,): aligned},
                )
            )
    return specs
