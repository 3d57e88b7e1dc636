"""Attention without a row normalisation: sigmoid attention on the op
`attnzoo.kernels.sigmoid_attention`; docs/mixers.md gives its formula, options and where attnzoo
departs.
"""

from __future__ import annotations

import math

import torch

from attnzoo import kernels
from attnzoo.mixers.base import _eye_values, _QKVHeads, gate_flops
from attnzoo.mixers.registry import register
from attnzoo.mixers.softmax import keys_per_query

LOG_N = "-log_n"  # the paper's bias: −log N, N the sequence length of the call


@register("sigmoid")
class SigmoidAttention(_QKVHeads):
    """Sigmoid attention (Ramapuram et al. 2024, arXiv 2409.04431): per head

        y_i = Σ_j σ(q_i·k_j / √dk + b) v_j

    over the keys query i may see, with q, k, v linear in x and an output projection (4 D²
    parameters, as scaled_dot). No normalisation: the weights of a row are not a distribution
    (`rows_are_distributions = False`: the attention entropy reads n/a, the row sums are the
    measure). `bias`: a number, or "-log_n" (the paper's b = −log N, N the length of the call,
    which keeps a row's total weight near 1 at init). `gate`: the softmax mixers' output gate
    (`none`, `headwise`, `elementwise`; attnzoo.mixers.base). `attn_dropout` is accepted and
    unused.
    """

    rows_are_distributions = False
    drops_attention = False

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        bias: float | str = LOG_N,
        attn_dropout: float = 0.0,
        gate: str = "none",
    ) -> None:
        super().__init__()
        if bias != LOG_N and (
            isinstance(bias, bool) or not isinstance(bias, (int, float)) or not math.isfinite(bias)
        ):
            raise ValueError(f"bias must be a finite number or {LOG_N!r}, got {bias!r}")
        self.bias = bias
        self._init_qkv(dim, heads, causal, impl, attn_dropout)
        self._init_gate(gate, dim, heads)

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """q, k, v and output projections 8 D²; scores q·k and weights·v 4 D Nₑ (scaled_dot's);
        with `gate`, its projection (`gate_flops`)."""
        gate = gate_flops(dim, heads, options.get("gate", "none"))
        return 8 * dim * dim + 4 * dim * keys_per_query(seq_len, causal) + gate

    def _bias(self, n: int) -> float:
        return -math.log(n) if self.bias == LOG_N else float(self.bias)

    def attend(self, x_bnd, key_padding_mask=None, scores_from=None) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk)."""
        q_bhnk, k_bhnk, v_bhnk = self._qkv(x_bnd, scores_from)
        bias = self._bias(x_bnd.shape[1])
        return kernels.sigmoid_attention(
            q_bhnk, k_bhnk, v_bhnk, self.causal, key_padding_mask, bias=bias, impl=self.impl
        )

    def attention_probs(self, x_bnd, key_padding_mask=None) -> torch.Tensor:
        """The weights σ(q kᵀ / √dk + b) per head, 0 where masked, (B, H, N, N)."""
        q_bhnk, k_bhnk, _ = self._qkv(x_bnd)
        eye_bhnn = _eye_values(x_bnd, self.heads)
        return kernels.sigmoid_attention(
            q_bhnk,
            k_bhnk,
            eye_bhnn,
            self.causal,
            key_padding_mask,
            bias=self._bias(x_bnd.shape[1]),
            impl="torch",
        )
