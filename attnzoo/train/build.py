"""Building a run from its configuration: the device, the task, the model, the W&B run, the
checkpoint it resumes from, and `run`, which checks all of it before any work and then hands it
to the `Trainer`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from attnzoo import distributed, replicates
from attnzoo.checkpoint import CheckpointError
from attnzoo.config import (
    ConfigError,
    DataError,
    enum_value,
    mixer_label,
    model_config,
    options,
    resolve_data_dir,
    swept_keys,
    validate,
)
from attnzoo.model import Model
from attnzoo.tasks import Task, build_task
from attnzoo.tasks._data import CorpusError
from attnzoo.tracking import WandbRun
from attnzoo.train.budget import planned_steps
from attnzoo.train.resume import checkpoint_to_resume, extended
from attnzoo.train.trainer import Trainer


def hydra_runtime() -> Any | None:
    """Hydra's runtime config inside `python -m attnzoo.train`; None from the Python API."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get() if HydraConfig.initialized() else None


def launch_dir() -> Path:
    """Where the command was started (Hydra may have changed into the run directory)."""
    with contextlib.suppress(Exception):
        from hydra.utils import get_original_cwd

        return Path(get_original_cwd())
    return Path.cwd()


def default_run_dir() -> Path:
    hc = hydra_runtime()
    if hc is not None:
        return Path(hc.runtime.output_dir)
    return Path("outputs") / time.strftime("%Y-%m-%d/%H-%M-%S")


def device_for(cfg: DictConfig) -> torch.device:
    """`train.device`, with `auto` the GPU when there is one."""
    choice = enum_value(cfg.train.device)
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def build_task_from(cfg: DictConfig, data_dir: Path) -> Task:
    """The task `cfg.task` describes; its constructor's errors name the task."""
    try:
        return build_task(cfg.task.name, str(data_dir), int(cfg.train.seed), **options(cfg.task))
    except CorpusError as err:
        raise DataError(f"task={cfg.task.name}: {err}") from err
    except (ValueError, FileNotFoundError) as err:
        raise ConfigError(f"task={cfg.task.name}: {err}") from err


def build_model(cfg: DictConfig, task: Task) -> Model:
    """The model `cfg.model` and `cfg.mixer` describe, shaped for `task`, initialised from
    `train.seed`; constructor errors become ConfigErrors naming the key to change."""
    m = cfg.model
    positions = m.max_len if m.max_len is not None else task.max_len
    if task.max_len > positions:
        key = "task.seq_len" if "seq_len" in cfg.task else f"task={cfg.task.name}"
        raise ConfigError(
            f"{key}: the task's context is {task.max_len} tokens but the model has "
            f"model.max_len={positions} positions; allowed: a context <= model.max_len "
            f"(raise model.max_len to >= {task.max_len} or set it to null)"
        )
    model_cfg = model_config(cfg, causal=task.causal)
    torch.manual_seed(int(cfg.train.seed))
    try:
        return Model(
            model_cfg,
            out_features=task.out_features,
            max_len=positions,
            vocab_size=task.vocab_size,
            in_features=task.in_features,
            head=task.head,
        )
    except ValueError as err:
        # Name the mixer option the message is about, so the user sees which key to change.
        opts = options(cfg.mixer)
        keys = [f"mixer.{k}={v!r}" for k, v in opts.items() if k in str(err)]
        where = ", ".join(keys) if keys else f"mixer={mixer_label(cfg.mixer)} with model.*"
        raise ConfigError(f"{where}: {err}") from err


def build_task_and_model(cfg: DictConfig, data_dir: Path) -> tuple[Task, Model]:
    """The task and the model `cfg` describes."""
    task = build_task_from(cfg, data_dir)
    return task, build_model(cfg, task)


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def sweep_name() -> str | None:
    """The multirun's folder name (None outside a multirun)."""
    hc = hydra_runtime()
    if hc is not None and str(hc.mode).endswith("MULTIRUN"):
        return Path(hc.sweep.dir).name
    return None


def wandb_identity(cfg: DictConfig, plain_cfg: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """How the run shows in W&B. Group: `logger.group`, else the configuration without its seed
    (`attnzoo.replicates.group_name`), so that W&B's grouped panels show mean and spread over the
    replicates; job type: the mixer; tags: task, mixer, the ablation switches off their defaults,
    the sweep, then `logger.tags`; name: `logger.name`, else the job's overrides with its seed."""
    hc, lg = hydra_runtime(), cfg.logger
    config_group = group_of(plain_cfg, run_dir)
    sweep = sweep_name()
    name = lg.name
    if not name and hc is not None and hc.job.override_dirname:
        name = str(hc.job.override_dirname)
        seed = f"{replicates.REPLICATE_KEY}={cfg.train.seed}"
        name = name if seed in name.split(",") else f"{name},{seed}"  # replicates told apart
    tags = replicates.tags(plain_cfg) + ([f"sweep:{sweep}"] if sweep else [])
    tags += [str(t) for t in lg.tags if str(t) not in tags]
    return {
        "group": str(lg.group) if lg.group else config_group,
        "job_type": mixer_label(cfg.mixer),
        "name": str(name) if name else None,
        "tags": [t[:64] for t in tags],  # W&B's limit on a tag
        "config_group": config_group,
        "sweep": sweep,
    }


def group_of(plain_cfg: dict[str, Any], run_dir: Path) -> str:
    """The run's configuration as a W&B group name (`attnzoo.replicates.group_name`), spelling
    out the job's overrides under Hydra."""
    hc = hydra_runtime()
    overrides = [str(o) for o in hc.overrides.task] if hc is not None else []
    if sweep_name() is not None:  # the values the sweep varies first: they tell groups apart
        swept = swept_keys(Path(hc.sweep.dir)) or set()
        key = lambda o: o.lstrip("+~").split("=", 1)[0]
        overrides.sort(key=lambda o: key(o) not in swept)
    return replicates.group_name(plain_cfg, replicates.run_folders(run_dir), overrides)


def open_wandb(
    cfg: DictConfig,
    plain_cfg: dict[str, Any],
    run_dir: Path,
    resume_id: str | None,
    recorded: dict[str, Any] | None = None,
) -> WandbRun:
    """The run's W&B run (disabled off the main process), named by `wandb_identity`; the config
    is logged flat, with `config_group` (the replicates' group) and `sweep` beside it. A resumed
    run keeps the identity it `recorded` in summary.json (its group, job type, tags, name and
    sweep), however it is continued: a sweep's job continued on its own stays in its sweep."""
    lg, who = cfg.logger, wandb_identity(cfg, plain_cfg, run_dir)
    for key in ("group", "job_type", "tags", "name", "sweep"):
        if recorded and recorded.get(key) is not None:
            who[key] = recorded[key]
    config = {**_flat(plain_cfg), "config_group": who["config_group"], "sweep": who["sweep"]}
    return WandbRun(
        mode=enum_value(lg.mode) if distributed.is_main() else "disabled",
        run_dir=run_dir,
        config=config,
        project=str(lg.project),
        entity=lg.entity,
        group=who["group"],
        job_type=who["job_type"],
        name=who["name"],
        tags=who["tags"],
        resume_id=resume_id,
        init_timeout=float(lg.init_timeout),
    )


def run(cfg: DictConfig, run_dir: Path | None = None) -> dict[str, Any]:
    """Train the configuration `cfg` in `run_dir` (default: Hydra's output directory, else
    `outputs/<date>/<time>`) and return the summary that is also written to `summary.json`.

    Raises ConfigError (a ValueError) for a configuration that cannot be trained, before any
    work and before anything is written: a refused run leaves `run_dir` as it found it (a folder
    Hydra made for it, still empty, is removed), so a finished run in that folder keeps its
    record. Re-raises any exception from training after recording status "failed". Non-finite
    numbers (status "diverged"), Ctrl-C ("interrupted") and SIGTERM/SIGUSR1 ("preempted")
    return normally.
    """
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir()
    made_for_us = hydra_runtime() is not None or not run_dir.exists()  # Hydra makes the folder
    try:
        device = distributed.setup(device_for(cfg))  # under torchrun: join the group, pick the GPU
        run_dir = Path(distributed.broadcast(str(run_dir)))  # every rank works in rank 0's folder
        try:
            plain_cfg, task, model, loaded = _prepare(cfg, run_dir, device)
        except (ConfigError, CheckpointError) as err:
            if distributed.is_main() and made_for_us and remove_if_empty(run_dir, launch_dir()):
                record_refusal(run_dir, err)
            raise
        previous = read_summary(run_dir) if loaded is not None else {}
        if loaded is not None and already_completed(previous, loaded[0], plain_cfg):
            if distributed.is_main():
                print(
                    f"attnzoo.train: {run_dir} already completed at step {previous['step']}; "
                    "nothing to do, nothing written (to train it further: train.extend=true "
                    "with a larger train.max_steps)",
                    file=sys.stderr,
                )
            return previous
        if distributed.is_main():
            save_configs(cfg, run_dir, resumed=loaded is not None)
        summary: dict[str, Any] = {
            "status": "failed",
            "step": 0,
            "steps_per_s": 0.0,
            "params": 0,
            "final": {},
            "error": None,
            "best": {},
            "run_dir": str(run_dir.resolve()),
        }
        summary["config_group"] = previous.get("config_group") or group_of(plain_cfg, run_dir)
        resume_id = loaded[0].get("wandb_id") if loaded is not None else None
        wb = open_wandb(cfg, plain_cfg, run_dir, resume_id, previous.get("wandb"))
        trainer = Trainer(cfg, plain_cfg, task, model, device, run_dir, loaded, wb, summary)
        return trainer.fit()
    finally:
        distributed.teardown()


def _prepare(
    cfg: DictConfig, run_dir: Path, device: torch.device
) -> tuple[dict[str, Any], Task, Model, tuple[dict[str, Any], Path] | None]:
    """Everything checked before any work, writing nothing: the config's values, the task and
    model, the device for `impl`, and the checkpoint a resumed run continues from."""
    validate(cfg)
    data_dir = resolve_data_dir(cfg.data_dir, launch_dir())
    task, model = build_task_and_model(cfg, data_dir)
    planned_steps(cfg, task, distributed.world_size())  # a budget that buys no step: an error now
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if enum_value(cfg.impl) == "triton" and device.type != "cuda" and not interpreted:
        raise ConfigError(
            f"impl=triton needs a CUDA device, and this run is on {device.type}; allowed "
            "here: impl=auto or impl=torch (or TRITON_INTERPRET=1 to run the Triton kernels "
            "in the interpreter, slowly)"
        )
    plain_cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    assert isinstance(plain_cfg, dict)
    plain_cfg["data_dir"] = str(data_dir)
    loaded = checkpoint_to_resume(run_dir, bool(cfg.train.resume), plain_cfg)
    return plain_cfg, task, model, loaded


def save_configs(cfg: DictConfig, run_dir: Path, resumed: bool = False) -> None:
    """`.hydra/config.yaml` (and, under Hydra, `hydra.yaml` and `overrides.yaml`): what Hydra
    writes into a job's folder, written here once the run is accepted, since conf/config.yaml
    turns Hydra's own early write off (`hydra.output_subdir: null`). A `resumed` run outside a
    sweep keeps the command line its run was started with (`overrides.yaml`, `hydra.yaml`:
    what the sweep summary places a job by); a sweep job rerun writes them with its sweep's
    `multirun.yaml`."""
    folder = run_dir / ".hydra"
    folder.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, folder / "config.yaml")
    hc = hydra_runtime()
    keep = resumed and sweep_name() is None and (folder / "overrides.yaml").exists()
    if hc is not None and not keep:
        from hydra.core.hydra_config import HydraConfig

        OmegaConf.save(HydraConfig.instance().cfg, folder / "hydra.yaml")
        OmegaConf.save(hc.overrides.task, folder / "overrides.yaml")


def read_summary(run_dir: Path) -> dict[str, Any]:
    """The run's `summary.json` ({} where there is none, or it does not read)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def already_completed(
    previous: dict[str, Any], state: dict[str, Any], plain_cfg: dict[str, Any]
) -> bool:
    """Whether continuing the run is a no-op: it completed at its checkpoint's step, and this
    command does not extend it (`train.extend` with another `train.max_steps` or budget)."""
    return (
        previous.get("status") == "completed"
        and previous.get("step") == int(state["step"])
        and not extended(state["config"], plain_cfg)
    )


def remove_if_empty(run_dir: Path, top: Path) -> bool:
    """Remove `run_dir`, if empty, and the parents Hydra made for it (e.g. `outputs/<date>/`)
    while they are empty, up to (not including) `top`: a refused run leaves no folder of its
    own. Whether `run_dir` was removed."""
    top, folder = top.resolve(), run_dir.resolve()
    removed = False
    while folder != top and top in folder.parents:
        try:
            folder.rmdir()  # only an empty folder
        except OSError:
            break
        removed = removed or folder == run_dir.resolve()
        folder = folder.parent
    return removed


def record_refusal(run_dir: Path, err: Exception) -> None:
    """A sweep job refused before it wrote anything leaves no folder; its reason goes to the
    sweep's `refused.jsonl` (one line per job, its overrides and the error), so that the sweep
    summary says which jobs were refused and why."""
    hc = hydra_runtime()
    if hc is None or not str(hc.mode).endswith("MULTIRUN"):
        return
    from attnzoo.analysis.runs import REFUSED_FILE

    entry = {"job": run_dir.name, "overrides": list(hc.overrides.task), "error": str(err)}
    sweep_dir = Path(hc.sweep.dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(sweep_dir / REFUSED_FILE, "a") as f:
        f.write(json.dumps(entry) + "\n")
