"""Argument checks shared by the PyTorch references and the Triton launchers.

Every check reads only tensor metadata (shape, dtype, device): none of them looks at values, so
none forces a device synchronisation on the hot path.
"""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
IMPLS = ("auto", "torch", "triton")


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


def check_dim(name: str, got: int, want: int, what: str) -> None:
    if got != want:
        raise ValueError(f"{name}: {what} is {got}, expected {want}")


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
