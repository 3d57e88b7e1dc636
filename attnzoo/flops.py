"""Analytic training FLOPs per token of an attnzoo model, for compute-matched comparisons.

Convention (the one of Kaplan et al. 2020 and the PaLM appendix, spelled out):

- Only matrix multiplications count: a multiply-add is 2 FLOPs, so `x @ W` with `W` of shape
  (a, b) costs `2 a b` per token. Norms, softmax, GELU, residual adds, pooling's window sums and
  the optimizer are left out (they are O(D) per token against O(D²) and O(N D) for the matmuls).
- Backward = 2 × forward, for every matmul (one product for the gradient of each operand), so a
  training step costs 3 × forward. Activation recomputation (a flash kernel's backward recomputes
  the scores) is not counted: the figure is the model's work, not one implementation's.
- The token-embedding lookup is excluded (a gather, no matmul); a linear input embedding
  (`in_features`) and the output head are counted only when asked for (`in_features`,
  `head_out`), since they are the same for every mixer at a given width.
- Attention over a context of N tokens: each query meets `N` keys, or `(N + 1) / 2` on average
  when `causal` (the half a causal kernel computes; a dense implementation that masks a full
  N × N score matrix does the non-causal amount, which is what `FlopCounterMode` reports for the
  PyTorch reference path).

Each mixer class gives its own term as `flops_per_token(dim, heads, seq_len, causal, **options)`
(attnzoo.mixers); a mixer without that method has no FLOP count (`train.max_flops` refuses it,
`compute/flops` is null). The package's mixers, per token and per block, forward, with
D = width, H = heads, dk = D / H, Nₑ = `keys_per_query(N, causal)` = N or (N + 1) / 2:

    scaled_dot   q, k, v, out projections  8 D²       scores q·k, weights·v   4 D Nₑ
    quadratic    v, out projections        4 D²       x U⁽ʰ⁾ per head       2 H D²
                 scores (x U)·x            2 H D Nₑ   weights·v              2 D Nₑ
    metric       p, out projections        4 D²       p M⁽ʰ⁾ per head       2 D dk
                 scores (p M)·p            2 D Nₑ     weights·p              2 D Nₑ
    pooling      0 (window means are additions)
    identity     0
    MLP          4 D h, with h = round(D · mlp_ratio) hidden units (0 when the MLP is off)

    forward per token  = depth · (mixer + MLP) [+ 2 in_features D] [+ 2 D head_out]
    training per token = 3 · forward per token

Parameters of the blocks are `params` and the "6 · params" rule of thumb is this formula's MLP and
projection part (2 FLOPs × params forward, × 3 for training) without the N-dependent attention
terms. tests/test_flops.py checks the formula by hand and against `torch.utils.flop_counter`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# The convention's Nₑ, which the mixers' own terms use too (they sit below this module).
from attnzoo.mixers.base import keys_per_query as keys_per_query
from attnzoo.mixers.registry import mixer_class


def flops_formula(mixer: Any) -> Callable[..., float] | None:
    """The mixer class's `flops_per_token`, or None for a mixer without one. `mixer`: a
    registered name, an import path or a class (attnzoo.mixers.mixer_class); ValueError for a
    mixer that names no class."""
    return getattr(mixer_class(mixer), "flops_per_token", None)


def mixer_flops_per_token(
    mixer: Any,
    dim: int,
    heads: int,
    seq_len: int,
    causal: bool = False,
    **options: Any,
) -> float:
    """Forward matmul FLOPs per token of one mixer, from its class's `flops_per_token` (see the
    module docstring for the terms); `options` are the mixer's own (e.g. a pooling window)."""
    try:
        formula = flops_formula(mixer)
    except ValueError as err:
        raise ValueError(f"no FLOP formula for mixer {mixer!r}: {err}") from err
    if formula is None:
        raise ValueError(
            f"no FLOP formula for mixer {mixer!r}: its class has no flops_per_token method"
        )
    if dim % heads:
        raise ValueError(f"dim={dim} must be divisible by heads={heads}")
    return float(formula(dim=dim, heads=heads, seq_len=seq_len, causal=causal, **options))


def mlp_flops_per_token(dim: int, mlp_ratio: float = 4.0, mlp: bool = True) -> float:
    """Forward FLOPs per token of the MLP: two matmuls D -> h -> D, h = round(D · ratio)."""
    return 4.0 * dim * int(round(dim * mlp_ratio)) if mlp else 0.0


def forward_flops_per_token(
    mixer: Any,
    dim: int,
    depth: int,
    heads: int,
    seq_len: int,
    causal: bool = False,
    mlp: bool = True,
    mlp_ratio: float = 4.0,
    in_features: int | None = None,
    head_out: int | None = None,
    mixer_options: Mapping[str, Any] | None = None,
) -> float:
    """Forward matmul FLOPs per token of the model: `depth` blocks, plus the linear input
    embedding and the output head when their sizes are given (a classification head, applied
    once per sequence, costs 2 D · head_out / N per token: pass `head_out / seq_len` then).
    `mixer_options` are the mixer's own options, as its constructor takes them."""
    block = mixer_flops_per_token(mixer, dim, heads, seq_len, causal, **(mixer_options or {}))
    block += mlp_flops_per_token(dim, mlp_ratio, mlp)
    total = depth * block
    if in_features is not None:
        total += 2.0 * in_features * dim
    if head_out is not None:
        total += 2.0 * dim * head_out
    return total


def train_flops_per_token(
    mixer: Any,
    dim: int,
    depth: int,
    heads: int,
    seq_len: int,
    causal: bool = False,
    mlp: bool = True,
    mlp_ratio: float = 4.0,
    in_features: int | None = None,
    head_out: int | None = None,
    mixer_options: Mapping[str, Any] | None = None,
) -> float:
    """Forward + backward FLOPs per token: 3 × `forward_flops_per_token` (backward = 2 × forward)."""
    return 3.0 * forward_flops_per_token(
        mixer,
        dim,
        depth,
        heads,
        seq_len,
        causal,
        mlp,
        mlp_ratio,
        in_features,
        head_out,
        mixer_options,
    )
