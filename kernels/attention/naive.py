"""The attention ops in PyTorch: the references the kernels are tested against, and the ops'
PyTorch path where SDPA does not take the call (a sink, a key bias, sigmoid attention,
impl="torch").

They are written for clarity: the full score matrix is materialised. Inputs in half precision
are computed in float32 and cast back, which is what the kernels do too (fp32 accumulation).
"""

from __future__ import annotations

import torch

from .._op import accumulate_dtype


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
    key_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(q kᵀ · scale + key_bias) v; `window` = (left, right) as in `allowed_keys`; `sink`
    as in `attention_from_scores`; `key_bias` (B, H, N): one logit added to every score of key j
    (in every row), e.g. the Forgetting Transformer's −Σ_{l≤j} log f_l."""
    ct = accumulate_dtype(q_bhnk)
    scores_bhnn = (q_bhnk.to(ct) @ k_bhnk.to(ct).transpose(-1, -2)) * scale
    if key_bias is not None:
        scores_bhnn = scores_bhnn + key_bias.to(ct)[..., None, :]
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
    ct = accumulate_dtype(x_bnd)
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
    ct = accumulate_dtype(p_bhnk)
    pc_bhnk = p_bhnk.to(ct)
    q_bhnk = pc_bhnk @ m_hkk.to(ct)[None]
    scores_bhnn = (q_bhnk @ pc_bhnk.transpose(-1, -2)) * scale
    out = attention_from_scores(
        scores_bhnn, pc_bhnk, causal, key_padding_mask, dropout_p, keep_bhnn, sink=sink
    )
    return out.to(p_bhnk.dtype)


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
    ct = accumulate_dtype(q_bhnk)
    scores_bhnn = (q_bhnk.to(ct) @ k_bhnk.to(ct).transpose(-1, -2)) * scale + bias
    weights_bhnn = torch.sigmoid(scores_bhnn)
    allowed = allowed_keys(q_bhnk.shape[-2], causal, key_padding_mask, q_bhnk.device)
    if allowed is not None:
        weights_bhnn = weights_bhnn.masked_fill(~allowed, 0.0)
    return (weights_bhnn @ v_bhnv.to(ct)).to(q_bhnk.dtype)
