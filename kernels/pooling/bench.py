"""pool_mix in the kernel benchmark (kernels/bench), against what a user would write instead:

| part | attnzoo op | what a user would write instead |
|---|---|---|
| pool | `pool_mix(x, window)` (centred) | `avg_pool1d(x, window, count_include_pad=False) - x` |

x is (batch, N, D) with D = heads x head dim of each attention shape (once per batch, N and D),
centred (`avg_pool1d` has no causal window that leaves padding uncounted), plus one large x
(`POOL_LARGE`) for its bandwidth, against a copy of x as the bandwidth reference. Its rates are
GB/s moved: the window sums are additions, not what bounds it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..bench.cases import BACKENDS, Candidate, Part, Shape, randn_leaf, seeded
from ..bench.timing import Result
from ..bench.verdicts import Verdict, judged, lookup, speedup
from . import ops

POOL_LARGE = (8, 8192, 1024)  # (batch, tokens, D): ~134 MB per bf16 tensor, well beyond L2
AVG_POOL = "avg_pool1d - x"


def pool_shapes(shapes: list[Shape], large: bool) -> list[Shape]:
    """x of (batch, N, heads x head_dim) per attention shape, once each, centred: heads 1 and
    head_dim the width D; plus the large x."""
    seen, out = set(), []
    for s in shapes:
        if (s.batch, s.n, s.width) not in seen:
            seen.add((s.batch, s.n, s.width))
            out.append(Shape(f"{s.name.split('-')[0]}-pool", s.batch, 1, s.n, s.width, False))
    if large:
        b, n, d = POOL_LARGE
        out.append(Shape("large-pool", b, 1, n, d, False))
    return out


def cost(s: Shape, window: int = 3) -> dict[str, float]:
    """The window's additions (not what bounds it) and x in, out out (the backward: g in, dx
    out); s.head_dim is the width D here, heads 1."""
    elems = s.batch * s.n * s.head_dim
    fwd = bwd = elems * window
    return {"fwd_flop": fwd, "bwd_flop": bwd, "fwd_bytes": 2 * s.elt * elems}


def avg_pool_mix(x, window: int):
    """`avg_pool1d(x) - x` over the tokens of x (B, N, D), padding not counted: centred pool_mix."""
    pooled = F.avg_pool1d(x.mT, window, 1, window // 2, count_include_pad=False)
    return pooled.mT - x


def copy_of(x):
    """The bandwidth reference: one read and one write of x."""
    return x.clone()


def inputs(s: Shape, device: str, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor]:
    return (randn_leaf(seeded(seed), device, dtype, s.batch, s.n, s.head_dim),)


def candidates(s, impl, window, backends=BACKENDS, device="cuda") -> list[Candidate]:
    return [
        Candidate("attnzoo", lambda x: ops.pool_mix(x, window, impl=impl)),
        Candidate(AVG_POOL, lambda x: avg_pool_mix(x, window)),
        Candidate("copy", copy_of, reference=True),
    ]


def targets(results: list[Result], n_target: int) -> list[Verdict]:
    """fwd+bwd >= 1.0x `avg_pool1d - x`, at every pool shape (the worst decides)."""
    get = lookup(results)
    ratios = []
    for shape in sorted({r.shape for r in results if r.part == "pool"}):
        sp = speedup(get("pool", shape, "attnzoo"), get("pool", shape, AVG_POOL))
        if sp is not None:
            ratios.append((sp, shape))
    worst = min(ratios, default=None)
    return [
        judged(
            f"pool_mix fwd+bwd vs {AVG_POOL}, every pool shape",
            None if worst is None else worst[0],
            1.0,
            "≥ 1.0×",
            "" if worst is None else f" (worst: {worst[1]})",
        )
    ]


PARTS = [
    Part(
        "pool",
        order=40,
        op="pool_mix",
        share_s=6,
        inputs=inputs,
        candidates=candidates,
        cost=lambda s, window: cost(s, window),
        targets=targets,
        auto_triton=lambda: ops.AUTO_TRITON,
        modes=(False,),  # centred only
        shapes=pool_shapes,
        not_auto=("copy",),
        bandwidth=True,
    )
]
