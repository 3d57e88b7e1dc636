"""Mixer ablation on real data (the NLP-MetaFormer experiments): the five mixers side by side.

Trains every mixer on `shakespeare_char` (character language model) and `imdb` (sentiment
classification) with skip and MLP on, at the same width and depth, and tabulates the final
validation loss and metric, parameters, steps/s and the final relative residual (rank/last).
The claim under test: on IMDB, pooling and identity match scaled-dot.

A task that is not registered in this checkout is skipped with a message, and a run that fails
is kept in the table with its status.

Outputs (in --out): mixer_ablation.csv, mixer_ablation.md, mixer_ablation.png (final metric and
loss per mixer and task), and runs/<task>/<mixer>/ (the training runs, one run folder each).

    python scripts/mixer_ablation.py                                  # 2-core CPU: minutes
    python scripts/mixer_ablation.py --dim 256 --depth 6 --heads 8 --steps 5000 \\
        --batch-size 64 --seq-len 256 --full-data --device auto        # full size (GPU)

Model and training settings default to conf/experiment/mixer_ablation.yaml; flags override them.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from attnzoo import MIXERS  # noqa: E402
from attnzoo.tasks import TASKS, task_options  # noqa: E402

# CPU-minutes defaults per task (only the options a task has are passed; flags override them).
TASK_DEFAULTS = {
    "shakespeare_char": {"seq_len": 64},
    "imdb": {"seq_len": 128, "max_examples": 2000},  # 2,000 reviews per split, first 128 tokens
}

COLUMNS = (
    "task",
    "mixer",
    "status",
    "final_val_loss",
    "metric",
    "final_metric",
    "params",
    "steps_per_s",
    "final_rank",
    "wall_s",
)


def final_value(run_dir: Path, summary: dict, key: str):
    """summary.json's final value of `key`, else the last one in metrics.jsonl."""
    final = summary.get("final") or {}
    if key in final:
        return final[key]
    value = None
    path = run_dir / "metrics.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                value = json.loads(line).get(key, value)
            except json.JSONDecodeError:
                continue
    return value


def overrides_for(task: str, mixer: str, args: argparse.Namespace) -> list[str]:
    """The experiment=mixer_ablation preset, the cell of the grid, and the command line's changes."""
    out = ["experiment=mixer_ablation", f"task={task}", f"mixer={mixer}", "logger.mode=disabled"]
    for key, value in (
        ("model.dim", args.dim),
        ("model.depth", args.depth),
        ("model.heads", args.heads),
        ("train.max_steps", args.steps),
        ("train.batch_size", args.batch_size),
        ("train.seed", args.seed),
        ("train.device", args.device),
        ("data_dir", args.data_dir),
    ):
        if value is not None:
            out.append(f"{key}={value}")
    task_opts = dict(TASK_DEFAULTS.get(task, {}))
    if args.seq_len is not None:
        task_opts["seq_len"] = args.seq_len
    if args.full_data:
        task_opts.pop("max_examples", None)
    allowed = task_options(task)
    out += [f"task.{k}={v}" for k, v in task_opts.items() if k in allowed]
    return out + list(args.override)


def train_one(task: str, mixer: str, args: argparse.Namespace, run_dir: Path) -> dict:
    """One cell of the grid: train, and read back what the table needs (a failure is a row)."""
    from attnzoo.train import compose, run

    if run_dir.exists():
        shutil.rmtree(run_dir)
    start = time.perf_counter()
    try:
        summary = run(compose(overrides_for(task, mixer, args)), run_dir=run_dir)
    except Exception as err:  # noqa: BLE001 - a failed run is a row of the table, not the end
        summary = {"status": "failed", "error": f"{type(err).__name__}: {err}"}
    wall = time.perf_counter() - start
    metric = getattr(TASKS[task], "metric", "accuracy")
    return {
        "task": task,
        "mixer": mixer,
        "status": summary.get("status"),
        "final_val_loss": final_value(run_dir, summary, "val/loss"),
        "metric": metric,
        "final_metric": final_value(run_dir, summary, f"val/{metric}"),
        "params": summary.get("params"),
        "steps_per_s": summary.get("steps_per_s"),
        "final_rank": final_value(run_dir, summary, "rank/last"),
        "wall_s": wall,
        "error": summary.get("error"),
    }


def _fmt(v) -> str:
    if v is None:
        return "–"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixers", nargs="+", default=list(MIXERS), choices=list(MIXERS))
    parser.add_argument("--tasks", nargs="+", default=["shakespeare_char", "imdb"])
    parser.add_argument("--dim", type=int, default=None)
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--seq-len", type=int, default=None, help="task.seq_len, where it has one")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--full-data", action="store_true", help="every example (no max_examples)")
    parser.add_argument("--device", default="cpu", help="train.device (auto picks a GPU)")
    parser.add_argument("--data-dir", default=None, help="corpora folder (trainer's data_dir)")
    parser.add_argument("--override", nargs="*", default=[], help="extra trainer overrides")
    parser.add_argument("--out", type=Path, default=Path("scripts/results/mixer_ablation"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    rows, skipped = [], []
    for task in args.tasks:
        if task not in TASKS:
            msg = f"skipping task {task!r}: it is not registered yet (registered: {sorted(TASKS)})"
            print(msg)
            skipped.append(msg)
            continue
        for mixer in args.mixers:
            r = train_one(task, mixer, args, args.out / "runs" / task / mixer)
            rows.append(r)
            print(
                f"{task} {mixer}: {r['status']} loss={_fmt(r['final_val_loss'])} "
                f"{r['metric']}={_fmt(r['final_metric'])} rank={_fmt(r['final_rank'])} "
                f"{_fmt(r['steps_per_s'])} steps/s"
            )

    with open(args.out / "mixer_ablation.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    from attnzoo.train import compose

    try:
        c = compose(overrides_for(rows[0]["task"], rows[0]["mixer"], args)) if rows else None
    except Exception:  # noqa: BLE001 - the failures are in the table already
        c = None
    shape = (
        f"width {c.model.dim}, depth {c.model.depth}, {c.model.heads} heads, "
        f"{c.train.max_steps} steps of batch {c.train.batch_size} (seed {c.train.seed})"
        if c is not None
        else "settings unknown (no run composed)"
    )
    lines = [
        f"Skip + MLP + LayerNorm blocks, {shape}; the same for every mixer.",
        "",
        "| task | mixer | status | val loss | metric | params | steps/s | final rank |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        metric = f"{r['metric']} {_fmt(r['final_metric'])}"
        lines.append(
            f"| {r['task']} | {r['mixer']} | {r['status']} | {_fmt(r['final_val_loss'])} | "
            f"{metric} | {_fmt(r['params'])} | {_fmt(r['steps_per_s'])} | "
            f"{_fmt(r['final_rank'])} |"
        )
    lines += (
        [""] + skipped + [f"{r['task']} {r['mixer']}: {r['error']}" for r in rows if r["error"]]
    )
    (args.out / "mixer_ablation.md").write_text("\n".join(lines) + "\n")

    tasks = sorted({r["task"] for r in rows}, key=args.tasks.index)
    fig, axes = plt.subplots(2, max(len(tasks), 1), figsize=(4.2 * max(len(tasks), 1), 5.6),
                             squeeze=False)  # fmt: skip
    for col, task in enumerate(tasks):
        done = [r for r in rows if r["task"] == task]
        names = [r["mixer"] for r in done]
        for row_i, key in enumerate(("final_val_loss", "final_metric")):
            ax = axes[row_i][col]
            ax.bar(names, [r[key] if r[key] is not None else 0.0 for r in done])
            ax.set_title(f"{task}: {'val loss' if row_i == 0 else done[0]['metric']}")
            ax.tick_params(axis="x", rotation=30, labelsize=8)
            ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(args.out / "mixer_ablation.png", dpi=120)
    print((args.out / "mixer_ablation.md").read_text())


if __name__ == "__main__":
    main()
