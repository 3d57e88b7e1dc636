"""Comparisons along one axis of a sweep: within each block of configurations that differ only in
that axis, every configuration against the best one (attnzoo.stats.compare: the paired t-test on
the seeds both ran, Welch's t-test when the seed sets differ, TOST against ±margin)."""

from __future__ import annotations

import json
from typing import Any

from attnzoo.analysis.groups import Group, axis_name
from attnzoo.analysis.runs import task_attr
from attnzoo.analysis.tables import fmt
from attnzoo.stats import Comparison, compare

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


def resolve_axis(name: str, axes: list[str]) -> str:
    """`mixer` or `mixer.name` or `model.skip`: the config key of a varied axis."""
    for key in (name, f"{name}.name"):
        if key in axes:
            return key
    shown = ", ".join(axis_name(a) for a in axes) or "none (the sweep varied only the seed)"
    raise ValueError(f"{name!r} is not an axis this sweep varied; its axes: {shown}")


def default_axis(axes: list[str]) -> str | None:
    """The axis the sweep varied: the only one, or the mixer, or the first."""
    if not axes:
        return None
    return "mixer.name" if "mixer.name" in axes else axes[0]


def lower_is_better(which: str, groups: list[Group]) -> bool:
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
        name = ", ".join(f"{axis_name(k)}={fmt(v)}" for k, v in rest.items()) or "all"
        out.setdefault(name, []).append(g)
    return out


def config_name(g: Group, axis: str, attached: list[str]) -> str:
    """The value of `axis`, with the attached keys' values: `pooling (train.lr=0.01)`."""
    extra = ", ".join(f"{axis_name(k)}={fmt(g.label.get(k))}" for k in attached)
    return fmt(g.label.get(axis)) + (f" ({extra})" if extra else "")


def sentence(a: str, best: str, c: Comparison, on: str) -> str:
    """One comparison in words: the verdict, the seeds, the test, the difference and its
    interval, the p-values."""
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
    ran, Welch's t-test when the seed sets differ, and TOST against ±margin. One row
    (COMPARISON_COLUMNS) per configuration that is not the best of its block."""
    lower = lower_is_better(on, groups)
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
            a_name = config_name(g, axis, attached)
            b_name = config_name(best, axis, attached)
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
                    "sentence": sentence(a_name, b_name, c, on),
                }
            )
    return rows
