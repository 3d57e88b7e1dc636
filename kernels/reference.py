"""PyTorch reference implementations of every op.

These are the oracles the Triton kernels are tested against, and the path taken on CPU. They are
written for clarity: the full score matrix is materialised. Inputs in half precision are computed
in float32 and cast back, which is what the kernels do too (fp32 accumulation).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange


def allowed_keys(
    n: int,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    device: torch.device,
    window: tuple[int, int] | None = None,
) -> torch.Tensor | None:
    """Boolean (B or 1, 1, N, N) matrix of which key each query may attend to, or None for all.

    With `window` = (left, right), query i sees key j only when i - left <= j <= i + right
    (and, if causal, j <= i too)."""
    allowed_11nn = None
    if causal:
        allowed_11nn = torch.ones(n, n, dtype=torch.bool, device=device).tril()[None, None]
    if window is not None:
        left, right = window
        query_n1 = torch.arange(n, device=device)[:, None]
        key_1n = torch.arange(n, device=device)[None, :]
        in_window_11nn = ((key_1n >= query_n1 - left) & (key_1n <= query_n1 + right))[None, None]
        allowed_11nn = in_window_11nn if allowed_11nn is None else allowed_11nn & in_window_11nn
    if key_padding_mask is not None:
        keep_b11n = ~key_padding_mask[:, None, None, :]
        allowed_11nn = keep_b11n if allowed_11nn is None else allowed_11nn & keep_b11n
    return allowed_11nn


def attention_from_scores(
    scores_bhnn: torch.Tensor,
    v_bhnv: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    dropout_p: float = 0.0,
    keep_bhnn: torch.Tensor | None = None,
    window: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Masked softmax over keys, dropout on the probabilities, then the weighted sum of values.

    A query whose every key is masked gets a zero output (not NaN): masked scores are set to the
    most negative finite number, which keeps the softmax finite, and the probabilities are then
    multiplied by the mask so such a row sums to zero.

    Dropout follows `scaled_dot_product_attention`'s `dropout_p`: each probability is kept with
    probability 1 - p and the kept ones are scaled by 1/(1 - p). `keep_bhnn` (bool, broadcastable
    to the scores) gives the keep mask explicitly, e.g. the one a Triton kernel drew; without it
    the mask is drawn from torch's generator.
    """
    n = scores_bhnn.shape[-1]
    allowed = allowed_keys(n, causal, key_padding_mask, scores_bhnn.device, window)
    if allowed is not None:
        scores_bhnn = scores_bhnn.masked_fill(~allowed, torch.finfo(scores_bhnn.dtype).min)
    probs_bhnn = scores_bhnn.softmax(dim=-1)
    if allowed is not None:
        probs_bhnn = probs_bhnn * allowed
    if dropout_p > 0.0:
        if keep_bhnn is None:
            keep_bhnn = torch.rand_like(probs_bhnn) >= dropout_p
        probs_bhnn = probs_bhnn * keep_bhnn / (1.0 - dropout_p)
    return probs_bhnn @ v_bhnv


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def scaled_dot_attention(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
    keep_bhnn: torch.Tensor | None = None,
    window: tuple[int, int] | None = None,
) -> torch.Tensor:
    """softmax(q kᵀ · scale) v; `window` = (left, right) as in `allowed_keys`."""
    ct = _compute_dtype(q_bhnk)
    scores_bhnn = (q_bhnk.to(ct) @ k_bhnk.to(ct).transpose(-1, -2)) * scale
    out = attention_from_scores(
        scores_bhnn, v_bhnv.to(ct), causal, key_padding_mask, dropout_p, keep_bhnn, window
    )
    return out.to(q_bhnk.dtype)


def quadratic_attention(
    x_bnd: torch.Tensor,
    u_hdd: torch.Tensor,
    v_bhnv: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
    keep_bhnn: torch.Tensor | None = None,
) -> torch.Tensor:
    """scores[b,h,i,j] = x[b,i] · U[h] · x[b,j]: attention with q = x U[h] and k = x for every head."""
    ct = _compute_dtype(x_bnd)
    x_bnd = x_bnd.to(ct)
    q_bhnd = torch.einsum("bnd,hde->bhne", x_bnd, u_hdd.to(ct))
    scores_bhnn = (q_bhnd @ x_bnd[:, None].transpose(-1, -2)) * scale
    out = attention_from_scores(
        scores_bhnn, v_bhnv.to(ct), causal, key_padding_mask, dropout_p, keep_bhnn
    )
    return out.to(v_bhnv.dtype)


def metric_attention(
    p_bhnk: torch.Tensor,
    m_hkk: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    scale: float,
    dropout_p: float = 0.0,
    keep_bhnn: torch.Tensor | None = None,
) -> torch.Tensor:
    """scores = p[i] · M · p[j]; the values are p itself."""
    ct = _compute_dtype(p_bhnk)
    pc_bhnk = p_bhnk.to(ct)
    q_bhnk = pc_bhnk @ m_hkk.to(ct)[None]
    scores_bhnn = (q_bhnk @ pc_bhnk.transpose(-1, -2)) * scale
    out = attention_from_scores(
        scores_bhnn, pc_bhnk, causal, key_padding_mask, dropout_p, keep_bhnn
    )
    return out.to(p_bhnk.dtype)


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
    ct = _compute_dtype(x_bnd)
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
