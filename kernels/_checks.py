"""Argument checks that every family's ops share: tensors, masks, flags and numbers, and what
the Triton kernels run on. A family's own checks (a shape only its op takes) live in its ops.py.

Each public op checks its arguments once, whichever implementation then runs; the launchers
check only the limits of the kernels themselves (head widths, int32 offsets). Every check reads
only tensor metadata (shape, dtype, device): none of them looks at values, so none forces a
device synchronisation on the hot path.
"""

from __future__ import annotations

import math
import numbers

import torch

from ._host import INTERPRET

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def check_tensor(name: str, t: torch.Tensor, ndim: int, layout: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of shape {layout}, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dims {layout}, got shape {tuple(t.shape)}")
    if t.dtype not in FLOAT_DTYPES:
        allowed = ", ".join(str(d) for d in FLOAT_DTYPES)
        raise ValueError(f"{name} has dtype {t.dtype}; allowed: {allowed}")


def check_same(names: tuple[str, ...], tensors: tuple[torch.Tensor, ...]) -> None:
    """All tensors share one device and one dtype."""
    first = tensors[0]
    for name, t in zip(names[1:], tensors[1:], strict=True):
        if t.device != first.device:
            raise ValueError(
                f"{name} is on {t.device} but {names[0]} is on {first.device}; "
                "all inputs must be on one device"
            )
        if t.dtype != first.dtype:
            raise ValueError(
                f"{name} has dtype {t.dtype} but {names[0]} has {first.dtype}; "
                "all inputs must share one dtype"
            )


def check_mask(mask: torch.Tensor | None, batch: int, tokens: int, device: torch.device) -> None:
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"key_padding_mask must be a bool tensor (True marks padding), got {got}")
    if tuple(mask.shape) != (batch, tokens):
        raise ValueError(
            f"key_padding_mask must have shape (batch, tokens) = {(batch, tokens)}, "
            f"got {tuple(mask.shape)}"
        )
    if mask.device != device:
        raise ValueError(f"key_padding_mask is on {mask.device} but the inputs are on {device}")


def check_attention(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    names: tuple[str, str, str] = ("q", "k", "v"),
) -> None:
    """Shapes for attention on (batch, heads, tokens, features) layouts (self-attention)."""
    nq, nk, nv = names
    check_tensor(nq, q_bhnk, 4, "(batch, heads, tokens, dk)")
    check_tensor(nk, k_bhnk, 4, "(batch, heads, tokens, dk)")
    check_tensor(nv, v_bhnv, 4, "(batch, heads, tokens, dv)")
    check_same(names, (q_bhnk, k_bhnk, v_bhnv))
    b, h, n, dk = q_bhnk.shape
    if tuple(k_bhnk.shape) != (b, h, n, dk):
        raise ValueError(
            f"{nk} must have the shape of {nq} {(b, h, n, dk)}, got {tuple(k_bhnk.shape)}"
        )
    if tuple(v_bhnv.shape[:3]) != (b, h, n):
        raise ValueError(
            f"{nv} must have (batch, heads, tokens) = {(b, h, n)} like {nq}, got {tuple(v_bhnv.shape)}"
        )
    check_mask(key_padding_mask, b, n, q_bhnk.device)


def check_causal(causal: bool) -> None:
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {causal!r}")


def real_number(value) -> bool:
    """A real number as a Python or NumPy scalar (not a bool, not a tensor: a tensor's value
    would cost a device synchronisation per call)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_scale(scale: float, name: str = "scale") -> float:
    """The score scale (or another number added to every score, `name`) as a float; it must be
    finite (NaN or inf would give NaN everywhere)."""
    if not real_number(scale) or not math.isfinite(scale):
        raise ValueError(f"{name} must be a finite real number (a Python float), got {scale!r}")
    return float(scale)


def check_dropout(dropout_p: float, name: str = "dropout_p") -> float:
    """A dropout probability as a float; `name` is what the caller calls it (the mixers'
    config option is `attn_dropout`)."""
    if not real_number(dropout_p) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {dropout_p!r}")
    return float(dropout_p)


def check_triton(name: str, t: torch.Tensor) -> None:
    """What the Triton kernels run on: fp16/bf16/fp32 CUDA tensors (CPU ones in the interpreter).
    Called on the first activation after `check_same` has matched the others to it."""
    if t.dtype not in TRITON_DTYPES:
        raise ValueError(f"{name} has dtype {t.dtype}; the Triton kernels take {TRITON_DTYPES}")
    if not (t.is_cuda or (t.device.type == "cpu" and INTERPRET)):
        raise ValueError(
            f"{name} is on {t.device}: the Triton kernels need CUDA tensors; set "
            "TRITON_INTERPRET=1 before importing triton to run them on CPU tensors in the "
            "interpreter"
        )


def check_saved(
    name: str,
    t: torch.Tensor,
    shape: tuple[int, ...],
    like: torch.Tensor,
    dtype: torch.dtype | None = None,
    contiguous: bool = False,
) -> None:
    """A tensor a backward operator is handed (the upstream gradient, or what the forward saved):
    the shape, dtype (default: like's), device and, for a per-row statistic the kernels index
    densely (lse, rcount), the contiguity they read it with."""
    dtype = like.dtype if dtype is None else dtype
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if (
        tuple(t.shape) != shape
        or t.dtype != dtype
        or t.device != like.device
        or (contiguous and not t.is_contiguous())
    ):
        dense = "contiguous " if contiguous else ""
        raise ValueError(
            f"{name} must be a {dense}{dtype} tensor of shape {shape} on {like.device}, got "
            f"{t.dtype} {tuple(t.shape)} strides {t.stride()} on {t.device}"
        )


def check_chunked_launch(
    op: str, what: str, q: torch.Tensor, v: torch.Tensor, named: dict, max_width: int
) -> None:
    """What a chunked linear-attention kernel (the linear and gated families') cannot
    take: `what` (key or feature) and value widths over `max_width`, bfloat16 under the
    interpreter, a head of `named`'s (B, H, N, D) tensors spanning 2**31 elements or more."""
    width_q, width_v = q.shape[-1], v.shape[-1]
    if width_q > max_width or width_v > max_width:
        raise ValueError(
            f"the Triton {op} takes {what} and value widths up to {max_width}, got q/k width "
            f"{width_q} and v width {width_v}; use impl='torch'"
        )
    if INTERPRET and q.dtype == torch.bfloat16:
        raise ValueError(
            f"the {op} kernels take no bfloat16 under TRITON_INTERPRET=1: the interpreter's "
            "tl.dot on bf16 tiles is wrong; use float16 or float32 there"
        )
    for name, t in named.items():
        reach = (t.shape[2] - 1) * t.stride(2) + (t.shape[3] - 1) * t.stride(3)
        if t.numel() > 0 and max(reach, t.shape[2] * t.shape[3]) >= 2**31:
            raise ValueError(
                f"{name}: one head spans {reach} elements; the kernels index it in int32"
            )
