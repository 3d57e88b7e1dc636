"""Soak test: a small sweep trained while jobs are killed at random and restarted with
train.resume=true, until every job completes; then every job's files are checked.

Each job is a `python -m attnzoo.train` subprocess with its own run directory. At random moments
(exponential gaps, mean --kill-every seconds) a running job gets SIGKILL (no chance to save) or
SIGTERM (checkpoint at the next step boundary, exit 75), chosen at random; it is then started
again with train.resume=true. At the end every job must have summary.json status "completed"
and a metrics.jsonl that holds every training step from 1 to --steps exactly once.

Printed: jobs, kills by signal, resumes, steps lost (trained, then recomputed because they came
after the last checkpoint), steps missing or duplicated in metrics.jsonl (must be 0), wall time.
Exits 1 if any check fails.

    python scripts/soak.py                                  # 4 jobs x 300 steps: a few minutes
    python scripts/soak.py --jobs 8 --steps 2000 --kill-every 5 --parallel 4
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from attnzoo.checkpoint import load_checkpoint
from attnzoo.mixers import MIXERS
from attnzoo.studies import in_zoo_order
from attnzoo.tracking import read_metrics

TINY = [
    "model.dim=32",
    "model.depth=2",
    "model.heads=2",
    "train.batch_size=16",
    "train.log_every=1",
    "train.eval_every=50",
    "train.eval_batches=1",
    "train.ckpt_every=25",
    "train.progress=false",
    "logger.mode=disabled",
]


@dataclass
class Job:
    name: str
    run_dir: Path
    overrides: list[str]
    proc: subprocess.Popen | None = None
    starts: int = 0
    kills: Counter = field(default_factory=Counter)
    steps_lost: int = 0
    done: bool = False
    failed: str | None = None

    def start(self) -> None:
        resume = ["train.resume=true"] if self.starts else []
        env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_DIR": str(self.run_dir.parent)}
        env.pop("TRITON_INTERPRET", None)
        log = open(self.run_dir.parent / f"{self.run_dir.name}.log", "a")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "attnzoo.train",
                *self.overrides,
                *resume,
                f"hydra.run.dir={self.run_dir}",
            ],
            env=env,
            cwd=self.run_dir.parent,
            stdout=subprocess.DEVNULL,
            stderr=log,  # a file, not a pipe: nobody reads while it runs
        )
        log.close()  # the child holds its own descriptor
        self.starts += 1

    def last_logged_step(self) -> int:
        path = self.run_dir / "metrics.jsonl"
        if not path.exists():
            return 0
        steps = [0]
        for line in path.read_text().splitlines():
            try:
                steps.append(int(json.loads(line)["step"]))
            except (ValueError, KeyError):
                break  # a line torn by the kill
        return max(steps)

    def checkpoint_step(self) -> int:
        loaded = load_checkpoint(self.run_dir / "checkpoints")
        return int(loaded[0]["step"]) if loaded else 0


def check(job: Job, steps: int) -> tuple[int, int, str | None]:
    """(missing, duplicated, problem) for a finished job."""
    summary_path = job.run_dir / "summary.json"
    if not summary_path.exists():
        return steps, 0, "no summary.json"
    status = json.loads(summary_path.read_text()).get("status")
    train_steps = Counter(
        r["step"] for r in read_metrics(job.run_dir / "metrics.jsonl") if "train/loss" in r
    )
    missing = sum(1 for s in range(1, steps + 1) if s not in train_steps)
    duplicated = sum(n - 1 for n in train_steps.values() if n > 1)
    extra = sorted(s for s in train_steps if not 1 <= s <= steps)
    problem = None if status == "completed" else f"status {status!r}"
    if extra:
        problem = f"steps outside 1..{steps}: {extra[:5]}"
    return missing, duplicated, problem


def soak(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    out = Path(args.out or tempfile.mkdtemp(prefix="attnzoo-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    jobs = []
    mixers = in_zoo_order(MIXERS)
    for i in range(args.jobs):
        mixer = mixers[i % len(mixers)]
        overrides = [*TINY, f"mixer={mixer}", f"train.max_steps={args.steps}", f"train.seed={i}"]
        jobs.append(Job(f"{i}-{mixer}", out / f"job{i}", overrides))
    t0 = time.monotonic()
    next_kill = t0 + rng.expovariate(1 / args.kill_every)
    while not all(j.done for j in jobs):
        if time.monotonic() - t0 > args.timeout:
            print(f"soak: gave up after {args.timeout} s", file=sys.stderr)
            break
        running = [j for j in jobs if j.proc is not None]
        for job in running:
            rc = job.proc.poll()
            if rc is None:
                continue
            job.proc = None
            if rc == 0:
                job.done = True
            # pre-empted (75), or killed before it could checkpoint: SIGKILL, or SIGTERM during
            # start-up, before the trainer's handler is installed. Either way: resume.
            elif rc in (75, -signal.SIGKILL, -signal.SIGTERM):
                job.steps_lost += max(0, job.last_logged_step() - job.checkpoint_step())
            else:
                log = (job.run_dir.parent / f"{job.run_dir.name}.log").read_text()
                job.done, job.failed = True, f"exit {rc}: {log.strip().splitlines()[-1:]}"
        waiting = [j for j in jobs if not j.done and j.proc is None]
        slots = args.parallel - sum(j.proc is not None for j in jobs)
        for job in waiting[: max(0, slots)]:
            job.start()
        if time.monotonic() >= next_kill:
            victims = [j for j in jobs if j.proc is not None and j.proc.poll() is None]
            if victims:
                job = rng.choice(victims)
                sig = rng.choice((signal.SIGKILL, signal.SIGTERM))
                job.proc.send_signal(sig)
                job.kills[signal.Signals(sig).name] += 1
            next_kill = time.monotonic() + rng.expovariate(1 / args.kill_every)
        time.sleep(0.05)
    wall = time.monotonic() - t0

    rows, ok = [], True
    for job in jobs:
        if job.proc is not None and job.proc.poll() is None:
            job.proc.kill()
        missing, dup, problem = check(job, args.steps)
        problem = job.failed or problem
        ok &= problem is None and missing == 0 and dup == 0
        rows.append(
            f"| {job.name} | {job.kills['SIGKILL']} | {job.kills['SIGTERM']} | "
            f"{max(0, job.starts - 1)} | {job.steps_lost} | {missing} | {dup} | "
            f"{problem or 'completed'} |"
        )
    kills = sum((j.kills for j in jobs), Counter())
    print(
        f"soak: {len(jobs)} jobs x {args.steps} steps, {args.parallel} at a time, a kill every "
        f"~{args.kill_every} s (seed {args.seed}); run directories in {out}\n"
    )
    print(
        "| job | SIGKILL | SIGTERM | resumes | steps lost | steps missing | steps duplicated | status |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows))
    print(
        f"\ntotal: {len(jobs)} jobs, {kills['SIGKILL']} SIGKILL + {kills['SIGTERM']} SIGTERM, "
        f"{sum(max(0, j.starts - 1) for j in jobs)} resumes, "
        f"{sum(j.steps_lost for j in jobs)} steps lost (recomputed), wall {wall:.0f} s: "
        f"{'every job complete' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--parallel", type=int, default=2, help="jobs running at once")
    parser.add_argument("--kill-every", type=float, default=4.0, help="mean seconds between kills")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800, help="give up after this many s")
    parser.add_argument("--out", help="where the run directories go (default: a temp dir)")
    args = parser.parse_args(argv)
    for name in ("jobs", "steps", "parallel"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.kill_every <= 0:
        parser.error(f"--kill-every must be > 0, got {args.kill_every}")
    return soak(args)


if __name__ == "__main__":
    sys.exit(main())
