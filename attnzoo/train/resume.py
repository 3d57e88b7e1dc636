"""Resuming and pre-emption: the signals that stop a run at a step boundary, the random state a
checkpoint carries so that a resumed run continues exactly as an uninterrupted one, and the
checks that a checkpoint belongs to the run that resumes it."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import torch

from attnzoo.checkpoint import load_checkpoint
from attnzoo.config import ConfigError


class Preemption:
    """Ctrl-C (SIGINT), SIGTERM and SIGUSR1 (SLURM's warning before a time limit) set a flag; the
    loop checkpoints at the next step boundary and stops, and an evaluation in progress stops at
    its next batch (`EvaluationInterrupted`). SIGINT makes the run `interrupted`; the scheduler's
    signals make it `preempted`, which a job started again with the same arguments resumes by
    itself. A second Ctrl-C stops at once (KeyboardInterrupt), keeping the last checkpoint. A
    handler that was installed before ours (submitit's, for SIGUSR2 too) is called after our
    checkpoint, so submitit can requeue the job."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        signals = [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1]
        if callable(signal.getsignal(signal.SIGUSR2)):  # someone (submitit) listens to USR2
            signals.append(signal.SIGUSR2)
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: do not wait for the step boundary
        if self.signum is None or signum == signal.SIGINT:
            self.signum = signum
            if signum == signal.SIGINT:
                print(
                    "\ninterrupted: stopping at the next step (Ctrl-C again to stop at once)",
                    file=sys.stderr,
                )

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __call__(self) -> bool:
        """Whether to stop: what an evaluation asks between batches."""
        return self.signum is not None

    @property
    def status(self) -> str:
        """The run's status when it stops for this signal."""
        return "interrupted" if self.signum == signal.SIGINT else "preempted"

    @property
    def reason(self) -> str:
        return f"signal {signal.Signals(self.signum).name}" if self.signum is not None else ""

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def chain(self) -> None:
        """Hand a scheduler's signal on to the handler that was there before us (e.g.
        submitit's requeue); never Ctrl-C, whose default handler would raise."""
        if self.signum == signal.SIGINT:
            return
        previous = self._previous.get(self.signum) if self.signum is not None else None
        if callable(previous):
            previous(self.signum, None)


class EvaluationInterrupted(Exception):
    """An evaluation stopped between batches because the run was asked to stop."""


def was_preempted(run_dir: Path) -> bool:
    """True if the last run in `run_dir` stopped on a pre-emption signal: a job that a scheduler
    (submitit, SLURM) starts again with the same arguments continues where it stopped."""
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("status") == "preempted"
    except (OSError, ValueError, AttributeError):
        return False


def requeued() -> bool:
    """True in a SLURM job that was requeued (its earlier attempt left a checkpoint)."""
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT", "0")) > 0
    except ValueError:
        return False


def rng_state(train_gen: torch.Generator) -> dict[str, Any]:
    """Every random state a step draws from: torch's, Python's, numpy's, CUDA's and the batches'."""
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "train_generator": train_gen.get_state(),
    }
    with contextlib.suppress(ImportError):
        import numpy as np

        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = (kind, keys.tolist(), pos, has_gauss, cached)
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], train_gen: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    train_gen.set_state(state["train_generator"])
    if "numpy" in state:
        with contextlib.suppress(ImportError):
            import numpy as np

            kind, keys, pos, has_gauss, cached = state["numpy"]
            np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def check_same_run(saved: dict[str, Any], cfg: dict[str, Any]) -> None:
    """A checkpoint only resumes the run it came from: same mixer, model, task and seed."""
    for group in ("mixer", "model", "task"):
        old, new = saved.get(group), cfg.get(group)
        if old != new:
            raise ConfigError(
                f"train.resume=true: the checkpoint was trained with {group}={saved.get(group)} "
                f"but this run has {group}={cfg.get(group)}; resume with the same {group} "
                "settings or use a new run directory"
            )
    if saved["train"]["seed"] != cfg["train"]["seed"]:
        raise ConfigError(
            f"train.resume=true: checkpoint has train.seed={saved['train']['seed']}, this run "
            f"train.seed={cfg['train']['seed']}; allowed: the checkpoint's seed"
        )


def checkpoint_to_resume(
    run_dir: Path, resume: bool, plain_cfg: dict[str, Any]
) -> tuple[dict[str, Any], Path] | None:
    """The checkpoint in `run_dir` this run continues from, or None for a fresh start. A run
    resumes when asked (`train.resume`), when SLURM requeued it, or when the last run here was
    pre-empted; a run that was not asked to resume never overwrites one that has a checkpoint."""
    ckpt_dir = run_dir / "checkpoints"
    resume = resume or requeued() or was_preempted(run_dir)
    has_ckpt = any((ckpt_dir / n).exists() for n in ("last.pt", "prev.pt"))
    if has_ckpt and not resume:
        raise ConfigError(
            f"{run_dir} already holds a checkpoint; pass train.resume=true to continue "
            "that run, or choose another directory (hydra.run.dir=... for a run, "
            "hydra.sweep.dir=... for a sweep); nothing was written"
        )
    loaded = load_checkpoint(ckpt_dir) if resume else None
    if resume and loaded is None:
        warnings.warn(
            f"train.resume=true but {ckpt_dir} has no checkpoint; starting fresh", stacklevel=3
        )
    if loaded is not None:
        check_same_run(loaded[0]["config"], plain_cfg)
    return loaded
