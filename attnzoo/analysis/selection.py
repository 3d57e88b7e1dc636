"""Selection of a tuned value (the learning rate, say) on the tuning seeds: per configuration of
the other axes, the value with the best mean, a flag when it sits at the edge of the grid, and the
Hydra overrides that rerun it with fresh seeds (so the reported numbers are not the ones the
choice was made on)."""

from __future__ import annotations

import shlex
import warnings
from collections.abc import Iterable
from typing import Any

from attnzoo.analysis.compare import blocks, lower_is_better
from attnzoo.analysis.groups import Group, axis_name
from attnzoo.analysis.runs import SweepWarning
from attnzoo.analysis.tables import fmt
from attnzoo.replicates import REPLICATE_KEY
from attnzoo.stats import mean_interval


def override_value(value: Any) -> str:
    """A config value as a Hydra override writes it."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return repr(value) if isinstance(value, float) else str(value)


def left_out(g: Group, tune_key: str, by: str) -> str:
    """A grid value without a single value of `by`, and why: its jobs' seeds and statuses."""
    statuses = ", ".join(f"seed {fmt(r['seed'])} {r['status']}" for _, r in g.members)
    return f"{axis_name(tune_key)}={fmt(g.config.get(tune_key))} left out: no {by} ({statuses})"


def success_rate(values: Iterable[float], success: float | None, lower: bool) -> float:
    """The share of `values` at or beyond `success` (at or below it when `lower` is better); 0
    without a threshold, so that the mean alone decides."""
    values = list(values)
    if success is None or not values:
        return 0.0
    return sum((v <= success) if lower else (v >= success) for v in values) / len(values)


def select(
    groups: list[Group],
    tune_key: str,
    by: str = "val_loss",
    fresh_seeds: str = "0,1,2,3,4",
    final_dir: str = "multirun/final",
    maximize: bool | None = None,
    success: float | None = None,
) -> list[dict[str, Any]]:
    """For each configuration of the other axes, the value of `tune_key` with the best mean of
    `by` over the tuning seeds (the highest when `maximize`, the lowest when not; by default the
    direction of `by`: lowest loss, the task's own direction for its metric; an exact tie goes
    to the smallest value) — with `success`, the value whose tuning seeds reach `success` (at
    or beyond it in `by`'s direction) most often, the best mean among those — and the Hydra
    overrides that rerun it with fresh seeds (the sweep of
    the i-th configuration into `final_dir`/<i>; they read every final split). `edge` says
    whether the choice sits at the "low" or "high" end of a grid of more than two values (None
    when interior): `extend` gives the value beyond it. A grid value without a completed seed
    is left out and the entry's `note` names it with its jobs' statuses; a configuration none
    of whose values has one is not selected, and a warning says so."""
    lower = lower_is_better(by, groups) if maximize is None else not maximize
    out = []
    for i, (block, members) in enumerate(blocks(groups, tune_key, attach=False).items()):
        scored = [g for g in members if g.values(by)]
        missing = [left_out(g, tune_key, by) for g in members if not g.values(by)]
        if not scored:
            warnings.warn(
                f"{block}: nothing selected, no {axis_name(tune_key)} value has a "
                f"completed seed: {'; '.join(missing)}",
                SweepWarning,
                stacklevel=2,
            )
            continue
        mean = {id(g): sum(g.values(by).values()) / len(g.values(by)) for g in scored}
        rate = {id(g): success_rate(g.values(by).values(), success, lower) for g in scored}
        grid = sorted(
            (g.config.get(tune_key) for g in members if g.config.get(tune_key) is not None),
            key=lambda v: (str(type(v)), v),
        )
        # the best mean; an exact tie goes to the value first in the sorted grid, whatever order
        # the jobs ran in
        place = {repr(v): i for i, v in enumerate(grid)}
        sign = 1 if lower else -1
        best = min(
            scored,
            key=lambda g: (
                -rate[id(g)],
                sign * mean[id(g)],
                place.get(repr(g.config.get(tune_key)), len(grid)),
            ),
        )
        chosen = best.config.get(tune_key)
        notes = list(missing)
        edge = None
        if len(grid) > 2 and chosen in (grid[0], grid[-1]):
            edge = "low" if chosen == grid[0] else "high"
            notes.append(f"{chosen} is at the edge of the grid {grid}: widen it")
        member = next(
            (j for j, r in best.members if r["status"] == "completed"), best.members[0][0]
        )
        # the fresh-seed runs are the ones a claim is made on: they read every final split,
        # whatever the tuning runs were limited to (tuning sees val only); a committed row
        # (groups_from_rows) has no job, and its rerun lists only the tuned value and seeds
        drop = (f"{REPLICATE_KEY}=", f"{tune_key}=", "train.final_splits=", "hydra")
        keep = [
            str(o)
            for o in (member.config.get("_overrides", []) if member is not None else [])
            if not str(o).lstrip("+~").startswith(drop)
        ]
        overrides = keep + [
            f"{tune_key}={override_value(chosen)}",
            f"{REPLICATE_KEY}={fresh_seeds}",
            f"hydra.sweep.dir={final_dir}/{i:02d}",
        ]
        ci = mean_interval(list(best.values(by).values()))
        out.append(
            {
                "config": block,
                "axes": {axis_name(k): v for k, v in best.label.items() if k != tune_key},
                "tune_axis": tune_key,
                "value": chosen,
                "select_by": by,
                "maximize": not lower,
                "success": success,
                "edge": edge,
                "grid": grid,
                "mean": ci.mean,
                "n_seeds": ci.n,
                "candidates": [
                    {
                        "value": g.config.get(tune_key),
                        "mean": mean[id(g)],
                        "n_seeds": len(g.values(by)),
                        **({"success_rate": rate[id(g)]} if success is not None else {}),
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


def extend(entry: dict[str, Any], cap_reached: bool = False) -> float | None:
    """The next value of a log-spaced grid beyond the edge a selection landed on: the edge
    value times the grid's own step (the ratio of its two outermost values on that side), or
    None when the choice is interior, the grid is not numeric, or `cap_reached`."""
    grid, edge = entry.get("grid") or [], entry.get("edge")
    if cap_reached or edge is None or len(grid) < 2:
        return None
    if not all(isinstance(v, (int, float)) and v > 0 for v in grid):
        return None
    if edge == "low":
        return grid[0] / (grid[1] / grid[0])
    return grid[-1] * (grid[-1] / grid[-2])
