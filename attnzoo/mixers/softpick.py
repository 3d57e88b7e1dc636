"""Attention with softpick's rectified softmax: rows that sum to at most 1, on the op
`attnzoo.kernels.softpick.softpick_attention`; docs/mixers.md gives its formula, options and
where attnzoo departs.
"""

from __future__ import annotations

import torch

from attnzoo import kernels
from attnzoo.kernels.softpick.ops import check_eps
from attnzoo.mixers.base import _eye_values, _QKVHeads, keys_per_query
from attnzoo.mixers.registry import register


@register("softpick")
class SoftpickAttention(_QKVHeads):
    """Softpick attention (Zuhri et al. 2025, "Softpick: No Attention Sink, No Massive
    Activations with Rectified Softmax", arXiv 2504.20966): per head

        y_i = Σ_j w_ij v_j,    w_ij = ReLU(exp(s_ij) − 1) / (Σ_j' |exp(s_ij') − 1| + ε),

    s_ij = q_i·k_j / √dk over the keys query i may see, with q, k, v linear in x and an output
    projection (4 D² parameters, as scaled_dot). A key with a negative score takes no weight but
    counts in the denominator, so a row sums to at most 1 and a head can attend to nothing
    without a sink token. The rows are not distributions (`rows_are_distributions = False`: the
    attention entropy reads n/a, the row sums are the measure). `eps`: the ε of the authors'
    code, added to the max-shifted sum (default their 1e-8). Softpick has no Triton kernel in
    attnzoo: `impl="triton"` runs the op's PyTorch path. `attn_dropout` is accepted and unused.
    """

    rows_are_distributions = False
    drops_attention = False

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        eps: float = 1e-8,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.eps = check_eps(eps)
        self._init_qkv(dim, heads, causal, impl, attn_dropout)

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """q, k, v and output projections 8 D²; scores q·k and weights·v 4 D Nₑ (scaled_dot's)."""
        return 8 * dim * dim + 4 * dim * keys_per_query(seq_len, causal)

    def _impl(self) -> str:
        """The op's impl: "triton" (a run-wide choice) runs the PyTorch path, as there is no kernel."""
        return "torch" if self.impl == "triton" else self.impl

    def attend(self, x_bnd, key_padding_mask=None, scores_from=None) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk)."""
        q_bhnk, k_bhnk, v_bhnk = self._qkv(x_bnd, scores_from)
        return kernels.softpick_attention(
            q_bhnk, k_bhnk, v_bhnk, self.causal, key_padding_mask, eps=self.eps, impl=self._impl()
        )

    def attention_probs(self, x_bnd, key_padding_mask=None) -> torch.Tensor:
        """The softpick weights per head, 0 where masked, rows summing to ≤ 1, (B, H, N, N)."""
        q_bhnk, k_bhnk, _ = self._qkv(x_bnd)
        eye_bhnn = _eye_values(x_bnd, self.heads)
        return kernels.softpick_attention(
            q_bhnk, k_bhnk, eye_bhnn, self.causal, key_padding_mask, eps=self.eps, impl="torch"
        )
