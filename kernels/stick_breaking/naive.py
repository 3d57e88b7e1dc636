"""stick_breaking_attention in PyTorch: the weights in log space, materialised (B, H, N, N).

Per batch and head, query i breaks a stick of length 1 over the keys before it, nearest first:
key j < i takes the fraction β_ij = σ(z_ij), z_ij = scale · q_i·k_j, of what the keys between
them (j < l < i) left, so

    A_ij = σ(z_ij) ∏_{j<l<i} (1 − σ(z_il)),    rem_i = 1 − Σ_{j<i} A_ij = ∏_{j<i} (1 − σ(z_ij)),
    y_i = Σ_{j<i} A_ij v_j  (+ rem_i v_i with `remainder`)

(Tan et al. 2024, arXiv 2410.17980). The product is a sum of logs: with log(1 − σ(z)) = −softplus(z),

    log A_ij = logσ(z_ij) − Σ_{j<l<i} softplus(z_il),    log rem_i = −Σ_{j<i} softplus(z_ij),

the inner sums a reversed cumulative sum along the keys, taken exclusive of j itself by a shift
(not by subtracting softplus(z_ij) from an inclusive sum, which would cancel where z_ij is large).
Every log is ≤ 0, so no exp overflows and a product of many small factors underflows to 0
instead of a NaN. A key marked in `key_padding_mask` takes no share and breaks nothing: its
factor is 1 (its log 0). The remainder is the stick no key took; the authors' models hand it to
the query's own value v_i (their tests and their models' `sb_remainder`, on by default), which
makes the mixing matrix A + diag(rem) row-stochastic on the real tokens. At a padded position the
remainder is dropped (v_i is a padded key's value, and a padded key gives nothing to any row,
its own included), so that row sums to less than 1; nobody reads its output.

Computed in the dtype it is given (the op passes fp32, or fp64 for fp64 inputs); its backward is
autograd through these operations. O(N²) memory per head: there is no Triton kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def visible_keys(
    n: int, key_padding_mask: torch.Tensor | None, device: torch.device
) -> torch.Tensor:
    """(B or 1, 1, N, N) bool: key j is visible to query i when j < i and j is not padding."""
    earlier_nn = torch.ones(n, n, dtype=torch.bool, device=device).tril(-1)
    if key_padding_mask is None:
        return earlier_nn[None, None]
    return earlier_nn[None, None] & ~key_padding_mask[:, None, None, :]


def stick_breaking_weights(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A (B, H, N, N), 0 where a key is not visible; rem (B, H, N), the stick left over)."""
    z_bhnn = scale * (q_bhnk @ k_bhnk.transpose(-1, -2))
    visible = visible_keys(z_bhnn.shape[-1], key_padding_mask, z_bhnn.device)
    log_keep_bhnn = torch.where(visible, F.logsigmoid(-z_bhnn), 0.0)  # log(1 − β), 0: no break
    # suffix_ij = Σ_{l ≥ j} log_keep_il; the sum over l > j is its neighbour to the right
    suffix_bhnn = log_keep_bhnn.flip(-1).cumsum(-1).flip(-1)
    after_bhnn = F.pad(suffix_bhnn[..., 1:], (0, 1))
    a_bhnn = torch.where(visible, torch.exp(F.logsigmoid(z_bhnn) + after_bhnn), 0.0)
    return a_bhnn, torch.exp(suffix_bhnn[..., 0])


def stick_breaking_attention(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    scale: float,
    remainder: bool = True,
) -> torch.Tensor:
    """y (B, H, N, V) = A v, plus rem_i v_i with `remainder` (not at padded i); in the inputs'
    dtype."""
    a_bhnn, rem_bhn = stick_breaking_weights(q_bhnk, k_bhnk, key_padding_mask, scale)
    out_bhnv = a_bhnn @ v_bhnv
    if remainder:
        if key_padding_mask is not None:  # a padded value is nobody's, its own row's included
            rem_bhn = torch.where(key_padding_mask[:, None, :], 0.0, rem_bhn)
        out_bhnv = out_bhnv + rem_bhn[..., None] * v_bhnv
    return out_bhnv
