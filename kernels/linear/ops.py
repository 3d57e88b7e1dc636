"""linear_attention: normalised linear attention (Katharopoulos et al. 2020) on feature-mapped q
and k, chunked.

The public function checks its arguments once and picks the path; the custom op
`torch.ops.attnzoo.linear_attention` (and its backward op) runs the Triton kernels of launch.py.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import _op
from .._checks import check_attention, check_causal, check_saved, real_number
from . import naive

# impl="auto" on CUDA: the chunked PyTorch path was faster than the kernel at every shape
# measured (H100, 2026-11-23; docs/gpu.md). Flip to True where scripts/gpu_check.py says the
# kernel wins.
AUTO_TRITON = False


def check_eps(eps: float) -> float:
    """The denominator offset as a float: finite and not negative (a negative one could make a
    denominator 0)."""
    if not real_number(eps) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite real number >= 0 (a Python float), got {eps!r}")
    return float(eps)


def _launch():
    return _op.triton_part(f"{__package__}.launch")


@torch.library.custom_op(f"{_op.NAMESPACE}::linear_attention", mutates_args=())
def linear_attention_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    eps: float,
) -> tuple[Tensor, Tensor]:
    """The kernels' forward: the output and the denominators (`den`, fp32 (B·H, N)), which the
    backward reads."""
    return _launch().linear_attention_forward(q, k, v, key_padding_mask, causal, eps)


@linear_attention_op.register_fake
def _(q, k, v, key_padding_mask, causal, eps):
    b, h, n, _ = q.shape
    return q.new_empty((b, h, n, v.shape[-1])), _op.rows_like(q, b * h, n)


@torch.library.custom_op(f"{_op.NAMESPACE}::linear_attention_backward", mutates_args=())
def linear_attention_backward_op(
    d_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    den: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    b, h, n, _ = q.shape
    check_saved("d_out", d_out, (b, h, n, v.shape[-1]), q)
    check_saved("out", out, (b, h, n, v.shape[-1]), q)
    check_saved("den", den, (b * h, n), q, torch.float32, contiguous=True)
    return _launch().linear_attention_backward(d_out, q, k, v, out, den, key_padding_mask, causal)


@linear_attention_backward_op.register_fake
def _(d_out, q, k, v, out, den, key_padding_mask, causal):
    return _op.contiguous_like(q), _op.contiguous_like(k), _op.contiguous_like(v)


def _setup(ctx, inputs, output) -> None:
    q, k, v, mask, causal, _ = inputs
    out, den = output
    ctx.save_for_backward(q, k, v, out, den, mask)
    ctx.causal = causal
    _op.no_gradient_for(ctx, den)


def _backward(ctx, d_out, d_den):
    q, k, v, out, den, mask = ctx.saved_tensors
    dq, dk, dv = linear_attention_backward_op(d_out, q, k, v, out, den, mask, ctx.causal)
    return dq, dk, dv, None, None, None


linear_attention_op.register_autograd(_backward, setup_context=_setup)
_op.register_autocast("linear_attention")


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    eps: float = 1e-6,
    impl: str = "auto",
) -> Tensor:
    """Normalised linear attention (Katharopoulos et al. 2020): y_i = q_iᵀ S_i / (q_iᵀ z_i + eps).

    q, k: (B, H, N, F), already feature-mapped (non-negative, e.g. elu(x) + 1); v: (B, H, N, dv)
    -> (B, H, N, dv). S_i = Σ_j k_j v_jᵀ and z_i = Σ_j k_j over the non-padding keys j (causal:
    j ≤ i). `key_padding_mask` masks keys only: a padding query is computed like any other, and
    a query with no visible key gets 0. eps ≥ 0 keeps the denominator off zero. The Triton path
    takes F and dv up to 128.
    """
    (q, k, v), _ = _op.apply_dtype_policy((q, k, v))
    check_attention(q, k, v, key_padding_mask)
    check_causal(causal)
    eps = check_eps(eps)
    with _op.autocast_off(q):
        if _op.use_triton(impl, "q", q, AUTO_TRITON):
            return linear_attention_op(q, k, v, key_padding_mask, causal, eps)[0]
        return naive.linear_attention(q, k, v, causal, key_padding_mask, eps)
