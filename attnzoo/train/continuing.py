"""`python -m attnzoo.train --continue FOLDER`: a run folder is enough to continue its run.

For a run's folder (it holds `.hydra/config.yaml`) the command is the run's own, in its folder:
Hydra runs it with `hydra.run.dir=FOLDER train.resume=true`, and the job trains the
configuration the run recorded (`attnzoo.train.resume.continued_config`), not the defaults. For
a sweep's folder, every unfinished job (`attnzoo.tracking.UNFINISHED`) is continued so, one after
another; completed and diverged jobs are left as they are. Overrides after the folder may change
only what does not change what is trained (`attnzoo.train.resume.MAY_CHANGE`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from attnzoo.tracking import UNFINISHED
from attnzoo.train.trainer import EXIT_CONFIG, EXIT_INTERRUPTED, EXIT_OK, EXIT_PREEMPTED

CONTINUE = "--continue"


def _status(job: Path) -> str:
    try:
        return str(json.loads((job / "summary.json").read_text()).get("status"))
    except (OSError, ValueError, AttributeError):
        return "running"  # accepted (it has a record), and stopped before it said more


def _order(job: Path) -> tuple[bool, int, str]:
    """Numbered job folders by number, then named ones by name."""
    return (not job.name.isdigit(), int(job.name) if job.name.isdigit() else 0, job.name)


def continue_sweep(sweep: Path, extra: list[str]) -> int:
    """Continue every unfinished job of the sweep folder `sweep`, one after another, each as
    `python -m attnzoo.train --continue JOB *extra`. The exit code: the first stop (Ctrl-C 130,
    a scheduler's signal 75) ends the sweep with its code; otherwise 2 if a job was refused, else
    the first other failure's code, else 0."""
    jobs = sorted(
        (p for p in sweep.iterdir() if (p / ".hydra" / "config.yaml").is_file()), key=_order
    )
    if not jobs:
        print(
            f"attnzoo.train: configuration error: {CONTINUE} {sweep}: neither a run's folder "
            "(it holds .hydra/config.yaml) nor a sweep's (its job folders do); allowed: the "
            "folder a run or a sweep printed",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    todo = [j for j in jobs if _status(j) in UNFINISHED]
    print(
        f"attnzoo.train: {sweep}: {len(jobs)} jobs, {len(todo)} unfinished"
        + (": continuing them one after another" if todo else "; nothing to do"),
        file=sys.stderr,
    )
    codes = []
    for job in todo:
        print(f"attnzoo.train: continuing {job.name} ({_status(job)})", file=sys.stderr)
        code = _child([sys.executable, "-m", "attnzoo.train", CONTINUE, str(job), *extra])
        if code in (EXIT_INTERRUPTED, EXIT_PREEMPTED):
            return code
        codes.append(code)
    if EXIT_CONFIG in codes:
        return EXIT_CONFIG
    return next((c for c in codes if c != EXIT_OK), EXIT_OK)


def _child(command: list[str]) -> int:
    """Run `command` and return its exit code. Ctrl-C reaches it from the terminal (it stops at
    a step boundary and checkpoints); this process waits for it meanwhile instead of killing it."""
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        return subprocess.call(command)
    finally:
        signal.signal(signal.SIGINT, previous)
