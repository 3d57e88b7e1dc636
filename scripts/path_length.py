"""Path-length study (Dong, Cordonnier & Loukas 2021): how much of a trained model do short paths do?

Trains a skip + attention network (no MLP, no norm: the blocks for which the path decomposition is
exact, attnzoo/paths.py) on the paper's sorting and convex-hull tasks, then evaluates the trained
model restricted to paths of length k, for k = 0..depth: `n_paths` random paths, each routing k
blocks through one randomly chosen head and the rest through the skip branch, summed. Accuracy
against k is plotted next to the full model.

Outputs (in --out): path_length.csv (task, k, accuracy, loss, paths used; k = "full" for the full
model), path_length.json (the command, machine and date, the model and training settings, what
was sampled), path_length.md (the table and the full model's numbers), path_length.png, and
runs/<task>/ (the training runs).

Model and training settings default to conf/experiment/path_length.yaml; flags override them.

    python scripts/path_length.py                                   # 2-core CPU: a few minutes
    python scripts/path_length.py --depth 6 --heads 8 --dim 128 --steps 5000 --n-paths 100
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attnzoo.paths import num_heads, num_paths, path_logits, sample_paths  # noqa: E402
from attnzoo.studies import (
    Clock,  # noqa: E402
    default_out,  # noqa: E402
)
from attnzoo.tasks import TASKS  # noqa: E402


def overrides_for(task: str, args: argparse.Namespace) -> list[str]:
    """The trainer overrides of one training run: the experiment=path_length preset (the model
    for which paths are exact), the task, and whatever the command line changes."""
    out = ["experiment=path_length", f"task={task}", "train.device=cpu", "logger.mode=disabled"]
    for key, value in (
        ("mixer", args.mixer),
        ("model.dim", args.dim),
        ("model.depth", args.depth),
        ("model.heads", args.heads),
        ("train.max_steps", args.steps),
        ("train.batch_size", args.batch_size),
        ("train.lr", args.lr),
        ("train.seed", args.seed),
    ):
        if value is not None:
            out.append(f"{key}={value}")
    return out + list(args.override)


def train(task: str, args: argparse.Namespace, run_dir: Path):
    """Train on `task` (with --reuse, evaluate the run already in `run_dir`); return the trained model, the task
    and the run's config."""
    from attnzoo.checkpoint import load_checkpoint
    from attnzoo.config import resolve_data_dir
    from attnzoo.train import build_task_and_model, compose, run

    cfg = compose(overrides_for(task, args))
    if run_dir.exists() and not args.reuse:
        shutil.rmtree(run_dir)
    if not (run_dir / "checkpoints" / "last.pt").exists():
        summary = run(cfg, run_dir=run_dir)
        if summary.get("status") != "completed":
            raise RuntimeError(f"training on {task} ended {summary.get('status')}: {summary}")
    task_obj, model = build_task_and_model(cfg, resolve_data_dir(cfg.data_dir, Path.cwd()))
    state, _ = load_checkpoint(run_dir / "checkpoints")
    model.load_state_dict(state["model"])
    return model.eval(), task_obj, cfg


@torch.no_grad()
def evaluate(model, task_obj, logits_fn, batches: int, batch_size: int, seed: int):
    """Mean loss and task metric of `logits_fn(batch)` over `batches` validation batches drawn
    with a fixed generator, so every k sees the same inputs."""
    gen = torch.Generator().manual_seed(seed)
    losses, metrics = [], []
    for _ in range(batches):
        batch = task_obj.batch("val", batch_size, gen)
        logits = logits_fn(batch)
        losses.append(task_obj.loss(logits, batch).item())
        metrics.append(task_obj.metrics(logits, batch)[task_obj.metric])
    return sum(losses) / len(losses), sum(metrics) / len(metrics)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["sort", "convex_hull"])
    parser.add_argument("--mixer", default=None)
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--n-paths", type=int, default=50)
    parser.add_argument("--eval-batches", type=int, default=4)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--override", nargs="*", default=[], help="extra trainer overrides")
    parser.add_argument("--reuse", action="store_true", help="evaluate the runs in --out/runs")
    parser.add_argument(
        "--out",
        type=Path,
        default=default_out("path_length"),
        help="report folder (default results/path_length/)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    clock = Clock()
    rows, full = [], {}
    for task in args.tasks:
        if task not in TASKS:
            print(f"skipping task {task!r}: not registered (registered: {sorted(TASKS)})")
            continue
        start = time.perf_counter()
        model, task_obj, cfg = train(task, args, args.out / "runs" / task)
        trained_s = time.perf_counter() - start
        model = model.double()  # the path sums are exact in float64 (paths reach 1e-10 scales)

        def as_model(batch, model=model):
            inputs = batch.inputs.double() if batch.inputs.is_floating_point() else batch.inputs
            return model(inputs, batch.key_padding_mask)

        loss, metric = evaluate(model, task_obj, as_model, args.eval_batches, 64, seed=1)
        full[task] = (loss, metric, cfg, trained_s)
        heads, depth = num_heads(model), len(model.blocks)
        for k in range(depth + 1):
            paths = sample_paths(depth, heads, k, args.n_paths, seed=k)

            def on_paths(batch, model=model, paths=paths):
                inputs = batch.inputs.double() if batch.inputs.is_floating_point() else batch.inputs
                return path_logits(model, inputs, paths, batch.key_padding_mask)

            loss_k, metric_k = evaluate(model, task_obj, on_paths, args.eval_batches, 64, seed=1)
            rows.append((task, k, metric_k, loss_k, len(paths), num_paths(depth, heads, k)))
            print(f"{task}: k={k} {task_obj.metric}={metric_k:.3f} loss={loss_k:.3g}")

    with open(args.out / "path_length.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["task", "k", "metric", "loss", "paths_used", "paths_total"])
        writer.writerows(rows)
        for task, (loss, metric, _, _) in full.items():
            writer.writerow([task, "full", metric, loss, "all", "all"])

    c = next(iter(full.values()))[2] if full else None
    shape = (
        f"{c.mixer.name} mixer, depth {c.model.depth}, {c.model.heads} heads, width "
        f"{c.model.dim}, {c.train.max_steps} steps of batch {c.train.batch_size}, lr {c.train.lr}"
        if c is not None
        else "no task trained"
    )
    lines = [
        f"Skip + attention blocks (no MLP, no norm): {shape}; {args.n_paths} random paths per "
        f"length, {args.eval_batches}×64 validation samples.",
        "",
        "| task | k | accuracy | loss | paths summed | paths of length k |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {t} | {k} | {m:.3f} | {lo:.3g} | {u} | {n} |" for t, k, m, lo, u, n in rows]
    lines += ["", "| task | full model accuracy | loss | training time (s) |", "|---|---|---|---|"]
    lines += [f"| {t} | {m:.3f} | {lo:.3g} | {s:.0f} |" for t, (lo, m, _, s) in full.items()]
    (args.out / "path_length.md").write_text("\n".join(lines) + "\n")
    settings = {}
    if c is not None:
        settings = {
            "mixer": c.mixer.name,
            "depth": c.model.depth,
            "heads": c.model.heads,
            "dim": c.model.dim,
            "steps": c.train.max_steps,
            "batch_size": c.train.batch_size,
            "lr": c.train.lr,
            "seed": c.train.seed,
        }
    header = clock.header(
        **settings, n_paths=args.n_paths, eval_samples=args.eval_batches * 64, tasks=list(full)
    )
    (args.out / "path_length.json").write_text(json.dumps(header, indent=2) + "\n")

    fig, axes = plt.subplots(1, max(len(full), 1), figsize=(4.2 * max(len(full), 1), 3.4))
    axes = [axes] if len(full) <= 1 else axes
    for ax, (task, (_, metric, _, _)) in zip(axes, full.items(), strict=False):
        ks = [k for t, k, *_ in rows if t == task]
        ax.plot(ks, [m for t, _, m, *_ in rows if t == task], marker="o", label="paths of length k")
        ax.axhline(metric, color="k", linestyle="--", label="full model")
        ax.set_title(task)
        ax.set_xlabel("path length k (heads on the path)")
        ax.set_ylabel("accuracy")
        ax.set_ylim(0, 1.02 if not math.isnan(metric) else None)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Accuracy of the trained model restricted to {args.n_paths} paths of length k")
    fig.tight_layout()
    fig.savefig(args.out / "path_length.png", dpi=120)
    print((args.out / "path_length.md").read_text())


if __name__ == "__main__":
    main()
