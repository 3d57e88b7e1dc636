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


def planted_sink(bos: bool, seq_len: int = 33, batch: int = 32, seed: int = 0):
    """The first-token sink's controls, (model, inputs): one causal scaled-dot block whose first
    token, with `bos`, is a constant BOS embedding whose key every query prefers, as the sinks of
    trained language models do (Gu et al. 2024, "When attention sink emerges in language
    models"): every row puts nearly all its weight on it, a sink any sink measure must find. With
    `bos=False` the same weights see ordinary tokens first, with nothing to prefer: no sink. The
    weights are set, not trained: query head-dimension 0 reads a feature every token carries into
    the mixer (the norm's bias), key head-dimension 0 a feature only BOS has."""
    from attnzoo.model import Model, ModelConfig

    dim, heads, vocab = 16, 2, 11
    config = ModelConfig(
        dim=dim, depth=1, heads=heads, mixer="scaled_dot", causal=True, impl="torch"
    )
    with torch.random.fork_rng():  # the caller's random state is left as it was
        torch.manual_seed(seed)
        model = Model(config, out_features=vocab, max_len=seq_len, vocab_size=vocab, head="token")
        inputs = torch.randint(1, vocab, (batch, seq_len))
    with torch.no_grad():
        model.pos.zero_()
        model.embed.weight[:, :2] = 0.0  # features 0 (BOS) and 1 (every token, by the norm)
        model.embed.weight[0] = 0.0
        model.embed.weight[0, 0] = 10.0  # token 0 is BOS
        block = model.blocks[0]
        block.norm1.bias.zero_()
        block.norm1.bias[1] = 2.0
        qkv = block.mixer.qkv.weight  # (3 dim, dim): the q, k and v rows, heads of dim // heads
        qkv[: 2 * dim] = 0.0
        for h in range(heads):
            qkv[h * (dim // heads), 1] = 3.0  # q_h[0] = 3 x[1]
            qkv[dim + h * (dim // heads), 0] = 3.0  # k_h[0] = 3 x[0]
    if bos:
        inputs[:, 0] = 0
    return model, inputs


def sink_control_readings() -> dict[str, dict[str, float]]:
    """The weight statistics (attnzoo.rank.WEIGHT_STATS) of the planted sink and of its negative,
    read as a study reads its runs: the trainer's record of the probe batch, block 1."""
    from attnzoo.rank import WEIGHT_STATS
    from attnzoo.tasks import Batch
    from attnzoo.train.rank_probe import rank_record

    readings = {}
    for name, bos in (("planted BOS sink (positive)", True), ("no BOS (negative)", False)):
        model, inputs = planted_sink(bos)
        probe = Batch(inputs, torch.zeros(len(inputs), dtype=torch.long))
        record = rank_record(model, probe, measures=["attention_entropy"])
        readings[name] = {s: record[f"attention/{s}/layer_1"] for s in WEIGHT_STATS}
    return readings
