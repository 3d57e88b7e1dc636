"""pool_mix: the mean over a window of real tokens, minus the token itself (PoolFormer's mixer).

The public function checks its arguments once and picks the path; the custom op
`torch.ops.attnzoo.pool_mix` (and its backward op) runs the Triton kernels of launch.py.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _op
from .._checks import check_causal, check_mask, check_saved, check_tensor
from . import naive

# impl="auto" on CUDA: PyTorch's avg_pool1d path was faster than the kernel at every shape
# measured (H100, 2026-11-23; docs/gpu.md). Flip to True where scripts/gpu_check.py says the
# kernel wins.
AUTO_TRITON = False


def check_pool(x_bnd: Tensor, window: int, causal: bool, key_padding_mask, name: str = "x") -> None:
    check_tensor(name, x_bnd, 3, "(batch, tokens, dim)")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    check_causal(causal)
    if not causal and window % 2 == 0:
        raise ValueError(f"window must be odd for a centred (non-causal) pool, got {window}")
    check_mask(key_padding_mask, x_bnd.shape[0], x_bnd.shape[1], x_bnd.device)


def _launch():
    return _op.triton_part(f"{__package__}.launch")


@torch.library.custom_op(f"{_op.NAMESPACE}::pool_mix", mutates_args=())
def pool_mix_op(
    x: Tensor, window: int, causal: bool, key_padding_mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The kernels' forward: the output and the reciprocal window counts (`rcount`, fp32 (B, N)),
    which the backward reads."""
    return _launch().pool_mix_forward(x, window, causal, key_padding_mask)


@pool_mix_op.register_fake
def _(x, window, causal, key_padding_mask):
    b, n, _ = x.shape
    return _op.contiguous_like(x), _op.rows_like(x, b, n)


@torch.library.custom_op(f"{_op.NAMESPACE}::pool_mix_backward", mutates_args=())
def pool_mix_backward_op(grad: Tensor, rcount: Tensor, window: int, causal: bool) -> Tensor:
    check_saved("rcount", rcount, tuple(grad.shape[:2]), grad, torch.float32, contiguous=True)
    return _launch().pool_mix_backward(grad, rcount, window, causal)


@pool_mix_backward_op.register_fake
def _(grad, rcount, window, causal):
    return _op.contiguous_like(grad)


def _setup(ctx, inputs, output) -> None:
    _, window, causal, _ = inputs
    ctx.save_for_backward(output[1])
    ctx.window, ctx.causal = window, causal
    _op.no_gradient_for(ctx, output[1])


def _backward(ctx, d_out, d_rcount):
    (rcount,) = ctx.saved_tensors
    return pool_mix_backward_op(d_out, rcount, ctx.window, ctx.causal), None, None, None


pool_mix_op.register_autograd(_backward, setup_context=_setup)
_op.register_autocast("pool_mix")


def pool_mix(
    x: Tensor,
    window: int,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    impl: str = "auto",
) -> Tensor:
    """Mean over a window of tokens minus the token (PoolFormer): (B, N, D) -> (B, N, D).

    Centred windows (odd `window`) reach `window // 2` tokens each side; causal windows take the
    token and the `window - 1` before it. Tokens outside the sequence or marked as padding are not
    counted; padding positions themselves get zeros.
    """
    (x,), _ = _op.apply_dtype_policy((x,))
    check_pool(x, window, causal, key_padding_mask)
    with _op.autocast_off(x):
        if _op.use_triton(impl, "x", x, AUTO_TRITON):
            return pool_mix_op(x, window, causal, key_padding_mask)[0]
        return naive.pool_mix(x, window, causal, key_padding_mask)
