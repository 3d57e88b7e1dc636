"""Training benchmark on the real corpora: every mixer, and a plain PyTorch GPT of the same shape
as a reference, trained by the trainer's own code on the same batches.

A recipe is the trainer's experiment config, composed by `attnzoo.train.compose`, with the
command line's flags as overrides: `--tasks shakespeare` is `experiment=shakespeare_char`
(nanoGPT's CPU recipe for Tiny Shakespeare),
`imdb` is `experiment=imdb`, `shakespeare_gpu` is `experiment=shakespeare_char_gpu` (nanoGPT's
GPU recipe). Models are built by `attnzoo.train.build_model` and trained by
`attnzoo.train.TrainStep`: the AdamW, schedule, clipping, non-finite checks, bf16 autocast on
CUDA and torch.compile of `python -m attnzoo.train`; validation is the trainer's `evaluate` and the
rank probe its `rank_record`. What the benchmark adds is the timing, and the plain GPT
(`attnzoo.bench.plain_gpt.PlainGPT`), a reference outside attnzoo's model that goes through the
same step. The benchmark itself is `attnzoo.bench.train`; this script is its command line.
Target on Tiny Shakespeare: scaled_dot reaches val loss <= 1.90 in <= 1.1x the plain GPT's time
per step.

The models train round-robin, one step each in turn, so that every model meets the same machine
load (on a shared CPU the load drifts over minutes, which would skew back-to-back timings). The
table also gives the cost of the rank probe as a share of training time at the recipe's
`train.eval_every` (target: under 5%), with the relative residual alone and with every measure
of the recipe's `train.rank_measures`.

On a GPU (`shakespeare_gpu`, or `--sequential` on any recipe) the models train one after another,
and the table gives what a user waits for: wall time (compilation and evaluations included),
steady ms/step (median over windows of steps, after the first), tokens/s and the best validation
loss, evaluated every `train.eval_every` steps and at the end.

`--trainer` instead trains each mixer through `attnzoo.train.run`: the numbers a user gets from
`python -m attnzoo.train experiment=...`, evaluation, probes and checkpoints included.

    python scripts/bench_train.py                                   # both tables, every mixer
    python scripts/bench_train.py --tasks shakespeare --mixers scaled_dot,gpt --steps 2000
    python scripts/bench_train.py --tasks imdb --steps 50 --eval-batches 5   # a quick look
    python scripts/bench_train.py --tasks shakespeare --device cuda --dim 256 --seq-len 256 --batch 32
    python scripts/bench_train.py --tasks shakespeare --mixers scaled_dot --trainer
    python scripts/bench_train.py --tasks shakespeare_gpu --device cuda       # nanoGPT's GPU recipe
    python scripts/bench_train.py --tasks shakespeare --mixers gpt --sequential --eval-every 250 \
        --eval-batches 40 --threads 2   # nanoGPT's CPU command's loop, on the plain GPT, with wall time
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from attnzoo.bench.train import (
    EXPERIMENTS,
    PLAIN,
    SEQUENTIAL,
    bench,
    bench_sequential,
    bench_trainer,
    recipe,
    table,
    table_sequential,
)
from attnzoo.config import Impl, enum_value
from attnzoo.mixers import MIXERS, causal_mixers
from attnzoo.studies import in_zoo_order
from attnzoo.train import device_for

ROOT = Path(__file__).resolve().parents[1]
# Where the corpora are read from unless --data-dir says otherwise: $ATTNZOO_DATA_DIR, else the
# project's shared test data beside the checkout, else the user cache (files are downloaded there).
DEFAULT_DATA = os.environ.get("ATTNZOO_DATA_DIR") or (
    str(ROOT.parent / "shared" / "data")
    if (ROOT.parent / "shared" / "data").is_dir()
    else str(Path.home() / ".cache" / "attnzoo")
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add(
        "--tasks", default="shakespeare,imdb", help=f"a comma-separated list of {list(EXPERIMENTS)}"
    )
    add(
        "--mixers",
        default=",".join([*in_zoo_order(causal_mixers()), PLAIN]),  # its tasks include causal ones
        help=f"mixers, and {PLAIN!r} for the plain GPT",
    )
    add("--steps", type=int, default=None, help="train.max_steps (default: the recipe's)")
    add("--eval-batches", type=int, default=None, help="train.eval_batches")
    add(
        "--eval-every",
        type=int,
        default=None,
        help="train.eval_every: evaluations (sequential) and the probe's share",
    )
    add("--dim", type=int, default=None, help="model.dim")
    add("--depth", type=int, default=None, help="model.depth")
    add("--heads", type=int, default=None, help="model.heads")
    add("--seq-len", type=int, default=None, help="task.seq_len")
    add("--batch", type=int, default=None, help="train.batch_size")
    add("--impl", default=None, choices=[i.value for i in Impl], help="impl")
    add("--device", default=None, help="train.device: cpu or cuda (default: the recipe's, auto)")
    add(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="train.compile (default: the recipe's)",
    )
    add("--trainer", action="store_true", help="train through attnzoo.train.run instead")
    add(
        "--sequential",
        action="store_true",
        help="train the models one after another, with wall times (as the GPU recipe does)",
    )
    add("--threads", type=int, default=1, help="torch.set_num_threads (0: torch's default)")
    add("--seed", type=int, default=0, help="train.seed")
    add(
        "--data-dir",
        default=DEFAULT_DATA,
        help=f"data_dir: where the corpora are (default {DEFAULT_DATA})",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    names = [n for n in args.mixers.split(",") if n]
    unknown = [n for n in names if n != PLAIN and n not in MIXERS]
    if unknown:
        parser.error(f"unknown mixer(s) {unknown}; choose from {[*MIXERS, PLAIN]}")
    tasks = [t for t in args.tasks.split(",") if t]
    if any(t not in EXPERIMENTS for t in tasks):
        parser.error(f"--tasks takes {sorted(EXPERIMENTS)}, got {tasks}")
    if args.threads:
        torch.set_num_threads(args.threads)
    for task_key in tasks:
        # the plain GPT takes its shape and training from the default mixer's config
        cfgs = {n: recipe(task_key, args, None if n == PLAIN else n) for n in names}
        cfg = recipe(task_key, args)
        m, t, device = cfg.model, cfg.train, device_for(cfg)
        where = (
            torch.cuda.get_device_name()
            if device.type == "cuda"
            else f"CPU, {torch.get_num_threads()} thread(s)"
        )
        print(
            f"\n### {task_key}: experiment={EXPERIMENTS[task_key]}, {cfg.task.name} "
            + (f"task.splits={enum_value(cfg.task.splits)} " if "splits" in cfg.task else "")
            + f"seq_len={cfg.task.seq_len}, {m.depth} layers x {m.heads} heads x {m.dim}, "
            f"batch {t.batch_size}, {t.max_steps} steps, impl={enum_value(cfg.impl)}, "
            f"compile={t.compile}, dropout={m.dropout}, torch {torch.__version__}, "
            f"{where}{', via attnzoo.train' if args.trainer else ''}\n",
            flush=True,
        )
        if args.trainer:
            print(bench_trainer(task_key, cfgs), flush=True)
        elif task_key in SEQUENTIAL or args.sequential:
            print(table_sequential(bench_sequential(cfgs)), flush=True)
        else:
            rows = bench(task_key, cfgs)
            print(table(task_key, rows, int(t.eval_every)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
