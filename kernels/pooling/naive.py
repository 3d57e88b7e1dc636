"""pool_mix in PyTorch: the reference the kernels are tested against, and the op's PyTorch path
(`avg_pool1d` with the padding left uncounted). Inputs in half precision are computed in fp32 and
cast back, as the kernels do."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from .._op import accumulate_dtype


def pool_mix(
    x_bnd: torch.Tensor,
    window: int,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
) -> torch.Tensor:
    """Average over a window of real tokens, minus the token itself (PoolFormer's token mixer).

    Centred windows cover `window // 2` tokens on each side; causal windows cover the token and the
    `window - 1` before it. Positions outside the sequence and padding tokens are not counted
    (PoolFormer's `count_include_pad=False`).
    """
    ct = accumulate_dtype(x_bnd)
    x_bdn = rearrange(x_bnd.to(ct), "b n d -> b d n")
    keep_b1n = torch.ones_like(x_bdn[:, :1])
    if key_padding_mask is not None:
        keep_b1n = (~key_padding_mask)[:, None, :].to(ct)
        x_bdn = x_bdn * keep_b1n
    pad = (window - 1, 0) if causal else (window // 2, window // 2)
    # avg_pool1d with zero padding counted, times the window, is the plain windowed sum.
    sums_bdn = F.avg_pool1d(F.pad(x_bdn, pad), window, stride=1) * window
    counts_b1n = F.avg_pool1d(F.pad(keep_b1n, pad), window, stride=1) * window
    mean_bdn = sums_bdn / counts_b1n.round().clamp_min(1.0)
    out_bnd = rearrange(mean_bdn - x_bdn, "b d n -> b n d")
    if key_padding_mask is not None:
        out_bnd = out_bnd.masked_fill(key_padding_mask[..., None], 0.0)
    return out_bnd.to(x_bnd.dtype)
