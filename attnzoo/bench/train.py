"""The training benchmark on the real corpora: every mixer, and a plain PyTorch GPT of the same
shape as a reference (`PlainGPT`), trained by the trainer's own code on the same batches.

A recipe is the trainer's experiment config (`EXPERIMENTS`), composed by `attnzoo.train.compose`
with the command line's values as overrides (`FLAGS`). Models are built by
`attnzoo.train.build_model` and trained by `attnzoo.train.TrainStep`: the AdamW, schedule,
clipping, non-finite checks, bf16 autocast on CUDA and torch.compile of `python -m attnzoo.train`;
validation is the trainer's `evaluate` and the rank probe its `rank_record`. What the benchmark
adds is the timing, and the plain GPT.

Three ways to run it, each returning its table:
- `bench` + `table`: round-robin, one step of each model in turn, so that every model meets the
  same machine load (on a shared CPU the load drifts over minutes, which would skew back-to-back
  timings); with the cost of the rank probe as a share of training time at `train.eval_every`;
- `bench_sequential` + `table_sequential`: each model on its own, start to end (a GPU is not
  shared): wall time, steady ms/step, tokens/s and the best validation loss;
- `bench_trainer`: each mixer through `attnzoo.train.run`, the numbers a user gets from
  `python -m attnzoo.train experiment=...`.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch import nn

from attnzoo.bench.plain_gpt import PlainGPT
from attnzoo.config import resolve_data_dir
from attnzoo.rank import MEASURES
from attnzoo.tasks import Task
from attnzoo.train import (
    TrainStep,
    build_model,
    compose,
    device_for,
    evaluate,
    probe_batch,
    rank_record,
    run,
)
from attnzoo.train.build import build_task_from
from attnzoo.train.step import next_batch, train_generator

PLAIN = "gpt"  # the name of the plain PyTorch reference in --mixers
# --tasks: conf/experiment/<name>.yaml
EXPERIMENTS = {
    "shakespeare": "shakespeare_char",
    "imdb": "imdb",
    "shakespeare_gpu": "shakespeare_char_gpu",
}
# the split each recipe trains and validates on: nanoGPT's 90/10 for the recipes whose reference
# figures are nanoGPT's (attnzoo's default, 90/5/5, validates on other text)
SPLITS = {"shakespeare": "nanogpt", "shakespeare_gpu": "nanogpt"}
SEQUENTIAL = {"shakespeare_gpu"}  # recipes whose models train one after another (GPU)
# command-line flag: the config key it overrides
FLAGS = {
    "steps": "train.max_steps",
    "batch": "train.batch_size",
    "eval_batches": "train.eval_batches",
    "eval_every": "train.eval_every",
    "device": "train.device",
    "compile": "train.compile",
    "seed": "train.seed",
    "dim": "model.dim",
    "depth": "model.depth",
    "heads": "model.heads",
    "seq_len": "task.seq_len",
    "impl": "impl",
    "data_dir": "data_dir",
}


def recipe(task_key: str, args: argparse.Namespace, mixer: str | None = None) -> DictConfig:
    """The task's experiment config with the command line's overrides (and `mixer`)."""
    overrides = [f"experiment={EXPERIMENTS[task_key]}", "logger.mode=disabled"]
    overrides += [f"task.splits={SPLITS[task_key]}"] if task_key in SPLITS else []
    overrides += ["train.progress=false"] + ([f"mixer={mixer}"] if mixer else [])
    for flag, key in FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            overrides.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
    return compose(overrides)


@dataclass
class Run:
    name: str
    model: nn.Module  # the eager module: evaluation and rank probes
    step: TrainStep  # the trainer's training step (compiled forward, AdamW, schedule)
    generator: torch.Generator  # training batches
    step_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def build(name: str, task: Task, cfg: DictConfig) -> Run:
    """The model `name` (a mixer, or the plain GPT) as the trainer builds it from `cfg`, with the
    trainer's training step and batch stream."""
    device, seed = device_for(cfg), int(cfg.train.seed)
    if name == PLAIN:
        torch.manual_seed(seed)
        m = cfg.model
        model: nn.Module = PlainGPT(
            task.vocab_size,
            task.out_features,
            task.max_len,
            m.dim,
            m.depth,
            m.heads,
            task.head,
            dropout=m.dropout,
            attn_dropout=cfg.mixer.get("attn_dropout", 0.0),
        )
    else:
        assert cfg.mixer.name == name, (cfg.mixer.name, name)
        model = build_model(cfg, task)
    model.to(device)
    return Run(name, model, TrainStep(model, task, cfg.train, device), train_generator(seed))


def optimizer_step(run: Run, task: Task, cfg: DictConfig, step: int) -> torch.Tensor:
    """Step `step` (0-based) as the trainer takes it; returns the loss (on the device, unread)."""
    device = device_for(cfg)
    batch = next_batch(task, int(cfg.train.batch_size), run.generator, device)
    loss, _ = run.step(batch, step + 1)
    return loss


def train_step(run: Run, task: Task, cfg: DictConfig, step: int) -> None:
    """One step, timed on its own (round-robin on a CPU)."""
    device = device_for(cfg)
    _sync(device)
    start = time.perf_counter()
    loss = optimizer_step(run, task, cfg, step)
    _sync(device)
    run.step_s.append(time.perf_counter() - start)
    run.losses.append(loss.item())


def _time_ms(fn, device: torch.device, repeats: int = 5) -> float:
    fn()  # the warm-up
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def probe_ms(run: Run, task: Task, cfg: DictConfig) -> tuple[float, float, float]:
    """The trainer's rank probe on its probe batch: the last layer's relative residual, and the
    median milliseconds of the probe with the relative residual alone and with the recipe's
    `train.rank_measures` (the plain GPT, which has the same `return_hidden` interface but no
    attnzoo mixers, without the attention measures)."""
    device = device_for(cfg)
    probe = probe_batch(task, cfg, device)
    measures = [
        m for m in cfg.train.rank_measures if run.name != PLAIN or MEASURES[m].reads == "hidden"
    ]
    rank = rank_record(run.model, probe)["rank/last"]
    alone = _time_ms(lambda: rank_record(run.model, probe), device)
    every = _time_ms(lambda: rank_record(run.model, probe, measures), device)
    return rank, alone, every


def validate(run: Run, task: Task, cfg: DictConfig) -> dict[str, float]:
    """The trainer's validation numbers (`val/loss`, `val/accuracy`, ...) on the eager model."""
    values = evaluate(run.model, task, cfg, device_for(cfg), sample=False)
    return {k: float(v) for k, v in values.items()}


def _task(cfg: DictConfig) -> Task:
    return build_task_from(cfg, resolve_data_dir(cfg.data_dir, Path.cwd()))


def bench(task_key: str, cfgs: dict[str, DictConfig]) -> list[dict]:
    """Every model trained round-robin, one step each in turn; a row of timings and validation
    numbers per model."""
    base = next(iter(cfgs.values()))
    task = _task(base)
    runs = [build(name, task, cfg) for name, cfg in cfgs.items()]
    steps = int(base.train.max_steps)
    print(f"[{task_key}] {len(runs)} models x {steps} steps, round-robin", file=sys.stderr)
    t0 = time.perf_counter()
    for step in range(steps):
        for r in runs:
            train_step(r, task, cfgs[r.name], step)
        if (step + 1) % max(1, steps // 10) == 0:
            losses = ", ".join(f"{r.name} {statistics.fmean(r.losses[-50:]):.3f}" for r in runs)
            print(f"  step {step + 1} ({time.perf_counter() - t0:.0f}s): {losses}", file=sys.stderr)
    rows = []
    for r in runs:
        skip = min(len(r.step_s) // 10, 50)  # the first steps pay one-off allocation costs
        times = r.step_s[skip:]
        values = validate(r, task, cfgs[r.name])
        rank, ms, ms_all = probe_ms(r, task, cfgs[r.name])
        rows.append(
            {
                "mixer": r.name,
                "params": sum(p.numel() for p in r.model.parameters()),
                "ms_mean": 1e3 * statistics.fmean(times),
                "ms_median": 1e3 * statistics.median(times),
                "val_loss": values["val/loss"],
                "accuracy": values["val/accuracy"],
                "rank": rank,
                "probe_ms": ms,
                "probe_all_ms": ms_all,
            }
        )
    return rows


def warm_up(task: Task, cfg: DictConfig) -> None:
    """Two steps of a throwaway one-layer plain GPT, so the process's one-off costs (lazy imports,
    the CUDA context and cuBLAS handles, the compiler's own start) are not billed to whichever
    model is timed first; it shares no graph with the measured models, which still compile their
    own."""
    tiny = cfg.copy()
    tiny.model.dim, tiny.model.depth = 8 * int(cfg.model.heads), 1
    run_ = build(PLAIN, task, tiny)
    for step in range(2):
        optimizer_step(run_, task, tiny, step)
    _sync(device_for(cfg))


def bench_sequential(cfgs: dict[str, DictConfig], window: int = 100) -> list[dict]:
    """Each model trained on its own, start to end (a GPU is not shared): wall time from building
    the model to the last evaluation, compilation included; ms/step over windows of `window`
    steps with one device synchronisation each (the first window, which compiles, is left out of
    the median); validation every `train.eval_every` steps and at the end, the best kept."""
    base = next(iter(cfgs.values()))
    task = _task(base)
    device = device_for(base)
    warm_up(task, base)
    rows = []
    for name, cfg in cfgs.items():
        steps, eval_every = int(cfg.train.max_steps), int(cfg.train.eval_every)
        _sync(device)
        start = time.perf_counter()
        r = build(name, task, cfg)
        window_ms, best, best_step = [], math.inf, 0
        mark, in_window = time.perf_counter(), 0
        for step in range(steps):
            loss = optimizer_step(r, task, cfg, step)
            done, in_window = step + 1, in_window + 1
            evaluating = done % eval_every == 0 or done == steps
            if in_window < window and not evaluating:
                continue
            _sync(device)  # a window of steps ends (early at an evaluation)
            window_ms.append(1e3 * (time.perf_counter() - mark) / in_window)
            if done % 1000 == 0:
                print(f"  {name} step {done}: loss {loss.item():.3f}", file=sys.stderr)
            if evaluating:
                val_loss = validate(r, task, cfg)["val/loss"]
                if val_loss < best:
                    best, best_step = val_loss, done
                print(f"  {name} step {done}: val loss {val_loss:.4f}", file=sys.stderr)
                _sync(device)
            mark, in_window = time.perf_counter(), 0  # evaluation time is not step time
        _sync(device)
        wall = time.perf_counter() - start
        steady = statistics.median(window_ms[1:] or window_ms)
        tokens = int(cfg.train.batch_size) * task.max_len
        rows.append(
            {
                "mixer": name,
                "params": sum(p.numel() for p in r.model.parameters()),
                "wall_s": wall,
                "ms_step": steady,
                "tokens_per_s": tokens / (steady / 1e3),
                "best_val_loss": best,
                "best_step": best_step,
            }
        )
        del r
    return rows


def table_sequential(rows: list[dict]) -> str:
    plain = next((row for row in rows if row["mixer"] == PLAIN), None)
    lines = [
        f"| mixer | params | wall (s) | steady ms/step | tokens/s | best val loss (step) "
        f"| wall vs {PLAIN} |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        ratio = f"{row['wall_s'] / plain['wall_s']:.2f}x" if plain else "-"
        lines.append(
            f"| {row['mixer']} | {row['params']:,} | {row['wall_s']:.2f} | {row['ms_step']:.2f} "
            f"| {row['tokens_per_s']:,.0f} | {row['best_val_loss']:.4f} ({row['best_step']}) "
            f"| {ratio} |"
        )
    return "\n".join(lines)


def table(task_key: str, rows: list[dict], eval_every: int) -> str:
    plain = next((row for row in rows if row["mixer"] == PLAIN), None)
    metric = "val loss" if task_key.startswith("shakespeare") else "val accuracy"
    lines = [
        f"| mixer | params | {metric} | ms/step (mean) | ms/step (median) | final rank "
        f"| time vs {PLAIN} | rank probe (ms): relative residual / all measures "
        f"| probe share at eval_every={eval_every}: relative residual / all measures |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        value = row["val_loss"] if task_key.startswith("shakespeare") else row["accuracy"]
        ratio = f"{row['ms_mean'] / plain['ms_mean']:.2f}x" if plain else "-"
        share, share_all = (
            row[k] / (row[k] + eval_every * row["ms_median"]) for k in ("probe_ms", "probe_all_ms")
        )
        lines.append(
            f"| {row['mixer']} | {row['params']:,} | {value:.4f} | {row['ms_mean']:.1f} | "
            f"{row['ms_median']:.1f} | {row['rank']:.3f} | {ratio} | {row['probe_ms']:.1f} / "
            f"{row['probe_all_ms']:.1f} | {100 * share:.2f}% / {100 * share_all:.2f}% |"
        )
    return "\n".join(lines)


def bench_trainer(task_key: str, cfgs: dict[str, DictConfig]) -> str:
    """Each mixer through `attnzoo.train.run` with its config; the table of what the run's
    summary reports."""
    metric = "loss" if task_key.startswith("shakespeare") else "accuracy"
    lines = [
        f"| mixer | params | val {metric} | steps/s (whole run) | final rank |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, cfg in cfgs.items():
        if name == PLAIN:
            continue  # the plain GPT is not an attnzoo mixer
        with tempfile.TemporaryDirectory() as tmp:
            summary = run(cfg, Path(tmp) / "run")
        final = summary["final"]
        lines.append(
            f"| {name} | {summary['params']:,} | {final[f'val/{metric}']:.4f} | "
            f"{summary['steps_per_s']:.2f} | {final['rank/last']:.3f} |"
        )
    return "\n".join(lines)
