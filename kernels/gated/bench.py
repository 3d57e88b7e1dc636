"""gated_linear_attention in the kernel benchmark (kernels/bench), against what a user would write
instead:

| part | attnzoo op | what a user would write instead |
|---|---|---|
| gated | `gated_linear_attention(q, k, v, g)`, g (B, H, N): a log decay per head (RetNet, Mamba-2) | its PyTorch path (`impl="torch"`, chunked); flash-linear-attention's `chunk_simple_gla` where `fla-core` is importable |
| gated_key | `gated_linear_attention(q, k, v, g)`, g (B, H, N, K): a log decay per key dimension (GLA) | its PyTorch path (`impl="torch"`, chunked); flash-linear-attention's `chunk_gla` where `fla-core` is importable |

q, k, v and the log decay g are laid out (batch, N, heads, ·) as a projection leaves them, g drawn
as the mixers' gates give it (`naive.sample_log_decay`: about (-2.5, 0)) and kept in fp32, as the
op computes it; every candidate runs at the op's default scale 1/sqrt(K), fla-core's included.
The recurrence is causal, so both parts are timed at the causal shapes only. Every candidate,
the attnzoo op included, is validated against the recurrence one token at a time in float64.
fla-core's rows are timed for the results table, with no goal, and impl="auto" would not run
them. Both parts measure the one op: its AUTO_TRITON follows True only where the kernel won for
both decay forms. There is no FLOP model of the recurrence: the rows carry no rate.
"""

from __future__ import annotations

import math

import torch

from ..bench.cases import (
    BACKENDS,
    TORCH_PATH,
    Candidate,
    Part,
    Shape,
    fla_function,
    fla_here,
    heads_first,
    randn_leaf,
    seeded,
    skipped,
)
from ..bench.timing import Result
from ..bench.verdicts import Verdict, judged, lookup, speedup
from . import naive, ops

FLA_SIMPLE_GLA = "fla chunk_simple_gla"  # a log decay per head (gated)
FLA_GLA = "fla chunk_gla"  # a log decay per key dimension (gated_key)


def fla_gated(per_key: bool):
    """flash-linear-attention's chunked gated linear attention on (B, N, H, ...) tensors, or None
    and why it is not there: `chunk_gla` for a log decay per key dimension, g (B, N, H, K), and
    `chunk_simple_gla` for one per head, g (B, N, H). It runs at the scale it is given and
    returns (o (B, N, H, V), final state); the output comes back as the op's (B, H, N, V)."""
    if per_key:
        chunk, keywords, why = fla_function("fla.ops.gla", "chunk_gla")
    else:
        chunk, keywords, why = fla_function("fla.ops.simple_gla", "chunk_simple_gla")
    if chunk is None:
        return None, why

    def run(q_bnhk, k_bnhk, v_bnhv, g, scale: float):
        return heads_first(chunk(q_bnhk, k_bnhk, v_bnhv, g, scale=scale, **keywords)[0])

    return run, ""


def gated_in_torch_layout(q_bnhk, k_bnhk, v_bnhv, g, scale: float, impl: str = "torch"):
    """attnzoo's op on (B, N, H, ...) inputs (the log decay g (B, N, H) or (B, N, H, K)), read as
    (B, H, N, ...) views; impl "torch" is the path impl="auto" takes where the kernel is not
    chosen."""
    qkvg = (heads_first(q_bnhk), heads_first(k_bnhk), heads_first(v_bnhv), heads_first(g))
    return ops.gated_linear_attention(*qkvg, scale=scale, impl=impl)


def gated_truth(q_bnhk, k_bnhk, v_bnhv, g, scale: float):
    """The recurrence one token at a time in float64 (`naive.recurrent`): the validation's truth
    for the gated parts."""
    qkvg = (heads_first(t).double() for t in (q_bnhk, k_bnhk, v_bnhv, g))
    return naive.recurrent(*qkvg, scale)[0]


def _inputs(per_key: bool):
    def inputs(s: Shape, device: str, dtype: torch.dtype, seed: int = 0):
        """q, k, v (B, N, H, K) and the log decay g, fp32, (B, N, H) or (B, N, H, K)."""
        gen = seeded(seed)
        b, h, n, d = s.batch, s.heads, s.n, s.head_dim
        size = (b, n, h, d) if per_key else (b, n, h)
        g = naive.sample_log_decay(*size, generator=gen)  # fp32, as the op computes it
        g = g.to(device=device).requires_grad_(True)
        q, k, v = (randn_leaf(gen, device, dtype, b, n, h, d) for _ in range(3))
        return q, k, v, g

    return inputs


def _candidates(per_key: bool):
    def candidates(s, impl, window, backends=BACKENDS, device="cuda") -> list[Candidate]:
        scale = 1.0 / math.sqrt(s.head_dim)  # the op's default, given to every candidate
        ours = Candidate(
            "attnzoo", lambda q, k, v, g: gated_in_torch_layout(q, k, v, g, scale, impl)
        )
        torch_path = Candidate(
            TORCH_PATH, lambda q, k, v, g: gated_in_torch_layout(q, k, v, g, scale)
        )
        fla, why = fla_here(*fla_gated(per_key), device, backends)
        run = (lambda q, k, v, g: fla(q, k, v, g, scale)) if fla else skipped
        return [ours, torch_path, Candidate(FLA_GLA if per_key else FLA_SIMPLE_GLA, run, skip=why)]

    return candidates


def truth(s: Shape):
    scale = 1.0 / math.sqrt(s.head_dim)
    return "float64 recurrence", lambda q, k, v, g: gated_truth(q, k, v, g, scale)


def _targets(name: str, decay: str):
    def targets(results: list[Result], n_target: int) -> list[Verdict]:
        """fwd+bwd >= 1.0x its PyTorch path at the training shape: the kernel walks one (batch,
        head) per program, so the training shape's many sequences are where it should win."""
        get = lookup(results)
        return [
            judged(
                f"{name} fwd+bwd vs its PyTorch path (log decay {decay}), train",
                speedup(get(name, "train", "attnzoo"), get(name, "train", TORCH_PATH)),
                1.0,
                "≥ 1.0×",
            )
        ]

    return targets


PARTS = [
    Part(
        name,
        order=order,
        op="gated_linear_attention",
        share_s=14,
        inputs=_inputs(per_key),
        candidates=_candidates(per_key),
        truth=truth,
        targets=_targets(name, decay),
        auto_triton=lambda: ops.AUTO_TRITON,
        modes=(True,),  # the recurrence runs forwards in time
        not_auto=(fla_name,),
    )
    for name, order, per_key, decay, fla_name in (
        ("gated", 70, False, "per head", FLA_SIMPLE_GLA),
        ("gated_key", 80, True, "per key dimension", FLA_GLA),
    )
]
