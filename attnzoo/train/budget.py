"""How long a run trains and what it used: a step count (`train.max_steps`), or instead a budget
of training FLOPs (`train.max_flops`) or of training wall time (`train.max_seconds`), so that a
mixer that is cheaper per step gets more steps at matched compute; and the compute a run records
(tokens seen, training FLOPs, seconds).

- `train.max_flops`: the step count is known up front, `floor(max_flops / (flops_per_token ×
  tokens_per_step))`, with the model's analytic training FLOPs per token from `attnzoo.flops`
  (the blocks' matmuls, backward = 2 × forward; embedding and head excluded) and
  `tokens_per_step = batch_size × context × processes`. It replaces `train.max_steps`; the LR
  schedule runs over it as over any step count.
- `train.max_seconds`: seconds spent *training* (steps and logging; evaluation, its extras and
  checkpoints are not counted, since a cheaper mixer evaluates more often in the same budget).
  The step count the LR schedule runs over is estimated once, from the training speed between the
  first log step and the first log step at least ESTIMATE_MIN_STEPS later (the first interval
  holds one-off costs: compilation, allocation), as the steps done plus the seconds left over the
  seconds per step; until then the schedule runs over `train.max_steps` (warmup is in steps
  anyway). The run stops at that step count or when the seconds are spent, whichever comes first.
  The estimate is kept in the checkpoint, so a resumed run keeps its schedule and the seconds it
  already used.
- Both: the step count from the FLOPs, and the clock may stop the run earlier.

The clock is read on the host only (no device synchronisation); under data parallelism rank 0's
clock decides, at log steps, so that every rank stops at the same step.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnzoo import distributed
from attnzoo.config import ConfigError, mixer_label, mixer_ref, options
from attnzoo.flops import flops_formula, train_flops_per_token
from attnzoo.tasks import Task

clock = time.perf_counter  # module-level, so that a test can run the budget on a fake clock
ESTIMATE_MIN_STEPS = 10


def flops_per_token(cfg: Mapping[str, Any], seq_len: int, causal: bool) -> float | None:
    """Training FLOPs per token of the blocks (attnzoo.flops) of the run `cfg` describes, at a
    context of `seq_len` tokens (`causal`: each query meets the keys before it). `cfg` is the
    run's resolved config: the trainer's DictConfig, or the mapping a run saved in
    `.hydra/config.yaml`, whose `mixer` node and `model.*` sizes are read as they are. None for a
    mixer without a formula (its class has no `flops_per_token`): its FLOPs are not available."""
    node, m = cfg["mixer"], cfg["model"]
    if not isinstance(node, DictConfig):
        node = OmegaConf.create(dict(node))
    try:
        mixer = mixer_ref(node)
    except ConfigError:  # a saved run's mixer that does not import here: not available
        return None
    if flops_formula(mixer) is None:
        return None
    return train_flops_per_token(
        mixer,
        dim=int(m["dim"]),
        depth=int(m["depth"]),
        heads=int(m["heads"]),
        seq_len=int(seq_len),
        causal=bool(causal),
        mlp=bool(m["mlp"]),
        mlp_ratio=float(m["mlp_ratio"]),
        mixer_options=options(node),
    )


def planned_steps(cfg: DictConfig, task: Task, world: int) -> int:
    """The step count the run trains to at most: `train.max_steps`, or the one `train.max_flops`
    buys; a ConfigError when the FLOPs cannot be counted or buy no step."""
    t = cfg.train
    if t.max_flops is None:
        return int(t.max_steps)
    per_token = flops_per_token(cfg, task.max_len, task.causal)
    per_step = (per_token or 0.0) * int(t.batch_size) * int(task.max_len) * world
    if per_step <= 0:
        raise ConfigError(
            f"train.max_flops={t.max_flops:g}: mixer={mixer_label(cfg.mixer)} with these model.* "
            "settings has no training FLOPs to count (attnzoo.flops counts the blocks' matmuls); "
            "allowed here: train.max_steps or train.max_seconds"
        )
    steps = math.floor(float(t.max_flops) / per_step)
    if steps < 1:
        raise ConfigError(
            f"train.max_flops={t.max_flops:g} buys no step: one step costs {per_step:.4g} FLOPs; "
            f"allowed: >= {per_step:.4g}"
        )
    return steps


@dataclass
class Budget:
    """The run's step count, its clock and the compute it used, across resumes."""

    steps: int  # the step count the run (and its LR schedule) runs to
    max_seconds: float | None
    flops_per_token: float | None
    by: str = "steps"  # what set `steps`: steps, flops, or seconds (once estimated)
    tokens: int = 0
    train_s: float = 0.0  # seconds training, all sessions
    wall_s: float = 0.0  # seconds in the loop, evaluation included, all sessions
    mark: tuple[int, float] | None = None  # (step, train_s) the speed is measured from
    stopped_by: str | None = None
    _session: dict[str, float] = field(default_factory=dict, repr=False)

    @classmethod
    def plan(cls, cfg: DictConfig, task: Task, world: int) -> Budget:
        t = cfg.train
        seconds = None if t.max_seconds is None else float(t.max_seconds)
        by = "flops" if t.max_flops is not None else "steps"
        per_token = flops_per_token(cfg, task.max_len, task.causal)
        return cls(planned_steps(cfg, task, world), seconds, per_token, by)

    @property
    def spent(self) -> bool:
        """A wall-time budget used up (e.g. by the run a resumed one continues)."""
        return self.max_seconds is not None and self.train_s >= self.max_seconds

    @property
    def flops(self) -> float | None:
        return None if self.flops_per_token is None else self.flops_per_token * self.tokens

    def start(self) -> None:
        """Start the clock of this process's part of the run (the loop begins; a resume starts another)."""
        now = clock()
        self._session = {"t0": now, "paused": 0.0, "train_s": self.train_s, "wall_s": self.wall_s}

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time inside is not training time (evaluation, checkpoints)."""
        start = clock()
        try:
            yield
        finally:
            self._session["paused"] += clock() - start

    def update(self) -> None:
        """Bring `train_s` and `wall_s` up to now."""
        s = self._session
        if not s:
            return  # the loop has not started
        elapsed = clock() - s["t0"]
        self.wall_s = s["wall_s"] + elapsed
        self.train_s = s["train_s"] + elapsed - s["paused"]

    def after_step(self, step: int, tokens: int, is_log: bool) -> bool:
        """Count a step's tokens; at log steps estimate the step count of a wall-time budget.
        Whether the run stops after `step`: its step count reached, or the seconds spent."""
        self.tokens += tokens
        timed = self.max_seconds is not None
        if timed and (is_log or distributed.world_size() == 1):
            self.update()
            out = self.train_s >= self.max_seconds
            if distributed.world_size() > 1:
                out = bool(distributed.broadcast(out))
            if out:
                self.stopped_by = "seconds"
                return True
            if is_log and self.by != "flops":
                self._estimate(step)
        if step >= self.steps:
            self.stopped_by = self.stopped_by or self.by
            return True
        return False

    def _estimate(self, step: int) -> None:
        """Fix the step count of a wall-time budget from the speed since `mark`."""
        if self.by == "seconds":
            return
        if self.mark is None:
            self.mark = (step, self.train_s)
            return
        done = step - self.mark[0]
        if done < ESTIMATE_MIN_STEPS:
            return
        per_step = max(self.train_s - self.mark[1], 1e-9) / done
        left = max(0.0, float(self.max_seconds or 0) - self.train_s)
        # rank 0's estimate on every rank: they must stop at the same step
        self.steps = int(distributed.broadcast(step + max(1, math.floor(left / per_step))))
        self.by = "seconds"

    def record(self) -> dict[str, Any]:
        """The cumulative numbers a log line carries (`compute/*`)."""
        return {
            "compute/tokens": self.tokens,
            "compute/flops": self.flops,
            "compute/train_s": self.train_s,
            "compute/wall_s": self.wall_s,
        }

    def summary(self) -> dict[str, Any]:
        """summary.json's `compute`."""
        return {
            "tokens": self.tokens,
            "flops": self.flops,
            "flops_per_token": self.flops_per_token,
            "train_s": self.train_s,
            "wall_s": self.wall_s,
            "steps_planned": self.steps,
            "planned_by": self.by,
            "max_seconds": self.max_seconds,
            "stopped_by": self.stopped_by,
        }

    def state_dict(self) -> dict[str, Any]:
        keys = ("steps", "by", "tokens", "train_s", "wall_s", "mark")
        return {k: getattr(self, k) for k in keys}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A resumed run keeps the compute used so far and a wall-time budget's estimate (its
        schedule); a step or FLOPs count comes from the config, so a run can be extended."""
        for k in ("tokens", "train_s", "wall_s"):
            if k in state:
                setattr(self, k, state[k])
        if self.max_seconds is not None and self.by != "flops":
            mark = state.get("mark")
            self.mark = (int(mark[0]), float(mark[1])) if mark is not None else None
            if state.get("by") == "seconds":
                self.steps, self.by = int(state["steps"]), "seconds"
