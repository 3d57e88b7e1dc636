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
from dataclasses import dataclass, field
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
    model: Model, task: Task, cfg: DictConfig, device: torch.device, sample: bool = True
) -> dict[str, float | str]:
    """Validation loss and the task's metrics, averaged over `train.eval_batches` batches that are
    the same at every evaluation; for language models and `sample` also a sample text."""
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
        seed = int(cfg.train.seed) + 2
        text = task.sample_text(model, torch.Generator().manual_seed(seed)) if sample else None
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
    return Trainer(cfg, plain_cfg, task, model, device, run_dir, loaded, summary).fit()


def threads_for(value: int | str, params: int, tokens_per_step: int, cores: int) -> int:
    """torch's intra-op threads for `train.threads`: an int as given; `auto` one thread per
    AUTO_FLOP_PER_THREAD of training work per step (6 x params x tokens), at least 1 and at most
    the idle `cores`. Small models lose more to handing work between threads than a second core
    gives them, and a thread on a core that another process keeps busy stalls all the others at
    every parallel region (README, "Threads": 3-4x slower on a loaded 2-core machine)."""
    if value != "auto":
        return int(value)
    flop_per_step = 6 * params * tokens_per_step
    return max(1, min(cores, int(flop_per_step // AUTO_FLOP_PER_THREAD)))


# On an idle 2-core CPU two threads beat one on the Shakespeare preset (~3.8 GFLOP a step: 50
# against 73 ms) and by less on the default job (~0.6 GFLOP: 14.7 against 19.9 ms), but when
# another process starts mid-run two threads can run 13x slower (README): a small job keeps one.
AUTO_FLOP_PER_THREAD = 1.5e9


def available_cores() -> int:
    """CPU cores this process may use and nobody else is using: its affinity mask (e.g. a SLURM
    allocation) shared among the data-parallel processes on this machine, less the cores other
    processes keep busy beyond what the mask leaves free (`busy_cores`)."""
    try:
        mask = os.sched_getaffinity(0)
        cores = len(mask)
    except AttributeError:  # pragma: no cover - platforms without affinity masks
        cores = os.cpu_count() or 1
    outside = (os.cpu_count() or cores) - cores  # cores this process may not use anyway
    busy = max(0, busy_cores() - outside)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    return max(1, (cores - busy) // max(1, local))


def busy_cores(window_s: float = 0.25, stat: Path = Path("/proc/stat")) -> int:
    """Cores other processes keep fully busy now: the machine's non-idle CPU time over a short
    window in which this process sleeps (/proc/stat), rounded down. Where there is no /proc/stat,
    the 1-minute load average instead, which lags: a job that ended a minute ago still counts
    there, and so a calm machine right after another run looked busy and got one thread."""

    def sample() -> tuple[int, int, int]:
        lines = stat.read_text().splitlines()
        fields = [int(v) for v in lines[0].split()[1:]]  # "cpu": every CPU's times summed
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
        return sum(fields[:8]), idle, cpus

    try:
        total0, idle0, cpus = sample()
        time.sleep(window_s)
        total1, idle1, _ = sample()
    except (OSError, ValueError, IndexError):
        try:
            return int(os.getloadavg()[0])
        except (OSError, AttributeError):  # pragma: no cover - no load average either
            return 0
    elapsed = total1 - total0
    if elapsed <= 0:
        return 0
    busy_share = 1.0 - (idle1 - idle0) / elapsed
    return int(busy_share * max(cpus, 1) + 0.25)  # a core 75% busy counts as busy


def extras_due(
    spent_s: float, last_cost_s: float, elapsed_s: float, budget: float, last: bool
) -> bool:
    """Whether an evaluation also makes the extras (sample text, rank figure, W&B media): always
    at the last evaluation; otherwise only while they stay within `budget` (a fraction, the
    `logger.media_budget`) of the wall time so far, counting the one about to be made (its cost
    guessed from the last) and keeping room for the last one. They cost seconds of plotting and
    image encoding per evaluation whatever the model, which on a fast run would dominate; the
    numbers (validation loss, metrics, rank profile) are measured at every evaluation."""
    if last or budget >= 1:
        return True
    cost = last_cost_s if last_cost_s > 0 else 5.0  # before the first: what a loaded CPU takes
    return spent_s + 2 * cost < budget * elapsed_s


def checks_on_device(device: torch.device) -> bool:
    """Whether non-finite steps are detected on the device and read by the host only at log,
    evaluation and checkpoint steps (CUDA: no per-step synchronisation), rather than after every
    step (CPU, where reading a number costs nothing)."""
    return device.type == "cuda"


class StepStats:
    """What the host reports about the steps since the last log line, kept on the device so that
    a step never waits for the host: the summed loss and count of the applied steps, the last
    gradient norm, and the non-finite steps (how many, the first one's step, loss and gradient
    norm). `read()` is the one synchronisation, at log steps."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.halted = torch.zeros((), dtype=torch.bool, device=device)  # stop: nothing more applies
        self.reset_interval()
        self.reset_nonfinite()

    def reset_interval(self) -> None:
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.applied = torch.zeros((), dtype=torch.int64, device=self.device)
        self.grad_norm = torch.full((), math.nan, dtype=torch.float64, device=self.device)

    def reset_nonfinite(self) -> None:
        self.bad = torch.zeros((), dtype=torch.int64, device=self.device)
        self.first_bad = torch.full((), -1, dtype=torch.int64, device=self.device)
        self.first_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        self.first_grad = torch.zeros((), dtype=torch.float64, device=self.device)

    def add(
        self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor, finite: torch.Tensor
    ) -> torch.Tensor:
        """Record step `step` (1-based) and return whether its update may be applied (a 0-d bool
        tensor): finite, and in stop mode no non-finite step before it."""
        loss64, norm64 = loss.detach().double(), grad_norm.detach().double()
        applied = finite & ~self.halted
        self.loss_sum += torch.where(applied, loss64, 0.0)
        self.applied += applied
        self.grad_norm = torch.where(applied, norm64, math.nan)
        first = ~finite & (self.first_bad < 0)
        self.first_bad = torch.where(first, step, self.first_bad)
        self.first_loss = torch.where(first, loss64, self.first_loss)
        self.first_grad = torch.where(first, norm64, self.first_grad)
        self.bad += ~finite
        return applied

    def read(self) -> dict[str, float]:
        values = torch.stack(
            [
                self.loss_sum,
                self.applied.double(),
                self.grad_norm,
                self.bad.double(),
                self.first_bad.double(),
                self.first_loss,
                self.first_grad,
            ]
        ).tolist()
        keys = ("loss_sum", "applied", "grad_norm", "bad", "first_bad", "first_loss", "first_grad")
        return dict(zip(keys, values, strict=True))


@dataclass
class Progress:
    """The run's own state beside the model, optimiser and scheduler: what a checkpoint holds."""

    step: int = 0
    best: dict[str, float] = field(default_factory=dict)
    rank_history: list[tuple[int, list[float]]] = field(default_factory=list)
    wandb_id: str | None = None
    skipped: int = 0


class Trainer:
    """One run, as a few named steps: `__init__` builds (optimiser, schedule, state from a
    checkpoint, logging), `train_step` is the hot path (no host synchronisation on CUDA),
    `evaluate`, `checkpoint`, `log` report, and `fit` is the loop that calls them."""

    def __init__(
        self,
        cfg: DictConfig,
        plain_cfg: dict[str, Any],
        task: Task,
        model: Model,
        device: torch.device,
        run_dir: Path,
        loaded: tuple[dict[str, Any], Path] | None,
        summary: dict[str, Any],
    ) -> None:
        t = cfg.train
        self.cfg, self.plain_cfg, self.task, self.device = cfg, plain_cfg, task, device
        self.run_dir, self.ckpt_dir, self.summary = run_dir, run_dir / "checkpoints", summary
        self.main = distributed.is_main()
        self.world = distributed.world_size()
        self.max_steps = int(t.max_steps)
        self.stop_on_nonfinite = enum_value(t.on_nonfinite) == "stop"
        self.on_device = checks_on_device(device)
        tokens = int(t.batch_size) * task.max_len
        saved = loaded[0].get("threads") if loaded is not None else None
        if t.threads == "auto" and saved is not None:
            self.threads = int(saved)  # as before: the thread count can change the rounding
        else:
            params = model.num_parameters()
            cores = available_cores() if t.threads == "auto" else 0  # sampled only when needed
            self.threads = threads_for(t.threads, params, tokens, cores)
        torch.set_num_threads(self.threads)
        summary["threads"] = self.threads
        if t.deterministic:
            torch.use_deterministic_algorithms(True)
        self.model = model.to(device)  # the eager module: checkpoints, evaluation, rank probes
        summary["params"] = model.num_parameters()
        self.optimizer = self._optimizer(model)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: lr_factor(s, int(t.warmup_steps), self.max_steps, float(t.min_lr_ratio)),
        )
        self.train_gen = torch.Generator().manual_seed(distributed.stream_seed(int(t.seed)))
        compiled = torch.compile(model) if t.compile else model
        self.trained = distributed.wrap(compiled, device)  # DDP under torchrun
        self.clip = float(t.grad_clip) if t.grad_clip > 0 else math.inf
        self.state = Progress()
        self.last_good: Path | None = None
        if loaded is not None:
            self._restore(*loaded)
        summary["resumed_from"] = self.state.step if loaded is not None else None
        self.metrics: MetricsFile | distributed.Discard = (
            MetricsFile(
                run_dir / "metrics.jsonl",
                truncate_after_step=self.state.step if loaded else None,
            )
            if self.main
            else distributed.Discard()
        )
        self.wb = WandbRun(
            mode=enum_value(cfg.logger.mode) if self.main else "disabled",
            run_dir=run_dir,
            config=_flat(plain_cfg),
            project=str(cfg.logger.project),
            entity=cfg.logger.entity,
            group=_wandb_group(cfg),
            job_type=str(cfg.mixer.name),
            name=_wandb_name(cfg),
            tags=list(cfg.logger.tags),
            resume_id=self.state.wandb_id,
            init_timeout=float(cfg.logger.init_timeout),
        )
        mode = self.wb.mode if self.wb.active else "disabled"
        summary["wandb"] = {"id": self.wb.id, "dir": self.wb.dir, "mode": mode}
        self.probe = probe_batch(task, cfg, device)
        self.stats = StepStats(device)
        self.evals_done = 0
        self.eval_s = 0.0  # seconds in evaluation, extras included
        self.extras_s, self.extras_cost = 0.0, 0.0  # seconds in extras; the last one's
        self.t_start = time.perf_counter()  # reset when the loop starts
        self.bar = _progress(bool(t.progress), self.max_steps, self.state.step)
        self.print = self.bar.write if self.bar is not None else _print_err

    def _optimizer(self, model: Model) -> torch.optim.Optimizer:
        """AdamW with weight decay on matrices only; fused on CUDA, where its `found_inf` input
        lets a non-finite step be skipped on the device."""
        t = self.cfg.train
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        return torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": float(t.weight_decay)},
                {"params": no_decay, "weight_decay": 0.0},
            ],
            lr=float(t.lr),
            betas=(float(t.beta1), float(t.beta2)),
            fused=True if self.on_device else None,
        )

    def _restore(self, state: dict[str, Any], path: Path) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        _set_rng_state(state["rng"], self.train_gen)
        step = int(state["step"])
        if not self.main:
            seed = distributed.stream_seed(int(self.cfg.train.seed), step)
            self.train_gen.manual_seed(seed)
        self.state = Progress(
            step=step,
            best=dict(state.get("best", {})),
            rank_history=[tuple(x) for x in state.get("rank_history", [])],
            wandb_id=state.get("wandb_id"),
            skipped=int(state.get("skipped_steps", 0)),
        )
        self.last_good = path
        print(f"resuming from {path} at step {step}", file=sys.stderr)

    # ---- the hot path ----------------------------------------------------------------------

    def next_batch(self) -> Batch:
        batch = self.task.batch("train", int(self.cfg.train.batch_size), self.train_gen)
        if self.device.type == "cuda":
            batch = batch.pin_memory()  # so that the copy below runs asynchronously
        return batch.to(self.device)

    def train_step(self, batch: Batch) -> bool | None:
        """Forward, backward, clipping and AdamW for one batch. A non-finite loss or gradient
        norm never reaches the weights: the update is skipped (on CUDA by the fused AdamW's
        `found_inf`, on the device). Returns on CPU whether the update was applied; None on CUDA,
        where nothing here waits for the device."""
        with _autocast(self.device):
            logits = self.trained(batch.inputs, batch.key_padding_mask)
        loss = self.task.loss(logits, batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        finite = distributed.all_finite(torch.isfinite(loss) & torch.isfinite(grad_norm))
        applied = self.stats.add(self.state.step + 1, loss, grad_norm, finite)
        ok: bool | None = None
        if self.on_device:
            self.optimizer.found_inf = (~applied).float()  # type: ignore[attr-defined]
            self.optimizer.step()
        else:
            ok = bool(applied)
            if ok:
                self.optimizer.step()
        if self.stop_on_nonfinite:
            self.stats.halted |= ~finite
        self.scheduler.step()
        self.state.step += 1
        return ok

    # ---- evaluation, checkpoints, reports --------------------------------------------------

    def evaluate(self, record: dict[str, Any], last: bool = False) -> None:
        """Validation numbers and rank profile into `record` and the best-so-far, at every
        evaluation; the extras (sample text, rank figure, W&B media) when `extras_due`."""
        start = time.perf_counter()
        state, cfg = self.state, self.cfg
        extras = extras_due(
            self.extras_s,
            self.extras_cost,
            start - self.t_start,
            float(cfg.logger.media_budget),
            last,
        )
        values = evaluate(self.model, self.task, cfg, self.device, sample=extras)
        ranks = rank_record(self.model, self.probe)
        record.update(values)
        record.update(ranks)
        state.rank_history.append(
            (state.step, [ranks[f"rank/layer_{i}"] for i in range(len(ranks) - 1)])
        )
        vloss = values.get("val/loss")
        if isinstance(vloss, float) and vloss < state.best.get("val/loss", math.inf):
            state.best["val/loss"] = vloss
        main_metric = f"val/{self.task.metric}"
        mv = values.get(main_metric)
        if isinstance(mv, float):
            old = state.best.get(main_metric)
            if old is None or (mv > old if self.task.higher_is_better else mv < old):
                state.best[main_metric] = mv
        if extras:
            extras_start = time.perf_counter()
            self.extras(values)
            self.extras_cost = time.perf_counter() - extras_start
            self.extras_s += self.extras_cost
        self.evals_done += 1
        self.eval_s += time.perf_counter() - start

    def extras(self, values: dict[str, Any]) -> None:
        """The sample text, rank_decay.png, and the W&B rank media and attention images."""
        state, cfg = self.state, self.cfg
        if "val/sample_text" in values:
            self.print(f"[step {state.step}] sample: {values['val/sample_text']}")
        fig = rank_figure(state.rank_history, title=f"{cfg.mixer.name} on {cfg.task.name}")
        try:
            image: Any = fig
            if self.main:
                image = self.run_dir / "rank_decay.png"
                fig.savefig(image)  # rendered once: W&B's image is this file
            if self.wb.active:
                _log_rank_media(self.wb, image, state.rank_history, state.step)
            if self.wb.active and cfg.logger.attention_maps:
                _log_attention_media(self.wb, self.model, self.probe, state.step)
        finally:
            import matplotlib.pyplot as plt

            plt.close(fig)

    def checkpoint(self) -> None:
        if not self.main:
            return
        state = self.state
        save_checkpoint(
            {
                "version": 1,
                "step": state.step,
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "rng": _rng_state(self.train_gen),
                "config": self.plain_cfg,
                "best": state.best,
                "rank_history": state.rank_history,
                "wandb_id": self.wb.id or state.wandb_id,
                "skipped_steps": state.skipped,
                "threads": self.threads,
            },
            self.ckpt_dir,
        )
        self.metrics.sync()
        self.last_good = self.ckpt_dir / "last.pt"

    def check_nonfinite(self) -> str | None:
        """Read the non-finite steps since the last check (one synchronisation); count skipped
        ones and warn, or return the error that stops the run (train.on_nonfinite=stop)."""
        s = self.stats.read()
        if not s["bad"]:
            return None
        self.stats.reset_nonfinite()
        first = int(s["first_bad"])
        what = (
            f"loss ({s['first_loss']})"
            if not math.isfinite(s["first_loss"])
            else f"gradient norm ({s['first_grad']})"
        )
        where = f"non-finite {what} at step {first}"
        if self.stop_on_nonfinite:
            late = f" (seen at step {self.state.step})" if self.state.step != first else ""
            kept = f"; the last good checkpoint {self.last_good} is kept" if self.last_good else ""
            self.state.step = first - 1  # the weights are those of the step before
            return f"{where}{late}; stopping (train.on_nonfinite=stop){kept}"
        n = int(s["bad"])
        self.state.skipped += n
        more = f" and {n - 1} more up to step {self.state.step}" if n > 1 else ""
        self.print(f"warning: {where}{more}; step skipped (train.on_nonfinite=skip)")
        return None

    def log(self, is_eval: bool, seconds: float, tokens: int) -> None:
        """One line of metrics.jsonl (and W&B) for the steps since the last one."""
        s = self.stats.read()
        self.stats.reset_interval()
        step = self.state.step
        record: dict[str, Any] = {
            "step": step,
            "train/loss": s["loss_sum"] / s["applied"] if s["applied"] else math.nan,
            "train/lr": self.optimizer.param_groups[0]["lr"],
            "train/grad_norm": s["grad_norm"],
            "perf/tokens_per_s": tokens / max(seconds, 1e-9),
        }
        if self.state.skipped:
            record["train/skipped_steps"] = self.state.skipped
        if is_eval:
            self.evaluate(record, last=step == self.max_steps)
        self.write(record)
        if self.bar is not None:
            self.bar.set_postfix(
                loss=f"{record['train/loss']:.4f}", tok_s=f"{record['perf/tokens_per_s']:.0f}"
            )

    def write(self, record: dict[str, Any]) -> None:
        self.metrics.write(record)
        self.wb.log(record, step=record["step"])

    # ---- the loop --------------------------------------------------------------------------

    def fit(self) -> dict[str, Any]:
        """Train to `train.max_steps`: a step, then at log, evaluation and checkpoint steps the
        host reads what the device accumulated (on CPU, also after a non-finite step), logs,
        evaluates and checkpoints; a pre-emption signal ends it at the next step boundary.
        Writes summary.json and returns it."""
        t, state = self.cfg.train, self.state
        log_every, eval_every, ckpt_every = int(t.log_every), int(t.eval_every), int(t.ckpt_every)
        preempt = Preemption()
        preempt.install()
        status, error, exit_reason = "completed", None, None
        start_step = state.step
        t_start = self.t_start = time.perf_counter()
        t_interval, tokens = time.perf_counter(), 0
        try:
            self.model.train()
            if state.step == 0:
                record: dict[str, Any] = {"step": 0}
                self.evaluate(record)
                self.write(record)
            while state.step < self.max_steps:
                if preempt.requested:
                    error = self.check_nonfinite()  # a checkpoint must not hold a bad step
                    if error is not None:
                        status = "diverged"
                        self.print(f"error: {error}")
                        break
                    status = "preempted"
                    assert preempt.signum is not None
                    exit_reason = (
                        f"signal {signal.Signals(preempt.signum).name} at step {state.step}"
                    )
                    break
                batch = self.next_batch()
                applied = self.train_step(batch)
                step = state.step
                tokens += batch.inputs.shape[0] * batch.inputs.shape[1] * self.world
                is_eval = step % eval_every == 0 or step == self.max_steps
                is_log = step % log_every == 0 or is_eval
                is_ckpt = step % ckpt_every == 0 and step < self.max_steps
                if applied is False or is_log or is_ckpt or step == self.max_steps:
                    error = self.check_nonfinite()
                    if error is not None:
                        status = "diverged"
                        self.print(f"error: {error}")
                        break
                if is_log:
                    self.log(is_eval, time.perf_counter() - t_interval, tokens)
                    tokens, t_interval = 0, time.perf_counter()
                if self.bar is not None:
                    self.bar.update(1)
                if is_ckpt:
                    self.checkpoint()
            if status in ("completed", "preempted"):
                self.checkpoint()
        except BaseException as err:
            status = "failed"
            error = f"{type(err).__name__}: {err}"
            raise
        finally:
            preempt.uninstall()
            self._finish(status, error, exit_reason, start_step, time.perf_counter() - t_start)
        if status == "preempted":
            preempt.chain()
        return self.summary

    def _finish(
        self,
        status: str,
        error: str | None,
        exit_reason: str | None,
        start_step: int,
        elapsed: float,
    ) -> None:
        """summary.json, the W&B summary, and the report of where everything is."""
        state, summary = self.state, self.summary
        if self.bar is not None:
            self.bar.close()
        self.metrics.close()
        last = metrics_last(self.run_dir / "metrics.jsonl")
        summary.update(
            status=status,
            step=state.step,
            steps_per_s=(state.step - start_step) / elapsed if elapsed > 0 else 0.0,
            final=last,
            error=error,
            best=state.best,
            skipped_steps=state.skipped,
            time={
                "total_s": elapsed,
                "eval_s": self.eval_s,
                "extras_s": self.extras_s,
                "evaluations": self.evals_done,
            },
        )
        if exit_reason:
            summary["preempted_by"] = exit_reason
        self.wb.summary(
            {
                **{f"best/{k}": v for k, v in state.best.items()},
                "final/rank_last": last.get("rank/last"),
                "status": status,
            }
        )
        self.wb.finish(exit_code=EXIT_CODES.get(status, EXIT_FAILED))
        if self.main:
            _write_json(self.run_dir / "summary.json", summary)
            _report(self.run_dir, summary, self.wb)


def _print_err(s: str) -> None:
    print(s, file=sys.stderr)


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
    wb: WandbRun, image: Any, history: Sequence[tuple[int, Sequence[float]]], step: int
) -> None:
    """The rank table, rank-vs-depth line series and the rank figure (a matplotlib figure or
    the PNG file it was saved to), as W&B media."""
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
        plot = wandb.Image(str(image) if isinstance(image, Path) else image)
        media = {"rank/table": table, "rank/vs_depth": series, "rank/plot": plot}
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
