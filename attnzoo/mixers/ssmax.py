"""Scalable-Softmax attention (SSMax, Nakanishi 2025, arXiv 2501.19399): softmax attention whose
scores are multiplied by s_h · log n, n the number of keys a query sees, so attention does not
fade as the context grows; on the op `attnzoo.kernels.scaled_dot_attention` unchanged (the
factor scales the queries). docs/mixers.md gives its formula, options and where attnzoo departs.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnzoo import kernels
from attnzoo.mixers.base import _eye_values, _QKVHeads, keys_per_query
from attnzoo.mixers.registry import register

# s_h at init: s · log n = 1 at n = 1024, the paper's pretraining context, where SSMax is then
# the softmax (docs/mixers.md says why this value and what the paper gives).
S_INIT = 1.0 / math.log(1024)


def keys_seen(
    n: int,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """n_i, the keys query i sees, (B or 1, N), in `dtype`: i + 1 when causal, N when not,
    counting only the keys that are not padding; at least 1 (a row that sees no key gets
    log 1 = 0, and the op gives it a zero output anyway)."""
    if key_padding_mask is None:
        real_1n = torch.ones(1, n, device=device, dtype=dtype)
    else:
        real_1n = (~key_padding_mask).to(dtype)
    counts = real_1n.cumsum(-1) if causal else real_1n.sum(-1, keepdim=True).expand_as(real_1n)
    return counts.clamp_min(1.0)


@register("ssmax")
class ScalableSoftmaxAttention(_QKVHeads):
    """Scalable-Softmax attention (SSMax): per head

        y_i = Σ_j softmax_j(s_h · log n_i · q_i·k_j / √dk) v_j

    with n_i the number of keys query i sees (causal: i + 1; bidirectional: the sequence
    length; padding keys not counted), s_h a learned scalar per head (init `s_init`) and q, k,
    v and the output projection as scaled_dot (4 D² + H parameters). A factor per row of the
    scores is a factor on q_i, so the queries are scaled and the scaled-dot op runs unchanged
    (its kernels included). `attn_dropout`: dropout on the attention probabilities.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        s_init: float = S_INIT,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if isinstance(s_init, bool) or not isinstance(s_init, (int, float)):
            raise ValueError(f"s_init must be a finite number, got {s_init!r}")
        if not math.isfinite(s_init):
            raise ValueError(f"s_init must be a finite number, got {s_init!r}")
        self._init_qkv(dim, heads, causal, impl, attn_dropout)
        self.s = nn.Parameter(torch.full((heads,), float(s_init)))

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """q, k, v and output projections 8 D²; scores q·k and weights·v 4 D Nₑ (scaled_dot's;
        the factor s_h log n_i on q is elementwise, not counted)."""
        return 8 * dim * dim + 4 * dim * keys_per_query(seq_len, causal)

    def score_factor(
        self, n: int, key_padding_mask: torch.Tensor | None, device: torch.device
    ) -> torch.Tensor:
        """s_h · log n_i, (B or 1, H, N, 1): what multiplies row i's scores (in s's dtype, at
        least fp32)."""
        dtype = torch.promote_types(self.s.dtype, torch.float32)
        log_n = keys_seen(n, self.causal, key_padding_mask, device, dtype).log()
        return (self.s[None, :, None] * log_n[:, None, :])[..., None]

    def _scaled_qkv(self, x_bnd, key_padding_mask=None, scores_from=None):
        q_bhnk, k_bhnk, v_bhnk = self._qkv(x_bnd, scores_from)
        factor = self.score_factor(x_bnd.shape[1], key_padding_mask, x_bnd.device)
        return q_bhnk * factor.to(q_bhnk.dtype), k_bhnk, v_bhnk

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """softmax_j(s_h log n_i · q_i·k_j / √dk) per head, (B, H, N, N)."""
        q_bhnk, k_bhnk, _ = self._scaled_qkv(x_bnd, key_padding_mask)
        return kernels.scaled_dot_attention(
            q_bhnk,
            k_bhnk,
            _eye_values(x_bnd, self.heads),
            self.causal,
            key_padding_mask,
            impl="torch",
        )

    def attend(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk); values from x, scores
        from `scores_from` (default x)."""
        q_bhnk, k_bhnk, v_bhnk = self._scaled_qkv(x_bnd, key_padding_mask, scores_from)
        return kernels.scaled_dot_attention(
            q_bhnk,
            k_bhnk,
            v_bhnk,
            self.causal,
            key_padding_mask,
            dropout_p=self.dropout_p(),
            impl=self.impl,
        )
