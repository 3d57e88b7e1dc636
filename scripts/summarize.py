"""Summarise a Hydra multirun of attnzoo.train: one row per job, one row per configuration over
its seeds with 95% intervals, which differences the seeds resolve, and (optionally) the learning
rate to keep per configuration.

Reads, for each job folder of the sweep, `.hydra/config.yaml`, `.hydra/overrides.yaml`,
`metrics.jsonl` and `summary.json` (nothing from the network, nothing from W&B) and writes to
--out (default: the sweep folder):

- summary.md, summary.csv: one row per job: mixer, skip, residual (the variant the job ran,
  `model.residual` with the older `model.skip` resolved by attnzoo.residual), MLP, norm, depth,
  task, seed, final validation loss and metric, final rank (the relative residual) and
  final_<measure> for each other collapse measure (effective_rank, stable_rank,
  token_similarity, attention_entropy; the last layer's `rank/<measure>/layer_<k>`, empty when
  n/a or not logged), steps/s, parameters, tokens, wall time, FLOPs, status, and the job's own
  overrides. A job that failed, diverged or was preempted keeps the status its
  summary.json gives; a job with metrics but no summary is "incomplete" (still running or
  killed), one with a folder but no metrics "missing", one whose files do not parse "corrupt".
  A job number the sweep's launcher never reached (a gap in 0..max, or fewer folders than the
  sweep's grid) appears as "missing" too. Tokens, FLOPs and wall time are what the run
  recorded in summary.json's `compute` (FLOPs: tokens × the analytic training FLOPs per token of
  the blocks, attnzoo.flops: matmuls, backward = 2 × forward, embedding and head excluded; wall
  time: the training loop's seconds, evaluation included, over every resume); for a run that
  did not record them, tokens are steps × train.batch_size × context of the resolved config and
  wall time is time.total_s.
- groups.md, groups.csv: one row per configuration. Jobs whose resolved configs differ only in
  `train.seed` (and in non-semantic keys: logger.*, data_dir, train.progress/resume/threads/
  ckpt_every/device) are replicates of one configuration. Columns: the axes that vary between
  configurations, n_seeds (completed seeds with a finite value), n_jobs, seeds, then for
  val_loss, metric (the task's), rank and each other collapse measure (<measure>_mean, ...):
  _mean, _std, _ci_low, _ci_high (Student-t, see attnzoo.stats for why not the bootstrap), then steps_per_s_mean, params, tokens, wall_s_mean,
  flops, note. A configuration with one seed has an empty interval and says so; a seed that did
  not complete is left out and named in the note.
- comparisons.csv and a section of groups.md: along one axis (--compare, default: the axis the
  sweep varied, the mixer when it varied several), each configuration against the best one
  (lowest mean validation loss) with the other axes fixed: the paired t-test on the seeds both
  ran (a seed fixes data order and initialisation, so matching seeds share noise that pairing
  removes), Welch's t-test when their seed sets differ. "resolved" = the interval of the
  difference excludes 0; with --margin, two one-sided tests (TOST) say "within margin" when the
  difference is shown to be inside ±margin. "not resolved" is not "equal".
- intervals.png: per configuration, the mean and its interval (whiskers) of the final
  validation loss, metric and rank, each seed as a grey dot. val_bands.png: validation loss
  against step, mean over seeds with its interval as a band.
- rank_vs_depth.png: the relative residual after each block at the final evaluation, one panel per
  ablation (residual/MLP/norm), one line per job. val_curves.png: validation loss against step, one
  line per job.
- with --select-by val_loss --tune-axis train.lr: selected.json, selected.md, selected.sh: for
  each configuration of the other axes, the value of the tuned axis with the best mean over the
  tuning seeds (a value at the edge of the grid is flagged), and the commands that rerun each at
  its value with fresh seeds and summarise the reruns.

    python scripts/summarize.py multirun/2026-11-22_12-00-00
    python scripts/summarize.py multirun/2026-11-22_12-00-00 --out reports/sweep1 --margin 0.02
    python scripts/summarize.py multirun/a multirun/b --out reports/ab     # several sweeps as one

A replicated, tuned ablation (tune on seeds 100-101 over a log-spaced grid, then report on fresh
seeds 0-4, so the reported numbers are not the ones the choice was made on):

    python -m attnzoo.train -m mixer=scaled_dot,pooling train.lr=1e-3,2e-3,4e-3,8e-3 \\
        train.seed=100,101 hydra.sweep.dir=multirun/tune
    python scripts/summarize.py multirun/tune --select-by val_loss --tune-axis train.lr \\
        --final-dir multirun/final
    bash multirun/tune/selected.sh      # one sweep per configuration at its selected LR, seeds
                                        # 0-4, then: summarize.py multirun/final/*/ --out
                                        # multirun/final-report --compare mixer
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _summary_plots import draw_bands, plot_intervals, plot_rank, plot_val  # this folder's
from _sweep_jobs import (  # this folder's: reading the jobs, the per-job table
    CSV_DIGITS,
    OTHER_MEASURES,
    Job,
    find_jobs,
    fmt,
    get,  # noqa: F401 - summarize is the study drivers' one import
    group_choice,  # noqa: F401
    reconstructed_budget,
    row,
    task_attr,
    write_tables,
)

from attnzoo.replicates import (  # the one definition the trainer uses too
    NON_SEMANTIC,
    REPLICATE_KEY,
    config_key,
    group_name,
    semantic_config,
)
from attnzoo.stats import Comparison, Interval, compare, mean_interval

# ---- seeds as replicates: one row per configuration -------------------------------------------

GROUP_STATS = (
    "n_seeds",
    "n_jobs",
    "seeds",
    "val_loss_mean",
    "val_loss_std",
    "val_loss_ci_low",
    "val_loss_ci_high",
    "metric",
    "metric_mean",
    "metric_std",
    "metric_ci_low",
    "metric_ci_high",
    "rank_mean",
    "rank_std",
    "rank_ci_low",
    "rank_ci_high",
    *(f"{m}_{s}" for m in OTHER_MEASURES for s in ("mean", "std", "ci_low", "ci_high")),
    "steps_per_s_mean",
    "params",
    "tokens",
    "wall_s_mean",
    "flops",
    "note",
    "wandb_group",
)
COMPARISON_COLUMNS = (
    "block",
    "config",
    "best",
    "on",
    "method",
    "n",
    "n_best",
    "diff",
    "diff_ci_low",
    "diff_ci_high",
    "p_value",
    "margin",
    "p_tost",
    "verdict",
    "sentence",
)
VALUES = {
    "val_loss": "final_val_loss",
    "metric": "final_metric",
    "rank": "final_rank",
    **{m: f"final_{m}" for m in OTHER_MEASURES},
}


def _axis_name(key: str) -> str:
    """How an axis is shown: a config group's choice by the group's name (`mixer`)."""
    return key.removesuffix(".name")


@dataclass
class Group:
    """The jobs of one configuration: resolved configs equal up to the seed and NON_SEMANTIC."""

    config: dict[str, Any]
    members: list[tuple[Job, dict[str, Any]]] = field(default_factory=list)
    label: dict[str, Any] = field(default_factory=dict)  # the axes that vary between groups

    @property
    def name(self) -> str:
        return ", ".join(f"{_axis_name(k)}={fmt(v)}" for k, v in self.label.items()) or "all"

    @property
    def completed(self) -> list[dict[str, Any]]:
        return [r for _, r in self.members if r["status"] == "completed"]

    def values(self, which: str) -> dict[Any, float]:
        """{seed: final value} over the completed jobs with a finite value (which: a key of
        VALUES: val_loss, metric, rank or another collapse measure)."""
        out: dict[Any, float] = {}
        for r in self.completed:
            v = r[VALUES[which]]
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                # no seed, or a seed twice (two sweeps): keyed by the job, so never paired
                seed = r["seed"] if r["seed"] is not None else ("job", r["job"])
                out[seed if seed not in out else ("job", r["job"])] = float(v)
        return out


def _run_paths(job: Job) -> list[str]:
    """The job's folder and its sweep's, as written and resolved: a config value that contains
    one is a run-dir path (checkpoint or output folder), not part of the configuration."""
    if job.folder is None:
        return []
    sweep = job.folder.parent
    given = [str(p) for p in (job.folder, sweep) if os.sep in str(p)]  # not a bare "sw"
    return given + [str(job.folder.resolve()), str(sweep.resolve())]


def group_jobs(jobs: list[Job], rows: list[dict[str, Any]]) -> tuple[list[Group], list[str]]:
    """Groups in order of first appearance, each labelled by the axes that vary between groups,
    and the names of the jobs that could not be placed (no readable config)."""
    groups: dict[str, Group] = {}
    orphans = []
    for job, r in zip(jobs, rows, strict=True):
        flat = semantic_config(job.config, _run_paths(job))
        if not flat:
            orphans.append(job.name)
            continue
        key = config_key(flat)
        groups.setdefault(key, Group(flat)).members.append((job, r))
    found = list(groups.values())
    for key in varying_axes(found):
        for g in found:
            g.label[key] = g.config.get(key)
    return found, orphans


def varying_axes(groups: list[Group]) -> list[str]:
    """Config keys whose value differs between groups, without the keys that only follow a group
    choice (mixer.window, present for pooling alone, follows mixer.name)."""
    keys = sorted({k for g in groups for k in g.config})
    varying = [
        k for k in keys if len({json.dumps(g.config.get(k), default=str) for g in groups}) > 1
    ]
    axes = []
    for key in varying:
        head = key.rsplit(".", 1)[0] + ".name" if "." in key else None
        if head and head != key and head in varying:
            by_choice: dict[str, set[str]] = {}
            for g in groups:
                by_choice.setdefault(str(g.config.get(head)), set()).add(
                    json.dumps(g.config.get(key), default=str)
                )
            if all(len(v) == 1 for v in by_choice.values()):
                continue  # determined by the group choice
        axes.append(key)
    # group choices first (mixer, task), then the rest in key order
    return sorted(axes, key=lambda k: (not k.endswith(".name"), k))


def _interval_cells(prefix: str, ci: Interval) -> dict[str, Any]:
    return {
        f"{prefix}_mean": ci.mean,
        f"{prefix}_std": ci.std,
        f"{prefix}_ci_low": ci.low,
        f"{prefix}_ci_high": ci.high,
    }


def _mean(values: list[Any]) -> float | None:
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(nums) / len(nums) if nums else None


def _common(values: list[Any]) -> Any:
    """The one value every job shares, else their mean (params differ only by accident)."""
    distinct = {v for v in values if v is not None}
    return distinct.pop() if len(distinct) == 1 else _mean(values)


def group_row(group: Group, confidence: float) -> dict[str, Any]:
    """One row of groups.csv: n, mean, std and the Student-t interval of the final validation
    loss, task metric and rank over the completed seeds, plus cost columns."""
    done = group.completed
    notes = []
    for job, r in group.members:
        if r["status"] != "completed":
            notes.append(f"seed {fmt(r['seed'])} {r['status']} (job {job.name}), left out")
    cells: dict[str, Any] = {}
    for which in VALUES:
        ci = mean_interval(list(group.values(which).values()), confidence)
        cells |= _interval_cells(which, ci)
        if ci.note and which == "val_loss":
            notes.append(ci.note)
    metrics = {r["metric"] for r in done if r["metric"]}
    return {
        "group": group.name,
        **{_axis_name(k): v for k, v in group.label.items()},
        "n_seeds": len(group.values("val_loss")),
        "n_jobs": len(group.members),
        "seeds": " ".join(fmt(r["seed"]) for r in done),
        **cells,
        "metric": ", ".join(sorted(metrics)) or None,
        "steps_per_s_mean": _mean([r["steps_per_s"] for r in done]),
        "params": _common([r["params"] for r in done]),
        "tokens": _common([r["tokens"] for r in done]),
        "wall_s_mean": _mean([r["wall_s"] for r in done]),
        "flops": _common([r["flops"] for r in done]),
        "note": "; ".join(notes),
        "wandb_group": group_name(group.members[0][0].config, _run_paths(group.members[0][0])),
    }


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: fmt(r.get(k), CSV_DIGITS) for k in columns} for r in rows)


def _md_table(columns: list[str], rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c)).replace("|", "/") for c in columns) + " |")
    return lines


def ci_text(mean: Any, low: Any, high: Any) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    if isinstance(low, float) and math.isnan(low):
        return f"{mean:.4g} (1 seed)"
    return f"{mean:.4g} [{low:.4g}, {high:.4g}]"


# ---- which differences are resolved ---------------------------------------------------------


def resolve_axis(name: str, axes: list[str]) -> str:
    """`mixer` or `mixer.name` or `model.skip`: the config key of a varied axis."""
    for key in (name, f"{name}.name"):
        if key in axes:
            return key
    shown = ", ".join(_axis_name(a) for a in axes) or "none (the sweep varied only the seed)"
    raise ValueError(f"{name!r} is not an axis this sweep varied; its axes: {shown}")


def default_axis(axes: list[str]) -> str | None:
    """The axis the sweep varied: the only one, or the mixer, or the first."""
    if not axes:
        return None
    return "mixer.name" if "mixer.name" in axes else axes[0]


def _lower_is_better(which: str, groups: list[Group]) -> bool:
    """Loss and rank: lower / higher is better; the task metric: the task's own direction."""
    if which == "val_loss":
        return True
    if which == "rank":
        return False  # a higher relative residual is less collapse
    tasks = {g.config.get("task.name") for g in groups}
    return not all(task_attr(t, "higher_is_better", True) for t in tasks)


def _in_scope(key: str, axis: str) -> bool:
    """`key` is the axis itself or under its config group (mixer.window for mixer.name)."""
    scope = axis.removesuffix("name") if axis.endswith(".name") else f"{axis}."
    return key == axis or key.startswith(scope)


def attached_keys(groups: list[Group], axis: str) -> list[str]:
    """Other axes that were chosen per value of `axis` rather than crossed with it: leaving one
    out of the blocks still puts each value of `axis` at most once in a block. A sweep rerun at
    a learning rate selected per mixer has train.lr attached to the mixer, so the mixers are
    still compared with each other (each at its own learning rate)."""
    rest = [k for k in (groups[0].label if groups else {}) if not _in_scope(k, axis)]
    attached: list[str] = []
    for key in rest:
        keep = [k for k in rest if k != key and k not in attached]
        seen: set[tuple[str, str]] = set()
        unique = True
        for g in groups:
            cell = (json.dumps([g.label.get(k) for k in keep], default=str),
                    json.dumps(g.label.get(axis), default=str))  # fmt: skip
            unique &= cell not in seen
            seen.add(cell)
        if unique:
            attached.append(key)
    return attached


def blocks(groups: list[Group], axis: str, attach: bool = True) -> dict[str, list[Group]]:
    """Groups that differ only in `axis` (and keys under its config group, and with `attach`
    the keys chosen per value of it: `attached_keys`), by the other axes' values."""
    skip = set(attached_keys(groups, axis)) if attach else set()
    out: dict[str, list[Group]] = {}
    for g in groups:
        rest = {k: v for k, v in g.label.items() if not _in_scope(k, axis) and k not in skip}
        name = ", ".join(f"{_axis_name(k)}={fmt(v)}" for k, v in rest.items()) or "all"
        out.setdefault(name, []).append(g)
    return out


def _config_name(g: Group, axis: str, attached: list[str]) -> str:
    """The value of `axis`, with the attached keys' values: `pooling (train.lr=0.01)`."""
    extra = ", ".join(f"{_axis_name(k)}={fmt(g.label.get(k))}" for k in attached)
    return fmt(g.label.get(axis)) + (f" ({extra})" if extra else "")


def _sentence(a: str, best: str, c: Comparison, on: str) -> str:
    n = f"{min(c.n_a, c.n_b)} seeds" if c.method == "paired t" else f"{c.n_a}+{c.n_b} seeds"
    if c.verdict == "too few seeds":
        return f"{a} vs {best}: too few seeds to tell ({c.n_a} and {c.n_b}; 2 each needed)"
    text = (
        f"{a} vs {best}: {c.verdict} with {n} ({c.method}, Δ{on} = {c.diff:+.3g}, "
        f"{c.confidence:.0%} CI [{c.low:+.3g}, {c.high:+.3g}], p = {c.p_value:.2g}"
    )
    if c.margin is not None and c.p_tost is not None:
        text += f"; TOST ±{c.margin:g}: p = {c.p_tost:.2g}"
    return text + ")"


def comparisons(
    groups: list[Group],
    axis: str,
    on: str = "val_loss",
    confidence: float = 0.95,
    margin: float | None = None,
) -> list[dict[str, Any]]:
    """Within each block (the other axes fixed), every configuration against the best one on
    `on` (by mean over seeds): attnzoo.stats.compare, i.e. the paired t-test on the seeds both
    ran, Welch's t-test when the seed sets differ, and TOST against ±margin."""
    lower = _lower_is_better(on, groups)
    attached = attached_keys(groups, axis)
    rows = []
    for block, members in blocks(groups, axis).items():
        scored = [g for g in members if g.values(on)]
        if len(scored) < 2:
            continue
        means = {id(g): sum(g.values(on).values()) / len(g.values(on)) for g in scored}
        best = (min if lower else max)(scored, key=lambda g: means[id(g)])
        for g in scored:
            if g is best:
                continue
            c = compare(g.values(on), best.values(on), confidence, margin)
            a_name = _config_name(g, axis, attached)
            b_name = _config_name(best, axis, attached)
            rows.append(
                {
                    "block": block,
                    "config": a_name,
                    "best": b_name,
                    "on": on,
                    "method": c.method,
                    "n": c.n_a,
                    "n_best": c.n_b,
                    "diff": c.diff,
                    "diff_ci_low": c.low,
                    "diff_ci_high": c.high,
                    "p_value": c.p_value,
                    "margin": margin,
                    "p_tost": c.p_tost,
                    "verdict": c.verdict,
                    "sentence": _sentence(a_name, b_name, c, on),
                }
            )
    return rows


# ---- selection of a tuned value (e.g. the learning rate) -----------------------------------


def _override_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return repr(value) if isinstance(value, float) else str(value)


def select(
    groups: list[Group],
    tune_key: str,
    by: str = "val_loss",
    fresh_seeds: str = "0,1,2,3,4",
    final_dir: str = "multirun/final",
) -> list[dict[str, Any]]:
    """For each configuration of the other axes, the value of `tune_key` with the best mean of
    `by` over the tuning seeds, and the Hydra overrides that rerun it with fresh seeds."""
    lower = _lower_is_better(by, groups)
    out = []
    for i, (block, members) in enumerate(blocks(groups, tune_key, attach=False).items()):
        scored = [g for g in members if g.values(by)]
        if not scored:
            continue
        mean = {id(g): sum(g.values(by).values()) / len(g.values(by)) for g in scored}
        best = (min if lower else max)(scored, key=lambda g: mean[id(g)])
        grid = sorted(
            (g.config.get(tune_key) for g in members if g.config.get(tune_key) is not None),
            key=lambda v: (str(type(v)), v),
        )
        chosen = best.config.get(tune_key)
        notes = []
        if len(grid) > 2 and chosen in (grid[0], grid[-1]):
            notes.append(f"{chosen} is at the edge of the grid {grid}: widen it")
        member = next(
            (j for j, r in best.members if r["status"] == "completed"), best.members[0][0]
        )
        keep = [
            str(o)
            for o in member.config.get("_overrides", [])
            if not str(o).lstrip("+~").startswith((f"{REPLICATE_KEY}=", f"{tune_key}=", "hydra"))
        ]
        overrides = keep + [
            f"{tune_key}={_override_value(chosen)}",
            f"{REPLICATE_KEY}={fresh_seeds}",
            f"hydra.sweep.dir={final_dir}/{i:02d}",
        ]
        ci = mean_interval(list(best.values(by).values()))
        out.append(
            {
                "config": block,
                "axes": {_axis_name(k): v for k, v in best.label.items() if k != tune_key},
                "tune_axis": tune_key,
                "value": chosen,
                "select_by": by,
                "mean": ci.mean,
                "n_seeds": ci.n,
                "candidates": [
                    {
                        "value": g.config.get(tune_key),
                        "mean": mean[id(g)],
                        "n_seeds": len(g.values(by)),
                    }
                    for g in sorted(scored, key=lambda g: (str(g.config.get(tune_key)),))
                ],
                "note": "; ".join(notes),
                "overrides": overrides,
                "command": "python -m attnzoo.train -m "
                + " ".join(shlex.quote(o) for o in overrides),
            }
        )
    return out


def write_selection(selected: list[dict[str, Any]], out: Path, final_dir: str, axis: str | None):
    """selected.json (the choices), selected.md (a table) and selected.sh (the fresh-seed runs,
    then their summary): `bash selected.sh` is the follow-up command."""
    (out / "selected.json").write_text(json.dumps(selected, indent=2, default=str) + "\n")
    compare_flag = f" --compare {_axis_name(axis)}" if axis else ""
    script = shlex.quote(os.path.relpath(Path(__file__).resolve()))  # from where it runs now
    report = f"python {script} {final_dir}/*/ --out {final_dir}-report{compare_flag}"
    lines = ["#!/usr/bin/env bash", "# fresh-seed runs at the selected values, then their summary",
             "set -euo pipefail"] + [s["command"] for s in selected] + [report]  # fmt: skip
    (out / "selected.sh").write_text("\n".join(lines) + "\n")
    md = ["# Selected values", ""]
    if selected:
        s0 = selected[0]
        md += [f"Chosen by the best mean of {s0['select_by']} over the tuning seeds, per "
               f"configuration of the other axes; tuned: `{s0['tune_axis']}`.", ""]  # fmt: skip
    md += ["| config | value | mean | n_seeds | candidates (value: mean) | note |",
           "|---|---|---|---|---|---|"]  # fmt: skip
    for s in selected:
        cands = ", ".join(f"{fmt(c['value'])}: {fmt(c['mean'])}" for c in s["candidates"])
        md.append(f"| {s['config']} | {fmt(s['value'])} | {fmt(s['mean'])} | {s['n_seeds']} "
                  f"| {cands} | {s['note']} |")  # fmt: skip
    md += ["", "Rerun with fresh seeds (`bash selected.sh` does all of it):", "", "```"]
    md += [s["command"] for s in selected] + [report, "```"]
    (out / "selected.md").write_text("\n".join(md) + "\n")


# ---- figures over seeds ----------------------------------------------------------------------


# What val_bands.png can be drawn against (--x): the metrics.jsonl key the trainer logs it under.
X_AXES = {
    "steps": ("step", "step"),
    "tokens": ("compute/tokens", "tokens seen"),
    "wall": ("compute/train_s", "training seconds (evaluation excluded)"),
    "flops": ("compute/flops", "training FLOPs (attnzoo.flops)"),
}


def _x_per_step(job: Job, x: str) -> float | None:
    """Tokens or FLOPs per step from the resolved config, for a run that did not log them."""
    if x not in ("tokens", "flops"):
        return None
    steps = (job.summary or {}).get("step") or max(
        (r.get("step", 0) for r in job.records), default=0
    )
    total = reconstructed_budget(job).get(x)
    return total / steps if total and steps else None


def curve_band(
    group: Group, confidence: float, x: str = "steps"
) -> tuple[list[float], list[Interval]]:
    """Validation loss over the completed seeds at the steps every seed logged, placed at the
    seeds' mean `x` there (steps, tokens, training seconds or FLOPs; see X_AXES)."""
    key = X_AXES[x][0]
    curves, where = [], []
    for job, r in group.members:
        if r["status"] != "completed":
            continue
        per_step = _x_per_step(job, x)
        curve, at = {}, {}
        for rec in job.records:
            if "val/loss" in rec and "step" in rec and math.isfinite(rec["val/loss"]):
                value = rec.get(key)
                if value is None and per_step is not None:
                    value = rec["step"] * per_step
                if value is not None:
                    curve[rec["step"]], at[rec["step"]] = rec["val/loss"], float(value)
        if curve:
            curves.append(curve)
            where.append(at)
    if not curves:
        return [], []
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    xs = [sum(a[s] for a in where) / len(where) for s in steps]
    return xs, [mean_interval([c[s] for c in curves], confidence) for s in steps]


def plot_bands(
    groups: list[Group], axis: str | None, path: Path, confidence: float, x: str = "steps"
) -> None:
    """Validation loss against `x` (steps, tokens, wall or flops): mean over seeds with its
    interval as a band; one panel per configuration of the other axes, one line per value of
    the compared axis."""
    panels = blocks(groups, axis) if axis else {"all": groups}
    attached = attached_keys(groups, axis) if axis else []
    curves: dict[str, list[tuple[str, list[float], list[Interval]]]] = {}
    for title, members in panels.items():
        title = title if title != "all" else f"by {_axis_name(axis or 'configuration')}"
        curves[title] = [
            (_config_name(g, axis, attached) if axis else g.name, *curve_band(g, confidence, x))
            for g in members
        ]
    draw_bands(curves, X_AXES[x][1], f"validation loss (mean, {confidence:.0%} band)", path)


def write_groups(
    groups: list[Group],
    table: list[dict[str, Any]],
    compared: list[dict[str, Any]],
    orphans: list[str],
    out: Path,
    axis: str | None,
    confidence: float,
    margin: float | None,
) -> None:
    axes = [_axis_name(k) for k in (groups[0].label if groups else {})]
    columns = ["group", *axes, *GROUP_STATS]
    _write_csv(out / "groups.csv", columns, table)
    lines = [
        "# Sweep summary by configuration",
        "",
        f"{len(groups)} configuration(s); jobs whose resolved configs differ only in "
        f"`{REPLICATE_KEY}` (and in {', '.join(k for k in NON_SEMANTIC if k != REPLICATE_KEY)}) "
        "are replicates of one configuration. Values: mean over the completed seeds "
        f"[{confidence:.0%} Student-t interval]; a configuration with one seed has no interval.",
        "",
    ]
    if orphans:
        lines += [f"Not placed (no readable config): jobs {', '.join(orphans)}.", ""]
    short = ["group", "n_seeds", "val_loss", "metric", "rank", "steps_per_s_mean", "params",
             "flops", "note"]  # fmt: skip
    cells = []
    for r in table:
        cells.append(
            {
                **r,
                "val_loss": ci_text(
                    r["val_loss_mean"], r["val_loss_ci_low"], r["val_loss_ci_high"]
                ),
                "metric": (f"{r['metric']} " if r["metric"] else "")
                + ci_text(r["metric_mean"], r["metric_ci_low"], r["metric_ci_high"]),
                "rank": ci_text(r["rank_mean"], r["rank_ci_low"], r["rank_ci_high"]),
            }
        )
    lines += _md_table(short, cells)
    if axis is not None:
        lines += ["", f"## Differences along `{_axis_name(axis)}`", ""]
        how = (
            "Each configuration against the best one (lowest mean validation loss) with the other "
            f"axes fixed: the paired t-test on the seeds both ran (Welch's t-test when the seed "
            f'sets differ), at {confidence:.0%}; "resolved" = the interval of the difference '
            'excludes 0. "Not resolved" is not "equal"'
        )
        how += (
            f': "within margin" = two one-sided tests put the difference inside ±{margin:g}.'
            if margin is not None
            else "; pass --margin for an equivalence test (TOST)."
        )
        lines += [how, ""]
        lines += [f"- {c['block']}: {c['sentence']}" if c["block"] != "all" else f"- {c['sentence']}"
                  for c in compared] or ["- nothing to compare (fewer than two configurations with a completed seed)"]  # fmt: skip
    (out / "groups.md").write_text("\n".join(lines) + "\n")


def wandb_mode_for(jobs: list[Job], mode: str) -> str:
    """`--wandb auto`: offline when any of the sweep's runs logged to W&B, else disabled."""
    if mode != "auto":
        return mode
    used = {((j.summary or {}).get("wandb") or {}).get("mode") for j in jobs}
    return "offline" if used & {"offline", "online"} else "disabled"


def log_wandb(
    jobs: list[Job],
    tables: dict[str, tuple[list[str], list[dict[str, Any]]]],
    out: Path,
    mode: str,
    sweep_name: str,
) -> str | None:
    """The groups (and comparisons) tables as W&B Tables in a summary run of the runs' project,
    tagged with the sweep; the run folder lands in `out`/wandb."""
    from attnzoo.tracking import log_tables

    logger = next(
        (j.config["logger"] for j in jobs if isinstance(j.config.get("logger"), dict)), {}
    )
    return log_tables(
        tables,
        mode=mode,
        run_dir=out,
        project=str(logger.get("project") or "attnzoo"),
        entity=logger.get("entity"),
        name=f"summary-{sweep_name}",
        tags=["summary", f"sweep:{sweep_name}"[:64]],
        config={"sweep": sweep_name, "jobs": len(jobs)},
    )


def summarize(
    sweep: Path | list[Path],
    out: Path | None = None,
    *,
    compare_axis: str | None = None,
    margin: float | None = None,
    confidence: float = 0.95,
    select_by: str | None = None,
    tune_axis: str | None = None,
    fresh_seeds: str = "0,1,2,3,4",
    final_dir: str = "multirun/final",
    x_axis: str = "steps",
    wandb_mode: str = "auto",
) -> list[dict[str, Any]]:
    """Write the per-job and per-configuration tables and figures (see the module docstring);
    return the per-job rows. Several sweep folders are summarised as one (job names then start
    with the sweep folder's name)."""
    sweeps = [sweep] if isinstance(sweep, Path) else list(sweep)
    if not sweeps:
        raise ValueError("no sweep folder given")
    if out is None:
        if len(sweeps) > 1:
            raise ValueError("several sweep folders: say where to write with --out")
        out = sweeps[0]
    if x_axis not in X_AXES:
        raise ValueError(f"--x {x_axis!r}: allowed: {', '.join(X_AXES)}")
    if select_by is not None and select_by not in ("val_loss", "metric"):
        raise ValueError(f"--select-by {select_by!r}: allowed: val_loss, metric")
    jobs = []
    for s in sweeps:
        found = find_jobs(s)
        if len(sweeps) > 1:
            for j in found:
                j.name = f"{s.name}/{j.name}"
        jobs += found
    out.mkdir(parents=True, exist_ok=True)
    rows = [row(j) for j in jobs]
    write_tables(rows, out, sweeps[0] if len(sweeps) == 1 else Path(", ".join(map(str, sweeps))))
    plot_rank(jobs, rows, out / "rank_vs_depth.png")
    plot_val(jobs, rows, out / "val_curves.png")

    groups, orphans = group_jobs(jobs, rows)
    axes = varying_axes(groups)
    if tune_axis is not None:
        tune_key = resolve_axis(tune_axis, axes)
        axes_wo_tune = [a for a in axes if a != tune_key]
    else:
        tune_key, axes_wo_tune = None, axes
    axis = resolve_axis(compare_axis, axes) if compare_axis else default_axis(axes_wo_tune)
    table = []
    for g in groups:
        r = group_row(g, confidence)
        r["_values"] = {w: list(g.values(w).values()) for w in VALUES}
        table.append(r)
    compared = comparisons(groups, axis, "val_loss", confidence, margin) if axis else []
    write_groups(groups, table, compared, orphans, out, axis, confidence, margin)
    mode = wandb_mode_for(jobs, wandb_mode)
    if mode != "disabled":
        group_columns = ["group", *(_axis_name(k) for k in (groups[0].label if groups else {}))]
        tables = {"groups": (group_columns + list(GROUP_STATS), table)}
        if compared:
            tables["comparisons"] = (list(COMPARISON_COLUMNS), compared)
        log_wandb(jobs, tables, out, mode, "+".join(s.name for s in sweeps))
    if compared:
        _write_csv(out / "comparisons.csv", list(COMPARISON_COLUMNS), compared)
    plot_intervals(groups, table, out / "intervals.png", confidence)
    plot_bands(groups, axis, out / "val_bands.png", confidence, x_axis)
    if select_by is not None:
        if tune_key is None:
            raise ValueError("--select-by needs --tune-axis (e.g. --tune-axis train.lr)")
        chosen = select(groups, tune_key, select_by, fresh_seeds, final_dir)
        rest = [a for a in axes if a != tune_key]
        write_selection(chosen, out, final_dir, default_axis(rest))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__[__doc__.index("A replicated, tuned ablation") :],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sweep", type=Path, nargs="+", help="multirun folder(s) (hold 0/, 1/, ...)")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: sweep)")
    parser.add_argument("--compare", default=None,
                        help="axis to compare along (e.g. mixer, model.skip); default: the axis "
                             "the sweep varied (the mixer when it varied several)")  # fmt: skip
    parser.add_argument("--margin", type=float, default=None,
                        help="equivalence margin on the validation loss for TOST (e.g. 0.01)")  # fmt: skip
    parser.add_argument("--confidence", type=float, default=0.95, help="default 0.95")
    parser.add_argument("--select-by", choices=("val_loss", "metric"), default=None,
                        help="pick the --tune-axis value with the best mean of this")  # fmt: skip
    parser.add_argument("--tune-axis", default=None, help="the tuned axis, e.g. train.lr")
    parser.add_argument("--fresh-seeds", default="0,1,2,3,4",
                        help="seeds of the follow-up runs at the selected values")  # fmt: skip
    parser.add_argument("--final-dir", default="multirun/final",
                        help="where selected.sh puts the follow-up sweeps")  # fmt: skip
    parser.add_argument("--x", choices=tuple(X_AXES), default="steps", dest="x_axis",
                        help="what val_bands.png is drawn against (default: steps)")  # fmt: skip
    parser.add_argument("--wandb", choices=("auto", "offline", "online", "disabled"),
                        default="auto", dest="wandb_mode",
                        help="log the groups table as a W&B Table in a summary run; auto: "
                             "offline when the sweep's runs used W&B")  # fmt: skip
    args = parser.parse_args()
    if not 0.0 < args.confidence < 1.0:
        parser.error("--confidence must be in (0, 1)")
    try:
        rows = summarize(
            args.sweep,
            args.out,
            compare_axis=args.compare,
            margin=args.margin,
            confidence=args.confidence,
            select_by=args.select_by,
            tune_axis=args.tune_axis,
            fresh_seeds=args.fresh_seeds,
            final_dir=args.final_dir,
            x_axis=args.x_axis,
            wandb_mode=args.wandb_mode,
        )
    except ValueError as err:
        parser.error(str(err))
    out = args.out or args.sweep[0]
    print((out / "summary.md").read_text())
    print((out / "groups.md").read_text())
    written = "summary.{md,csv}, groups.{md,csv}, intervals.png, val_bands.png"
    if (out / "comparisons.csv").exists():
        written += ", comparisons.csv"
    if args.select_by:
        print((out / "selected.md").read_text())
        written += ", selected.{json,md,sh}"
    print(f"wrote {out}/: {written}, rank_vs_depth.png, val_curves.png")
    for run_folder in sorted((out / "wandb").glob("offline-run-*"))[-1:]:
        print(f"W&B summary run (the groups table): {run_folder}   upload: wandb sync {run_folder}")
    bad = [r["job"] for r in rows if r["status"] != "completed"]
    if bad:
        print(f"{len(bad)} job(s) did not complete: {', '.join(bad)}")


if __name__ == "__main__":
    main()
