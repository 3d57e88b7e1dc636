"""The Forgetting Transformer's attention (FoX, Lin et al. 2025, arXiv 2503.02130): softmax
attention whose scores decay with the forget gates between query and key, on the op
`attnzoo.kernels.scaled_dot_attention` with its `key_bias`; docs/mixers.md gives its formula,
options and where attnzoo departs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from attnzoo import kernels
from attnzoo.mixers.base import _eye_values, _QKVHeads, keys_per_query
from attnzoo.mixers.registry import register


@register("forgetting")
class ForgettingAttention(_QKVHeads):
    """Forgetting attention (FoX): per head, over the keys j ≤ i,

        y_i = Σ_j softmax_j(q_i·k_j / √dk + D_ij) v_j,   D_ij = Σ_{l=j+1..i} log f_l,

    with a forget gate per token and head f_t = σ(w_h·x_t + b_h) (a linear layer D → H with a
    bias, the authors' init: weights N(0, 0.02²), bias 0, so f ≈ 1/2 at init) and q, k, v, the
    output projection as scaled_dot (4 D² + D H + H parameters). With c_i = Σ_{l≤i} log f_l,
    D_ij = c_i − c_j, and c_i is the same for every key of row i, so it cancels in the softmax:
    FoX is causal softmax attention with the per-key logit −c_j, the op's `key_bias`, which the
    kernels add to the scores (docs/kernels.md). The gradient reaches f through that bias.

    Causal only (the paper's decay runs from a key to the later queries): `causal=False` is
    refused. A padding token (key_padding_mask) neither decays nor is seen: its log f is 0, so a
    padded sequence gives its real tokens the outputs of the sequence without the padding.
    `attn_dropout`: dropout on the attention probabilities, as scaled_dot's. FoX's "Pro" extras
    (output gate, QK-norm, key/value shift) are not part of it.
    """

    supports_bidirectional = False  # the decay D_ij is defined for j ≤ i only

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if not causal:
            raise ValueError(
                "mixer 'forgetting' (the Forgetting Transformer) is causal only: its forget "
                "gates decay a key's score towards the later queries; use it with causal=True "
                "(a causal task, a language model), or a mixer that can be bidirectional"
            )
        self._init_qkv(dim, heads, causal, impl, attn_dropout)
        self.forget_gate = nn.Linear(dim, heads, bias=True)
        nn.init.normal_(self.forget_gate.weight, mean=0.0, std=0.02)
        nn.init.zeros_(self.forget_gate.bias)

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """q, k, v and output projections 8 D²; the forget gate x W_f 2 D H; scores q·k and
        weights·v 4 D Nₑ (the gate's log-sigmoid and cumulative sum are elementwise, not
        counted)."""
        return 8 * dim * dim + 2 * dim * heads + 4 * dim * keys_per_query(seq_len, causal)

    def log_forget(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """log f_t = log σ(w_h·x_t + b_h) per head, (B, H, N), in fp32 (as the authors' code);
        0 at a padding token."""
        log_f_bhn = rearrange(F.logsigmoid(self.forget_gate(x_bnd).float()), "b n h -> b h n")
        if key_padding_mask is not None:
            log_f_bhn = log_f_bhn.masked_fill(key_padding_mask[:, None, :], 0.0)
        return log_f_bhn

    def key_bias(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The op's key bias −c_j = −Σ_{l≤j} log f_l, (B, H, N) fp32: with it the score of
        (i, j) is q_i·k_j/√dk + D_ij up to the row's own c_i, which the softmax cancels."""
        return -self.log_forget(x_bnd, key_padding_mask).cumsum(dim=-1)

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """softmax_j(q_i·k_j / √dk + D_ij) per head, (B, H, N, N), 0 above the diagonal."""
        q_bhnk, k_bhnk, _ = self._qkv(x_bnd)
        return kernels.scaled_dot_attention(
            q_bhnk,
            k_bhnk,
            _eye_values(x_bnd, self.heads),
            True,
            key_padding_mask,
            impl="torch",
            key_bias=self.key_bias(x_bnd, key_padding_mask),
        )

    def attend(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk); values from x, scores
        (and forget gates) from `scores_from` (default x)."""
        q_bhnk, k_bhnk, v_bhnk = self._qkv(x_bnd, scores_from)
        s_bnd = x_bnd if scores_from is None else scores_from
        return kernels.scaled_dot_attention(
            q_bhnk,
            k_bhnk,
            v_bhnk,
            True,
            key_padding_mask,
            dropout_p=self.dropout_p(),
            impl=self.impl,
            key_bias=self.key_bias(s_bnd, key_padding_mask),
        )
