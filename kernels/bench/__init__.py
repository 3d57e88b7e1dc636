"""Benchmark of attnzoo's kernels against what a user would write instead, with a verdict per
target: the library behind `scripts/bench_kernels.py` (and the GPU check's kernel stage).

Read in order:

- `cases`: the shapes, the FLOP and byte model, and each op's comparisons (the SDPA and
  `avg_pool1d` formulations), with their inputs;
- `validate`: each op against each formulation at a tiny fp32 shape, outputs and gradients (the
  gated and sigmoid parts: every candidate against a float64 formula);
- `timing`: device and host time per call, each part under its own time limit;
- `verdicts`: the targets judged from the timings, and the rows of the dispatch table;
- `report`: the Markdown tables and the JSON and Markdown files;
- `run`: one run, validation to report, from `Options`.

Only attnzoo.kernels and PyTorch are imported, as everywhere in attnzoo.kernels.
"""

from .cases import (
    BACKENDS,
    PARTS,
    TRAIN,
    Shape,
    attention_shapes,
    cost,
    pool_shapes,
    step_shares,
)
from .run import Options, run
from .timing import Budget, PartTimeout, Result, Timer, time_limit, time_part, wall_timer
from .validate import Check, validate
from .verdicts import Verdict, dispatch_rows, verdicts

__all__ = [
    "BACKENDS",
    "Budget",
    "PARTS",
    "TRAIN",
    "Check",
    "Options",
    "PartTimeout",
    "Result",
    "Shape",
    "Timer",
    "Verdict",
    "attention_shapes",
    "cost",
    "dispatch_rows",
    "pool_shapes",
    "run",
    "step_shares",
    "time_limit",
    "time_part",
    "validate",
    "verdicts",
    "wall_timer",
]
