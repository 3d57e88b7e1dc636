"""The public ops of attnzoo.kernels: argument checks, defaults, and the choice of implementation.

Every op takes `impl`:
- "torch": the PyTorch reference in `reference.py` (any device, any float dtype);
- "triton": the Triton kernels (CUDA tensors, or any tensor under TRITON_INTERPRET=1);
- "auto": Triton for CUDA tensors in fp16/bf16/fp32; elsewhere, for the three attention ops in
  fp32/fp64, PyTorch's fused `scaled_dot_product_attention` (the fastest CPU path, same result as
  the reference to rounding), and the reference for everything else.

Layouts are (batch, heads, tokens, features). `key_padding_mask` is a bool (batch, tokens) tensor
in which True marks a padding token, as in `torch.nn.MultiheadAttention`. A query whose every key
is masked (causal and padding together) gets a zero output.
"""

from __future__ import annotations

import importlib
import math
import os

import torch

from . import reference
from ._checks import check_attention, check_impl, check_mask, check_same, check_tensor

TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _triton(module: str):
    """The Triton implementations in kernels/<module>.py (`attention` or `pooling`), imported on
    first use: triton is optional off Linux, and importing it is slow."""
    try:
        return importlib.import_module(f"{__package__}.{module}")
    except ImportError as err:  # pragma: no cover - depends on the platform
        raise NotImplementedError(
            f"impl='triton' needs triton and attnzoo.kernels.{module}, which failed to import: {err}"
        ) from err


def _use_triton(impl: str, t: torch.Tensor) -> bool:
    check_impl(impl)
    if impl == "torch":
        return False
    if impl == "triton":
        if t.dtype not in TRITON_DTYPES:
            raise ValueError(f"impl='triton' takes dtypes {TRITON_DTYPES}, got {t.dtype}")
        if not t.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError(
                f"impl='triton' needs CUDA tensors (got {t.device}); set TRITON_INTERPRET=1 "
                "before importing triton to run the kernels on CPU in the interpreter"
            )
        return True
    return t.is_cuda and t.dtype in TRITON_DTYPES


def _use_sdpa(impl: str, t: torch.Tensor) -> bool:
    """impl="auto" off CUDA in fp32/fp64: attention through torch's fused SDPA (call after
    `_use_triton`, which has already checked `impl`)."""
    return impl == "auto" and not t.is_cuda and t.dtype in (torch.float32, torch.float64)


def _sdpa(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """The reference's masked attention through `F.scaled_dot_product_attention`.

    Some torch versions give NaN for a query whose every key is masked, where the reference
    gives zeros. Such rows are therefore let see every key (so nothing is NaN, forward or
    backward) and their output is then zeroed, which also zeroes their gradient.
    """
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if key_padding_mask is None:
        return sdpa(q_bhnk, k_bhnk, v_bhnv, is_causal=causal, scale=scale)
    allowed_b1nn = reference.allowed_keys(q_bhnk.shape[-2], causal, key_padding_mask, q_bhnk.device)
    empty_b1n1 = ~allowed_b1nn.any(dim=-1, keepdim=True)
    out = sdpa(q_bhnk, k_bhnk, v_bhnv, attn_mask=allowed_b1nn | empty_b1n1, scale=scale)
    return out.masked_fill(empty_b1n1, 0.0)


def _scale(scale: float | None, features: int) -> float:
    return 1.0 / math.sqrt(features) if scale is None else float(scale)


def scaled_dot_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """softmax(q kᵀ · scale) v, per head.

    q, k: (B, H, N, dk); v: (B, H, N, dv) -> (B, H, N, dv). `scale` defaults to 1/sqrt(dk).
    """
    check_attention(q, k, v, key_padding_mask)
    scale = _scale(scale, q.shape[-1])
    if not _use_triton(impl, q) and _use_sdpa(impl, q):
        return _sdpa(q, k, v, causal, key_padding_mask, scale)
    ops = _triton("attention") if _use_triton(impl, q) else reference
    return ops.scaled_dot_attention(q, k, v, causal, key_padding_mask, scale)


def quadratic_attention(
    x: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Attention whose scores are a quadratic form of the tokens: x[i] · U[h] · x[j] · scale.

    x: (B, N, D); u: (H, D, D); v: (B, H, N, dv) -> (B, H, N, dv). `scale` defaults to 1/sqrt(D).
    Equivalent to scaled-dot attention with q = x U[h] and k = x shared by every head.
    """
    check_tensor("x", x, 3, "(batch, tokens, dim)")
    check_tensor("u", u, 3, "(heads, dim, dim)")
    check_tensor("v", v, 4, "(batch, heads, tokens, dv)")
    check_same(("x", "u", "v"), (x, u, v))
    b, n, d = x.shape
    h = u.shape[0]
    if tuple(u.shape) != (h, d, d):
        raise ValueError(
            f"u must have shape (heads, dim, dim) = ({h}, {d}, {d}), got {tuple(u.shape)}"
        )
    if tuple(v.shape[:3]) != (b, h, n):
        raise ValueError(
            f"v must have (batch, heads, tokens) = {(b, h, n)} from x and u, got {tuple(v.shape)}"
        )
    check_mask(key_padding_mask, b, n, x.device)
    scale = _scale(scale, d)
    if not _use_triton(impl, x) and _use_sdpa(impl, x):
        q_bhnd = torch.einsum("bnd,hde->bhne", x, u)
        k_bhnd = x[:, None].expand(b, h, n, d)
        return _sdpa(q_bhnd, k_bhnd, v, causal, key_padding_mask, scale)
    ops = _triton("attention") if _use_triton(impl, x) else reference
    return ops.quadratic_attention(x, u, v, causal, key_padding_mask, scale)


def metric_attention(
    p: torch.Tensor,
    m: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Attention under a learned metric: scores p[i] · M[h] · p[j] · scale, values p itself.

    p: (B, H, N, dk); m: (H, dk, dk) -> (B, H, N, dk). `scale` defaults to 1/sqrt(dk). The mixer
    passes a symmetric M; the op itself is correct for any M (its symmetry is never checked, since
    that would read values on the device).
    """
    check_tensor("p", p, 4, "(batch, heads, tokens, dk)")
    check_tensor("m", m, 3, "(heads, dk, dk)")
    check_same(("p", "m"), (p, m))
    b, h, n, dk = p.shape
    if tuple(m.shape) != (h, dk, dk):
        raise ValueError(
            f"m must have shape (heads, dk, dk) = ({h}, {dk}, {dk}), got {tuple(m.shape)}"
        )
    check_mask(key_padding_mask, b, n, p.device)
    scale = _scale(scale, dk)
    if not _use_triton(impl, p) and _use_sdpa(impl, p):
        return _sdpa(p @ m[None], p, p, causal, key_padding_mask, scale)
    ops = _triton("attention") if _use_triton(impl, p) else reference
    return ops.metric_attention(p, m, causal, key_padding_mask, scale)


def pool_mix(
    x: torch.Tensor,
    window: int,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Mean over a window of tokens minus the token (PoolFormer): (B, N, D) -> (B, N, D).

    Centred windows (odd `window`) reach `window // 2` tokens each side; causal windows take the
    token and the `window - 1` before it. Tokens outside the sequence or marked as padding are not
    counted; padding positions themselves get zeros.
    """
    check_tensor("x", x, 3, "(batch, tokens, dim)")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")
    if not causal and window % 2 == 0:
        raise ValueError(f"window must be odd for a centred (non-causal) pool, got {window}")
    check_mask(key_padding_mask, x.shape[0], x.shape[1], x.device)
    ops = _triton("pooling") if _use_triton(impl, x) else reference
    return ops.pool_mix(x, window, causal, key_padding_mask)
