"""The ablation trainer: `python -m attnzoo.train key=value ...` (Hydra).

One command trains one configuration (mixer × model × task × train × logger, see conf/); `-m`
sweeps. A run directory holds `.hydra/config.yaml`, `metrics.jsonl`, `checkpoints/last.pt` (and
`prev.pt`), `rank_decay.png`, `wandb/` and `summary.json`.

Python API (the same as the CLI): `compose(overrides) -> DictConfig`, `run(cfg, run_dir) -> dict`.

The rooms, in the order a run passes through them:
- `cli`: the Hydra entry point, `compose`, and the exit codes;
- `build`: a run from its config (device, task, model, W&B run, the checkpoint it resumes);
- `trainer`: the `Trainer` and its loop, evaluation, checkpoints and logging;
- `budget`: how long a run trains (steps, or a FLOPs or wall-time budget) and the compute it used;
- `rank_probe`: the rank probe's batch and the collapse measures it logs;
- `step`: one training step, its optimiser and LR schedule (also what scripts/bench_train.py runs);
- `resume`: pre-emption signals, random state, and the checks that a checkpoint is this run's;
- `continuing`: `--continue FOLDER`, a run or every unfinished job of a sweep from its folder;
- `footprint`: a command that trains nothing leaves every folder as it found it;
- `system`: how many threads a run uses on this machine.
"""

from attnzoo.train.budget import Budget, planned_steps
from attnzoo.train.build import build_model, build_task_and_model, device_for, run
from attnzoo.train.cli import compose, main, task_function
from attnzoo.train.rank_probe import by_depth, probe_batch, rank_record
from attnzoo.train.step import StepStats, TrainStep, build_optimizer, lr_factor
from attnzoo.train.system import AUTO_FLOP_PER_THREAD, available_cores, busy_cores, threads_for
from attnzoo.train.trainer import (
    EXIT_CODES,
    EXIT_CONFIG,
    EXIT_DIVERGED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PREEMPTED,
    Trainer,
    evaluate,
    evaluate_splits,
    extras_due,
)

__all__ = [
    "AUTO_FLOP_PER_THREAD",
    "Budget",
    "EXIT_CODES",
    "EXIT_CONFIG",
    "EXIT_DIVERGED",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_PREEMPTED",
    "StepStats",
    "TrainStep",
    "Trainer",
    "available_cores",
    "build_model",
    "build_optimizer",
    "build_task_and_model",
    "by_depth",
    "busy_cores",
    "compose",
    "device_for",
    "evaluate",
    "evaluate_splits",
    "extras_due",
    "lr_factor",
    "main",
    "planned_steps",
    "probe_batch",
    "rank_record",
    "run",
    "task_function",
    "threads_for",
]
