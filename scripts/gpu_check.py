"""Everything a GPU can tell us about attnzoo, in one command, within a time budget.

    python scripts/gpu_check.py                 # on a CUDA machine: 330 s of stages
    python scripts/gpu_check.py --dry-run       # any machine: every stage at tiny sizes on CPU

Stages, most valuable first, each a subprocess with its share of the budget (`--budget`, what one
stage leaves unused goes to the ones after it), so that a hang or a crash in one loses only that
one and the whole check ends inside the budget:

1. env: GPU name and compute capability, driver, CUDA, Python, torch and triton versions;
2. bench-kernels: `scripts/bench_kernels.py` at the training shape and N = 1k/4k, with its
   verdicts and, per op and shape, which path won (the Triton kernel or the fastest PyTorch
   formulation) and the `AUTO_TRITON` value that would follow in the op's
   `kernels/<family>/ops.py`;
3. cuda-tests: a curated part of the `cuda` test tier (every op, forward and backward);
4. bench-train: `scripts/bench_train.py` on nanoGPT's GPU Shakespeare recipe cut to 300 steps,
   attnzoo's attention and the plain GPT first, one subprocess per model and mode;
5. default-job: `python -m attnzoo.train` end to end on cuda.

The report folder (`--out`) holds `<date>-<gpu>.md` (tables, verdicts, what failed with its
error), `<date>-<gpu>.json` and `<date>-<gpu>-logs.tar.gz` (every stage's output), rewritten the
moment each stage ends, so a check that is killed keeps what the stages before it found. Exit
status: 0 when every stage passed, 1 when one failed or ran out of time, 2 without a GPU (unless
--dry-run) or on a bad option, 128 + the signal when SIGTERM or SIGINT stopped it.

`--dry-run` runs the same stages on CPU at tiny sizes (the Triton kernels in the interpreter, a
synthetic corpus unless --data-dir holds Tiny Shakespeare, bench_kernels --smoke) to prove the
script itself works.

The stages and the report are `attnzoo.bench.gpu_check` and `attnzoo.bench.gpu_report`; this
script is their command line.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from attnzoo.bench.gpu_check import BUDGET, SHARES, run_check

ROOT = Path(__file__).resolve().parents[1]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--dry-run", action="store_true", help="every stage at tiny sizes on CPU")
    add("--out", type=Path, default=None, help="report folder (default results/gpu)")
    add("--data-dir", type=Path, default=None, help="holds tinyshakespeare/")
    add("--budget", type=float, default=BUDGET, help=f"seconds for all stages (default {BUDGET})")
    add(
        "--setup-s",
        type=float,
        default=None,
        help="seconds an installation took before the check (reported with the stages)",
    )
    add("--only", nargs="+", choices=list(SHARES), default=list(SHARES), help="stages to run")
    return parser


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if not args.budget > 0:
        cli.error(f"--budget must be a positive number of seconds, got {args.budget}")
    if args.setup_s is not None and not args.setup_s >= 0:
        cli.error(f"--setup-s must be seconds >= 0, got {args.setup_s}")

    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print(
            "gpu_check: no CUDA GPU here (torch.cuda.is_available() is False). Run it on a "
            "machine with one, or use --dry-run to check the script on CPU.",
            file=sys.stderr,
        )
        return 2
    out = args.out or (
        Path(tempfile.mkdtemp(prefix="gpu_check-")) if args.dry_run else ROOT / "results" / "gpu"
    )
    data = args.data_dir or Path(
        os.environ.get("ATTNZOO_DATA_DIR") or (ROOT.parent / "shared" / "data")
    )
    return run_check(ROOT, out, args.dry_run, data, args.budget, args.only, args.setup_s)


if __name__ == "__main__":
    sys.exit(main())
