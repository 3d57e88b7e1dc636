"""The ablation trainer: `python -m attnzoo.train key=value ...` (Hydra).

One command trains one configuration (mixer × model × task × train × logger, see conf/); `-m`
sweeps. A run directory holds `.hydra/config.yaml`, `metrics.jsonl`, `checkpoints/last.pt` (and
`prev.pt`), `rank_decay.png`, `wandb/` and `summary.json`.

Python API (the same as the CLI): `compose(overrides) -> DictConfig`, `run(cfg, run_dir) -> dict`.

Exit codes of the CLI (single run): 0 completed, 1 failed (an exception; see summary.json),
2 bad configuration (nothing was trained), 3 diverged (non-finite loss or gradient with
`train.on_nonfinite=stop`), 75 pre-empted (SIGTERM/SIGUSR1: a checkpoint was written at the next
step boundary; run again with `train.resume=true`).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from attnzoo import distributed
from attnzoo.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from attnzoo.config import (
    ConfigError,
    enum_value,
    options,
    register_configs,
    resolve_data_dir,
    validate,
)
from attnzoo.model import Model, ModelConfig
from attnzoo.rank import rank_profile
from attnzoo.tasks import Batch, Task, build_task
from attnzoo.tracking import MetricsFile, WandbRun, rank_figure

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_DIVERGED, EXIT_PREEMPTED = 0, 1, 2, 3, 75
EXIT_CODES = {"completed": EXIT_OK, "failed": EXIT_FAILED, "diverged": EXIT_DIVERGED}
EXIT_CODES["preempted"] = EXIT_PREEMPTED

register_configs()

_CONF_MODULE = "attnzoo.conf"
# Hydra 1.4 deprecates `version_base`; 1.3 wants it (1.3's defaults: no chdir into the run dir).
_HYDRA_MAJOR_MINOR = tuple(int(x) for x in hydra.__version__.split(".")[:2])
_VERSION_BASE: dict[str, Any] = {} if _HYDRA_MAJOR_MINOR >= (1, 4) else {"version_base": "1.3"}


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """The configuration `python -m attnzoo.train *overrides` would train (without its `hydra`
    node). Raises Hydra's errors for unknown keys, wrong types and unknown choices."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return hydra_compose("config", overrides=list(overrides))
    with initialize_config_module(config_module=_CONF_MODULE, **_VERSION_BASE):
        return hydra_compose("config", overrides=list(overrides))


# --------------------------------------------------------------------------------------------
# Building the pieces


def _launch_dir() -> Path:
    """Where the command was started (Hydra may have changed into the run directory)."""
    with contextlib.suppress(Exception):
        from hydra.utils import get_original_cwd

        return Path(get_original_cwd())
    return Path.cwd()


def _hydra_runtime() -> Any | None:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get() if HydraConfig.initialized() else None


def build_task_and_model(cfg: DictConfig, data_dir: Path) -> tuple[Task, Model]:
    """The task and the model `cfg` describes; constructor errors become ConfigErrors that name
    the config group they came from."""
    task_name, mixer_name = cfg.task.name, cfg.mixer.name
    try:
        task = build_task(task_name, str(data_dir), int(cfg.train.seed), **options(cfg.task))
    except (ValueError, FileNotFoundError) as err:
        raise ConfigError(f"task={task_name}: {err}") from err
    m = cfg.model
    positions = m.max_len if m.max_len is not None else task.max_len
    if task.max_len > positions:
        key = "task.seq_len" if "seq_len" in cfg.task else f"task={task_name}"
        raise ConfigError(
            f"{key}: the task's context is {task.max_len} tokens but the model has "
            f"model.max_len={positions} positions; allowed: a context <= model.max_len "
            f"(raise model.max_len to >= {task.max_len} or set it to null)"
        )
    model_cfg = ModelConfig(
        dim=m.dim,
        depth=m.depth,
        heads=m.heads,
        mixer=mixer_name,
        mixer_options=options(cfg.mixer),
        skip=m.skip,
        mlp=m.mlp,
        mlp_ratio=m.mlp_ratio,
        norm=enum_value(m.norm),
        norm_position=enum_value(m.norm_position),
        layer_scale=m.layer_scale,
        dropout=m.dropout,
        pos_emb=enum_value(m.pos_emb),
        share_blocks=m.share_blocks,
        causal=task.causal,
        impl=enum_value(cfg.impl),
    )
    torch.manual_seed(int(cfg.train.seed))
    try:
        model = Model(
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
        where = ", ".join(keys) if keys else f"mixer={mixer_name} with model.*"
        raise ConfigError(f"{where}: {err}") from err
    return task, model


def lr_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warmup over `warmup` steps, then cosine from 1 down to `min_ratio` at `total`."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def _device(cfg: DictConfig) -> torch.device:
    choice = enum_value(cfg.train.device)
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def _autocast(device: torch.device) -> contextlib.AbstractContextManager:
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


# --------------------------------------------------------------------------------------------
# Pre-emption


class Preemption:
    """SIGTERM and SIGUSR1 (SLURM's warning before a time limit) set a flag; the loop checkpoints
    at the next step boundary and stops. A handler that was installed before ours (submitit's, for
    SIGUSR2 too) is called after our checkpoint, so submitit can requeue the job."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        signals = [signal.SIGTERM, signal.SIGUSR1]
        if callable(signal.getsignal(signal.SIGUSR2)):  # someone (submitit) listens to USR2
            signals.append(signal.SIGUSR2)
        for sig in signals:
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def chain(self) -> None:
        """Hand the signal on to the handler that was there before us (e.g. submitit's requeue)."""
        previous = self._previous.get(self.signum) if self.signum is not None else None
        if callable(previous):
            previous(self.signum, None)


def _was_preempted(run_dir: Path) -> bool:
    """True if the last run in `run_dir` stopped on a pre-emption signal: a job that a scheduler
    (submitit, SLURM) starts again with the same arguments continues where it stopped."""
    import json

    try:
        return json.loads((run_dir / "summary.json").read_text()).get("status") == "preempted"
    except (OSError, ValueError, AttributeError):
        return False


def _requeued() -> bool:
    """True in a SLURM job that was requeued (its earlier attempt left a checkpoint)."""
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT", "0")) > 0
    except ValueError:
        return False


# --------------------------------------------------------------------------------------------
# Evaluation


@torch.no_grad()
def evaluate(
    model: Model, task: Task, cfg: DictConfig, device: torch.device
) -> dict[str, float | str]:
    """Validation loss and the task's metrics, averaged over `train.eval_batches` batches that are
    the same at every evaluation; for language models also a sample text."""
    model.eval()
    gen = torch.Generator().manual_seed(int(cfg.train.seed) + 1)
    sums: dict[str, float] = {}
    n = int(cfg.train.eval_batches)
    try:
        for _ in range(n):
            batch = task.batch("val", int(cfg.train.batch_size), gen).to(device)
            with _autocast(device):
                logits = model(batch.inputs, batch.key_padding_mask)
            values = {"loss": task.loss(logits, batch).item(), **task.metrics(logits, batch)}
            for k, v in values.items():
                sums[k] = sums.get(k, 0.0) + float(v)
        out: dict[str, float | str] = {f"val/{k}": v / n for k, v in sums.items()}
        text = task.sample_text(model, torch.Generator().manual_seed(int(cfg.train.seed) + 2))
        if text is not None:
            out["val/sample_text"] = text
    finally:
        model.train()
    return out


def probe_batch(task: Task, cfg: DictConfig, device: torch.device) -> Batch:
    gen = torch.Generator().manual_seed(int(cfg.train.seed) + 3)
    return task.batch("val", int(cfg.train.probe_batch_size), gen).to(device)


def rank_record(model: Model, probe: Batch) -> dict[str, float]:
    """`rank/layer_<i>` for every hidden state (0: the embedding, i: the output of block i) and
    `rank/last`, on the fixed probe batch."""
    profile = rank_profile(model, probe.inputs, probe.key_padding_mask)
    out = {f"rank/layer_{i}": float(r) for i, r in enumerate(profile.mean)}
    out["rank/last"] = float(profile.mean[-1])
    return out


# --------------------------------------------------------------------------------------------
# The run


def _rng_state(train_gen: torch.Generator) -> dict[str, Any]:
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


def _set_rng_state(state: dict[str, Any], train_gen: torch.Generator) -> None:
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


def _check_same_run(saved: dict[str, Any], cfg: dict[str, Any]) -> None:
    """A checkpoint only resumes the run it came from: same mixer, model, task and seed."""
    for group in ("mixer", "model", "task"):
        if saved.get(group) != cfg.get(group):
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


def _write_json(path: Path, data: dict[str, Any]) -> None:
    import json

    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def _default_run_dir() -> Path:
    hc = _hydra_runtime()
    if hc is not None:
        return Path(hc.runtime.output_dir)
    return Path("outputs") / time.strftime("%Y-%m-%d/%H-%M-%S")


def _wandb_group(cfg: DictConfig) -> str | None:
    if cfg.logger.group:
        return str(cfg.logger.group)
    hc = _hydra_runtime()
    if hc is not None and enum_value(hc.mode) is not None and str(hc.mode).endswith("MULTIRUN"):
        return Path(hc.sweep.dir).name
    return None


def _wandb_name(cfg: DictConfig) -> str | None:
    if cfg.logger.name:
        return str(cfg.logger.name)
    hc = _hydra_runtime()
    if hc is not None and hc.job.override_dirname:
        return f"{hc.job.override_dirname}"
    return None


def run(cfg: DictConfig, run_dir: Path | None = None) -> dict[str, Any]:
    """Train the configuration `cfg` in `run_dir` (default: Hydra's output directory, else
    `outputs/<date>/<time>`) and return the summary that is also written to `summary.json`.

    Raises ConfigError (a ValueError) for a configuration that cannot be trained, before any
    work; re-raises any exception from training after recording status "failed". Non-finite
    numbers (status "diverged") and SIGTERM/SIGUSR1 (status "preempted") return normally.
    """
    run_dir = Path(run_dir) if run_dir is not None else _default_run_dir()
    try:
        return _run(cfg, run_dir)
    finally:
        distributed.teardown()


def _run(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    device = distributed.setup(_device(cfg))  # under torchrun: join the group, pick the GPU
    run_dir = Path(distributed.broadcast(str(run_dir)))  # every rank works in rank 0's folder
    main = distributed.is_main()
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt_dir = run_dir / "checkpoints"
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
    try:
        validate(cfg)
        data_dir = resolve_data_dir(cfg.data_dir, _launch_dir())
        task, model = build_task_and_model(cfg, data_dir)
        if (
            enum_value(cfg.impl) == "triton"
            and device.type != "cuda"
            and os.environ.get("TRITON_INTERPRET") != "1"
        ):
            raise ConfigError(
                f"impl=triton needs a CUDA device, and this run is on {device.type}; allowed "
                "here: impl=auto or impl=torch (or TRITON_INTERPRET=1 to run the Triton kernels "
                "in the interpreter, slowly)"
            )
        plain_cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
        assert isinstance(plain_cfg, dict)
        plain_cfg["data_dir"] = str(data_dir)
        resume = bool(cfg.train.resume) or _requeued() or _was_preempted(run_dir)
        has_ckpt = any((ckpt_dir / n).exists() for n in ("last.pt", "prev.pt"))
        if has_ckpt and not resume:
            raise ConfigError(
                f"{run_dir} already holds a checkpoint; pass train.resume=true to continue "
                "that run, or choose another directory (hydra.run.dir=...)"
            )
        loaded = load_checkpoint(ckpt_dir) if resume else None
        if resume and loaded is None:
            warnings.warn(
                f"train.resume=true but {ckpt_dir} has no checkpoint; starting fresh", stacklevel=2
            )
        if loaded is not None:
            _check_same_run(loaded[0]["config"], plain_cfg)
    except (ConfigError, CheckpointError) as err:
        summary["error"] = str(err)
        if main:
            _write_json(run_dir / "summary.json", summary)
        raise
    hydra_cfg = run_dir / ".hydra" / "config.yaml"
    if main and not hydra_cfg.exists():  # the Python API: leave the same record the CLI leaves
        hydra_cfg.parent.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(cfg, hydra_cfg)
    return _train(cfg, plain_cfg, task, model, device, run_dir, loaded, summary)


def _train(
    cfg: DictConfig,
    plain_cfg: dict[str, Any],
    task: Task,
    model: Model,
    device: torch.device,
    run_dir: Path,
    loaded: tuple[dict[str, Any], Path] | None,
    summary: dict[str, Any],
) -> dict[str, Any]:
    t = cfg.train
    torch.set_num_threads(int(t.threads))
    if t.deterministic:
        torch.use_deterministic_algorithms(True)
    ckpt_dir = run_dir / "checkpoints"
    model.to(device)
    summary["params"] = model.num_parameters()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": float(t.weight_decay)},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=float(t.lr),
        betas=(float(t.beta1), float(t.beta2)),
    )
    max_steps = int(t.max_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: lr_factor(s, int(t.warmup_steps), max_steps, float(t.min_lr_ratio)),
    )
    train_gen = torch.Generator().manual_seed(distributed.stream_seed(int(t.seed)))
    main = distributed.is_main()
    trained = distributed.wrap(model, device)  # DDP under torchrun: gradients averaged
    world = distributed.world_size()
    step, best, rank_history, wandb_id, skipped = 0, {}, [], None, 0
    resumed_from, last_good = None, None
    if loaded is not None:
        state, path = loaded
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        _set_rng_state(state["rng"], train_gen)
        if not main:
            train_gen.manual_seed(distributed.stream_seed(int(t.seed), int(state["step"])))
        step, best = int(state["step"]), dict(state.get("best", {}))
        rank_history = [tuple(x) for x in state.get("rank_history", [])]
        wandb_id, skipped = state.get("wandb_id"), int(state.get("skipped_steps", 0))
        resumed_from = step
        last_good = path
        print(f"resuming from {path} at step {step}", file=sys.stderr)
    summary["resumed_from"] = resumed_from
    if main:
        metrics = MetricsFile(
            run_dir / "metrics.jsonl", truncate_after_step=step if loaded else None
        )
    else:
        metrics = distributed.Discard()
    wb = WandbRun(
        mode=enum_value(cfg.logger.mode) if main else "disabled",
        run_dir=run_dir,
        config=_flat(plain_cfg),
        project=str(cfg.logger.project),
        entity=cfg.logger.entity,
        group=_wandb_group(cfg),
        job_type=str(cfg.mixer.name),
        name=_wandb_name(cfg),
        tags=list(cfg.logger.tags),
        resume_id=wandb_id,
        init_timeout=float(cfg.logger.init_timeout),
    )
    summary["wandb"] = {"id": wb.id, "dir": wb.dir, "mode": wb.mode if wb.active else "disabled"}
    probe = probe_batch(task, cfg, device)
    preempt = Preemption()
    preempt.install()
    higher_is_better = task.higher_is_better
    main_metric = f"val/{task.metric}"

    def checkpoint() -> None:
        if not main:
            return
        state = {
            "version": 1,
            "step": step,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": _rng_state(train_gen),
            "config": plain_cfg,
            "best": best,
            "rank_history": rank_history,
            "wandb_id": wb.id or wandb_id,
            "skipped_steps": skipped,
        }
        save_checkpoint(state, ckpt_dir)
        metrics.sync()

    def do_eval(record: dict[str, Any]) -> None:
        nonlocal best
        values = evaluate(model, task, cfg, device)
        ranks = rank_record(model, probe)
        record.update(values)
        record.update(ranks)
        depth_ranks = [ranks[f"rank/layer_{i}"] for i in range(len(ranks) - 1)]
        rank_history.append((step, depth_ranks))
        vloss = values.get("val/loss")
        if isinstance(vloss, float) and vloss < best.get("val/loss", math.inf):
            best["val/loss"] = vloss
        mv = values.get(main_metric)
        if isinstance(mv, float):
            old = best.get(main_metric)
            if old is None or (mv > old if higher_is_better else mv < old):
                best[main_metric] = mv
        if "val/sample_text" in values:
            _print(f"[step {step}] sample: {values['val/sample_text']}")
        fig = rank_figure(rank_history, title=f"{cfg.mixer.name} on {cfg.task.name}")
        try:
            if main:
                fig.savefig(run_dir / "rank_decay.png")
            if wb.active:
                _log_rank_media(wb, fig, rank_history, step)
            if wb.active and cfg.logger.attention_maps:
                _log_attention_media(wb, model, probe, step)
        finally:
            import matplotlib.pyplot as plt

            plt.close(fig)

    bar = _progress(bool(t.progress), max_steps, step)
    _print = bar.write if bar is not None else (lambda s: print(s, file=sys.stderr))
    status, error, exit_reason = "completed", None, None
    start_step, t_start = step, time.perf_counter()
    t_interval, tokens_interval, loss_sum, loss_count = time.perf_counter(), 0, 0.0, 0
    try:
        model.train()
        if step == 0:
            record: dict[str, Any] = {"step": 0}
            do_eval(record)
            metrics.write(record)
            wb.log(record, step=0)
        while step < max_steps:
            if preempt.requested:
                status = "preempted"
                exit_reason = f"signal {signal.Signals(preempt.signum).name} at step {step}"
                break
            batch = task.batch("train", int(t.batch_size), train_gen).to(device)
            with _autocast(device):
                logits = trained(batch.inputs, batch.key_padding_mask)
            loss = task.loss(logits, batch)
            bad = None
            if not distributed.all_true(bool(torch.isfinite(loss)), device):
                bad = f"loss ({loss.item()})"
            else:
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                clip = float(t.grad_clip) if t.grad_clip > 0 else math.inf
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                if not torch.isfinite(grad_norm):
                    bad = f"gradient norm ({grad_norm.item()})"
            if bad is not None:
                where = f"non-finite {bad} at step {step + 1}"
                if enum_value(t.on_nonfinite) == "stop":
                    status = "diverged"
                    kept = f"; the last good checkpoint {last_good} is kept" if last_good else ""
                    error = f"{where}; stopping (train.on_nonfinite=stop){kept}"
                    _print(f"error: {error}")
                    break
                skipped += 1
                optimizer.zero_grad(set_to_none=True)
                _print(f"warning: {where}; step skipped (train.on_nonfinite=skip)")
            else:
                optimizer.step()
                loss_sum += loss.item()
                loss_count += 1
            scheduler.step()
            step += 1
            tokens_interval += batch.inputs.shape[0] * batch.inputs.shape[1] * world
            is_eval = step % int(t.eval_every) == 0 or step == max_steps
            if step % int(t.log_every) == 0 or is_eval:
                now = time.perf_counter()
                record = {
                    "step": step,
                    "train/loss": loss_sum / loss_count if loss_count else math.nan,
                    "train/lr": optimizer.param_groups[0]["lr"],
                    "train/grad_norm": float(grad_norm) if bad is None else math.nan,
                    "perf/tokens_per_s": tokens_interval / max(now - t_interval, 1e-9),
                }
                if skipped:
                    record["train/skipped_steps"] = skipped
                if is_eval:
                    do_eval(record)
                metrics.write(record)
                wb.log(record, step=step)
                if bar is not None:
                    bar.set_postfix(
                        loss=f"{record['train/loss']:.4f}",
                        tok_s=f"{record['perf/tokens_per_s']:.0f}",
                    )
                loss_sum, loss_count, tokens_interval = 0.0, 0, 0
                t_interval = time.perf_counter()
            if bar is not None:
                bar.update(1)
            if step % int(t.ckpt_every) == 0 and step < max_steps:
                checkpoint()
                last_good = ckpt_dir / "last.pt"
        if status in ("completed", "preempted"):
            checkpoint()
    except BaseException as err:
        status = "failed"
        error = f"{type(err).__name__}: {err}"
        raise
    finally:
        elapsed = time.perf_counter() - t_start
        if bar is not None:
            bar.close()
        preempt.uninstall()
        metrics.close()
        last = metrics_last(run_dir / "metrics.jsonl")
        summary.update(
            status=status,
            step=step,
            steps_per_s=(step - start_step) / elapsed if elapsed > 0 else 0.0,
            final=last,
            error=error,
            best=best,
            skipped_steps=skipped,
        )
        if exit_reason:
            summary["preempted_by"] = exit_reason
        wb.summary(
            {
                **{f"best/{k}": v for k, v in best.items()},
                "final/rank_last": last.get("rank/last"),
                "status": status,
            }
        )
        wb.finish(exit_code=EXIT_CODES.get(status, EXIT_FAILED))
        if main:
            _write_json(run_dir / "summary.json", summary)
            _report(run_dir, summary, wb)
    if status == "preempted":
        preempt.chain()
    return summary


def metrics_last(path: Path) -> dict[str, Any]:
    """The latest value of every scalar key in `metrics.jsonl` (what summary.json calls final)."""
    import json

    final: dict[str, Any] = {}
    if not path.exists():
        return final
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            for k, v in json.loads(line).items():
                if k != "step" and isinstance(v, (int, float)):
                    final[k] = v
    return final


def _log_rank_media(
    wb: WandbRun, fig: Any, history: Sequence[tuple[int, Sequence[float]]], step: int
) -> None:
    """The rank table, rank-vs-depth line series and the matplotlib figure, as W&B media."""
    wandb = wb.wandb
    try:
        rows = [[s, layer, float(r)] for s, ranks in history for layer, r in enumerate(ranks)]
        table = wandb.Table(columns=["step", "layer", "relative_residual"], data=rows)
        depth = len(history[-1][1])
        series = wandb.plot.line_series(
            xs=list(range(depth)),
            ys=[list(map(float, ranks)) for _, ranks in history],
            keys=[f"step {s}" for s, _ in history],
            title="rank decay: relative residual vs depth",
            xname="layer",
        )
        media = {"rank/table": table, "rank/vs_depth": series, "rank/plot": wandb.Image(fig)}
    except Exception as err:
        wb._fail("building rank media", err)
        return
    wb.log(media, step=step)


def _log_attention_media(wb: WandbRun, model: Model, probe: Batch, step: int) -> None:
    """Attention maps per layer and head, and the learned U or M, as W&B images."""
    import matplotlib.pyplot as plt

    from attnzoo.attention_maps import (
        attention_maps,
        learned_matrices,
        maps_figure,
        matrices_figure,
    )

    figs = {}
    try:
        maps = attention_maps(model, probe.inputs, probe.key_padding_mask)
        if maps:
            figs["attention/maps"] = maps_figure(maps, step)
        mats = learned_matrices(model)
        if mats:
            figs["attention/learned_matrices"] = matrices_figure(mats, step)
        media = {k: wb.wandb.Image(f) for k, f in figs.items()}
    except Exception as err:
        wb._fail("building attention images", err)
        return
    finally:
        for f in figs.values():
            plt.close(f)
    if media:
        wb.log(media, step=step)


def _progress(enabled: bool, total: int, initial: int) -> Any | None:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, dynamic_ncols=True, mininterval=1.0, unit="step")


def _report(run_dir: Path, summary: dict[str, Any], wb: WandbRun) -> None:
    """Print where everything is and how to look at it."""
    d = run_dir.resolve()
    lines = [
        f"attnzoo.train: {summary['status']} at step {summary['step']}"
        + (f" ({summary['error']})" if summary.get("error") else ""),
        "  final          "
        + (
            "  ".join(
                f"{k}={v:.4g}"
                for k, v in summary.get("final", {}).items()
                if k.startswith("val/") or k == "rank/last"
            )
            or "(no evaluation yet)"
        ),
        f"  run directory  {d}",
        f"  metrics        {d / 'metrics.jsonl'}",
        f"  summary        {d / 'summary.json'}",
        f"  checkpoint     {d / 'checkpoints' / 'last.pt'}   "
        f"(continue: python -m attnzoo.train hydra.run.dir={d} train.resume=true)",
        f"  rank plot      {d / 'rank_decay.png'}",
    ]
    wandb_info = summary.get("wandb") or {}
    if wandb_info.get("mode") != "disabled" and wandb_info.get("dir"):
        run_folder = Path(wandb_info["dir"]).parent
        lines.append(f"  W&B run        {run_folder}")
        if wandb_info.get("mode") == "offline":
            lines.append(
                f"                 view: wandb leet {run_folder}   upload: wandb sync {run_folder}"
            )
    print("\n".join(lines), file=sys.stderr)


# --------------------------------------------------------------------------------------------
# The CLI

_exit_code = EXIT_OK


def task_function(cfg: DictConfig) -> dict[str, Any] | None:
    """One Hydra job. A module-level function (not the decorated one), so that launchers that
    ship jobs to other processes (joblib, submitit) pickle it by reference."""
    global _exit_code
    hc = _hydra_runtime()
    multirun = hc is not None and str(hc.mode).endswith("MULTIRUN")
    try:
        summary = run(cfg)
    except (ConfigError, CheckpointError) as err:
        if multirun:
            raise  # Hydra records the failed job and goes on with the others
        print(f"attnzoo.train: configuration error: {err}", file=sys.stderr)
        _exit_code = EXIT_CONFIG
        return None
    _exit_code = EXIT_CODES.get(summary["status"], EXIT_FAILED)
    return summary


def main() -> None:
    """`python -m attnzoo.train key=value ...`; see the module docstring for exit codes."""
    hydra.main(config_path="pkg://attnzoo.conf", config_name="config", **_VERSION_BASE)(
        task_function
    )()
    sys.exit(_exit_code)


if __name__ == "__main__":
    # Run the copy imported as attnzoo.train, not this __main__ module: launchers that ship jobs
    # to other processes (joblib, submitit) pickle the task function, by reference only when it
    # has an importable name; pickled by value it drags torch's module objects along and fails.
    from attnzoo.train import main as _main

    _main()
