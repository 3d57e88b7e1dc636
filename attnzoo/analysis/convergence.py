"""Whether a configuration's training budget converged: from each seed's sampled validation
curve (metrics.jsonl's `val/loss`), how much the loss moved over the last part of training,
against how much the final validation loss varies between seeds."""

from __future__ import annotations

import math
import statistics
from typing import Any

from attnzoo.analysis.groups import Group


def points_change(points: list[tuple[float, float]], tail: float = 0.2) -> float | None:
    """For a curve of (step, value) points, the value at the last step minus that at the last
    point at or before the start of the last `tail` of training (its first point when none is);
    None with fewer than two finite points."""
    points = sorted((s, v) for s, v in points if math.isfinite(v))
    if len(points) < 2:
        return None
    start = points[-1][0] * (1 - tail)
    before = [p for p in points[:-1] if p[0] <= start] or points[:1]
    return points[-1][1] - before[-1][1]


def still_moving(
    rows: list[dict[str, Any]], margin: float, tail: float = 0.2, key: str = "val_accuracy"
) -> list[tuple[str, int, float]]:
    """(arm, seed, change) of every curve among `rows` (points with `arm`, `seed`, `step`
    and `key`, as a study's curves.csv holds them) whose value moved by `margin` or more over
    its last `tail` of training (`points_change`), sorted: the seeds a budget left unsettled by
    the difference a study calls worth acting on."""
    curves: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for r in rows:
        point = (float(r["step"]), float(r[key]))
        curves.setdefault((r["arm"], int(r["seed"])), []).append(point)
    return [
        (arm, seed, change)
        for (arm, seed), points in sorted(curves.items())
        if (change := points_change(points, tail)) is not None and abs(change) >= margin
    ]


def tail_change(
    records: list[dict[str, Any]], tail: float = 0.2, key: str = "val/loss"
) -> float | None:
    """`points_change` of a run's sampled `key` (metrics.jsonl records)."""
    return points_change(
        [
            (r["step"], float(r[key]))
            for r in records
            if "step" in r and isinstance(r.get(key), (int, float))
        ],
        tail,
    )


def flattened(group: Group, tail: float = 0.2) -> dict[str, Any]:
    """`flattened` is True when the mean change of the sampled validation loss over the last
    `tail` of training (over the completed seeds) is smaller in size than the seed standard
    deviation of the final validation loss, False when not, None with fewer than two seeds or
    curves. Also `change` (that mean) and `sd`."""
    changes = [
        c
        for job, r in group.members
        if r["status"] == "completed"
        if (c := tail_change(job.records, tail)) is not None
    ]
    finals = list(group.values("val_loss").values())
    if len(changes) < 2 or len(finals) < 2:
        return {"flattened": None, "change": None, "sd": None}
    change, sd = sum(changes) / len(changes), statistics.stdev(finals)
    return {"flattened": abs(change) < sd, "change": change, "sd": sd}


def flattened_text(result: dict[str, Any]) -> str:
    """yes / no / n/a, as a report's column writes `flattened`."""
    return {True: "yes", False: "no"}.get(result["flattened"], "n/a")


def flat_from(points: list[tuple[float, float]], margin: float, tail: float = 0.2) -> float | None:
    """The first step s of a (step, value) curve from which it stays within a band narrower
    than `margin` (max − min of the values at s and after < margin), where s leaves at least
    the last `tail` of the curve's steps after it, so that the flatness is seen, not assumed;
    None when the curve is still moving by `margin` within its last `tail`."""
    points = sorted((s, v) for s, v in points if math.isfinite(v))
    if len(points) < 2:
        return None
    latest = points[-1][0] * (1 - tail)
    for i, (step, _) in enumerate(points):
        if step > latest:
            break
        later = [v for _, v in points[i:]]
        if max(later) - min(later) < margin:
            return step
    return None


def budget_from(
    curves: dict[Any, list[tuple[float, float]]], margin: float, tail: float = 0.2
) -> tuple[float | None, dict[Any, float | None]]:
    """The step by which every curve has flattened (`flat_from`, each curve's own), and each
    curve's: the budget a pilot's curves ask for; None when one of them has not flattened."""
    flat = {key: flat_from(points, margin, tail) for key, points in curves.items()}
    if not flat or any(v is None for v in flat.values()):
        return None, flat
    return max(flat.values()), flat
