"""Benchmark of attnzoo's kernels against what a user would write instead, with a verdict per
target and, per op and shape, which path won: the library behind `scripts/bench_kernels.py` (and
the GPU check's kernel stage).

The harness names no op: each family declares its parts in `kernels/<family>/bench.py` (the
inputs, the candidates, a float64 truth, the cost model, the targets) and `cases.parts()` finds
them. Read in order:

- `cases`: the shapes, the `Part` a family declares, and their discovery;
- `validate`: each op against each formulation at a tiny fp32 shape, outputs and gradients (or
  every candidate against the part's float64 truth);
- `timing`: device and host time per call, each part under its own time limit;
- `verdicts`: the targets judged from the timings, and which path won per op and shape;
- `report`: the Markdown tables and the JSON and Markdown files;
- `run`: one run, validation to report, from `Options`.

Only attnzoo.kernels and PyTorch are imported, as everywhere in attnzoo.kernels.
"""

from .cases import (
    BACKENDS,
    TORCH_PATH,
    TRAIN,
    Candidate,
    Part,
    Shape,
    attention_shapes,
    cost,
    part,
    part_names,
    parts,
    step_shares,
)
from .run import Options, run
from .timing import Budget, PartTimeout, Result, Timer, time_limit, time_part, wall_timer
from .validate import Check, validate
from .verdicts import Verdict, auto_rows, path_rows, verdicts

__all__ = [
    "BACKENDS",
    "TORCH_PATH",
    "TRAIN",
    "Budget",
    "Candidate",
    "Check",
    "Options",
    "Part",
    "PartTimeout",
    "Result",
    "Shape",
    "Timer",
    "Verdict",
    "attention_shapes",
    "auto_rows",
    "cost",
    "part",
    "part_names",
    "parts",
    "path_rows",
    "run",
    "step_shares",
    "time_limit",
    "time_part",
    "validate",
    "verdicts",
    "wall_timer",
]
