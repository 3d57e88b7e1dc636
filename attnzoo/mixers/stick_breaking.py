"""Stick-breaking attention: causal attention whose weights break a stick, nearest key first, on
the op `attnzoo.kernels.stick_breaking_attention`; docs/mixers.md gives its formula, options and
where attnzoo departs.
"""

from __future__ import annotations

import torch

from attnzoo import kernels
from attnzoo.mixers.base import _eye_values, _QKVHeads
from attnzoo.mixers.registry import register
from attnzoo.mixers.softmax import keys_per_query


@register("stick_breaking")
class StickBreakingAttention(_QKVHeads):
    """Stick-breaking attention (Tan et al. 2024, arXiv 2410.17980): per head, query i breaks a
    stick of length 1 over the keys before it, nearest first,

        A_ij = σ(z_ij) ∏_{j<l<i} (1 − σ(z_il)),   z_ij = q_i·k_j / √dk   (j < i),
        y_i  = Σ_{j<i} A_ij v_j + rem_i v_i,       rem_i = 1 − Σ_{j<i} A_ij,

    with q, k, v linear in x and an output projection (4 D² parameters, as scaled_dot). The order
    is in the weights (a recency bias): the paper uses no positional encoding (`model.pos_emb=
    none`; the model's default is left as set). Causal only: a query's
    stick runs over the keys before it, so `causal=False` is refused (a bidirectional task
    refuses the mixer). `remainder` (default true, as the authors' models): the stick no key took
    goes to the query's own value, so a real token's row of the mixing matrix A + diag(rem) that
    `attention_probs` returns sums to 1; `remainder=false`: y_i = Σ A_ij v_j alone, rows sum to
    at most 1. A padded key takes no share and does not break the stick, and a padded position
    drops its remainder (a padded key gives nothing to any row, its own included), so its row
    sums to less than 1: either way the rows are not all distributions
    (`rows_are_distributions = False`: the attention entropy reads n/a, the row sums are the
    measure). `attn_dropout` is accepted and unused. `impl="triton"` runs the op's PyTorch path:
    there is no Triton kernel of stick-breaking attention in attnzoo.
    """

    rows_are_distributions = False
    drops_attention = False
    supports_bidirectional = False  # causal only: the constructor refuses causal=False

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        remainder: bool = True,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if not causal:
            raise ValueError(
                f"mixer {self.mixer_name!r} cannot be bidirectional (causal=False): each query "
                "breaks its stick over the keys before it, nearest first, and a bidirectional "
                "stick is not the paper's mixer; use it on a causal task (a language model: "
                "mqar, shakespeare_char, shakespeare_bpe), or a mixer that can be bidirectional "
                "(e.g. scaled_dot, sigmoid)"
            )
        if not isinstance(remainder, bool):
            raise ValueError(f"remainder must be a bool, got {remainder!r}")
        self.remainder = remainder
        self._init_qkv(dim, heads, causal, impl, attn_dropout)

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """q, k, v and output projections 8 D²; scores q·k and weights·v 4 D Nₑ (scaled_dot's:
        the (N − 1)/2 earlier keys of a causal row and the query's own value, which takes the
        remainder). The softplus, the cumulative sum and the exps are not counted, as softmax's
        are not."""
        return 8 * dim * dim + 4 * dim * keys_per_query(seq_len, causal)

    def _impl(self) -> str:
        return "torch" if self.impl == "triton" else self.impl

    def attend(self, x_bnd, key_padding_mask=None, scores_from=None) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk)."""
        q_bhnk, k_bhnk, v_bhnk = self._qkv(x_bnd, scores_from)
        return kernels.stick_breaking_attention(
            q_bhnk,
            k_bhnk,
            v_bhnk,
            key_padding_mask,
            remainder=self.remainder,
            impl=self._impl(),
        )

    def attention_probs(self, x_bnd, key_padding_mask=None) -> torch.Tensor:
        """The mixing matrix per head, (B, H, N, N): A_ij below the diagonal, rem_i on it with
        `remainder` (0 without, and at padded i), 0 above it and on padded keys; `attend` is it
        times the values."""
        q_bhnk, k_bhnk, _ = self._qkv(x_bnd)
        eye_bhnn = _eye_values(x_bnd, self.heads)
        return kernels.stick_breaking_attention(
            q_bhnk, k_bhnk, eye_bhnn, key_padding_mask, remainder=self.remainder, impl="torch"
        )
