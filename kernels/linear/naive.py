"""linear_attention in PyTorch: the reference the kernels are tested against, and the op's PyTorch
path. It is written for clarity; the causal form is chunked (chunk × chunk blocks and one F × dv
state per chunk, never one per token). Inputs in half precision are computed in fp32 and cast
back, as the kernels do."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from .._op import accumulate_dtype

LINEAR_CHUNK = 64  # tokens per chunk of the causal reference (the kernels' chunk too)


def _exclusive_cumsum(x_bhc: torch.Tensor) -> torch.Tensor:
    """Σ of the chunks before each chunk along dim 2. Shifted, not `cumsum(x) − x`: the
    gradient of a query with no visible key is ~g / eps, and the subtraction's gradient would
    add and remove it in fp32, leaving its rounding (~1e-7 · g / eps) on real keys."""
    shifted = x_bhc.narrow(2, 0, x_bhc.shape[2] - 1)
    return F.pad(shifted.cumsum(dim=2), (0,) * (2 * (x_bhc.dim() - 3)) + (1, 0))


def linear_attention(
    q_bhnf: torch.Tensor,
    k_bhnf: torch.Tensor,
    v_bhnv: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    eps: float,
    chunk: int = LINEAR_CHUNK,
) -> torch.Tensor:
    """Normalised linear attention (Katharopoulos et al. 2020) on feature-mapped q and k:
    y_i = q_iᵀ S_i / (q_iᵀ z_i + eps), S_i = Σ_j k_j v_jᵀ, z_i = Σ_j k_j over the non-padding
    keys j (causal: j ≤ i). The mask masks keys only: a padding query is computed like any
    other, and a query with no visible key gets 0.

    Non-causal: two einsums for the global state, two for the outputs. Causal: chunks of `chunk`
    tokens, each reading the exclusive prefix sum of the chunk states (F × dv per chunk, never per
    token) plus its own causal-masked chunk × chunk block. Computed in fp32 (fp64 for fp64).
    """
    dtype, ct = q_bhnf.dtype, accumulate_dtype(q_bhnf)
    q_bhnf, k_bhnf, v_bhnv = q_bhnf.to(ct), k_bhnf.to(ct), v_bhnv.to(ct)
    if key_padding_mask is not None:  # a padding key contributes nothing to S or z
        k_bhnf = k_bhnf.masked_fill(key_padding_mask[:, None, :, None], 0.0)
    if not causal:
        s_bhfv = torch.einsum("bhnf,bhnv->bhfv", k_bhnf, v_bhnv)
        num_bhnv = torch.einsum("bhnf,bhfv->bhnv", q_bhnf, s_bhfv)
        den_bhn = torch.einsum("bhnf,bhf->bhn", q_bhnf, k_bhnf.sum(dim=2))
    else:
        n = q_bhnf.shape[2]
        pad = (0, 0, 0, -n % chunk)  # whole chunks; the zero rows past n are cut off below
        q_bhctf, k_bhctf, v_bhctv = (
            rearrange(F.pad(t, pad), "b h (c t) f -> b h c t f", t=chunk)
            for t in (q_bhnf, k_bhnf, v_bhnv)
        )
        # the state of the chunks before each chunk: an exclusive cumulative sum over chunks
        s_bhcfv = _exclusive_cumsum(torch.einsum("bhctf,bhctv->bhcfv", k_bhctf, v_bhctv))
        z_bhcf = _exclusive_cumsum(k_bhctf.sum(dim=3))
        scores_bhctt = (q_bhctf @ k_bhctf.transpose(-1, -2)).tril()
        num_bhctv = torch.einsum("bhctf,bhcfv->bhctv", q_bhctf, s_bhcfv) + scores_bhctt @ v_bhctv
        den_bhct = torch.einsum("bhctf,bhcf->bhct", q_bhctf, z_bhcf) + scores_bhctt.sum(dim=-1)
        num_bhnv = rearrange(num_bhctv, "b h c t v -> b h (c t) v")[:, :, :n]
        den_bhn = rearrange(den_bhct, "b h c t -> b h (c t)")[:, :, :n]
    return (num_bhnv / (den_bhn + eps)[..., None]).to(dtype)
