"""Seeds as replicates: the jobs of a sweep grouped into configurations (attnzoo.replicates: the
resolved configs equal up to the seed and the non-semantic keys), the axes that vary between
them, and per configuration its values over the completed seeds with Student-t intervals."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from attnzoo.analysis.runs import OTHER_MEASURES, Job, reconstructed_budget
from attnzoo.analysis.tables import fmt
from attnzoo.replicates import (
    REPLICATE_KEY,
    config_key,
    group_name,
    run_folders,
    semantic_config,
)
from attnzoo.stats import Interval, mean_interval

# What a group's values are read from: the per-job row's column of each final value.
VALUES = {
    "val_loss": "final_val_loss",
    "metric": "final_metric",
    "test_loss": "final_test_loss",
    "test_metric": "final_test_metric",
    "rank": "final_rank",
    **{m: f"final_{m}" for m in OTHER_MEASURES},
}
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
    *(
        f"{v}_{s}"
        for v in ("test_loss", "test_metric")
        for s in ("mean", "std", "ci_low", "ci_high")
    ),
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


def split_of(which: str) -> str | None:
    """The split a final value is from: `test` (test_loss, test_metric), `val` (val_loss and the
    task metric), None for the collapse measures; a success rate's (`success: test_metric ≥
    0.9`) is its measure's."""
    if which.startswith("success: "):
        return split_of(which.split()[1])
    if which.startswith("test_"):
        return "test"
    return "val" if which in ("val_loss", "metric") else None


def axis_name(key: str) -> str:
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
        return ", ".join(f"{axis_name(k)}={fmt(v)}" for k, v in self.label.items()) or "all"

    @property
    def completed(self) -> list[dict[str, Any]]:
        """The per-job rows of the completed jobs."""
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

    def interval(self, which: str = "val_loss", confidence: float = 0.95) -> Interval:
        """Mean, std and Student-t interval of `which` over the completed seeds."""
        return mean_interval(list(self.values(which).values()), confidence)


def run_paths(job: Job) -> list[str]:
    """The job's folder and its sweep's (attnzoo.replicates.run_folders, the trainer's own): a
    config value that contains one is a run-dir path, not part of the configuration."""
    return [] if job.folder is None else run_folders(job.folder)


def _grid_point(job: Job) -> tuple[str, tuple[str, ...]]:
    """The job's sweep and its overrides without the seed: jobs of one sweep that share it ran
    (or would have run) one configuration."""
    seedless = (str(o) for o in job.config.get("_overrides", []))
    rest = tuple(sorted(o for o in seedless if not o.lstrip("+~").startswith(f"{REPLICATE_KEY}=")))
    return str(job.sweep), rest


def group_jobs(jobs: list[Job], rows: list[dict[str, Any]]) -> tuple[list[Group], list[str]]:
    """Groups in order of first appearance, each labelled by the axes that vary between groups,
    and the names of the jobs that could not be placed (no readable config). A job that left no
    folder (refused, or never launched) joins the configuration of a job of its sweep whose
    overrides differ from its own only in the seed, so the configuration's note names it."""
    groups: dict[str, Group] = {}
    placed: dict[tuple[str, tuple[str, ...]], Group] = {}
    unplaced = []
    for job, r in zip(jobs, rows, strict=True):
        flat = semantic_config(job.config, run_paths(job))
        if not flat:
            unplaced.append((job, r))
            continue
        key = config_key(flat)
        group = groups.setdefault(key, Group(flat))
        group.members.append((job, r))
        if job.config.get("_overrides"):
            placed.setdefault(_grid_point(job), group)
    orphans = []
    for job, r in unplaced:
        group = placed.get(_grid_point(job)) if job.config.get("_overrides") else None
        if group is None:
            orphans.append(job.name)
        else:
            group.members.append((job, r))
    found = list(groups.values())
    for key in varying_axes(found):
        for g in found:
            g.label[key] = g.config.get(key)
    for g in found:  # each job's row names its configuration, as groups.csv does
        for _, r in g.members:
            r["group"] = g.name
    return found, orphans


def _cell(text: Any) -> Any:
    """A CSV cell as the value it was written from: a number where it reads as one."""
    if not isinstance(text, str):
        return text
    try:
        return int(text) if text.lstrip("-").isdigit() else float(text)
    except ValueError:
        return None if text == "" else text


def groups_from_rows(rows: list[dict[str, Any]], by: tuple[str, ...] = ()) -> list[Group]:
    """The groups of committed per-seed rows (a runs.csv: one row a job, its `group` the
    configuration's label `mixer=favor, train.lr=0.001`), so that a report's comparisons can be
    recomputed from its per-seed values without its run folders. `by`: row columns that keep
    groups apart without being an axis (the task of a study that ran several); they go into the
    group's config as `<column>.name`. Cells are read back as numbers where they are numbers."""
    groups: dict[tuple, Group] = {}
    for row in rows:
        r = {k: _cell(v) for k, v in row.items()}
        r["group"] = str(row["group"])  # a label, even one that reads as a number
        label = {}
        for part in r["group"].split(", ") if r["group"] != "all" else []:
            key, _, value = part.partition("=")
            label[key if "." in key else f"{key}.name"] = _cell(value)
        extra = {f"{c}.name": r[c] for c in by}
        key = (r["group"], *extra.values())
        group = groups.setdefault(key, Group({**label, **extra}, label=label))
        group.members.append((None, r))  # type: ignore[arg-type]  # no job: a committed row
    return list(groups.values())


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


def no_seed_note(group: Group, which: str) -> str:
    """What a configuration without a single value of `which` says: n=0, and each job's seed,
    status and reason (failed, refused, still running, ...)."""
    why = [
        f"seed {fmt(r['seed'])} {r['status']} (job {job.name}"
        + (f": {job.reason})" if r["status"] != "completed" and job.reason else ")")
        for job, r in group.members
    ]
    return f"n=0: no completed seed with a final {which}: " + "; ".join(why)


def group_row(group: Group, confidence: float = 0.95) -> dict[str, Any]:
    """One row of groups.csv: n, mean, std and the Student-t interval of the final validation
    loss, task metric, rank and each other collapse measure over the completed seeds, plus cost
    columns and a note naming the seeds left out."""
    done = group.completed
    first = group.members[0][0]
    notes = []
    if not group.values("val_loss"):
        notes.append(no_seed_note(group, "val_loss"))
    else:
        for job, r in group.members:
            if r["status"] != "completed":
                notes.append(f"seed {fmt(r['seed'])} {r['status']} (job {job.name}), left out")
    cells: dict[str, Any] = {}
    for which in VALUES:
        ci = group.interval(which, confidence)
        cells |= _interval_cells(which, ci)
        if ci.note and which == "val_loss" and ci.n:
            notes.append(ci.note)
    metrics = {r["metric"] for r in done if r["metric"]}
    return {
        "group": group.name,
        **{axis_name(k): v for k, v in group.label.items()},
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
        # the group the runs logged to (summary.json), else the name they would have had
        "wandb_group": (first.summary or {}).get("config_group")
        or group_name(first.config, run_paths(first), first.config.get("_overrides", [])),
    }


# ---- validation curves over seeds ------------------------------------------------------------

# What a validation curve can be placed against: the metrics.jsonl key the trainer logs it under
# and the axis label.
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
    group: Group, confidence: float = 0.95, x: str = "steps"
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
