"""Softpick attention in PyTorch: the reference, and the op's only path (there is no Triton
kernel of softpick in attnzoo).

Written for clarity: the full (B, H, N, N) score matrix is materialised. Inputs in half
precision are computed in float32 (float64 stays float64) and the output is cast back, the dtype
policy of kernels/_op.py.
"""

from __future__ import annotations

import torch

from .._op import accumulate_dtype


def visible_keys(
    n: int, causal: bool, key_padding_mask: torch.Tensor | None, device: torch.device
) -> torch.Tensor | None:
    """Boolean (B or 1, 1, N, N): which keys each query may see, or None for all of them."""
    visible_11nn = None
    if causal:
        visible_11nn = torch.ones(n, n, dtype=torch.bool, device=device).tril()[None, None]
    if key_padding_mask is not None:
        keep_b11n = ~key_padding_mask[:, None, None, :]
        visible_11nn = keep_b11n if visible_11nn is None else visible_11nn & keep_b11n
    return visible_11nn


def softpick(scores_bhnn: torch.Tensor, visible: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Softpick over the last axis (Zuhri et al. 2025, arXiv 2504.20966):

        w_ij = ReLU(exp(s_ij) − 1) / (Σ_j |exp(s_ij) − 1| + ε)

    over the visible keys j (a masked key adds to neither sum; its weight is 0), in the authors'
    stable form: numerator and sum multiplied by exp(−m), m the row's largest visible score,
    with ε added to the shifted sum as the authors' code adds it (so the unshifted formula's ε
    is ε·exp(m)). m is floored at 0: when every visible score is < 0 every numerator is 0
    whatever m is, and the floor keeps exp(−m) finite (the authors' m can overflow it, which
    turns the backward NaN). A row with no visible key gets weights 0."""
    if visible is not None:
        scores_bhnn = scores_bhnn.masked_fill(~visible, float("-inf"))
    m_bhn1 = scores_bhnn.amax(dim=-1, keepdim=True).clamp_min(0.0)
    shifted_bhnn = torch.exp(scores_bhnn - m_bhn1) - torch.exp(-m_bhn1)  # (e^s − 1)·e^−m
    if visible is not None:  # a masked key: e^−∞ − e^−m, zeroed so it adds to no sum
        shifted_bhnn = shifted_bhnn.masked_fill(~visible, 0.0)
    total_bhn1 = shifted_bhnn.abs().sum(dim=-1, keepdim=True) + eps
    return torch.relu(shifted_bhnn) / total_bhn1


def softpick_attention(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    scale: float,
    eps: float,
) -> torch.Tensor:
    """Σ_j w_ij v_j with w = softpick(scale · q kᵀ) over the keys query i may see; (B, H, N, dv)
    in q's dtype, computed in fp32 (fp64 for fp64 inputs)."""
    ct = accumulate_dtype(q_bhnk)
    scores_bhnn = (q_bhnk.to(ct) @ k_bhnk.to(ct).transpose(-1, -2)) * scale
    visible = visible_keys(q_bhnk.shape[-2], causal, key_padding_mask, q_bhnk.device)
    weights_bhnn = softpick(scores_bhnn, visible, eps)
    return (weights_bhnn @ v_bhnv.to(ct)).to(q_bhnk.dtype)
