"""The path decomposition of Dong, Cordonnier & Loukas (2021): a model restricted to paths.

With the attention weights frozen at the values the full network computes, a block
`x -> x + mixer(x)` is linear in x, and a depth-L network with H heads per block is the sum of
(1 + H)^L paths: at every block a path goes either through the skip branch or through one head
(that head's contribution through the output projection). A path of length k goes through k heads.
The study (scripts/path_length.py) asks how well a trained model does on paths of length k only.

Exact for blocks made of a skip and a mixer (model.mlp=false, model.norm=none), which is what this
module accepts; an MLP or a norm in the block is non-linear in the path's input, so the sum over
paths would no longer be the network.
"""

from __future__ import annotations

import itertools
import math
import random

import torch

from attnzoo.model import Model

# A path: for each block it routes through a head, the (block index, head index) pair, in order.
Path = tuple[tuple[int, int], ...]


def check_decomposable(model: Model) -> None:
    """ValueError unless every block is skip + mixer with no norm and no MLP, and the mixer
    gives its heads' outputs."""
    c, residual = model.config, model.residual.kind
    if residual != "add" or c.mlp or c.norm != "none":
        raise ValueError(
            "the path decomposition needs blocks x + mixer(x): model.residual=add, "
            f"model.mlp=false, model.norm=none; got residual={residual!r}, mlp={c.mlp}, "
            f"norm={c.norm!r}"
        )
    mixer = model.blocks[0].mixer
    if not hasattr(mixer, "head_outputs"):
        raise ValueError(
            f"the path decomposition is not available for mixer {type(mixer).__name__}: it has "
            "no head_outputs (a mixer not linear in its input once its weights are frozen)"
        )


def num_heads(model: Model) -> int:
    """Heads per block as the decomposition counts them (1 for pooling and identity)."""
    return int(model.blocks[0].mixer.heads)


def all_paths(depth: int, heads: int) -> list[Path]:
    """Every one of the (1 + heads)^depth paths, shortest first."""
    paths: list[Path] = []
    for k in range(depth + 1):
        for layers in itertools.combinations(range(depth), k):
            for hs in itertools.product(range(heads), repeat=k):
                paths.append(tuple(zip(layers, hs, strict=True)))
    return paths


def num_paths(depth: int, heads: int, k: int) -> int:
    """How many paths go through exactly k heads: C(L, k) · H^k."""
    return math.comb(depth, k) * heads**k


def path_shares(depth: int, heads: int) -> list[float]:
    """Share of the (1 + H)^L paths of a depth-L, H-head network that go through k attention
    heads, k = 0..L: C(L, k)·H^k / (1 + H)^L (the paths of this module)."""
    total = (1 + heads) ** depth
    return [num_paths(depth, heads, k) / total for k in range(depth + 1)]


def mean_path_length(depth: int, heads: int) -> float:
    """L·H / (1 + H): the mean number of heads on a path (a binomial's mean)."""
    return depth * heads / (1 + heads)


def sample_paths(depth: int, heads: int, k: int, n_paths: int, seed: int = 0) -> list[Path]:
    """`n_paths` paths of length k, each with k blocks drawn at random and one random head in each.

    Where there are no more than `n_paths` paths of length k, all of them are returned, each once
    (so k = 0 gives the one skip-only path).
    """
    if not 0 <= k <= depth:
        raise ValueError(f"path length k={k} must be in 0..depth={depth}")
    if n_paths < 1:
        raise ValueError(f"n_paths must be a positive int, got {n_paths!r}")
    if num_paths(depth, heads, k) <= n_paths:
        return [p for p in all_paths(depth, heads) if len(p) == k]
    rng = random.Random(seed)
    paths = []
    for _ in range(n_paths):
        layers = sorted(rng.sample(range(depth), k))
        paths.append(tuple((layer, rng.randrange(heads)) for layer in layers))
    return paths


@torch.no_grad()
def path_logits(
    model: Model,
    inputs: torch.Tensor,
    paths: list[Path],
    key_padding_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The model's logits with its last hidden state replaced by the sum of `paths`.

    Each path starts from the embedding output; at a block on the path it takes one head's
    contribution (attention weights from the full network's input to that block), elsewhere it
    passes through the skip branch. The summed hidden state then goes through the final norm and
    the task head as in `Model.forward`. Summing all paths gives the model's own logits.
    """
    check_decomposable(model)
    was_training = model.training
    model.eval()
    try:
        _, hidden = model(inputs, key_padding_mask, return_hidden=True)
        total_bnd = torch.zeros_like(hidden[-1])
        for path in paths:
            x_bnd = hidden[0]
            for layer, head in path:
                block = model.blocks[layer]
                heads_bhnd = block.mixer.head_outputs(
                    x_bnd, key_padding_mask, scores_from=hidden[layer]
                )
                x_bnd = block.scale1(heads_bhnd[:, head])
            total_bnd = total_bnd + x_bnd
        return readout(model, total_bnd, key_padding_mask)
    finally:
        model.train(was_training)


def readout(
    model: Model, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The part of `Model.forward` after the blocks: final norm and task head."""
    x_bnd = model.norm(x_bnd)
    if model.head_kind == "classify":
        if key_padding_mask is None:
            return model.head(x_bnd.mean(dim=1))
        keep_bn1 = (~key_padding_mask)[..., None].to(x_bnd.dtype)
        return model.head((x_bnd * keep_bn1).sum(1) / keep_bn1.sum(1).clamp_min(1.0))
    return model.head(x_bnd)
