"""Argument checks, one per op, run once per call at whichever entry the call came in by.

The entries are the public ops (`kernels/ops.py`, every impl) and the `torch.ops.attnzoo`
operators (`kernels/library.py`), which a compiled graph or a user can call without ops.py. An
eager call through ops.py reaches the kernels without passing the operators' checks again, so
the launchers (attention/launch.py, pooling/launch.py) check only the limits of the kernels
themselves (head widths, int32 offsets, the dropout counter).

Every check reads only tensor metadata (shape, dtype, device): none of them looks at values, so
none forces a device synchronisation on the hot path.
"""

from __future__ import annotations

import math
import numbers

import torch

from ._host import INTERPRET

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
IMPLS = ("auto", "torch", "triton", "tune")


def check_impl(impl: str) -> None:
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not one of {IMPLS}")


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


def check_quadratic(
    x_bnd: torch.Tensor, u_hdd: torch.Tensor, v_bhnv: torch.Tensor, key_padding_mask
) -> None:
    check_tensor("x", x_bnd, 3, "(batch, tokens, dim)")
    check_tensor("u", u_hdd, 3, "(heads, dim, dim)")
    check_tensor("v", v_bhnv, 4, "(batch, heads, tokens, dv)")
    check_same(("x", "u", "v"), (x_bnd, u_hdd, v_bhnv))
    b, n, d = x_bnd.shape
    h = u_hdd.shape[0]
    if tuple(u_hdd.shape) != (h, d, d):
        raise ValueError(
            f"u must have shape (heads, dim, dim) = ({h}, {d}, {d}), got {tuple(u_hdd.shape)}"
        )
    if tuple(v_bhnv.shape[:3]) != (b, h, n):
        raise ValueError(
            f"v must have (batch, heads, tokens) = {(b, h, n)} from x and u, "
            f"got {tuple(v_bhnv.shape)}"
        )
    check_mask(key_padding_mask, b, n, x_bnd.device)


def check_metric(p_bhnk: torch.Tensor, m_hkk: torch.Tensor, key_padding_mask) -> None:
    check_tensor("p", p_bhnk, 4, "(batch, heads, tokens, dk)")
    check_tensor("m", m_hkk, 3, "(heads, dk, dk)")
    check_same(("p", "m"), (p_bhnk, m_hkk))
    b, h, n, dk = p_bhnk.shape
    if tuple(m_hkk.shape) != (h, dk, dk):
        raise ValueError(
            f"m must have shape (heads, dk, dk) = ({h}, {dk}, {dk}), got {tuple(m_hkk.shape)}"
        )
    check_mask(key_padding_mask, b, n, p_bhnk.device)


def check_pool(
    x_bnd: torch.Tensor, window: int, causal: bool, key_padding_mask, name: str = "x"
) -> None:
    check_tensor(name, x_bnd, 3, "(batch, tokens, dim)")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    check_causal(causal)
    if not causal and window % 2 == 0:
        raise ValueError(f"window must be odd for a centred (non-causal) pool, got {window}")
    check_mask(key_padding_mask, x_bnd.shape[0], x_bnd.shape[1], x_bnd.device)


def check_causal(causal: bool) -> None:
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {causal!r}")


def check_window(window) -> tuple[int, int] | None:
    """A sliding window as the pair (left, right) of plain ints, or None (no window): query i
    sees the keys i − left ..= i + right. Both reaches are non-negative (every query sees
    itself); a reach of N or more is no bound on that side."""
    if window is None:
        return None
    if (
        not isinstance(window, (tuple, list))
        or len(window) != 2
        or not all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in window)
    ):
        raise ValueError(
            f"window must be None or a pair (left, right) of ints (query i sees keys "
            f"i - left ..= i + right), got {window!r}"
        )
    left, right = int(window[0]), int(window[1])
    if left < 0 or right < 0:
        raise ValueError(
            f"window = {window!r}: left and right must be >= 0 (query i sees keys "
            "i - left ..= i + right, itself included)"
        )
    return left, right


def _real(value) -> bool:
    """A real number as a Python or NumPy scalar (not a bool, not a tensor: a tensor's value
    would cost a device synchronisation per call)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_scale(scale: float, name: str = "scale") -> float:
    """The score scale (or another number added to every score, `name`) as a float; it must be
    finite (NaN or inf would give NaN everywhere)."""
    if not _real(scale) or not math.isfinite(scale):
        raise ValueError(f"{name} must be a finite real number (a Python float), got {scale!r}")
    return float(scale)


def check_sink(sink, heads: int, device: torch.device) -> None:
    """An attention sink: a float tensor of one logit per head, (heads,), on the inputs' device
    (its values are not read: that would cost a device synchronisation per call)."""
    if sink is None:
        return
    if not isinstance(sink, torch.Tensor) or not sink.is_floating_point() or sink.shape != (heads,):
        got = (
            f"{tuple(sink.shape)} {sink.dtype}"
            if isinstance(sink, torch.Tensor)
            else type(sink).__name__
        )
        raise ValueError(
            f"sink must be a float tensor of one logit per head, ({heads},), got {got}"
        )
    if sink.device != device:
        raise ValueError(f"sink is on {sink.device} but the inputs are on {device}")


def check_dropout(dropout_p: float, name: str = "dropout_p") -> float:
    """A dropout probability as a float; `name` is what the caller calls it (the mixers'
    config option is `attn_dropout`)."""
    if not _real(dropout_p) or not 0.0 <= dropout_p < 1.0:
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


def check_eps(eps: float) -> float:
    """linear_attention's denominator offset as a float: finite and not negative (a negative one
    could make a denominator 0)."""
    if not _real(eps) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite real number >= 0 (a Python float), got {eps!r}")
    return float(eps)


def check_linear(
    q_bhnf: torch.Tensor,
    k_bhnf: torch.Tensor,
    v_bhnv: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    eps: float,
) -> float:
    """linear_attention's arguments: q, k (batch, heads, tokens, F) and v (batch, heads, tokens,
    dv) as for attention, the mask, `causal` and `eps`; returns eps as a float."""
    check_attention(q_bhnf, k_bhnf, v_bhnv, key_padding_mask)
    check_causal(causal)
    return check_eps(eps)


def check_gated(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    log_decay: torch.Tensor,
    initial_state: torch.Tensor | None,
    causal: bool,
) -> None:
    """gated_linear_attention's arguments: q, k (batch, heads, tokens, K) and v (batch, heads,
    tokens, V) as for attention; log_decay (batch, heads, tokens) or (batch, heads, tokens, K)
    and initial_state (batch, heads, K, V) of any float dtype on q's device; causal=True."""
    check_attention(q_bhnk, k_bhnk, v_bhnv, None)
    b, h, n, kd = q_bhnk.shape
    if not isinstance(log_decay, torch.Tensor) or log_decay.dtype not in FLOAT_DTYPES:
        got = log_decay.dtype if isinstance(log_decay, torch.Tensor) else type(log_decay).__name__
        raise ValueError(f"log_decay must be a float tensor, got {got}")
    if tuple(log_decay.shape) not in ((b, h, n), (b, h, n, kd)):
        raise ValueError(
            f"log_decay must have shape (batch, heads, tokens) = {(b, h, n)} (one decay per "
            f"token) or (batch, heads, tokens, K) = {(b, h, n, kd)} (one per key dimension), "
            f"got {tuple(log_decay.shape)}"
        )
    if log_decay.device != q_bhnk.device:
        raise ValueError(f"log_decay is on {log_decay.device} but q is on {q_bhnk.device}")
    if initial_state is not None:
        shape = (b, h, kd, v_bhnv.shape[-1])
        if not isinstance(initial_state, torch.Tensor) or initial_state.dtype not in FLOAT_DTYPES:
            got = (
                initial_state.dtype
                if isinstance(initial_state, torch.Tensor)
                else type(initial_state).__name__
            )
            raise ValueError(f"initial_state must be None or a float tensor, got {got}")
        if tuple(initial_state.shape) != shape:
            raise ValueError(
                f"initial_state must have shape (batch, heads, K, V) = {shape}, "
                f"got {tuple(initial_state.shape)}"
            )
        if initial_state.device != q_bhnk.device:
            raise ValueError(
                f"initial_state is on {initial_state.device} but q is on {q_bhnk.device}"
            )
    check_causal(causal)
    if not causal:
        raise ValueError(
            "causal=False: gated_linear_attention is a recurrence forwards in time and takes "
            "causal=True only (a bidirectional mixer runs it over the sequence and its reverse)"
        )


def check_chunked_launch(
    op: str, what: str, q: torch.Tensor, v: torch.Tensor, named: dict, max_width: int
) -> None:
    """What a chunked linear-attention kernel (linear_attention, gated_linear_attention) cannot
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


def check_delta(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    beta: torch.Tensor,
    log_decay: torch.Tensor | None,
) -> None:
    """delta_rule's arguments: q, k (batch, heads, tokens, K) and v (batch, heads, tokens, V) as
    for attention; beta and log_decay (None, or a tensor) (batch, heads, tokens) of any float
    dtype on q's device."""
    check_attention(q_bhnk, k_bhnk, v_bhnv, None)
    b, h, n, _ = q_bhnk.shape
    for name, t in (("beta", beta), ("log_decay", log_decay)):
        if t is None and name == "log_decay":
            continue
        if not isinstance(t, torch.Tensor) or t.dtype not in FLOAT_DTYPES:
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a float tensor, got {got}")
        if tuple(t.shape) != (b, h, n):
            raise ValueError(
                f"{name} must have shape (batch, heads, tokens) = {(b, h, n)}, got {tuple(t.shape)}"
            )
        if t.device != q_bhnk.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q_bhnk.device}")
