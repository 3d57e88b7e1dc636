"""The training loop: `Trainer.fit` takes steps and, at log, evaluation and checkpoint steps,
reads what the device accumulated, logs, evaluates (validation numbers and the rank profile) and
checkpoints, until the run's step count or wall-time budget (`attnzoo.train.budget`) or a
pre-emption signal.

Two kinds of evaluation: during training, `evaluate` samples `train.eval_batches` batches of the
validation split (cheap, the same batches every time: the curves, the best-so-far); at the end
of a run that completes, `evaluate_splits` scores the whole validation and test splits once,
every example exactly once (the numbers a study reports).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from attnzoo import distributed
from attnzoo.analysis.metrics import last_record, last_values
from attnzoo.attention_maps import has_attention
from attnzoo.checkpoint import save_checkpoint
from attnzoo.config import mixer_label
from attnzoo.model import Model
from attnzoo.tasks import Task
from attnzoo.tracking import (
    MetricsFile,
    WandbRun,
    log_attention_media,
    log_rank_media,
    measures_figure,
    report,
    write_json,
)
from attnzoo.train.budget import Budget
from attnzoo.train.rank_probe import by_depth, probe_batch, rank_record
from attnzoo.train.resume import (
    EvaluationInterrupted,
    Preemption,
    continue_command,
    extended,
    rng_state,
    set_rng_state,
)
from attnzoo.train.step import TrainStep, autocast, next_batch, train_generator
from attnzoo.train.system import LONG_CPU_RUN_S, available_cores, cpu_estimate, threads_for

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_DIVERGED, EXIT_PREEMPTED = 0, 1, 2, 3, 75
EXIT_INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C (128 + SIGINT)
EXIT_CODES = {
    "completed": EXIT_OK,
    "failed": EXIT_FAILED,
    "diverged": EXIT_DIVERGED,
    "preempted": EXIT_PREEMPTED,
    "interrupted": EXIT_INTERRUPTED,
}


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    task: Task,
    cfg: DictConfig,
    device: torch.device,
    sample: bool = True,
    stop: Callable[[], bool] | None = None,
) -> dict[str, float | str]:
    """Validation loss and the task's metrics, averaged over `train.eval_batches` batches sampled
    from the validation split, the same at every evaluation; for language models and `sample`
    also a sample text. A cheap estimate, for curves during training: the final numbers are
    `evaluate_splits`'. Raises EvaluationInterrupted between batches once `stop()` is true."""
    model.eval()
    gen = torch.Generator().manual_seed(int(cfg.train.seed) + 1)
    sums: dict[str, float] = {}
    n = int(cfg.train.eval_batches)
    try:
        for _ in range(n):
            if stop is not None and stop():
                raise EvaluationInterrupted("validation")
            batch = task.batch("val", int(cfg.train.batch_size), gen).to(device)
            with autocast(device):
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


@torch.no_grad()
def evaluate_splits(
    model: torch.nn.Module,
    task: Task,
    batch_size: int,
    device: torch.device,
    splits: tuple[str, ...] = ("val", "test"),
    stop: Callable[[], bool] | None = None,
    progress: bool = False,
) -> dict[str, float | int]:
    """The loss and the task's metrics over the whole of each of `splits` the task has
    (`<split>/<metric>`), and how many examples they counted (`<split>/n`; predicted tokens for
    a language model): every example exactly once, in order, in batches of `batch_size`, each
    metric its sums over its counts across all batches (so batch sizes and padding do not
    weigh in). Deterministic: no sampling. With `progress`, a bar per split on stderr (a long
    split, such as IMDB's 25,000 test reviews, takes minutes on a CPU); raises
    EvaluationInterrupted between batches once `stop()` is true."""
    was_training = model.training
    model.eval()
    out: dict[str, float | int] = {}
    try:
        for split in (s for s in splits if s in task.splits):
            sums: dict[str, list[float]] = {}
            n = 0
            for batch in _bar(task.whole_split(split, batch_size), progress, f"final {split}"):
                if stop is not None and stop():
                    raise EvaluationInterrupted(f"final evaluation of {split}")
                batch = batch.to(device)
                with autocast(device):
                    logits = model(batch.inputs, batch.key_padding_mask)
                for key, (total, count) in task.totals(logits, batch).items():
                    acc = sums.setdefault(key, [0.0, 0])
                    acc[0] += float(total)
                    acc[1] += count
                n += task.count(batch)
            out.update({f"{split}/{k}": t / max(c, 1) for k, (t, c) in sums.items()})
            out[f"{split}/n"] = n
    finally:
        model.train(was_training)
    return out


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


@dataclass
class Progress:
    """The run's own state beside the model, optimiser and scheduler: what a checkpoint holds."""

    step: int = 0
    best: dict[str, float] = field(default_factory=dict)
    rank_history: list[tuple[int, list[float]]] = field(default_factory=list)  # relative residual
    measure_history: list[tuple[int, dict[str, list[float]]]] = field(default_factory=list)
    wandb_id: str | None = None
    skipped: int = 0
    eval_pending: bool = False  # this step's evaluation was interrupted: made when resumed


def _print_err(s: str) -> None:
    print(s, file=sys.stderr)


class Trainer:
    """One run, as a few named steps: `__init__` sets up (threads, the training step, state from a
    checkpoint, logging), `train_step` is the hot path (no host synchronisation on CUDA),
    `evaluate`, `checkpoint` and `log` report, and `fit` is the loop that calls them."""

    def __init__(
        self,
        cfg: DictConfig,
        plain_cfg: dict[str, Any],
        task: Task,
        model: Model,
        device: torch.device,
        run_dir: Path,
        loaded: tuple[dict[str, Any], Path] | None,
        wb: WandbRun,
        summary: dict[str, Any],
    ) -> None:
        t = cfg.train
        self.cfg, self.plain_cfg, self.task, self.device = cfg, plain_cfg, task, device
        self.run_dir, self.ckpt_dir, self.summary = run_dir, run_dir / "checkpoints", summary
        self.main, self.world = distributed.is_main(), distributed.world_size()
        self.budget = Budget.plan(cfg, task, self.world)
        self.threads = self._threads(model, loaded)
        torch.set_num_threads(self.threads)
        if t.deterministic:
            torch.use_deterministic_algorithms(True)
        self.model = model.to(device)  # the eager module: checkpoints, evaluation, rank probes
        self.train_step = TrainStep(model, task, t, device)
        self.train_gen = train_generator(int(t.seed))
        self.state = Progress()
        self.stop = Preemption()  # installed while `fit` runs
        self.last_good: Path | None = None  # the last checkpoint, and its step
        self.saved_step = 0
        if loaded is not None:
            self._restore(*loaded)
        self.max_steps = self.train_step.total_steps = self.budget.steps
        self.metrics: MetricsFile | distributed.Discard = (
            MetricsFile(run_dir / "metrics.jsonl", self.state.step if loaded else None)
            if self.main
            else distributed.Discard()
        )
        self.wb = wb
        summary.update(
            threads=self.threads,
            params=model.num_parameters(),
            resumed_from=self.state.step if loaded is not None else None,
            wandb={
                "id": wb.id,
                "dir": wb.dir,
                "mode": wb.mode if wb.active else "disabled",
                "group": wb.group,
                "job_type": wb.job_type,
                "tags": wb.tags,
                "name": wb.name,
                "sweep": wb.sweep,
            },
        )
        self.probe = probe_batch(task, cfg, device)
        self.evals_done = 0
        self.eval_s = 0.0  # seconds in evaluation, extras and the final evaluation included
        self.final: dict[str, float | int] | None = None  # the final evaluation's numbers
        self.final_s = 0.0  # seconds in the final evaluation
        self.extras_s, self.extras_cost = 0.0, 0.0  # seconds in extras; the last one's
        self.t_start = time.perf_counter()  # reset when the loop starts
        self.bar = _progress_bar(bool(t.progress), self.max_steps, self.state.step)
        self.print = self.bar.write if self.bar is not None else _print_err
        if self.main:
            for note in [*self.not_available(), *self.long_on_cpu()]:
                self.print(note)

    def not_available(self) -> list[str]:
        """What this run logs less of because its mixer lacks an optional method (attnzoo.mixers):
        said once, when the run starts."""
        mixer, cfg = self.model.blocks[0].mixer, self.cfg
        who = f"mixer={mixer_label(cfg.mixer)}: {type(mixer).__name__} has no"
        notes = []
        if not has_attention(mixer):
            if "attention_entropy" in cfg.train.rank_measures:
                notes.append(
                    f"rank/attention_entropy: not available for this mixer ({who} attention_probs): n/a"
                )
            if cfg.logger.attention_maps and self.wb.active:
                notes.append(
                    f"attention maps: not available for this mixer ({who} attention_probs): skipped"
                )
        elif (
            not getattr(mixer, "rows_are_distributions", True)
            and "attention_entropy" in cfg.train.rank_measures
        ):
            why = (
                f"its sink ({mixer.sink}) takes part of each row's mass"
                if getattr(mixer, "sink", "none") != "none"
                else f"the rows of {type(mixer).__name__}'s weights need not sum to 1"
            )
            notes.append(
                f"rank/attention_entropy: not available for this mixer ({why}; the row sums are "
                "logged instead): n/a"
            )
        if self.budget.flops_per_token is None:
            notes.append(
                f"compute/flops: not available for this mixer ({who} flops_per_token): null"
            )
        return notes

    def long_on_cpu(self) -> list[str]:
        """A warning, before the first step, when the run would take long on this CPU: a GPU
        preset started without a GPU sits at its first steps for many minutes otherwise."""
        if self.device.type != "cpu" or self.state.step >= self.max_steps:
            return []
        t, tokens = self.cfg.train, int(self.cfg.train.batch_size) * self.task.max_len
        steps = self.max_steps - self.state.step
        seconds = cpu_estimate(self.model.num_parameters(), tokens, steps, self.threads)
        if seconds < LONG_CPU_RUN_S:
            return []
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get() if HydraConfig.initialized() else None
        preset = str(hc.runtime.choices.get("experiment") or "") if hc is not None else ""
        gpu = f" experiment={preset} is sized for a GPU." if preset.endswith("_gpu") else ""
        compiled = " train.compile=true also compiles for minutes first." if t.compile else ""
        return [
            f"warning: on this CPU ({self.threads} thread(s)) this run would take about "
            f"{_duration(seconds)} ({steps} steps).{gpu}{compiled} Stop with Ctrl-C: a checkpoint "
            f"is kept and {continue_command(self.run_dir)} continues."
        ]

    def _threads(self, model: Model, loaded: tuple[dict[str, Any], Path] | None) -> int:
        """`train.threads`, with `auto` decided when the run starts and kept when it resumes (the
        thread count can change how sums are rounded)."""
        t = self.cfg.train
        saved = loaded[0].get("threads") if loaded is not None else None
        if t.threads == "auto" and saved is not None:
            return int(saved)
        cores = available_cores() if t.threads == "auto" else 0  # sampled only when needed
        tokens = int(t.batch_size) * self.task.max_len
        return threads_for(t.threads, model.num_parameters(), tokens, cores)

    def _restore(self, state: dict[str, Any], path: Path) -> None:
        self.model.load_state_dict(state["model"])
        self.train_step.load_state_dict(state)
        set_rng_state(state["rng"], self.train_gen)
        step = int(state["step"])
        if not self.main:
            seed = distributed.stream_seed(int(self.cfg.train.seed), step)
            self.train_gen.manual_seed(seed)
        self.state = Progress(
            step=step,
            best=dict(state.get("best", {})),
            rank_history=[tuple(x) for x in state.get("rank_history", [])],
            measure_history=[tuple(x) for x in state.get("measure_history", [])]
            or [(s, {"relative_residual": list(r)}) for s, r in state.get("rank_history", [])],
            wandb_id=state.get("wandb_id"),
            skipped=int(state.get("skipped_steps", 0)),
            eval_pending=bool(state.get("eval_pending", False)),
        )
        self.budget.load_state_dict(state.get("budget", {}))
        self.last_good, self.saved_step = path, step
        print(f"resuming from {path} at step {step}", file=sys.stderr)
        if extended(state["config"], self.plain_cfg):  # train.extend (resume.check_same_run)
            self.train_step.extend(step)
            print(
                f"extending the run at step {step}: the learning rate decays from its value "
                "there to the floor at the new end",
                file=sys.stderr,
            )

    # ---- the loop --------------------------------------------------------------------------

    def fit(self) -> dict[str, Any]:
        """Train to the run's step count or budget: a step, then at log, evaluation and checkpoint
        steps the host reads what the device accumulated (on CPU, also after a non-finite step),
        logs, evaluates and checkpoints. A stop signal (Ctrl-C, a scheduler's SIGTERM/SIGUSR1)
        ends it at the next step boundary, or between batches of an evaluation, with a checkpoint
        of the last completed step. Writes summary.json and returns it."""
        t, state, stop = self.cfg.train, self.state, self.stop
        stop.install()
        status, error, stopped_by, save = "completed", None, None, True
        start_step, self.t_start = state.step, time.perf_counter()
        t_interval, tokens = self.t_start, 0
        self.budget.start()
        try:
            self.model.train()
            self.mark_running()
            if state.step == 0 and not state.measure_history:  # not yet evaluated at init
                self.write(self.evaluate({"step": 0, **self.budget.record()}))
            elif state.eval_pending:  # the evaluation a stop cut short, made now
                self.redo_evaluation()
            while state.step < self.max_steps and not self.budget.spent and not stop.requested:
                batch = next_batch(self.task, int(t.batch_size), self.train_gen, self.device)
                _, applied = self.train_step(batch, state.step + 1)
                state.step += 1
                step, n_tokens = state.step, batch.inputs.shape[0] * batch.inputs.shape[1]
                tokens += n_tokens * self.world
                last = self.budget.after_step(step, n_tokens * self.world, step % t.log_every == 0)
                self._follow_budget(step, last)
                is_eval = step % t.eval_every == 0 or last
                is_log = step % t.log_every == 0 or is_eval
                is_ckpt = step % t.ckpt_every == 0 and not last
                if applied is False or is_log or is_ckpt or last:
                    error = self.check_nonfinite()
                    if error is not None:
                        status = "diverged"
                        break
                if is_log:
                    self.log(is_eval, time.perf_counter() - t_interval, tokens)
                    tokens, t_interval = 0, time.perf_counter()
                if self.bar is not None:
                    self.bar.update(1)
                if is_ckpt and not stop.requested:
                    self.checkpoint()
            if self.budget.spent and self.budget.stopped_by is None:
                # the seconds ran out between a step's check and the loop's (in its logging)
                self.budget.stopped_by = "seconds"
            if status == "completed" and stop.requested:
                error = self.check_nonfinite()  # a checkpoint must not hold a bad step
                status = "diverged" if error else stop.status
                stopped_by = None if error else f"{stop.reason} at step {state.step}"
            if status == "completed" and self.final is None:
                self.final_after_loop()
        except EvaluationInterrupted as err:
            status, stopped_by = stop.status, f"{stop.reason} at step {state.step}, during {err}"
        except KeyboardInterrupt:  # a second Ctrl-C, mid-step: the last checkpoint stands
            status, save = "interrupted", False
            stopped_by = f"a second Ctrl-C at step {state.step}; kept: {self.last_good}"
            state.step = self.saved_step
        except BaseException as err:
            status, error, save = "failed", f"{type(err).__name__}: {err}", False
            raise
        finally:
            try:
                if save and status != "diverged":
                    self.checkpoint()
            finally:
                stop.uninstall()
                self.finish(status, error, stopped_by, start_step)
        if status == "preempted":
            stop.chain()
        return self.summary

    def redo_evaluation(self) -> None:
        """The evaluation of the step a stop interrupted, added to that step's line."""
        record = self.evaluate({"step": self.state.step}, last=self.state.step == self.max_steps)
        self.state.eval_pending = False
        self.metrics.merge(record)
        self.wb.log(record, step=record["step"])

    def _follow_budget(self, step: int, last: bool) -> None:
        """The step count as the budget now has it (a wall-time budget's estimate), or this step
        when the budget ends the run here."""
        steps = step if last else self.budget.steps
        if steps != self.max_steps:
            self.max_steps = self.train_step.total_steps = steps
            if self.bar is not None:
                self.bar.total = steps
                self.bar.refresh()

    # ---- evaluation, checkpoints, reports --------------------------------------------------

    def evaluate(self, record: dict[str, Any], last: bool = False) -> dict[str, Any]:
        """Validation numbers and rank profile into `record` (returned) and the best-so-far, at
        every evaluation; the extras (sample text, rank figure, W&B media) when `extras_due`.
        Not training time for a wall-time budget."""
        with self.budget.paused():
            return self._evaluate(record, last)

    def _evaluate(self, record: dict[str, Any], last: bool) -> dict[str, Any]:
        start = time.perf_counter()
        state, cfg = self.state, self.cfg
        budget = float(cfg.logger.media_budget)
        extras = extras_due(self.extras_s, self.extras_cost, start - self.t_start, budget, last)
        values = evaluate(self.model, self.task, cfg, self.device, sample=extras, stop=self.stop)
        measures = list(cfg.train.rank_measures)
        ranks = rank_record(self.model, self.probe, measures)
        record.update(values)
        record.update(ranks)
        depths = by_depth(ranks, measures)
        state.rank_history.append((state.step, depths["relative_residual"]))
        state.measure_history.append((state.step, depths))
        self._keep_best("val/loss", values, higher_is_better=False)
        self._keep_best(f"val/{self.task.metric}", values, self.task.higher_is_better)
        if extras:
            extras_start = time.perf_counter()
            self.extras(values)
            self.extras_cost = time.perf_counter() - extras_start
            self.extras_s += self.extras_cost
        self.evals_done += 1
        self.eval_s += time.perf_counter() - start
        return record

    def final_evaluation(self, record: dict[str, Any]) -> None:
        """The whole validation and test splits (`evaluate_splits`; `train.final_splits` says
        which), into `record` as `final/<split>/<metric>` and `final/<split>/n`: once, at the end
        of a run that completes. Not training time for a wall-time budget."""
        with self.budget.paused():
            start = time.perf_counter()
            t = self.cfg.train
            batch_size = int(t.eval_batch_size if t.eval_batch_size is not None else t.batch_size)
            splits = tuple(t.final_splits)
            self.final = evaluate_splits(
                self.model, self.task, batch_size, self.device, splits, self.stop, bool(t.progress)
            )
            self.final_s = time.perf_counter() - start
            self.eval_s += self.final_s
        record.update({f"final/{k}": v for k, v in self.final.items()})

    def final_after_loop(self) -> None:
        """The final evaluation of a run whose loop took no last step here: one resumed at its
        end (its metrics.jsonl already holds the numbers, which are kept) or with its wall-time
        budget already spent (evaluated now, added to the line of its step)."""
        last = last_record(self.run_dir / "metrics.jsonl")
        if last.get("step") == self.state.step and any(k.startswith("final/") for k in last):
            self.final = {
                k.removeprefix("final/"): v for k, v in last.items() if k.startswith("final/")
            }
            return
        record: dict[str, Any] = {"step": self.state.step}
        self.final_evaluation(record)
        self.metrics.merge(record)
        self.wb.log(record, step=record["step"])

    def _keep_best(self, key: str, values: dict[str, Any], higher_is_better: bool) -> None:
        value, old = values.get(key), self.state.best.get(key)
        if isinstance(value, float) and (
            old is None or (value > old if higher_is_better else value < old)
        ):
            self.state.best[key] = value

    def extras(self, values: dict[str, Any]) -> None:
        """The sample text, rank_decay.png, and the W&B rank media and attention images."""
        state, cfg = self.state, self.cfg
        if "val/sample_text" in values:
            self.print(f"[step {state.step}] sample: {values['val/sample_text']}")
        title = f"{mixer_label(cfg.mixer)} on {cfg.task.name}"
        fig = measures_figure(state.measure_history, title=title)
        try:
            image: Any = fig
            if self.main:
                image = self.run_dir / "rank_decay.png"
                fig.savefig(image)  # rendered once: W&B's image is this file
            if self.wb.active:
                log_rank_media(self.wb, image, state.measure_history, state.step)
            if self.wb.active and cfg.logger.attention_maps:
                log_attention_media(self.wb, self.model, self.probe, state.step)
        finally:
            import matplotlib.pyplot as plt

            plt.close(fig)

    def checkpoint(self) -> None:
        """Write checkpoints/last.pt (the one before it kept as prev.pt): everything a resumed
        run needs to continue exactly as an uninterrupted one."""
        if not self.main:
            return
        with self.budget.paused():
            self._save()

    def _save(self) -> None:
        state = self.state
        self.budget.update()
        save_checkpoint(
            {
                "version": 1,
                "step": state.step,
                "model": self.model.state_dict(),
                **self.train_step.state_dict(),
                "rng": rng_state(self.train_gen),
                "config": self.plain_cfg,
                "best": state.best,
                "rank_history": state.rank_history,
                "measure_history": state.measure_history,
                "wandb_id": self.wb.id or state.wandb_id,
                "skipped_steps": state.skipped,
                "eval_pending": state.eval_pending,
                "threads": self.threads,
                "budget": self.budget.state_dict(),
            },
            self.ckpt_dir,
        )
        self.metrics.sync()
        self.last_good, self.saved_step = self.ckpt_dir / "last.pt", state.step
        self.mark_running()

    def mark_running(self) -> None:
        """summary.json while the run is alive: status `running` and the step of its last
        checkpoint (the step it would resume from), so that a run killed outright (`kill -9`,
        out of memory) is told apart from one that stopped and said so."""
        if self.main:
            self.summary.update(status="running", step=self.state.step, error=None)
            write_json(self.run_dir / "summary.json", self.summary)

    def check_nonfinite(self) -> str | None:
        """Read the non-finite steps since the last check (one synchronisation); count skipped
        ones and warn, or return the error that stops the run (train.on_nonfinite=stop)."""
        stats = self.train_step.stats
        s = stats.read()
        if not s["bad"]:
            return None
        stats.reset_nonfinite()
        first = int(s["first_bad"])
        what = (
            f"loss ({s['first_loss']})"
            if not math.isfinite(s["first_loss"])
            else f"gradient norm ({s['first_grad']})"
        )
        where = f"non-finite {what} at step {first}"
        if self.train_step.halt_on_nonfinite:
            late = f" (seen at step {self.state.step})" if self.state.step != first else ""
            kept = f"; the last good checkpoint {self.last_good} is kept" if self.last_good else ""
            self.state.step = first - 1  # the weights are those of the step before
            error = f"{where}{late}; stopping (train.on_nonfinite=stop){kept}"
            self.print(f"error: {error}")
            return error
        n = int(s["bad"])
        self.state.skipped += n
        more = f" and {n - 1} more up to step {self.state.step}" if n > 1 else ""
        self.print(f"warning: {where}{more}; step skipped (train.on_nonfinite=skip)")
        return None

    def log(self, is_eval: bool, seconds: float, tokens: int) -> None:
        """One line of metrics.jsonl (and W&B) for the steps since the last one."""
        stats = self.train_step.stats
        s = stats.read()
        stats.reset_interval()
        step = self.state.step
        record: dict[str, Any] = {
            "step": step,
            "train/loss": s["loss_sum"] / s["applied"] if s["applied"] else math.nan,
            "train/lr": self.train_step.optimizer.param_groups[0]["lr"],
            "train/grad_norm": s["grad_norm"],
            "perf/tokens_per_s": tokens / max(seconds, 1e-9),
        }
        self.budget.update()
        record.update(self.budget.record())
        if self.state.skipped:
            record["train/skipped_steps"] = self.state.skipped
        try:
            if is_eval:
                self.state.eval_pending = True  # until it completes
                self.evaluate(record, last=step == self.max_steps)
                self.state.eval_pending = False
            if step == self.max_steps:
                self.final_evaluation(record)
        finally:
            self.write(record)  # the step's training numbers, whatever happened to its evaluation
        if self.bar is not None:
            self.bar.set_postfix(
                loss=f"{record['train/loss']:.4f}", tok_s=f"{record['perf/tokens_per_s']:.0f}"
            )

    def write(self, record: dict[str, Any]) -> None:
        self.metrics.write(record)
        self.wb.log(record, step=record["step"])

    def finish(
        self, status: str, error: str | None, preempted_by: str | None, start_step: int
    ) -> None:
        """summary.json, the W&B summary, and the report of where everything is."""
        state, summary = self.state, self.summary
        elapsed = time.perf_counter() - self.t_start
        self.budget.update()
        if self.bar is not None:
            self.bar.close()
        self.metrics.close()
        last = last_values(self.run_dir / "metrics.jsonl")
        final = {k: v for k, v in last.items() if not k.startswith("final/")}
        if status == "completed" and self.final is not None:
            final.update(self.final)  # whole-split val/test in place of the sampled val
        summary.update(
            status=status,
            step=state.step,
            steps_per_s=(state.step - start_step) / elapsed if elapsed > 0 else 0.0,
            final=final,
            error=error,
            best=state.best,
            skipped_steps=state.skipped,
            compute=self.budget.summary(),
            time={
                "total_s": elapsed,
                "eval_s": self.eval_s,
                "extras_s": self.extras_s,
                "final_eval_s": self.final_s,
                "evaluations": self.evals_done,
            },
            splits=self.task.describe_splits(),
        )
        if preempted_by:
            summary[f"{status}_by"] = preempted_by
        self.wb.summary(
            {
                **{f"best/{k}": v for k, v in state.best.items()},
                "final/rank_last": last.get("rank/last"),
                **{f"final/{k}": v for k, v in (self.final or {}).items()},
                **{f"compute/{k}": v for k, v in self.budget.summary().items()},
                "status": status,
            }
        )
        self.wb.finish(exit_code=EXIT_CODES.get(status, EXIT_FAILED))
        if self.main:
            write_json(self.run_dir / "summary.json", summary)
            report(self.run_dir, summary)


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def _bar(batches: Iterable[Any], enabled: bool, what: str) -> Iterable[Any]:
    """`batches`, with a progress bar on stderr when `enabled`."""
    if not enabled:
        return batches
    from tqdm.auto import tqdm

    return tqdm(batches, desc=what, unit="batch", dynamic_ncols=True, mininterval=1.0, leave=False)


def _progress_bar(enabled: bool, total: int, initial: int) -> Any | None:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, dynamic_ncols=True, mininterval=1.0, unit="step")
