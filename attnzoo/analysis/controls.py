"""Control mixers for the collapse study: token mixers whose collapse is known in advance, built
by the same Model as the registered ones so that a study can check its reading of a curve
against them. They model no mixer anyone trains, so they are not in the registry (a study's
default mixers stay the real ones); name one by its import path, e.g.
`ModelConfig(mixer="attnzoo.analysis.controls.FrozenStochastic")`.
"""

from __future__ import annotations

import torch
from torch import nn


class FrozenStochastic(nn.Module):
    """y = P x with P a random row-stochastic matrix drawn once at construction and never trained
    (a buffer): P = softmax(G · logit_std) row by row, G standard normal, (max_len, max_len),
    lower-triangular before the softmax when causal. Every row is a distribution, as softmax
    attention's are, but P does not depend on the input: a stack of them is a product of fixed
    stochastic matrices, which contracts the part of x that is not the same for every token by
    about the second-largest singular value of each P per layer, a singly exponential decay
    (Dong et al.'s doubly exponential rate needs the weights to depend on x).

    A shorter input uses the top-left block of P, each row renormalised over the tokens it sees;
    padded keys (key_padding_mask True) get weight 0 and the rows are renormalised without them.
    `max_len` left at None is the model's, as for token_mlp.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        max_len: int | None = None,
        logit_std: float = 1.0,
    ) -> None:
        super().__init__()
        if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len <= 0:
            raise ValueError(f"FrozenStochastic needs max_len, a positive int, got {max_len!r}")
        if not isinstance(logit_std, (int, float)) or logit_std < 0:
            raise ValueError(f"logit_std must be a number >= 0, got {logit_std!r}")
        self.dim, self.heads, self.causal = dim, heads, causal
        logits_nn = torch.randn(max_len, max_len) * float(logit_std)
        self.register_buffer("logits_nn", logits_nn)

    def weights(self, n: int, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The (B or 1, N, N) row-stochastic matrix applied to an input of n tokens."""
        if n > self.logits_nn.shape[0]:
            raise ValueError(
                f"FrozenStochastic mixes at most max_len={self.logits_nn.shape[0]} tokens, got {n}"
            )
        logits_bnn = self.logits_nn[None, :n, :n]
        if self.causal:
            upper = torch.ones(n, n, dtype=torch.bool, device=logits_bnn.device).triu(1)
            logits_bnn = logits_bnn.masked_fill(upper, float("-inf"))
        if key_padding_mask is not None:
            logits_bnn = logits_bnn.masked_fill(key_padding_mask[:, None, :], float("-inf"))
        # a row with every key masked (a padded query in a causal model) reads nothing: zeros
        return torch.softmax(logits_bnn, dim=-1).nan_to_num(0.0)

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """P for every head, (B, H, N, N): a distribution per row."""
        p_bnn = self.weights(x_bnd.shape[1], key_padding_mask).to(x_bnd.dtype)
        b, n = x_bnd.shape[:2]
        return p_bnn[:, None].expand(b, self.heads, n, n)

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        if x_bnd.ndim != 3 or x_bnd.shape[-1] != self.dim:
            raise ValueError(f"expected input (B, N, {self.dim}), got {tuple(x_bnd.shape)}")
        return self.weights(x_bnd.shape[1], key_padding_mask).to(x_bnd.dtype) @ x_bnd
