"""The linear_attention launchers: the kernels' own limits, output allocation, the grid.

The arguments arrive checked by the public op (ops.py); what is checked here are the kernels'
limits: F and dv up to MAX_WIDTH, rows of one head indexed in int32, no bf16 under the
interpreter. Inputs are read through their strides (no copies); outputs are contiguous.
`linear_attention_forward` and `linear_attention_backward` are what the custom op in ops.py runs."""

from __future__ import annotations

import functools

import torch

from .._checks import check_chunked_launch
from ._jit import MAX_WIDTH, _linear_bwd_dkdv_kernel, _linear_bwd_dq_kernel, _linear_fwd_kernel
from .tuning import autotuned, dot_precision, n_bucket, width

# Tests set this to True: outputs are then allocated full of NaN, so an element the kernel never
# writes shows up as NaN instead of as whatever memory held before.
POISON_OUTPUTS = False

_fwd = autotuned(_linear_fwd_kernel)
_bwd_dq = autotuned(_linear_bwd_dq_kernel)
_bwd_dkdv = autotuned(_linear_bwd_dkdv_kernel)


def _check_limits(q_bhnf: torch.Tensor, v_bhnv: torch.Tensor, named: dict) -> None:
    check_chunked_launch("linear_attention", "feature", q_bhnf, v_bhnv, named, MAX_WIDTH)


def _alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if POISON_OUTPUTS:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


@functools.cache
def _placeholder(device: torch.device) -> torch.Tensor:
    """A pointer passed where the padding mask is switched off (HAS_MASK=False): never read."""
    return torch.zeros(1, dtype=torch.uint8, device=device)


def _mask_args(key_padding_mask: torch.Tensor | None, device: torch.device) -> tuple:
    if key_padding_mask is None:
        return _placeholder(device), 0, 0
    pad_bn = key_padding_mask.view(torch.uint8)  # a view: the same bytes, no copy
    return (pad_bn, *pad_bn.stride())


def _switches(q_bhnf: torch.Tensor, v_bhnv: torch.Tensor, causal: bool, mask) -> dict:
    return dict(
        CAUSAL=causal,
        HAS_MASK=mask is not None,
        DOT_PREC=dot_precision(q_bhnf.dtype),
        BF=width(q_bhnf.shape[-1]),
        BV=width(v_bhnv.shape[-1]),
    )


def linear_attention_forward(
    q_bhnf: torch.Tensor,
    k_bhnf: torch.Tensor,
    v_bhnv: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the forward kernel: (out (B, H, N, dv) contiguous in q's dtype, den (B·H, N) fp32)."""
    _check_limits(q_bhnf, v_bhnv, {"q": q_bhnf, "k": k_bhnf, "v": v_bhnv})
    b, h, n, f = q_bhnf.shape
    dv = v_bhnv.shape[-1]
    out_bhnv = _alloc((b, h, n, dv), q_bhnf.dtype, q_bhnf.device)
    den_xn = _alloc((b * h, n), torch.float32, q_bhnf.device)
    if b * h * n == 0 or f == 0 or dv == 0:  # nothing to launch: q·z = 0, so out = 0
        return out_bhnv.zero_(), den_xn.fill_(eps)
    pad, stride_pb, stride_pn = _mask_args(key_padding_mask, q_bhnf.device)
    _fwd[(b * h,)](
        q_bhnf,
        k_bhnf,
        v_bhnv,
        pad,
        out_bhnv,
        den_xn,
        float(eps),
        h,
        n,
        f,
        dv,
        *q_bhnf.stride(),
        *k_bhnf.stride(),
        *v_bhnv.stride(),
        stride_pb,
        stride_pn,
        n_bucket(n),
        **_switches(q_bhnf, v_bhnv, causal, key_padding_mask),
    )
    return out_bhnv, den_xn


def linear_attention_backward(
    d_out: torch.Tensor,
    q_bhnf: torch.Tensor,
    k_bhnf: torch.Tensor,
    v_bhnv: torch.Tensor,
    out_bhnv: torch.Tensor,
    den_xn: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the two backward kernels: (dq, dk, dv), contiguous, in q's dtype."""
    named = {"q": q_bhnf, "k": k_bhnf, "v": v_bhnv, "d_out": d_out, "out": out_bhnv}
    _check_limits(q_bhnf, v_bhnv, named)
    b, h, n, f = q_bhnf.shape
    dv = v_bhnv.shape[-1]
    dq_bhnf = _alloc((b, h, n, f), q_bhnf.dtype, q_bhnf.device)
    dk_bhnf = _alloc((b, h, n, f), q_bhnf.dtype, q_bhnf.device)
    dv_bhnv = _alloc((b, h, n, dv), q_bhnf.dtype, q_bhnf.device)
    if b * h * n == 0 or f == 0 or dv == 0:  # out does not depend on the inputs
        return dq_bhnf.zero_(), dk_bhnf.zero_(), dv_bhnv.zero_()
    pad, stride_pb, stride_pn = _mask_args(key_padding_mask, q_bhnf.device)
    switches = _switches(q_bhnf, v_bhnv, causal, key_padding_mask)
    _bwd_dq[(b * h,)](
        k_bhnf,
        v_bhnv,
        pad,
        d_out,
        out_bhnv,
        den_xn,
        dq_bhnf,
        h,
        n,
        f,
        dv,
        *k_bhnf.stride(),
        *v_bhnv.stride(),
        stride_pb,
        stride_pn,
        *d_out.stride(),
        *out_bhnv.stride(),
        n_bucket(n),
        **switches,
    )
    _bwd_dkdv[(b * h,)](
        q_bhnf,
        k_bhnf,
        v_bhnv,
        pad,
        d_out,
        out_bhnv,
        den_xn,
        dk_bhnf,
        dv_bhnv,
        h,
        n,
        f,
        dv,
        *q_bhnf.stride(),
        *k_bhnf.stride(),
        *v_bhnv.stride(),
        stride_pb,
        stride_pn,
        *d_out.stride(),
        *out_bhnv.stride(),
        n_bucket(n),
        **switches,
    )
    return dq_bhnf, dk_bhnf, dv_bhnv
