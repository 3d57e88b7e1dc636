"""The pool_mix launchers: the kernels' own limits, output allocation, the grid.

The arguments arrive checked by the public op (ops.py); what is checked here are the kernels'
int32 offsets. Per call nothing is allocated but the outputs: no zero mask tensor without a mask,
no copy of a strided input. `pool_mix_forward` and `pool_mix_backward` are what the custom op in
ops.py runs.
"""

from __future__ import annotations

import torch

from .._host import cdiv
from ._jit import _pool_bwd_kernel, _pool_fwd_kernel
from .tuning import KEY, autotuned, buckets

# Tests set this to allocate outputs full of NaN, so an element a kernel never writes fails.
POISON_OUTPUTS = False

_pool_fwd = autotuned(_pool_fwd_kernel, KEY)
_pool_bwd = autotuned(_pool_bwd_kernel, KEY[:2])


def _check_limits(name: str, t: torch.Tensor, window: int) -> None:
    """The kernels' own limits (the arguments arrive checked by the public op): the
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
        *buckets(b, n, d),
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
        *buckets(b, n, d),
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
