"""Training benchmark on the real corpora: every mixer, and a plain PyTorch GPT of the same shape,
trained by one loop on the same batches.

Tiny Shakespeare follows the CPU recipe of nanoGPT's character-level example (the reference figure
of ../shared/data/README.md): 4 layers, 4 heads, width 128, context 64, batch 12, 2000 AdamW
steps (lr 1e-3, cosine to 1e-4 after 100 warmup steps, betas 0.9/0.99, weight decay 0.1 on
matrices, gradient clipping 1.0, dropout 0); validation loss over 200 batches of the last 10%.
Targets: scaled_dot reaches val loss <= 1.90, in <= 1.1x the plain GPT's time per step.

The models train round-robin, one step each in turn, so that every model meets the same machine
load (on a shared CPU the load drifts over minutes, which would skew back-to-back timings). A step
is what the trainer does per step: forward, cross-entropy, backward, clipping, AdamW with the
trainer's schedule (`attnzoo.train.lr_factor`), bf16 autocast on CUDA. The table also gives the
cost of the trainer's rank probe (`attnzoo.train.rank_record`) as a share of training time at an
evaluation every `--eval-every` steps (target: under 5%).

`--tasks shakespeare_gpu` is nanoGPT's GPU recipe for Tiny Shakespeare (6 layers x 6 heads x 384,
context 256, batch 64, dropout 0.2, 5000 steps, lr 1e-3 with 100 warmup steps and cosine decay to
1e-4, betas 0.9/0.99, weight decay 0.1, clipping 1.0, evaluation every 1000 steps over 200 batches;
`conf/experiment/shakespeare_char_gpu.yaml` holds the same). A GPU is not shared, so there the
models train one after another, each compiled with torch.compile, and the table gives what a user
waits for: wall time (compilation and evaluations included), steady ms/step (median over windows
of steps, after the first), tokens/s and the best validation loss.

`--trainer` instead trains each mixer through `attnzoo.train.run` with the task's experiment
config (`experiment=shakespeare_char` / `experiment=imdb`): the numbers a user gets from
`python -m attnzoo.train`, evaluation, probes and checkpoints included.

    python scripts/bench_train.py                                   # both tables, every mixer
    python scripts/bench_train.py --tasks shakespeare --mixers scaled_dot,gpt --steps 2000
    python scripts/bench_train.py --tasks imdb --steps 50 --eval-batches 5   # a quick look
    python scripts/bench_train.py --tasks shakespeare --device cuda --dim 256 --seq-len 256 --batch 32
    python scripts/bench_train.py --tasks shakespeare --mixers scaled_dot --trainer
    python scripts/bench_train.py --tasks shakespeare_gpu --device cuda       # nanoGPT's GPU recipe
    python scripts/bench_train.py --tasks shakespeare --mixers gpt --sequential --eval-every 250 \
        --eval-batches 40 --threads 2   # nanoGPT's CPU command's loop, on the plain GPT, with wall time

`--sequential` trains the models one after another with wall times (as the GPU recipe does) on
any recipe: with the line above, the plain GPT follows nanoGPT's CPU command (2000 steps, an
evaluation every 250 over 20 train + 20 val batches, two threads) to set beside
`python -m attnzoo.train experiment=shakespeare_char` run as a whole process (README, "Threads").
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from attnzoo import train as trainer
from attnzoo.mixers import MIXERS
from attnzoo.model import Model, ModelConfig
from attnzoo.tasks import Batch, Task, build_task
from attnzoo.train import lr_factor, rank_record

ROOT = Path(__file__).resolve().parents[1]
# Where the corpora are read from unless --data-dir says otherwise: $ATTNZOO_DATA_DIR, else the
# project's shared test data beside the checkout, else the user cache (files are downloaded there).
DEFAULT_DATA = os.environ.get("ATTNZOO_DATA_DIR") or (
    str(ROOT.parent / "shared" / "data")
    if (ROOT.parent / "shared" / "data").is_dir()
    else str(Path.home() / ".cache" / "attnzoo")
)
PLAIN = "gpt"  # the name of the plain PyTorch baseline in --mixers


@dataclass
class Recipe:
    task: str
    task_options: dict
    steps: int
    batch_size: int
    dim: int = 128
    depth: int = 4
    heads: int = 4
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup: int = 100
    betas: tuple[float, float] = (0.9, 0.99)
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_batches: int = 200
    eval_batch_size: int = 12
    impl: str = "auto"
    device: str = "cpu"
    dropout: float = 0.0  # embeddings and residual branches (attnzoo's model.dropout)
    attn_dropout: float = 0.0  # attention probabilities (plain GPT; mixers with that option)
    eval_every: int = 0  # evaluations during training (0: once, at the end)
    compile: bool = False  # torch.compile the training forward


# conf/experiment/<name>.yaml
EXPERIMENTS = {
    "shakespeare": "shakespeare_char",
    "imdb": "imdb",
    "shakespeare_gpu": "shakespeare_char_gpu",
}
RECIPES = {
    "shakespeare": Recipe("shakespeare_char", {"seq_len": 64}, steps=2000, batch_size=12),
    # No published reference; the same model and optimiser, longer reviews, bigger batches.
    "imdb": Recipe(
        "imdb", {"seq_len": 128}, steps=300, batch_size=32, eval_batches=60, eval_batch_size=50
    ),
    # nanoGPT's config/train_shakespeare_char.py, evaluated every 1000 steps.
    "shakespeare_gpu": Recipe(
        "shakespeare_char",
        {"seq_len": 256},
        steps=5000,
        batch_size=64,
        dim=384,
        depth=6,
        heads=6,
        dropout=0.2,
        attn_dropout=0.2,
        eval_every=1000,
        eval_batch_size=64,
        device="cuda",
        compile=True,
    ),
}
SEQUENTIAL = {"shakespeare_gpu"}  # recipes whose models train one after another (GPU)


class PlainGPT(nn.Module):
    """A nanoGPT-style transformer of the same shape as attnzoo's Model with scaled_dot: pre-norm
    blocks, fused qkv without bias, SDPA, GELU MLP of width 4D, learned positions, untied head.
    For classification it mean-pools the real tokens, as Model does."""

    class Block(nn.Module):
        def __init__(
            self, dim: int, heads: int, causal: bool, dropout: float, attn_dropout: float
        ) -> None:
            super().__init__()
            self.heads, self.causal, self.attn_dropout = heads, causal, attn_dropout
            self.ln_1 = nn.LayerNorm(dim)
            self.c_attn = nn.Linear(dim, 3 * dim, bias=False)
            self.c_proj = nn.Linear(dim, dim, bias=False)
            self.ln_2 = nn.LayerNorm(dim)
            self.mlp = nn.Sequential(
                nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout)
            )
            self.drop = nn.Dropout(dropout)

        def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
            b, n, d = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
            q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
            p = self.attn_dropout if self.training else 0.0
            if key_padding_mask is None:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal)
            else:  # non-causal with padding (IMDB); a review always has one real token
                y = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=~key_padding_mask[:, None, None], dropout_p=p
                )
            x = x + self.drop(self.c_proj(y.transpose(1, 2).reshape(b, n, d)))
            return x + self.mlp(self.ln_2(x))

    def __init__(
        self,
        vocab: int,
        out: int,
        max_len: int,
        dim: int,
        depth: int,
        heads: int,
        head: str,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.head_kind = head
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Parameter(torch.zeros(max_len, dim))
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            [PlainGPT.Block(dim, heads, head == "lm", dropout, attn_dropout) for _ in range(depth)]
        )
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, out)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = (
                    0.02 / math.sqrt(2 * depth)
                    if name.endswith(("c_proj.weight", "2.weight"))
                    else 0.02
                )
                nn.init.normal_(p, std=std)

    def forward(self, idx, key_padding_mask=None, return_hidden=False):
        x = self.drop(self.wte(idx) + self.wpe[: idx.shape[1]])
        hidden = [x]
        for block in self.blocks:
            x = block(x, key_padding_mask)
            hidden.append(x)
        x = self.ln_f(x)
        if self.head_kind == "classify":
            keep = (~key_padding_mask)[..., None].to(x.dtype)
            x = (x * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        logits = self.head(x)
        return (logits, hidden) if return_hidden else logits

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


@dataclass
class Run:
    name: str
    model: nn.Module  # the eager module: evaluation and rank probes
    forward: nn.Module  # what training calls: the model, or torch.compile of it
    optimizer: torch.optim.Optimizer
    generator: torch.Generator
    step_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)


def _autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA, as the trainer does; nothing on CPU."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def build(name: str, task: Task, r: Recipe, seed: int) -> Run:
    torch.manual_seed(seed)
    if name == PLAIN:
        model: nn.Module = PlainGPT(
            task.vocab_size,
            task.out_features,
            task.max_len,
            r.dim,
            r.depth,
            r.heads,
            task.head,
            dropout=r.dropout,
            attn_dropout=r.attn_dropout,
        )
    else:
        extra = {"attn_dropout": r.attn_dropout}  # every mixer takes it (a no-op without scores)
        cfg = ModelConfig(
            dim=r.dim,
            depth=r.depth,
            heads=r.heads,
            mixer=name,
            mixer_options=extra,
            causal=task.causal,
            impl=r.impl,
            dropout=r.dropout,
        )
        model = Model(cfg, task.out_features, task.max_len, task.vocab_size, head=task.head)
    model.to(r.device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": r.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = True if r.device == "cuda" else None  # as the trainer: fused AdamW on CUDA
    optimizer = torch.optim.AdamW(groups, lr=r.lr, betas=r.betas, fused=fused)
    forward = torch.compile(model) if r.compile else model
    return Run(name, model, forward, optimizer, torch.Generator().manual_seed(seed))


def lr_at(step: int, r: Recipe) -> float:
    """The trainer's schedule: linear warmup, then cosine from lr down to min_lr."""
    return r.lr * lr_factor(step, r.warmup, r.steps, r.min_lr / r.lr)


def loss_of(model: nn.Module, task: Task, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    with _autocast(batch.inputs.device):
        logits = model(batch.inputs, batch.key_padding_mask)
    return task.loss(logits, batch), logits


def optimizer_step(run: Run, task: Task, r: Recipe, step: int) -> torch.Tensor:
    """One training step as the trainer takes it; returns the loss (on the device, unread)."""
    device = torch.device(r.device)
    batch = task.batch("train", r.batch_size, run.generator)
    if device.type == "cuda":
        batch = batch.pin_memory()
    batch = batch.to(device)
    for group in run.optimizer.param_groups:
        group["lr"] = lr_at(step, r)
    loss, _ = loss_of(run.forward, task, batch)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), r.grad_clip)
    run.optimizer.step()
    return loss.detach()


def train_step(run: Run, task: Task, r: Recipe, step: int) -> None:
    """One step, timed on its own (round-robin on a CPU)."""
    device = torch.device(r.device)
    _sync(device)
    start = time.perf_counter()
    loss = optimizer_step(run, task, r, step)
    _sync(device)
    run.step_s.append(time.perf_counter() - start)
    run.losses.append(loss.item())


def probe_ms(run: Run, probe: Batch) -> float:
    """Median milliseconds of the trainer's rank probe on `probe` (the plain GPT has the same
    `return_hidden` interface, so it is measured the same way)."""
    device = probe.inputs.device
    rank_record(run.model, probe)  # warm-up
    times = []
    for _ in range(5):
        _sync(device)
        start = time.perf_counter()
        rank_record(run.model, probe)
        _sync(device)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


@torch.no_grad()
def validate(run: Run, task: Task, r: Recipe, seed: int) -> tuple[float, float]:
    """Validation loss and accuracy over the recipe's evaluation batches (the same batches at
    every call), on the eager model."""
    run.model.eval()
    generator = torch.Generator().manual_seed(seed + 1)
    losses, accs = [], []
    for _ in range(r.eval_batches):
        batch = task.batch("val", r.eval_batch_size, generator).to(r.device)
        loss, logits = loss_of(run.model, task, batch)
        losses.append(loss.item())
        accs.append(task.metrics(logits.float(), batch)["accuracy"])
    run.model.train()
    return statistics.fmean(losses), statistics.fmean(accs)


def evaluate(run: Run, task: Task, r: Recipe, seed: int) -> dict[str, float]:
    val_loss, accuracy = validate(run, task, r, seed)
    probe = task.batch("val", 16, torch.Generator().manual_seed(seed + 2)).to(r.device)
    return {
        "val_loss": val_loss,
        "accuracy": accuracy,
        "rank": rank_record(run.model, probe)["rank/last"],
        "probe_ms": probe_ms(run, probe),
    }


def recipe(task_key: str, args: argparse.Namespace) -> Recipe:
    """The task's recipe with the command line's overrides."""
    r = Recipe(**{**RECIPES[task_key].__dict__})
    r.task_options = dict(r.task_options)
    for key in (
        "steps",
        "eval_batches",
        "eval_every",
        "dim",
        "depth",
        "heads",
        "impl",
        "device",
        "compile",
    ):
        if getattr(args, key) is not None:
            setattr(r, key, getattr(args, key))
    if args.batch is not None:
        r.batch_size = args.batch
    if args.seq_len is not None:
        r.task_options["seq_len"] = args.seq_len
    return r


def bench(task_key: str, r: Recipe, names: list[str], seed: int, data_dir: str) -> list[dict]:
    task = build_task(r.task, data_dir, seed, **r.task_options)
    runs = [build(name, task, r, seed) for name in names]
    print(f"[{task_key}] {len(runs)} models x {r.steps} steps, round-robin", file=sys.stderr)
    t0 = time.perf_counter()
    for step in range(r.steps):
        for run in runs:
            train_step(run, task, r, step)
        if (step + 1) % max(1, r.steps // 10) == 0:
            losses = ", ".join(
                f"{run.name} {statistics.fmean(run.losses[-50:]):.3f}" for run in runs
            )
            print(f"  step {step + 1} ({time.perf_counter() - t0:.0f}s): {losses}", file=sys.stderr)
    rows = []
    for run in runs:
        skip = min(len(run.step_s) // 10, 50)  # the first steps pay one-off allocation costs
        times = run.step_s[skip:]
        rows.append(
            {
                "mixer": run.name,
                "params": sum(p.numel() for p in run.model.parameters()),
                "ms_mean": 1e3 * statistics.fmean(times),
                "ms_median": 1e3 * statistics.median(times),
                **evaluate(run, task, r, seed),
            }
        )
    return rows


def warm_up(task: Task, r: Recipe, seed: int) -> None:
    """Two steps of a throwaway one-layer plain GPT, so the process's one-off costs (lazy imports,
    the CUDA context and cuBLAS handles, the compiler's own start) are not billed to whichever
    model is timed first; it shares no graph with the measured models, which still compile their
    own."""
    tiny = replace(r, dim=8 * r.heads, depth=1)
    run = build(PLAIN, task, tiny, seed)
    for step in range(2):
        optimizer_step(run, task, tiny, step)
    _sync(torch.device(r.device))


def bench_sequential(
    task_key: str, r: Recipe, names: list[str], seed: int, data_dir: str, window: int = 100
) -> list[dict]:
    """Each model trained on its own, start to end (a GPU is not shared): wall time from building
    the model to the last evaluation, compilation included; ms/step over windows of `window`
    steps with one device synchronisation each (the first window, which compiles, is left out of
    the median); validation every `r.eval_every` steps and at the end, the best kept."""
    task = build_task(r.task, data_dir, seed, **r.task_options)
    device = torch.device(r.device)
    warm_up(task, r, seed)
    rows = []
    for name in names:
        _sync(device)
        start = time.perf_counter()
        run = build(name, task, r, seed)
        window_ms, best, best_step = [], math.inf, 0
        mark, in_window = time.perf_counter(), 0
        for step in range(r.steps):
            loss = optimizer_step(run, task, r, step)
            done, in_window = step + 1, in_window + 1
            evaluating = (r.eval_every and done % r.eval_every == 0) or done == r.steps
            if in_window < window and not evaluating:
                continue
            _sync(device)  # a window of steps ends (early at an evaluation)
            window_ms.append(1e3 * (time.perf_counter() - mark) / in_window)
            if done % 1000 == 0:
                print(f"  {name} step {done}: loss {loss.item():.3f}", file=sys.stderr)
            if evaluating:
                val_loss, _ = validate(run, task, r, seed)
                if val_loss < best:
                    best, best_step = val_loss, done
                print(f"  {name} step {done}: val loss {val_loss:.4f}", file=sys.stderr)
                _sync(device)
            mark, in_window = time.perf_counter(), 0  # evaluation time is not step time
        _sync(device)
        wall = time.perf_counter() - start
        steady = statistics.median(window_ms[1:] or window_ms)
        tokens = r.batch_size * r.task_options["seq_len"]
        rows.append(
            {
                "mixer": name,
                "params": sum(p.numel() for p in run.model.parameters()),
                "wall_s": wall,
                "ms_step": steady,
                "tokens_per_s": tokens / (steady / 1e3),
                "best_val_loss": best,
                "best_step": best_step,
            }
        )
        del run
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
        f"| time vs {PLAIN} | rank probe (ms) | probe share at eval_every={eval_every} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        value = row["val_loss"] if task_key.startswith("shakespeare") else row["accuracy"]
        ratio = f"{row['ms_mean'] / plain['ms_mean']:.2f}x" if plain else "-"
        share = row["probe_ms"] / (row["probe_ms"] + eval_every * row["ms_median"])
        lines.append(
            f"| {row['mixer']} | {row['params']:,} | {value:.4f} | {row['ms_mean']:.1f} | "
            f"{row['ms_median']:.1f} | {row['rank']:.3f} | {ratio} | {row['probe_ms']:.1f} | "
            f"{100 * share:.2f}% |"
        )
    return "\n".join(lines)


def bench_trainer(task_key: str, r: Recipe, names: list[str], seed: int, data_dir: str) -> str:
    """Each mixer through `attnzoo.train.run` with the task's experiment config; the table of
    what the run's summary reports."""
    metric = "loss" if task_key.startswith("shakespeare") else "accuracy"
    lines = [
        f"| mixer | params | val {metric} | steps/s (whole run) | final rank |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in names:
        if name == PLAIN:
            continue  # the plain GPT is not an attnzoo mixer
        overrides = [
            f"experiment={EXPERIMENTS[task_key]}",
            f"mixer={name}",
            f"data_dir={data_dir}",
            f"train.max_steps={r.steps}",
            f"train.seed={seed}",
            f"train.device={r.device}",
            f"impl={r.impl}",
            "logger.mode=disabled",
            "train.progress=false",
        ]
        with tempfile.TemporaryDirectory() as tmp:
            summary = trainer.run(trainer.compose(overrides), Path(tmp) / "run")
        final = summary["final"]
        lines.append(
            f"| {name} | {summary['params']:,} | {final[f'val/{metric}']:.4f} | "
            f"{summary['steps_per_s']:.2f} | {final['rank/last']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="shakespeare,imdb", help="shakespeare, imdb or both")
    parser.add_argument(
        "--mixers",
        default=",".join([*MIXERS, PLAIN]),
        help=f"mixers, and '{PLAIN}' for the plain GPT",
    )
    parser.add_argument("--steps", type=int, default=None, help="override the recipe's steps")
    parser.add_argument("--eval-batches", type=int, default=None)
    parser.add_argument("--dim", type=int, default=None, help="override the recipe's width")
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--seq-len", type=int, default=None, help="task.seq_len")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--impl", default=None, choices=["auto", "torch", "triton"])
    parser.add_argument("--device", default=None, help="cpu (default) or cuda")
    parser.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help="evaluations during training (sequential recipes); the probe's share (default 100)",
    )
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the training forward (default: the recipe's)",
    )
    parser.add_argument(
        "--trainer", action="store_true", help="train through attnzoo.train.run instead"
    )
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="train the models one after another, with wall times (as the GPU recipe does)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch.set_num_threads (0: torch's default)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--data-dir", default=DEFAULT_DATA, help=f"where the corpora are (default {DEFAULT_DATA})"
    )
    args = parser.parse_args(argv)
    names = [n for n in args.mixers.split(",") if n]
    unknown = [n for n in names if n != PLAIN and n not in MIXERS]
    if unknown:
        parser.error(f"unknown mixer(s) {unknown}; choose from {[*MIXERS, PLAIN]}")
    tasks = [t for t in args.tasks.split(",") if t]
    if any(t not in RECIPES for t in tasks):
        parser.error(f"--tasks takes {sorted(RECIPES)}, got {tasks}")
    if args.threads:
        torch.set_num_threads(args.threads)
    for task_key in tasks:
        r = recipe(task_key, args)
        where = (
            torch.cuda.get_device_name()
            if r.device == "cuda"
            else f"CPU, {torch.get_num_threads()} thread(s)"
        )
        print(
            f"\n### {task_key}: {r.task} {r.task_options}, {r.depth} layers x {r.heads} heads x "
            f"{r.dim}, batch {r.batch_size}, {r.steps} steps, impl={r.impl}, "
            f"compile={r.compile}, dropout={r.dropout}, "
            f"torch {torch.__version__}, {where}{', via attnzoo.train' if args.trainer else ''}\n",
            flush=True,
        )
        if args.trainer:
            print(bench_trainer(task_key, r, names, args.seed, args.data_dir), flush=True)
        elif task_key in SEQUENTIAL or args.sequential:
            rows = bench_sequential(task_key, r, names, args.seed, args.data_dir)
            print(table_sequential(rows), flush=True)
        else:
            print(
                table(
                    task_key,
                    bench(task_key, r, names, args.seed, args.data_dir),
                    args.eval_every or 100,
                ),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
