"""Summarise a Hydra multirun of attnzoo.train: one table row per job, and two figures.

Reads, for each job folder of the sweep, `.hydra/config.yaml`, `metrics.jsonl` and `summary.json`
(nothing from the network, nothing from W&B) and writes to --out (default: the sweep folder):

- summary.md, summary.csv: mixer, skip, MLP, norm, depth, task, final validation loss and metric,
  final rank, steps/s, parameters, status, and the job's own overrides. A job that failed, diverged or was preempted keeps the
  status its summary.json gives; a job with metrics but no summary is "incomplete" (still running
  or killed), one with a folder but no metrics "missing", one whose files do not parse "corrupt".
  A job number the sweep's launcher never reached (a gap in 0..max, or fewer folders than the
  sweep's grid) appears as "missing" too.
- rank_vs_depth.png: the relative residual after each block at the final evaluation, one panel per
  ablation (skip/MLP/norm), one line per mixer (and depth).
- val_curves.png: validation loss against step, one panel per mixer, one line per ablation.

    python scripts/summarize.py multirun/2026-11-22_12-00-00
    python scripts/summarize.py multirun/2026-11-22_12-00-00 --out reports/sweep1
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import yaml  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

COLUMNS = (
    "job",
    "mixer",
    "skip",
    "mlp",
    "norm",
    "depth",
    "task",
    "final_val_loss",
    "metric",
    "final_metric",
    "final_rank",
    "steps_per_s",
    "params",
    "status",
    "overrides",
    "note",
)
RANK_LAYER = re.compile(r"^rank/layer_(\d+)$")


@dataclass
class Job:
    """What summarize knows about one job of the sweep."""

    name: str
    folder: Path | None
    config: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    status: str = "missing"
    notes: list[str] = field(default_factory=list)

    def value(self, key: str) -> Any:
        """The latest value of `key`: summary.json's `final` first, then metrics.jsonl."""
        final = (self.summary or {}).get("final") or {}
        if isinstance(final, dict) and key in final:
            return final[key]
        for record in reversed(self.records):
            if key in record:
                return record[key]
        return None

    @property
    def metric_name(self) -> str | None:
        """The task's validation metric besides the loss (e.g. accuracy), as logged."""
        keys = set((self.summary or {}).get("final") or {})
        for record in self.records:
            keys.update(record)
        names = sorted(k for k in keys if k.startswith("val/") and k != "val/loss")
        return names[0] if names else None

    def rank_profile(self) -> list[float] | None:
        """rank/layer_0..L from the last record that logged them."""
        for record in reversed(self.records):
            layers = {int(m[1]): v for k, v in record.items() if (m := RANK_LAYER.match(k))}
            if layers:
                return [layers.get(i, math.nan) for i in range(max(layers) + 1)]
        return None


def _get(cfg: dict[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _group_name(cfg: dict[str, Any], group: str, overrides: list[str]) -> Any:
    """A config group's choice: its `name` key, a plain string, or the `group=` override."""
    node = cfg.get(group)
    if isinstance(node, dict) and node.get("name") is not None:
        return node["name"]
    if isinstance(node, str):
        return node
    for override in overrides:
        if override.startswith(f"{group}="):
            return override.split("=", 1)[1]
    return None


def load_job(name: str, folder: Path) -> Job:
    """Read one job folder; every problem becomes a status or a note, never an exception."""
    job = Job(name=name, folder=folder)
    config_file = folder / ".hydra" / "config.yaml"
    if config_file.exists():
        try:
            job.config = yaml.safe_load(config_file.read_text()) or {}
        except yaml.YAMLError as err:
            job.notes.append(f"config.yaml unreadable: {str(err).splitlines()[0]}")
    else:
        job.notes.append("no .hydra/config.yaml")
    overrides_file = folder / ".hydra" / "overrides.yaml"
    try:
        job.config["_overrides"] = yaml.safe_load(overrides_file.read_text()) or []
    except (OSError, yaml.YAMLError):
        job.config["_overrides"] = []

    metrics_file = folder / "metrics.jsonl"
    bad_lines = 0
    if metrics_file.exists():
        for line in metrics_file.read_text(errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                bad_lines += 1
                continue
            if isinstance(record, dict):
                job.records.append(record)
            else:
                bad_lines += 1
    if bad_lines:
        job.notes.append(f"{bad_lines} unreadable line(s) in metrics.jsonl")

    summary_file = folder / "summary.json"
    if summary_file.exists():
        try:
            summary = json.loads(summary_file.read_text())
            if not isinstance(summary, dict):
                raise ValueError("not a JSON object")
            job.summary = summary
            job.status = str(summary.get("status") or "unknown")
            if summary.get("error"):
                job.notes.append(str(summary["error"]).strip().splitlines()[-1][:120])
        except (json.JSONDecodeError, ValueError) as err:
            job.status = "corrupt"
            job.notes.append(f"summary.json unreadable: {err}")
    elif job.records:
        job.status = "incomplete"
        job.notes.append("no summary.json (still running, or killed)")
    else:
        job.status = "missing"
        job.notes.append("no metrics.jsonl and no summary.json")
    return job


def _expected_jobs(sweep: Path) -> int | None:
    """How many jobs the sweep's grid has, from multirun.yaml (None if unknown)."""
    try:
        cfg = yaml.safe_load((sweep / "multirun.yaml").read_text()) or {}
        # as Hydra's basic sweeper builds the grid: hydra.sweeper.params, then the command line
        params = _get(cfg, "hydra.sweeper.params") or {}
        overrides = [f"{k}={v}" for k, v in params.items()]
        overrides += _get(cfg, "hydra.overrides.task") or []
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(list(overrides))
        batches = BasicSweeper.split_arguments(parsed, None)
        return sum(len(batch) for batch in batches)
    except Exception:  # the count is a convenience: without it, gaps are still reported
        return None


def find_jobs(sweep: Path) -> list[Job]:
    """Every job of the sweep, including the ones that left no folder behind."""
    if not sweep.is_dir():
        raise ValueError(f"{sweep} is not a folder (give the multirun folder of a sweep)")
    folders = {
        p.name: p
        for p in sweep.iterdir()
        if p.is_dir()
        and (p.name.isdigit() or (p / ".hydra").is_dir() or (p / "metrics.jsonl").exists())
    }
    numbers = [int(n) for n in folders if n.isdigit()]
    expected = _expected_jobs(sweep)
    last = max(numbers + [(expected or 0) - 1, -1])
    names = sorted(folders, key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n))
    jobs = [load_job(n, folders[n]) for n in names]
    for number in range(last + 1):
        if str(number) not in folders:
            jobs.append(Job(str(number), None, notes=["the job left no folder"]))
    return sorted(
        jobs, key=lambda j: (not j.name.isdigit(), int(j.name) if j.name.isdigit() else 0)
    )


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def row(job: Job) -> dict[str, Any]:
    cfg, overrides = job.config, job.config.get("_overrides", [])
    metric = job.metric_name
    summary = job.summary or {}
    rank = job.value("rank/last")
    return {
        "job": job.name,
        "mixer": _group_name(cfg, "mixer", overrides),
        "skip": _get(cfg, "model.skip"),
        "mlp": _get(cfg, "model.mlp"),
        "norm": _get(cfg, "model.norm"),
        "depth": _get(cfg, "model.depth"),
        "task": _group_name(cfg, "task", overrides),
        "final_val_loss": job.value("val/loss"),
        "metric": metric.removeprefix("val/") if metric else None,
        "final_metric": job.value(metric) if metric else None,
        "final_rank": rank,
        "steps_per_s": summary.get("steps_per_s"),
        "params": summary.get("params"),
        "status": job.status,
        "overrides": " ".join(str(o) for o in overrides),
        "note": "; ".join(job.notes),
    }


def write_tables(rows: list[dict[str, Any]], out: Path, sweep: Path) -> None:
    with open(out / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows({k: _fmt(v) for k, v in r.items()} for r in rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    lines = [
        f"# Sweep summary: {sweep}",
        "",
        f"{len(rows)} jobs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ".",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for r in rows:
        cells = [_fmt(r[c]).replace("|", "/") for c in COLUMNS]
        if r["status"] != "completed":
            cells[COLUMNS.index("status")] = f"**{r['status']}**"
        lines.append("| " + " | ".join(cells) + " |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def _ablation(r: dict[str, Any]) -> str:
    on = lambda v: "on" if v in (True, "true", "True") else "off" if v is not None else "?"
    return f"skip {on(r['skip'])}, mlp {on(r['mlp'])}, norm {r['norm'] or '?'}"


def plot_rank(jobs: list[Job], rows: list[dict[str, Any]], path: Path) -> None:
    panels: dict[str, list[tuple[str, list[float]]]] = {}
    for job, r in zip(jobs, rows, strict=True):
        profile = job.rank_profile()
        if profile:
            label = f"{r['mixer']} (depth {r['depth']})"
            panels.setdefault(_ablation(r), []).append((label, profile))
    n = max(len(panels), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.0 * n, 3.4), squeeze=False, sharey=True)
    for ax, (title, curves) in zip(axes[0], sorted(panels.items()), strict=False):
        for label, profile in curves:
            ax.semilogy(range(len(profile)), [max(v, 1e-17) for v in profile], marker="o", ms=3,
                        label=label)  # fmt: skip
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("layer (0 = embedding)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if not panels:
        axes[0][0].text(0.5, 0.5, "no job logged rank/layer_*", ha="center", va="center")
    axes[0][0].set_ylabel("relative residual at the final eval")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_val(jobs: list[Job], rows: list[dict[str, Any]], path: Path) -> None:
    panels: dict[str, list[tuple[str, list[int], list[float]]]] = {}
    for job, r in zip(jobs, rows, strict=True):
        points = [(rec["step"], rec["val/loss"]) for rec in job.records
                  if "val/loss" in rec and "step" in rec]  # fmt: skip
        if points:
            steps, losses = zip(*points, strict=True)
            label = f"{_ablation(r)}, depth {r['depth']} [{r['status']}]"
            panels.setdefault(str(r["mixer"]), []).append((label, list(steps), list(losses)))
    n = max(len(panels), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.0 * n, 3.4), squeeze=False, sharey=True)
    for ax, (mixer, curves) in zip(axes[0], sorted(panels.items()), strict=False):
        for label, steps, losses in curves:
            ax.plot(steps, losses, marker="o", ms=2, label=label)
        ax.set_title(mixer)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    if not panels:
        axes[0][0].text(0.5, 0.5, "no job logged val/loss", ha="center", va="center")
    axes[0][0].set_ylabel("validation loss")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarize(sweep: Path, out: Path | None = None) -> list[dict[str, Any]]:
    """Write summary.{md,csv}, rank_vs_depth.png and val_curves.png; return the table rows."""
    out = sweep if out is None else out
    jobs = find_jobs(sweep)
    out.mkdir(parents=True, exist_ok=True)
    rows = [row(j) for j in jobs]
    write_tables(rows, out, sweep)
    plot_rank(jobs, rows, out / "rank_vs_depth.png")
    plot_val(jobs, rows, out / "val_curves.png")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path, help="the multirun folder (holds 0/, 1/, ...)")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: sweep)")
    args = parser.parse_args()
    try:
        rows = summarize(args.sweep, args.out)
    except ValueError as err:
        parser.error(str(err))
    out = args.out or args.sweep
    print((out / "summary.md").read_text())
    bad = [r["job"] for r in rows if r["status"] != "completed"]
    print(f"wrote {out}/summary.{{md,csv}}, rank_vs_depth.png, val_curves.png")
    if bad:
        print(f"{len(bad)} job(s) did not complete: {', '.join(bad)}")


if __name__ == "__main__":
    main()
