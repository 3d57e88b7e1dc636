"""The rank-collapse measure of Dong, Cordonnier & Loukas (2021).

For a hidden state H (N tokens × D), res(H) = H − 1 · mean_tokens(H)ᵀ. The logged figure is
‖res(H)‖ / ‖H‖ with the composite norm ‖A‖ = sqrt(‖A‖₁ ‖A‖∞): 1 for a state far from rank one,
0 when every token carries the same vector (complete rank collapse).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn


def composite_norm(a: torch.Tensor) -> torch.Tensor:
    """sqrt(max column abs-sum × max row abs-sum) over the last two dims."""
    abs_ = a.abs()
    col = abs_.sum(dim=-2).amax(dim=-1)
    row = abs_.sum(dim=-1).amax(dim=-1)
    return torch.sqrt(col * row)


def relative_residual(
    h_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """‖H − 1 mean(H)ᵀ‖ / ‖H‖ per sample, (B,); padding tokens (mask True) are left out."""
    if h_bnd.dim() != 3:
        raise ValueError(f"h must have shape (batch, tokens, dim), got {tuple(h_bnd.shape)}")
    if key_padding_mask is None:
        mean_b1d = h_bnd.mean(dim=1, keepdim=True)
        res_bnd = h_bnd - mean_b1d
    else:
        if tuple(key_padding_mask.shape) != tuple(h_bnd.shape[:2]):
            raise ValueError(
                f"key_padding_mask must have shape {tuple(h_bnd.shape[:2])}, "
                f"got {tuple(key_padding_mask.shape)}"
            )
        keep_bn1 = (~key_padding_mask)[..., None].to(h_bnd.dtype)
        h_bnd = h_bnd * keep_bn1
        mean_b1d = h_bnd.sum(dim=1, keepdim=True) / keep_bn1.sum(dim=1, keepdim=True).clamp_min(1)
        res_bnd = (h_bnd - mean_b1d) * keep_bn1
    return composite_norm(res_bnd) / composite_norm(h_bnd).clamp_min(torch.finfo(h_bnd.dtype).tiny)


@dataclass
class RankProfile:
    """Mean and std over the probe batch of the relative residual of each hidden state."""

    mean: list[float]  # depth + 1 entries: the embedding output, then each block's output
    std: list[float]


@torch.no_grad()
def rank_profile(
    model: nn.Module,
    inputs: torch.Tensor,
    key_padding_mask: torch.Tensor | None = None,
    dtype: torch.dtype | None = None,
) -> RankProfile:
    """Run `model(inputs, key_padding_mask, return_hidden=True)` in eval mode and measure every
    hidden state. With `dtype=torch.float64` a float64 copy of the model is used, which sees the
    residual fall far past float32's floor (about 1e-7)."""
    if dtype is not None and dtype != next(model.parameters()).dtype:
        model = copy.deepcopy(model).to(dtype)
        if inputs.is_floating_point():
            inputs = inputs.to(dtype)
    was_training = model.training
    model.eval()
    try:
        _, hidden = model(inputs, key_padding_mask, return_hidden=True)
    finally:
        model.train(was_training)
    # Half-precision states are measured in float32: their sums would lose the small residuals.
    stats = torch.stack(
        [
            relative_residual(h if h.dtype.itemsize >= 4 else h.float(), key_padding_mask)
            for h in hidden
        ]
    )
    mean, std = stats.mean(dim=1), stats.std(dim=1, unbiased=False)
    return RankProfile(mean=mean.tolist(), std=std.tolist())
