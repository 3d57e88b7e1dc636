"""delta_rule in the kernel benchmark (kernels/bench), against what a user would write instead:

| part | attnzoo op | what a user would write instead |
|---|---|---|
| delta | `delta_rule(q, k, v, beta)` (DeltaNet), attnzoo's chunked PyTorch path: it has no kernel | flash-linear-attention's `chunk_delta_rule` (`impl="fla"`) where `fla-core` is importable |
| delta_gated | `delta_rule(q, k, v, beta, log_decay)` (Gated DeltaNet), the same path | flash-linear-attention's `chunk_gated_delta_rule` (`impl="fla"`) |

q, k (L2-normalised, as the deltanet mixer gives them), v in (B, H, N, ·), beta = σ(randn) and a
log decay drawn as the gated family's, (B, H, N), both fp32; causal only. attnzoo has no Triton
kernel of the delta rule: its "attnzoo" row is the chunked PyTorch path whatever `impl` says,
timed against fla-core's kernels (through `impl="fla"`, which adds a transpose to (B, N, H, ·)
and back), validated against the recurrence one token at a time in float64, and says nothing
about impl="auto". There is no FLOP model of the delta rule: the rows carry no rate.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..bench.cases import (
    BACKENDS,
    Candidate,
    Part,
    Shape,
    fla_function,
    fla_here,
    randn_leaf,
    seeded,
    skipped,
)
from ..gated.naive import sample_log_decay
from . import naive, ops

FLA_DELTA = "fla chunk_delta_rule"  # delta
FLA_GATED_DELTA = "fla chunk_gated_delta_rule"  # delta_gated


def delta_op(q, k, v, beta, g=None, impl: str = "torch"):
    """attnzoo's op at its default scale 1/sqrt(K): "torch" its chunked PyTorch path (the op's
    only one), "fla" flash-linear-attention's chunked kernels."""
    return ops.delta_rule(q, k, v, beta, g, impl=impl)


def delta_truth(q, k, v, beta, g=None):
    """The delta rule one token at a time in float64 (`naive.recurrent`): the validation's truth
    for the delta parts."""
    q, k, v, beta = q.double(), k.double(), v.double(), beta.double()
    g = None if g is None else g.double()
    return naive.recurrent(q, k, v, beta, g, 1.0 / math.sqrt(q.shape[-1]))[0]


def fla_delta(gated: bool):
    """delta_op through impl="fla" where fla-core's delta rule is importable, or None and why."""
    module, name = (
        ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule")
        if gated
        else ("fla.ops.delta_rule", "chunk_delta_rule")
    )
    found, _, why = fla_function(module, name)
    return (None, why) if found is None else (lambda *t: delta_op(*t, impl="fla"), "")


def _inputs(gated: bool):
    def inputs(s: Shape, device: str, dtype: torch.dtype, seed: int = 0):
        """q, k (unit norm, as the mixer's), v (B, H, N, K), beta and, gated, the log decay."""
        gen = seeded(seed)
        b, h, n, d = s.batch, s.heads, s.n, s.head_dim
        k = F.normalize(torch.randn(b, h, n, d, generator=gen), dim=-1)
        k = k.to(device=device, dtype=dtype).requires_grad_(True)
        beta = torch.sigmoid(torch.randn(b, h, n, generator=gen)).to(device).requires_grad_(True)
        g = sample_log_decay(b, h, n, generator=gen).to(device).requires_grad_(True)
        q = randn_leaf(gen, device, dtype, b, h, n, d)
        v = randn_leaf(gen, device, dtype, b, h, n, d)
        return (q, k, v, beta, *((g,) if gated else ()))

    return inputs


def _candidates(gated: bool):
    def candidates(s, impl, window, backends=BACKENDS, device="cuda") -> list[Candidate]:
        fla, why = fla_here(*fla_delta(gated), device, backends)
        name = FLA_GATED_DELTA if gated else FLA_DELTA
        return [Candidate("attnzoo", delta_op), Candidate(name, fla or skipped, skip=why)]

    return candidates


PARTS = [
    Part(
        name,
        order=order,
        op="delta_rule",
        share_s=10,
        inputs=_inputs(gated),
        candidates=_candidates(gated),
        truth=lambda s: ("float64 recurrence", delta_truth),
        modes=(True,),  # the recurrence runs forwards in time
    )
    for name, order, gated in (("delta", 100, False), ("delta_gated", 110, True))
]
