"""Everything a GPU can tell us about attnzoo, stage by stage: the GPU check behind
`scripts/gpu_check.py` (docs/gpu.md describes the stages, the budget and the report).

The stages run most valuable first, each a subprocess with a share of one time budget, so that a
hang or a crash in one loses only that one and the whole check ends inside the budget: the
environment probe, the kernel benchmark (`scripts/bench_kernels.py`: its targets, and per op and
shape which path won, the Triton kernel or the fastest PyTorch formulation, with the
`AUTO_TRITON` value that would follow), a curated part of the `cuda` test tier, the training
benchmark (`scripts/bench_train.py`) and the default training job. The report (Markdown and JSON) and the archive of every stage's output are rewritten the
moment each stage ends, so a check killed in the middle keeps what the stages before it found.

The stages run the checkout's tests and scripts (`root`), from a scratch folder outside it, and
keep their working files there; the report folder only ever holds the report, its JSON twin and
the log archive. `--dry-run` runs the same stages on CPU at tiny sizes (the Triton kernels in the
interpreter, a synthetic corpus unless the data folder holds Tiny Shakespeare).

The report itself (the Markdown and JSON files and the verdict table) is
`attnzoo.bench.gpu_report`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnzoo.bench.gpu_report import (
    remove_report,
    slug,
    stage_table_md,
    verdict_table_md,
    write_report,
)
from attnzoo.kernels.bench import parts
from attnzoo.mixers import causal_mixers
from attnzoo.studies import in_zoo_order

PLAIN = "gpt"  # bench_train's plain PyTorch GPT
CORPUS = "tinyshakespeare/input.txt"

# The stages in the order they run (most valuable first) and each one's share of the budget, in
# seconds of the default budget: what fits 6 minutes of an H100 with the installation
# (docs/gpu.md gives the arithmetic). A stage's limit is its share of the time that is left, so
# what one stage leaves unused goes to the stages after it.
SHARES = {
    "env": 10,
    "bench-kernels": 135,
    "cuda-tests": 55,
    "bench-train": 100,
    "default-job": 30,
}
BUDGET = sum(SHARES.values())  # 330 s
# --dry-run's shares (CPU, tiny sizes: `--dry-run --budget 60` takes 15-30 s on two cores)
DRY_SHARES = {
    "env": 10,
    "bench-kernels": 20,
    "cuda-tests": 10,
    "bench-train": 10,
    "default-job": 10,
}
UNNAMED_GPU = "unnamed-gpu"  # the report's name for the GPU until a stage has named it
BENCH_REPS = 10  # timed calls per kernel-benchmark measurement
# of the kernel benchmark's limit, what its start-up and its files take (not its parts' budget)
BENCH_START_S, DRY_BENCH_START_S = 10.0, 6.0
RESERVE_S = 2.0  # kept back from the stages for the last report and the log archive
MIN_STAGE_S = 3.0  # no stage is started with less than this left of the budget

# The part of the `cuda` tier the check runs: every op forward and backward against float64 in
# bf16 (causal, padded), dropout, a mixer per op training under bf16 autocast with the Triton
# kernels (linear_attention through `linear`, the sliding window through `local`), and one
# compiled. `TRITON_INTERPRET=0 python -m pytest -m cuda` runs the whole tier.
CUDA_TESTS = (
    *(
        "test_cuda_ops.py::test_kernels_match_the_float64_reference"
        f"[{op}-1000-True-True-torch.bfloat16]"  # n = 1000, causal, padded
        for op in ("scaled_dot", "quadratic", "metric", "pool")
    ),
    "test_cuda_ops.py::test_dropout_matches_the_reference_given_the_kernels_mask"
    "[scaled_dot-torch.bfloat16]",
    *(
        f"test_cuda_ops.py::test_every_mixer_trains_20_steps_under_bf16_autocast[{m}-triton-eager]"
        for m in ("scaled_dot", "metric", "quadratic", "pooling", "linear", "local")
    ),
    "test_cuda_ops.py::test_every_mixer_trains_20_steps_under_bf16_autocast"
    "[scaled_dot-triton-compiled]",
)

ENV_PROBE = r"""
import json, platform, subprocess, sys
import torch
info = {"python": platform.python_version(), "torch": torch.__version__,
        "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
try:
    import triton
    info["triton"] = triton.__version__
except ImportError as err:
    info["triton"] = f"not importable: {err}"
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    info.update(gpu=props.name, capability=f"{props.major}.{props.minor}",
                memory_gib=round(props.total_memory / 2**30, 1),
                sms=props.multi_processor_count, gpus=torch.cuda.device_count())
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        info["driver"] = out.stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError) as err:
        info["driver"] = f"unknown ({type(err).__name__})"
    smoke = torch.ones(4, device="cuda") * 2
    info["smoke"] = float(smoke.sum())
else:
    info.update(gpu="cpu", capability=None, driver=None)
print("ENV " + json.dumps(info))
"""


@dataclass
class Stage:
    name: str
    # not reached (yet) | running | ok | failed | timeout | cut | skipped | not run; a report
    # left with a stage "running" is one whose check was killed during that stage
    status: str = "not reached"
    seconds: float = 0.0
    limit_s: float = 0.0
    summary: str = ""
    error: str = ""
    commands: list[str] = field(default_factory=list)


@dataclass
class Check:
    """What the check found, filled stage by stage."""

    out: Path  # the report, its JSON twin and the log archive, nothing else
    work: Path  # the stages' logs and working files (archived into out/ after each stage)
    dry_run: bool
    deadline: float
    root: Path  # the checkout: its tests/ and scripts/ are what the stages run
    budget_s: float = BUDGET
    setup_s: float | None = None  # the installation before the check, where a wrapper timed it
    env: dict = field(default_factory=dict)
    stages: list[Stage] = field(default_factory=list)
    tests: list[dict] = field(default_factory=list)
    bench: dict = field(default_factory=dict)
    train: list[dict] = field(default_factory=list)
    default_job: dict = field(default_factory=dict)
    day: str = field(default_factory=lambda: time.strftime("%Y-%m-%d", time.gmtime()))

    def limit(self, stage: str, left: Sequence[str]) -> float:
        """The stage's share of the time left, among the stages `left` to run (itself first)."""
        shares = DRY_SHARES if self.dry_run else SHARES
        available = self.deadline - RESERVE_S - time.monotonic()
        return available * shares[stage] / sum(shares[s] for s in left)


class Stopped(Exception):
    """SIGTERM or SIGINT reached the check: the stage running is cut, the report written."""


# ------------------------------------------------------------------------------------ subprocesses


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the stage's process gets SIGKILL when the check dies (even by SIGKILL), so no
    stage outlives a killed check."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def run(
    cmd: list[str], limit: float, log: Path, env: dict[str, str], cwd: Path
) -> tuple[int | None, str]:
    """Run `cmd` in its own process group; (exit status or None on timeout, its output). On
    timeout, or when the check is stopped, the whole group is killed (pytest workers, compile
    workers), and what it printed so far is kept. The output is also written to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as sink:
        sink.write("$ " + " ".join(cmd) + "\n")
        sink.flush()
        proc = subprocess.Popen(
            cmd,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        try:
            code = proc.wait(timeout=max(limit, 0.1))
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if proc.returncode is None:  # timed out, or Stopped raised while waiting
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return code, log.read_text(errors="replace")


def last_error(output: str) -> str:
    """The line that says what went wrong: the last exception line, else the last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^([A-Za-z_.]+(Error|Exception|Interrupt)|AssertionError|E\s)", ln):
            return ln[:400]
    return lines[-1][:400] if lines else "(no output)"


def md_table(text: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the markdown table in `text` whose first column is headed `first_header`."""
    rows, header = [], None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if "|" in line else None
        if cells is None:
            header = None
            continue
        if cells[0] == first_header:
            header = cells
        elif header and not set(cells[0]) <= set("-: ") and len(cells) == len(header):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


# ------------------------------------------------------------------------------------ stages


def stage_env(check: Check, stage: Stage, env: dict[str, str]) -> None:
    cmd = [sys.executable, "-c", ENV_PROBE]
    stage.commands.append("python -c <environment probe>")
    code, output = run(cmd, stage.limit_s, check.work / "logs" / "env.log", env, check.work)
    found = [ln for ln in output.splitlines() if ln.startswith("ENV ")]
    if code != 0 or not found:
        stage.status = "timeout" if code is None else "failed"
        stage.error = last_error(output)
        return
    check.env = json.loads(found[-1][4:])
    e = check.env
    stage.summary = (
        f"{e['gpu']} (sm {e.get('capability')}), driver {e.get('driver')}, CUDA {e['cuda']}, "
        f"torch {e['torch']}, triton {e['triton']}, Python {e['python']}"
    )
    stage.status = "ok"


def stage_tests(check: Check, stage: Stage, env: dict[str, str]) -> None:
    tests = [str(check.root / "tests" / t) for t in CUDA_TESTS]
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-v", "-rfE", "-p", "no:cacheprovider"]
    cmd += ["--rootdir", str(check.root), "-c", str(check.root / "pyproject.toml"), *tests]
    stage.commands.append(
        "TRITON_INTERPRET=0 python -m pytest -m cuda " + " ".join(f"tests/{t}" for t in CUDA_TESTS)
    )
    test_env = {**env, "TRITON_INTERPRET": "1" if check.dry_run else "0"}
    code, output = run(
        cmd, stage.limit_s, check.work / "logs" / "cuda-tests.log", test_env, check.work
    )
    results: dict[str, dict] = {}
    for m in re.finditer(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", output, re.M):
        results[m.group(1)] = {"test": m.group(1).split("tests/")[-1], "outcome": m.group(2)}
    for m in re.finditer(r"^(FAILED|ERROR) (\S+::\S+)(?: - (.*))?$", output, re.M):
        key = next((k for k in results if k.endswith(m.group(2).split("tests/")[-1])), None)
        if key:
            results[key]["error"] = (m.group(3) or "")[:300]
    check.tests = list(results.values())
    counts: dict[str, int] = {}
    for r in check.tests:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    stage.summary = ", ".join(f"{n} {k.lower()}" for k, n in sorted(counts.items())) or "no tests"
    if code is None:
        stage.status = "timeout"
        stage.summary += " (the rest not reached)"
        stage.error = f"stopped at {stage.limit_s:.0f} s"
    elif code == 0:
        stage.status = "ok"
    else:
        stage.status = "failed"
        failed = [r for r in check.tests if r["outcome"] in ("FAILED", "ERROR")]
        stage.error = (
            f"{failed[0]['test']}: {failed[0].get('error', '')}" if failed else last_error(output)
        )


def stage_bench_kernels(check: Check, stage: Stage, env: dict[str, str]) -> None:
    out = check.work / "bench_kernels"
    cmd = [sys.executable, str(check.root / "scripts" / "bench_kernels.py"), "--out", str(out)]
    if check.dry_run:
        cmd += ["--smoke", "--n", "32", "--batch", "1", "--heads", "2", "--head-dim", "16"]
        # metric and quadratic take scaled_dot's path, slower; linear has the skipped rows
        cmd += ["--only", "scaled_dot", "pool", "linear", "local"]
        cmd += ["--no-train-shape", "--no-pool-large", "--reps", "1"]
    else:  # N = 1k and 4k (and the training shape); the parts with a kernel for auto to choose
        kernels = [p.name for p in parts() if p.auto_triton is not None]
        cmd += ["--n", "1024", "4096", "--reps", str(BENCH_REPS), "--only", *kernels]
    # the parts share the stage's limit, less the process's start (torch, triton) and its files
    start_s = DRY_BENCH_START_S if check.dry_run else BENCH_START_S
    cmd += ["--budget", f"{max(stage.limit_s - start_s, stage.limit_s / 2):.1f}"]
    stage.commands.append(" ".join(["python", *cmd[1:]]))
    bench_env = {**env, "TRITON_INTERPRET": "1" if check.dry_run else "0"}
    code, output = run(
        cmd, stage.limit_s, check.work / "logs" / "bench-kernels.log", bench_env, check.work
    )
    saved = out / "bench_kernels.json"
    if saved.exists():
        check.bench = json.loads(saved.read_text())
    rows = check.bench.get("paths", [])
    verdicts = check.bench.get("verdicts", [])
    met = sum(v["verdict"] == "met" for v in verdicts)
    missed = sum(v["verdict"] == "MISSED" for v in verdicts)
    won = sum(r["won"] == "triton" for r in rows)
    stage.summary = (
        f"Triton won {won} of {len(rows)} op/shape/mode timings; "
        f"targets: {met} met, {missed} missed"
    )
    notes = check.bench.get("notes", [])
    if code is None:
        stage.status, stage.error = "timeout", f"stopped at {stage.limit_s:.0f} s"
    elif code != 0 or not saved.exists():
        stage.status, stage.error = "failed", last_error(output)
    elif not rows:
        stage.status, stage.error = "failed", "nothing was timed: " + "; ".join(notes)[:300]
    else:
        stage.status = "ok"
        failed_parts = [n for n in notes if "failed" in n or "time limit" in n]
        if failed_parts:
            stage.error = "; ".join(failed_parts)[:400]


def _synthetic_corpus(folder: Path) -> str:
    """A small stand-in for Tiny Shakespeare (dry runs without the corpus); its sha256."""
    lines = [
        f"{who}:\nThe {what} of {where} is {how}, and {how} the {what} shall be.\n"
        for who in ("FIRST CITIZEN", "MENENIUS", "CORIOLANUS", "VOLUMNIA")
        for what in ("crown", "storm", "night", "word")
        for where in ("Rome", "Verona", "Denmark")
        for how in ("fair", "foul", "quiet")
    ]
    path = folder / CORPUS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines * 3))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stage_bench_train(check: Check, stage: Stage, env: dict[str, str], data: Path):
    if not (data / CORPUS).exists():
        stage.status = "skipped"
        stage.error = f"no Tiny Shakespeare at {data / CORPUS} (give --data-dir)"
        return
    script = str(check.root / "scripts" / "bench_train.py")
    base = [sys.executable, script, "--data-dir", str(data)]
    if check.dry_run:  # one process, every mixer, eager: the compiled path needs a C++ toolchain
        jobs = [("all, eager", [*in_zoo_order(causal_mixers()), PLAIN], False)]
        base += ["--tasks", "shakespeare", "--sequential", "--device", "cpu", "--steps", "2"]
        base += ["--eval-batches", "1", "--dim", "32", "--depth", "1", "--heads", "2"]
        base += ["--seq-len", "16", "--batch", "2", "--eval-every", "2"]
    else:  # one process per model and mode, what finishes is kept; the comparisons that say
        # most first (attnzoo's attention against the plain GPT, eager and compiled)
        order = (
            "scaled_dot",
            PLAIN,
            *(m for m in in_zoo_order(causal_mixers()) if m != "scaled_dot"),
        )
        jobs = [
            (f"{name}, {'compiled' if compiled else 'eager'}", [name], compiled)
            for name in order
            for compiled in (False, True)
        ]
        base += ["--tasks", "shakespeare_gpu", "--steps", "300", "--eval-batches", "20"]
        base += ["--eval-every", "300"]
    stop = time.monotonic() + stage.limit_s
    failures, done = [], 0
    for i, (label, names, compiled) in enumerate(jobs):
        left = stop - time.monotonic()
        if left < 5:
            check.train.append({"job": label, "status": "not run (stage time spent)"})
            continue
        cmd = [*base, "--mixers", ",".join(names), "--compile" if compiled else "--no-compile"]
        stage.commands.append(" ".join(["python", *cmd[1:]]))
        log = check.work / "logs" / f"bench-train-{i:02d}.log"
        code, output = run(cmd, left, log, env, check.work)
        rows = md_table(output, "mixer")
        for row in rows:
            check.train.append({"job": label, "status": "ok", **row})
        if code != 0 or not rows:
            status = "timeout" if code is None else "failed"
            failures.append(f"{label}: {status}: {last_error(output)}")
            check.train.append({"job": label, "status": status, "error": last_error(output)})
        else:
            done += 1
    not_run = sum(r["status"].startswith("not run") for r in check.train)
    stage.summary = f"{done}/{len(jobs)} runs finished" + (
        f", {not_run} not run" if not_run else ""
    )
    if failures:
        stage.status, stage.error = "failed", "; ".join(failures)[:600]
    elif not_run:
        stage.status, stage.error = (
            "timeout",
            f"{not_run} run(s) did not fit in {stage.limit_s:.0f} s",
        )
    else:
        stage.status = "ok"


def stage_default_job(check: Check, stage: Stage, env: dict[str, str]) -> None:
    run_dir = check.work / "default_job"
    cmd = [sys.executable, "-m", "attnzoo.train", "logger.mode=disabled", "train.progress=false"]
    cmd.append(f"hydra.run.dir={run_dir}")
    if check.dry_run:
        cmd += ["train.device=cpu", "train.max_steps=4", "train.eval_every=2", "train.log_every=2"]
        cmd += ["train.eval_batches=1", "train.batch_size=8", "train.probe_batch_size=2"]
        cmd += ["train.ckpt_every=4", "model.dim=32", "model.depth=1"]
    else:
        cmd += ["train.device=cuda"]
    stage.commands.append(" ".join(["python", *cmd[1:]]))
    started = time.monotonic()
    code, output = run(cmd, stage.limit_s, check.work / "logs" / "default-job.log", env, check.work)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    final = summary.get("final") or {}
    check.default_job = {
        "status": summary.get("status", "no summary.json"),
        "step": summary.get("step"),
        "wall_s": round(time.monotonic() - started, 1),
        "final": {k: v for k, v in final.items() if isinstance(v, int | float)},
    }
    shown = {k: final[k] for k in ("val/loss", "val/accuracy") if isinstance(final.get(k), float)}
    stage.summary = (
        f"{check.default_job['status']} at step {summary.get('step')} in "
        f"{check.default_job['wall_s']} s" + "".join(f", {k} {v:.4f}" for k, v in shown.items())
    )
    if code is None:
        stage.status, stage.error = "timeout", f"stopped at {stage.limit_s:.0f} s"
    elif code != 0 or summary.get("status") != "completed":
        stage.status = "failed"
        stage.error = summary.get("error") or last_error(output)
    else:
        stage.status = "ok"


# ------------------------------------------------------------------------------------ the check


def run_check(
    root: Path,
    out: Path,
    dry_run: bool,
    data: Path,
    budget: float = BUDGET,
    only: Sequence[str] = tuple(SHARES),
    setup_s: float | None = None,
) -> int:
    """Run the stages named in `only` (the others are reported skipped), in order, within
    `budget` seconds; rewrite `<out>/<date>-<gpu>.md`, `.json` and `-logs.tar.gz` as each stage
    ends; print the stage and verdict tables. A stage that the budget does not reach is "not
    run"; SIGTERM or SIGINT cut the stage running and still write the report. The exit status:
    0 when every stage passed, else 1 (a dry run also fails on a skipped stage it was asked to
    run), 128 + the signal when stopped."""
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    # the subprocesses run outside the checkout, whose attnzoo/ folder (without kernels/) would
    # shadow the installed package, and keep their files there; no downloads, no W&B
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    check = Check(out, work, dry_run, started + budget, root, budget, setup_s)
    check.stages = [Stage(name) for name in SHARES]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "ATTNZOO_OFFLINE": "1"}
    env.setdefault("WANDB_MODE", "disabled")
    if dry_run and not (data / CORPUS).exists():
        data = work / "data"
        env["ATTNZOO_TINYSHAKESPEARE_SHA256"] = _synthetic_corpus(data)
    # the report is written before each stage starts, the first one included, so a check killed
    # in its env stage still leaves one; on a GPU its name says `unnamed-gpu` until then
    stem = report_stem(check)

    def stop(signum: int, frame: object) -> None:
        raise Stopped(signal.Signals(signum).name)

    handlers = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    print(f"gpu_check{' --dry-run' if dry_run else ''}: report in {out}", flush=True)
    stopped = None
    try:
        for i, stage in enumerate(check.stages):
            if stage.name not in only:
                stage.status = "skipped"
                continue
            left = [s.name for s in check.stages[i:] if s.name in only]
            stage.limit_s = check.limit(stage.name, left)
            if check.deadline - RESERVE_S - time.monotonic() < MIN_STAGE_S:
                stage.status = "not run"
                stage.error = f"the budget of {budget:.0f} s was spent before it"
                continue
            stage.status = "running"
            stem = rewrite_report(check, stem)
            print(f"== {stage.name} (limit {stage.limit_s:.0f} s)", flush=True)
            start = time.monotonic()
            try:
                run_stage(check, stage, env, data)
            except Stopped as err:
                stage.status, stage.error = "cut", f"the check was stopped by {err}"
                stopped = err
            except Exception as err:  # noqa: BLE001 - the report says so, the next stage runs
                stage.status, stage.error = "failed", f"{type(err).__name__}: {err}"[:400]
            stage.seconds = time.monotonic() - start
            print(f"   {stage.status}: {stage.summary} {stage.error}".rstrip(), flush=True)
            stem = rewrite_report(check, stem)
            if stopped:
                break
    except Stopped as err:  # between stages, or while a report was written
        stopped = err
        for stage in check.stages:
            if stage.status == "running":
                stage.status, stage.error = "cut", f"the check was stopped by {err}"
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    stem = rewrite_report(check, stem)
    shutil.rmtree(work, ignore_errors=True)
    print(f"\nwrote {out / stem}.md, .json and -logs.tar.gz\n\n{stage_table_md(check)}\n")
    print(verdict_table_md(check), flush=True)
    if stopped:
        return 128 + signal.Signals[str(stopped)].value
    bad = [s for s in check.stages if s.status in ("failed", "timeout", "not run")]
    if dry_run:  # a dry run proves every stage: a skipped one is a failure too
        bad += [s for s in check.stages if s.status == "skipped" and s.name in only]
    return 1 if bad else 0


def report_stem(check: Check) -> str:
    """`<date>-<gpu>`: the date the check started and the GPU the env stage found (else the one
    the kernel benchmark ran on); `unnamed-gpu` until a stage has named it."""
    if check.dry_run:
        return f"{check.day}-cpu-dry-run"
    gpu = check.env.get("gpu") or check.bench.get("meta", {}).get("device")
    return f"{check.day}-{slug(gpu) if gpu else UNNAMED_GPU}"


def rewrite_report(check: Check, stem: str) -> str:
    """Write the report under the stem the check has now (`report_stem`) and remove the one
    written under `stem` before, if the name changed (the GPU was named); the stem now used."""
    now = report_stem(check)
    write_report(check, now)
    if now != stem:
        remove_report(check.out, stem)
    return now


def run_stage(check: Check, stage: Stage, env: dict[str, str], data: Path) -> None:
    if stage.name == "env":
        stage_env(check, stage, env)
    elif stage.name == "bench-kernels":
        stage_bench_kernels(check, stage, env)
    elif stage.name == "cuda-tests":
        stage_tests(check, stage, env)
    elif stage.name == "bench-train":
        stage_bench_train(check, stage, env, data)
    else:
        stage_default_job(check, stage, env)
