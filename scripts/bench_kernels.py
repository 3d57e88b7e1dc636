"""Benchmark attnzoo's kernels against what a user would write instead, with a verdict per target.

Each op runs through the public API (`attnzoo.kernels.*`, `impl="triton"`) and is compared with
its PyTorch formulation, bf16, forward and forward+backward:

| part | attnzoo op | what a user would write instead |
|---|---|---|
| scaled_dot | `scaled_dot_attention(q, k, v)` | `sdpa(q, k, v)` |
| metric | `metric_attention(p, M)` | `sdpa(p @ M, p, p)` |
| quadratic | `quadratic_attention(x, U, v)` | `sdpa(x @ U[h], x, v)`, x expanded over the heads |
| pool | `pool_mix(x, window)` (centred) | `avg_pool1d(x, window, count_include_pad=False) - x` |
| linear | `linear_attention(q, k, v)` | its PyTorch path (`impl="torch"`); causal: the cumsum/einsum formulation and flash-linear-attention's `chunk_linear_attn` |
| local | `scaled_dot_attention(q, k, v, window=w)` | `sdpa(q, k, v, attn_mask=band)` |
| gated | `gated_linear_attention(q, k, v, g)`, a log decay per head | its PyTorch path (`impl="torch"`); flash-linear-attention's `chunk_simple_gla` |
| gated_key | `gated_linear_attention(q, k, v, g)`, a log decay per key dimension | its PyTorch path (`impl="torch"`); flash-linear-attention's `chunk_gla` |
| sigmoid | `sigmoid_attention(q, k, v, bias=-log N)` | its PyTorch path (`impl="torch"`, the reference) |
| delta, delta_gated | `delta_rule(q, k, v, beta[, log_decay])`: no kernel, its chunked PyTorch path | flash-linear-attention's `chunk_delta_rule` / `chunk_gated_delta_rule` |

`sdpa` is `torch.nn.functional.scaled_dot_product_attention`, timed on each backend that takes the
shape (FLASH_ATTENTION, CUDNN_ATTENTION, EFFICIENT_ATTENTION; a backend that refuses a shape is
noted and skipped). flash-linear-attention is timed where the optional `fla-core` is importable
(`pip install -e ".[fla]"`); elsewhere its rows say why they were skipped. local's window reaches
min(128, N / 4) keys back (and forward, bidirectional); gated, gated_key and the delta parts are
causal only, so they are timed at the causal shapes. Shapes: the training shape of nanoGPT's GPU recipe (batch 64, 6 heads, N = 256,
head dim 64, causal) and batch 2, 8 heads, head dim 64 at N = 1024 / 4096 / 8192, causal and
bidirectional; pool_mix on x of (batch, N, heads x head dim), plus one large x (8 x 8192 x 1024).
Two numbers per call: device ms (CUDA events, L2 flushed, launches hidden behind a sleep kernel)
and host us (the launch path's wall time). The verdict table at the end judges the targets. The
method is the package's, `attnzoo.kernels.bench`; each family's parts, targets and FLOP and byte
model are in its `kernels/<family>/bench.py`.

Before timing, and alone under `--dry-run`, under TRITON_INTERPRET=1 or without a GPU, every
comparison is validated at a tiny fp32 shape: the attnzoo op against each formulation above
(outputs and gradients of every input; for gated, gated_key, sigmoid and the delta parts every
candidate against a float64 formula: the recurrence one token at a time, the sigmoid reference), so the
formulations the benchmark times are proven to compute the ops. Without a GPU it also prints the FLOP and byte model of each op.

    python scripts/bench_kernels.py                                # everything (GPU)
    python scripts/bench_kernels.py --only scaled_dot pool --n 4096 --out results/
    python scripts/bench_kernels.py --dry-run                      # validation only, any machine
    python scripts/bench_kernels.py --smoke --n 32 --head-dim 16 --out DIR   # the timing path on CPU

Each step (a part's validation, a part's timing) runs under its own time limit (SIGALRM):
`--timeout` seconds each, or with `--budget` its share of the time left, so that what one step
leaves unused goes to the steps after it (the shares are each part's expected seconds on an H100,
`share_s` where its family declares it in `kernels/<family>/bench.py`). Results print as they
come, then a short table of ratios and verdicts, and per op and shape which path won: the
attnzoo op's Triton time against the fastest PyTorch formulation's, and the `AUTO_TRITON` value
(in the op's `kernels/<family>/ops.py`) that would follow. `--out DIR` writes bench_kernels.json
and bench_kernels.md. Exit status 1 if a validation fails.

`--smoke` runs the timing loop without a GPU (fp32 on CPU, a wall-clock timer, the Triton kernels
in the interpreter under TRITON_INTERPRET=1) so that the timing, the verdicts and the files are
exercised at tiny shapes; its numbers measure nothing and are marked so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnzoo.kernels.bench import Options, part_names, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=part_names(), default=list(part_names()))
    parser.add_argument("--n", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=("causal", "bidirectional"),
        default=["causal", "bidirectional"],
    )
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--no-train-shape", action="store_true", help="leave out batch 64 x N 256")
    parser.add_argument("--no-pool-large", action="store_true", help="leave out pool's 8x8192x1024")
    parser.add_argument("--window", type=int, default=3, help="pool_mix window (odd)")
    parser.add_argument("--reps", type=int, default=30, help="timed calls per measurement")
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds per step without --budget (0: none)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=0,
        help="seconds for every step together, each its share of the time left (0: none)",
    )
    parser.add_argument("--tol", type=float, default=2e-4, help="validation: max relative error")
    parser.add_argument("--dry-run", action="store_true", help="validate only, no timing")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="time on CPU (fp32, wall clock) to exercise the timing path; the numbers mean nothing",
    )
    parser.add_argument("--out", type=Path, default=None, help="write bench_kernels.json/.md here")
    args = parser.parse_args(argv)
    for name, value in (("--batch", args.batch), ("--heads", args.heads), ("--reps", args.reps)):
        if value < 1:
            parser.error(f"{name} must be ≥ 1, got {value}")
    if not 16 <= args.head_dim <= 128:
        parser.error(f"--head-dim must be in 16..128, got {args.head_dim}")
    if args.window < 1 or args.window % 2 == 0:
        parser.error(f"--window must be a positive odd int (centred pool), got {args.window}")
    if args.budget < 0:
        parser.error(f"--budget must be seconds >= 0, got {args.budget}")
    if any(n < 1 for n in args.n):
        parser.error(f"--n must be ≥ 1, got {args.n}")

    command = "python scripts/bench_kernels.py " + " ".join(sys.argv[1:] if argv is None else argv)
    return run(
        Options(
            parts=tuple(args.only),
            ns=tuple(args.n),
            modes=tuple(args.modes),
            batch=args.batch,
            heads=args.heads,
            head_dim=args.head_dim,
            train_shape=not args.no_train_shape,
            pool_large=not args.no_pool_large,
            window=args.window,
            reps=args.reps,
            timeout=args.timeout,
            budget=args.budget,
            tol=args.tol,
            dry_run=args.dry_run,
            smoke=args.smoke,
            out=args.out,
            command=command,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
