"""Resuming and pre-emption: the signals that stop a run at a step boundary, the random state a
checkpoint carries so that a resumed run continues exactly as an uninterrupted one, and the
checks that a checkpoint belongs to the run that resumes it."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import shlex
import signal
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from attnzoo import replicates
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


# What a continued run may set differently from the run it continues: where and how it logs,
# checkpoints and threads, its device (attnzoo.replicates.NON_SEMANTIC, the seed excepted), and
# `train.extend`, which lets its length change (`LENGTH_KEYS`, `check_same_run`).
MAY_CHANGE = (
    *(k for k in replicates.NON_SEMANTIC if k != replicates.REPLICATE_KEY),
    "train.extend",
)
CHANGEABLE = (
    "train.device, train.threads, train.progress, train.ckpt_every, logger.*, data_dir, and "
    "with train.extend=true train.max_steps (or a budget: train.max_flops, train.max_seconds)"
)
_ABSENT = "(not set)"
_DELETED = object()


def may_change(key: str) -> bool:
    """Whether a continued run may give the flat config key `key` another value."""
    return any(key == k or key.startswith(f"{k}.") for k in MAY_CHANGE)


def config_changes(saved: Mapping[str, Any], cfg: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Each flat key whose value differs between the run's recorded config `saved` and `cfg`, as
    (the run's value, this one's), less the keys a continued run may change."""
    old, new = replicates.flatten(saved), replicates.flatten(cfg)
    return {
        k: (old.get(k, _ABSENT), new.get(k, _ABSENT))
        for k in sorted(old.keys() | new.keys())
        if old.get(k, _ABSENT) != new.get(k, _ABSENT) and not may_change(k)
    }


# The keys that set how long a run trains: a continued run may change them with train.extend=true.
LENGTH_KEYS = ("train.max_steps", "train.max_flops", "train.max_seconds")


def check_same_run(
    saved: Mapping[str, Any], cfg: Mapping[str, Any], run_dir: Path | None = None, step: int = 0
) -> bool:
    """A run folder is only continued by the run it holds: `cfg` must equal the configuration the
    run recorded (`saved`) but for the keys a continued run may change (`MAY_CHANGE`); its length
    (`LENGTH_KEYS`) changes only with `train.extend=true`, and a step count may not end before
    the run's `step`. ConfigError naming each key that differs, with its two values, otherwise.
    Whether the run is extended (its length changes: `extended`)."""
    changes = config_changes(saved, cfg)
    length = {k: changes.pop(k) for k in LENGTH_KEYS if k in changes}
    extend = bool(cfg.get("train", {}).get("extend"))
    listed = [f"{k}: the run has {o!r}, this command {n!r}" for k, (o, n) in changes.items()]
    if length and not extend:
        listed += [f"{k}: the run has {o!r}, this command {n!r}" for k, (o, n) in length.items()]
        listed[-1] += (
            " (to train the run on to another length add train.extend=true: the learning rate "
            f"then decays from its value at step {step} to the floor at the new end)"
        )
    where = run_dir if run_dir is not None else "this folder"
    if listed:
        how = f": {continue_command(run_dir)}" if run_dir is not None else ""
        raise ConfigError(
            f"{where} holds a run of another configuration: {'; '.join(listed)}. Continuing a "
            f"run may only change {CHANGEABLE}; to continue the run as it was{how}"
        )
    steps = length.get("train.max_steps")
    if steps is not None and cfg["train"].get("max_flops") is None and int(steps[1]) < step:
        raise ConfigError(
            f"train.max_steps={steps[1]} is not allowed with train.extend=true: the run in "
            f"{where} is already at step {step}; allowed: >= {step}"
        )
    return bool(length)


def extended(saved: Mapping[str, Any], cfg: Mapping[str, Any]) -> bool:
    """Whether `cfg` continues the run that recorded `saved` to another length (`LENGTH_KEYS`)."""
    old, new = replicates.flatten(saved), replicates.flatten(cfg)
    return any(old.get(k) != new.get(k) for k in LENGTH_KEYS)


def _keys_of(cfg: DictConfig) -> set[str]:
    """Every dotted key of `cfg`, nodes included."""
    out = set()
    for key, value in cfg.items():
        out.add(str(key))
        if isinstance(value, DictConfig):
            out |= {f"{key}.{k}" for k in _keys_of(value)}
    return out


def continue_command(run_dir: Path) -> str:
    """The command that continues the run (or every unfinished job of the sweep) in `run_dir`,
    quoted for a POSIX shell: it pastes as it is printed, sweep job folders with `=` and `,`
    included."""
    return f"python -m attnzoo.train --continue {shlex.quote(str(run_dir.resolve()))}"


def checkpoint_to_resume(
    run_dir: Path, resume: bool, plain_cfg: dict[str, Any]
) -> tuple[dict[str, Any], Path] | None:
    """The checkpoint in `run_dir` this run continues from, or None for a fresh start. A run
    resumes when asked (`train.resume`), when SLURM requeued it, or when the last run here was
    pre-empted; a run that was not asked to resume never overwrites one that has a checkpoint,
    and one that resumes must be the run the folder recorded (`check_same_run`), also where a
    run was stopped before its first checkpoint."""
    ckpt_dir = run_dir / "checkpoints"
    resume = resume or requeued() or was_preempted(run_dir)
    has_ckpt = any((ckpt_dir / n).exists() for n in ("last.pt", "prev.pt"))
    if has_ckpt and not resume:
        raise ConfigError(
            f"{run_dir} already holds a checkpoint; to continue that run add train.resume=true "
            f"(or: {continue_command(run_dir)}), or choose another directory (hydra.run.dir=... "
            "for a run, hydra.sweep.dir=... for a sweep); nothing was written"
        )
    loaded = load_checkpoint(ckpt_dir) if resume else None
    if loaded is not None:
        check_same_run(loaded[0]["config"], plain_cfg, run_dir, int(loaded[0]["step"]))
        return loaded
    recorded = recorded_config(run_dir) if resume else None
    saved: Any = None
    if recorded is not None:
        with contextlib.suppress(Exception):  # a record that does not resolve here: not compared
            saved = OmegaConf.to_container(recorded, resolve=True, enum_to_str=True)
    if isinstance(saved, dict):
        check_same_run(saved, plain_cfg, run_dir, 0)
    if resume:
        warnings.warn(
            f"train.resume=true but {ckpt_dir} has no checkpoint; starting fresh", stacklevel=3
        )
    return None


def recorded_config(run_dir: Path) -> DictConfig | None:
    """The configuration the run in `run_dir` recorded when it was accepted (`.hydra/config.yaml`),
    with a relative `data_dir` taken from the folder its command ran in (`.hydra/hydra.yaml`);
    None where the folder holds no record."""
    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        return None
    try:
        recorded = OmegaConf.load(path)
    except Exception as err:
        raise ConfigError(f"{path}: the run's recorded configuration does not read: {err}") from err
    if not isinstance(recorded, DictConfig):
        raise ConfigError(f"{path}: the run's recorded configuration is not a mapping")
    data_dir = recorded.get("data_dir")
    if isinstance(data_dir, str) and data_dir and not Path(data_dir).expanduser().is_absolute():
        with contextlib.suppress(Exception):
            hydra_cfg = OmegaConf.load(run_dir / ".hydra" / "hydra.yaml")
            cwd = OmegaConf.select(hydra_cfg, "hydra.runtime.cwd", default=None)
            if cwd:
                recorded.data_dir = str(Path(str(cwd)) / data_dir)
    return recorded


def named_keys(
    overrides: Sequence[str], groups: Mapping[str, Any], cfg: DictConfig
) -> tuple[list[str], bool]:
    """The config keys a command line's `overrides` set: a key (`train.lr=0.1`, `~model.x`), or
    the node of a group it chooses (`mixer=pooling`: every `mixer.*`); and whether one chooses a
    group whose package is global (a preset, `experiment=...`), which may set any key. `groups`
    are Hydra's group choices (`hydra.runtime.choices`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys, preset = [], False
    for override in OverridesParser.create().parse_overrides([str(o) for o in overrides]):
        key = override.key_or_group
        if key.startswith("hydra"):
            continue
        if key in groups and key not in cfg:
            preset = True
        else:
            keys.append(key)
    return keys, preset


def continued_config(
    cfg: DictConfig, recorded: DictConfig, named: Sequence[str], preset: bool = False
) -> DictConfig:
    """The configuration a command that continues a run trains: the run's `recorded` one, with
    the keys the command line `named` (a key, or the node of a group it chose) taken from the
    command's `cfg`. So `hydra.run.dir=RUN train.resume=true` continues the run in RUN as it
    was, whatever the defaults; whether a named key may differ is `check_same_run`'s to say. A
    command that chooses a `preset`, which may set any key, trains its own `cfg`, but where and
    how the run logs, checkpoints and reads its data (`MAY_CHANGE`) stay as the run recorded
    them unless named."""
    if preset:
        out = copy.deepcopy(cfg)
        with read_write(out), open_dict(out):
            for key in MAY_CHANGE:
                value = OmegaConf.select(recorded, key, default=_DELETED)
                mine = any(f"{n}.".startswith(f"{key}.") or key.startswith(f"{n}.") for n in named)
                if value is not _DELETED and not mine and key in _keys_of(out):
                    OmegaConf.update(out, key, value, merge=True)
        return out
    from attnzoo.config import Config

    try:
        out = OmegaConf.merge(OmegaConf.structured(Config), recorded)
    except Exception as err:
        raise ConfigError(
            f"the run's recorded configuration does not fit this version's keys: {err}"
        ) from err
    assert isinstance(out, DictConfig)
    with open_dict(out):
        for key in named:
            value = OmegaConf.select(cfg, key, default=_DELETED)
            if value is _DELETED:  # a key the command deleted (~key)
                parent, _, leaf = key.rpartition(".")
                node = OmegaConf.select(out, parent) if parent else out
                if isinstance(node, DictConfig) and leaf in node:
                    del node[leaf]
            else:
                OmegaConf.update(out, key, value, merge=False, force_add=True)
    return out
