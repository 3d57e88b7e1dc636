"""Everything a GPU can tell us about attnzoo, in one command.

    python scripts/gpu_check.py                 # on a CUDA machine: about 9 minutes
    python scripts/gpu_check.py --dry-run       # any machine: every stage at tiny sizes on CPU

Stages, each a subprocess with its own time limit, so that a hang or a crash in one loses only
that one (what it printed is kept in `<out>/logs/<stage>.log`):

1. env: GPU name and compute capability, driver, CUDA, Python, torch and triton versions;
2. cuda-tests: the `cuda` test tier (`pytest -m cuda`), per test passed, failed or not reached;
3. bench-kernels: `scripts/bench_kernels.py` at its standard shapes, with its verdicts and the
   per-key timings that become the dispatch table of `impl="auto"`;
4. bench-train: `scripts/bench_train.py` on nanoGPT's GPU Shakespeare recipe cut to a few hundred
   steps, every mixer and the plain GPT, eager and compiled, one subprocess per model and mode;
5. default-job: `python -m attnzoo.train` end to end on cuda;
6. dispatch-table: `kernels/dispatch_tables/<major>.<minor>.json` from stage 3's measurements
   (`attnzoo.kernels.dispatch.make_table`), the table `impl="auto"` follows on that GPU.

It writes `<out>/<date>-<gpu>.md` (tables, verdicts, what failed with its error) and
`<out>/<date>-<gpu>.json`, and prints the verdict table last. Exit status: 0 when every stage
passed, 1 when one failed or ran out of time, 2 without a GPU (unless --dry-run).

`--dry-run` runs the same stages on CPU at tiny sizes (the Triton kernels in the interpreter, a
synthetic corpus unless --data-dir holds Tiny Shakespeare, bench_kernels --smoke) to prove the
script itself works; it writes its table into `<out>/dispatch/`, never into kernels/.

The stages and the report are `attnzoo.bench.gpu_check` and `attnzoo.bench.gpu_report`; this
script is their command line.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from attnzoo.bench.gpu_check import LIMITS, run_check

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="every stage at tiny sizes on CPU")
    parser.add_argument(
        "--out", type=Path, default=None, help="report folder (default results/gpu)"
    )
    parser.add_argument(
        "--table-dir",
        type=Path,
        default=ROOT / "kernels" / "dispatch",
        help="where the dispatch table goes (default kernels/dispatch_tables)",
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="holds tinyshakespeare/")
    parser.add_argument("--budget", type=float, default=540, help="seconds for all stages")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every stage's limit")
    parser.add_argument(
        "--only", nargs="+", choices=list(LIMITS), default=list(LIMITS), help="stages to run"
    )
    args = parser.parse_args(argv)

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
    return run_check(
        ROOT, out, args.dry_run, args.table_dir, data, args.budget, args.scale, args.only
    )


if __name__ == "__main__":
    sys.exit(main())
