"""One run of the kernel benchmark: validation, then timing (or the cost model), then the report.

`scripts/bench_kernels.py` parses its command line into `Options` and calls `run`.
"""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .cases import BACKENDS, attention_shapes, part, part_names, step_shares
from .report import auto_table, paths_table, print_model, results_table, verdict_table, write_out
from .timing import (
    Budget,
    Result,
    Timer,
    first_line,
    stopped_by_limit,
    time_limit,
    time_part,
    wall_timer,
)
from .validate import Check, validate
from .verdicts import auto_rows, path_rows, verdicts


@dataclass(frozen=True)
class Options:
    """What to run; the command-line options of scripts/bench_kernels.py."""

    parts: tuple[str, ...] = field(default_factory=part_names)  # every part, in order
    ns: tuple[int, ...] = (1024, 4096, 8192)
    modes: tuple[str, ...] = ("causal", "bidirectional")
    batch: int = 2
    heads: int = 8
    head_dim: int = 64
    train_shape: bool = True  # nanoGPT's training shape (batch 64 x N 256)
    pool_large: bool = True  # the large shape of a part that has one (pool's 8 x 8192 x 1024)
    window: int = 3  # the window of a part that takes one (pooling's, odd)
    reps: int = 30  # timed calls per measurement
    timeout: float = 600  # seconds per part (0: none), where there is no budget
    budget: float = 0  # seconds for every part together, shared as `Budget` says (0: none)
    tol: float = 2e-4  # validation: max relative error
    dry_run: bool = False  # validate only, no timing
    smoke: bool = False  # time on CPU to exercise the timing path
    out: Path | None = None  # write bench_kernels.json/.md here
    command: str = "python scripts/bench_kernels.py"  # recorded in the report


def _emit(results: list[Result]):
    """Keep each result and print it as it comes."""

    def emit(r: Result) -> None:
        results.append(r)
        dev = "" if r.device_ms is None else f"device {r.device_ms:8.3f} ms"
        host = "" if r.host_us is None else f"host {r.host_us:7.0f} µs"
        rate = (
            ""
            if r.rate is None
            else f"{r.rate:8.1f} {'GB/s' if part(r.part).bandwidth else 'TFLOP/s'}"
        )
        print(
            f"{r.part:10s} {r.shape:18s} {r.candidate:24s} {r.mode:8s} {dev} {host} {rate} {r.note}",
            flush=True,
        )

    return emit


MIN_STEP_S = 1.0  # a step is not started with less than this of the budget left


def run(opts: Options) -> int:
    """Validate every comparison, time them where there is a GPU (or `smoke`), print the tables
    and write the files; exit status 1 if a validation fails, else 0."""
    # the first call of any op imports torch._dynamo (torch.library's custom ops reach it),
    # seconds on a busy machine: imported before the steps' time limits, so that an alarm never
    # stops it halfway and leaves a half-initialised module to every later part
    importlib.import_module("torch._dynamo")

    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    gpu = torch.cuda.is_available() and not interpret
    timing = gpu and not opts.dry_run
    smoke = opts.smoke and not gpu
    shapes = attention_shapes(
        list(opts.ns), list(opts.modes), opts.batch, opts.heads, opts.head_dim, opts.train_shape
    )
    notes: list[str] = []
    device = torch.cuda.get_device_name() if gpu else "cpu"
    print(f"bench_kernels on {device}; parts {', '.join(opts.parts)}\n", flush=True)

    # 1. validation: the formulations compute the ops
    impl = "triton" if gpu or interpret else "torch"
    if impl == "torch":
        notes.append(
            "no GPU and no TRITON_INTERPRET=1: the formulations were checked against the PyTorch "
            "reference (impl='torch'), not the Triton kernels"
        )
    # the steps (each part's validation, then each part's timing) share one budget, if given
    steps = [f"validate {p}" for p in opts.parts] + (list(opts.parts) if timing or smoke else [])
    budget = Budget(opts.budget, step_shares(opts.parts), opts.timeout)

    def step_limit(step: str) -> float | None:
        """The step's limit, or None (noted) where the budget is spent."""
        limit = budget.limit(step, steps[steps.index(step) :])
        if opts.budget > 0 and limit < MIN_STEP_S:
            notes.append(f"{step}: not run, the budget of {opts.budget:g} s was spent")
            print(notes[-1], flush=True)
            return None
        return limit

    checks: list[Check] = []
    for name in opts.parts:
        limit = step_limit(f"validate {name}")
        if limit is None:
            continue
        try:
            with time_limit(limit, f"validation of {name}"):
                checks += validate([name], "cuda" if gpu else "cpu", impl, opts.window, opts.tol)
        except Exception as err:
            stopped = stopped_by_limit(err)
            if stopped is None:
                raise
            notes.append(str(stopped))
            print(stopped, flush=True)
    failed = [c for c in checks if not c.ok]
    print()

    # 2. timing, part by part, or the cost model where there is no GPU
    results: list[Result] = []
    emit = _emit(results)
    dtype = torch.float32 if smoke else torch.bfloat16
    if timing or smoke:
        timer = wall_timer if smoke else Timer(opts.reps)
        where = ("cpu", dtype) if smoke else ("cuda", dtype)
        backends = ("math",) if smoke else BACKENDS
        if smoke:
            notes.append(
                "--smoke: fp32 on CPU with a wall-clock timer; the numbers measure nothing"
            )
        for name in opts.parts:
            limit = step_limit(name)
            if limit is None:
                continue
            timed = part(name).shapes_for(shapes, opts.pool_large)
            if not timed:
                notes.append(f"part {name}: no shape to time it at (causal only)")
                print(notes[-1], flush=True)
                continue
            try:
                with time_limit(limit, f"part {name}"):
                    time_part(name, timed, impl, opts.window, timer, emit, *where, backends)
            except Exception as err:  # noqa: BLE001 - report and go on with the next part
                stopped = stopped_by_limit(err)
                if stopped is not None:
                    notes.append(f"{stopped}; its results so far are kept")
                    print(stopped, flush=True)
                    continue
                notes.append(f"part {name} failed: {first_line(err)}")
                print(f"part {name} failed: {first_line(err)}", flush=True)
    else:
        print_model(shapes, opts.window, opts.pool_large)
        print()
        why = (
            "--dry-run"
            if opts.dry_run
            else ("TRITON_INTERPRET=1" if interpret else "no CUDA device")
        )
        print(f"{why}: timings need a GPU; the table above is the FLOP and byte model behind the")
        print("ratios a GPU run measures, and the validation above checks every comparison.")
        notes.append(f"{why}: no timings")

    vs = verdicts(results) if results else []
    rows = path_rows(results)
    auto = auto_rows(rows)
    if results:
        print("\n" + results_table(results))
        print("\n" + verdict_table(vs))
    if rows:
        print("\n" + paths_table(rows))
        print("\n" + auto_table(auto))
    print(f"\nvalidation: {len(checks) - len(failed)}/{len(checks)} comparisons agree")
    for note in notes:
        print(f"note: {note}")
    if opts.out:
        meta = {
            "device": device,
            "smoke": smoke,
            "capability": (
                "{}.{}".format(*torch.cuda.get_device_capability()) if gpu and not smoke else None
            ),
            "torch": torch.__version__,
            "command": opts.command,
            "time_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        }
        try:
            import triton

            meta["triton"] = triton.__version__
        except ImportError:  # pragma: no cover
            pass
        write_out(opts.out, meta, checks, results, vs, notes, rows, auto)
        print(f"wrote {opts.out / 'bench_kernels.json'} and bench_kernels.md")
    return 1 if failed else 0
