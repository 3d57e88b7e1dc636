"""PyTorch reference implementations of every op.

These are the oracles the Triton kernels are tested against, and the path taken on CPU. They are
written for clarity: the full score matrix is materialised (linear attention's causal reference,
chunked, materialises chunk × chunk blocks and one F × dv state per chunk). Inputs in half precision are computed
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
    sink: torch.Tensor | None = None,
) -> torch.Tensor:
    """Masked softmax over keys, dropout on the probabilities, then the weighted sum of values.

    `sink` (heads,): an attention sink, one more logit per head in every row's softmax whose
    value is zero: the softmax's denominator gains exp(sink_h), so a row may put mass nowhere.

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
    if sink is None:
        probs_bhnn = scores_bhnn.softmax(dim=-1)
    else:  # the sink's column joins the softmax, then leaves: its value is zero
        column = sink.to(scores_bhnn.dtype)[None, :, None, None].expand(*scores_bhnn.shape[:-1], 1)
        probs_bhnn = torch.cat([scores_bhnn, column], dim=-1).softmax(dim=-1)[..., :-1]
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
    sink: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(q kᵀ · scale) v; `window` = (left, right) as in `allowed_keys`; `sink` as in
    `attention_from_scores`."""
    ct = _compute_dtype(q_bhnk)
    scores_bhnn = (q_bhnk.to(ct) @ k_bhnk.to(ct).transpose(-1, -2)) * scale
    out = attention_from_scores(
        scores_bhnn, v_bhnv.to(ct), causal, key_padding_mask, dropout_p, keep_bhnn, window, sink
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
    sink: torch.Tensor | None = None,
) -> torch.Tensor:
    """scores[b,h,i,j] = x[b,i] · U[h] · x[b,j]: attention with q = x U[h] and k = x for every head."""
    ct = _compute_dtype(x_bnd)
    x_bnd = x_bnd.to(ct)
    q_bhnd = torch.einsum("bnd,hde->bhne", x_bnd, u_hdd.to(ct))
    scores_bhnn = (q_bhnd @ x_bnd[:, None].transpose(-1, -2)) * scale
    out = attention_from_scores(
        scores_bhnn, v_bhnv.to(ct), causal, key_padding_mask, dropout_p, keep_bhnn, sink=sink
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
    sink: torch.Tensor | None = None,
) -> torch.Tensor:
    """scores = p[i] · M · p[j]; the values are p itself."""
    ct = _compute_dtype(p_bhnk)
    pc_bhnk = p_bhnk.to(ct)
    q_bhnk = pc_bhnk @ m_hkk.to(ct)[None]
    scores_bhnn = (q_bhnk @ pc_bhnk.transpose(-1, -2)) * scale
    out = attention_from_scores(
        scores_bhnn, pc_bhnk, causal, key_padding_mask, dropout_p, keep_bhnn, sink=sink
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


# --------------------------------------------------------------------------------------------
# linear_attention
# --------------------------------------------------------------------------------------------

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
    dtype, ct = q_bhnf.dtype, _compute_dtype(q_bhnf)
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


def sigmoid_attention(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    scale: float,
    bias: float,
) -> torch.Tensor:
    """Σ_j σ(scale · q_i·k_j + bias) v_j over the allowed keys j (Ramapuram et al. 2024): no
    normalisation, so a row's weights need not sum to 1 and a masked pair adds nothing."""
    ct = _compute_dtype(q_bhnk)
    scores_bhnn = (q_bhnk.to(ct) @ k_bhnk.to(ct).transpose(-1, -2)) * scale + bias
    weights_bhnn = torch.sigmoid(scores_bhnn)
    allowed = allowed_keys(q_bhnk.shape[-2], causal, key_padding_mask, q_bhnk.device)
    if allowed is not None:
        weights_bhnn = weights_bhnn.masked_fill(~allowed, 0.0)
    return (weights_bhnn @ v_bhnv.to(ct)).to(q_bhnk.dtype)
