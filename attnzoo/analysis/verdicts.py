"""What "keeps rank" and "collapses" mean, and how a comparison is put in words for a claim.

Rank. Each measure of the hidden states has a collapse value c (COLLAPSE): 0 for the relative
residual, 1 for effective and stable rank (rank one: every token the same direction), 1 for
token similarity (every token equal). The share of layer 0's distance from collapse that the last
block keeps, per seed, on a run's fixed probe batch, is

    share = (m_last − c) / (m_0 − c)        (token similarity: (1 − s_last) / (1 − s_0))

so 1 is "as far from collapse as the input", 0 is "collapsed", whatever the input's own value:
a last layer at stable rank 1.000 has share 0 however high or low the embedding's stable rank
was. A layer 0 already at the collapse value (no distance to keep) gives no share (n/a). Over
the seeds, its mean and Student-t interval give the verdict, a rule fixed before any run:
**kept** when the interval's lower end is ≥ KEPT (0.5: at least half the distance kept),
**collapsed** when its upper end is ≤ COLLAPSED (0.2: at most a fifth left), **partial**
otherwise (with one seed the mean decides, and says so); n/a when no seed has a share.
Attention entropy has no verdict, only a value (n/a without softmax attention).

Claims. A comparison against a reference is worded from the test that supports it
(attnzoo.analysis.compare): better or worse than the reference (the two-sided test), worse or
better by more than the margin (the test against it, two-sided), within margin (two one-sided
tests), or not resolved with n seeds (none of them; not the same as equal), with the smallest
difference those seeds could resolve.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnzoo.analysis.compare import comparison_row, correct
from attnzoo.analysis.groups import Group, group_row
from attnzoo.analysis.metrics import rank_layers
from attnzoo.analysis.runs import Job, get
from attnzoo.analysis.tables import fmt
from attnzoo.stats import Comparison, Interval, mean_interval

KEPT, COLLAPSED = 0.5, 0.2  # the verdict thresholds on the share of the distance from collapse
# each measure's value at collapse (all tokens equal, or one direction): the share's zero
COLLAPSE = {
    "relative_residual": 0.0,
    "effective_rank": 1.0,
    "stable_rank": 1.0,
    "token_similarity": 1.0,
}
# hidden-state measures with a verdict, and their short names
SPREAD = {
    "relative_residual": "res",
    "effective_rank": "erank",
    "stable_rank": "srank",
    "token_similarity": "sim",
}
WHEN = ("init", "trained")


def kept_share(name: str, values: list[float]) -> float:
    """The share of layer 0's distance from collapse that the last block keeps, from measure
    `name` at every layer: (last − c) / (first − c), c = COLLAPSE[name] (see the module
    docstring); NaN (n/a) where layer 0 is at the collapse value or a value is not finite."""
    c = COLLAPSE[name]
    first, last = values[0], values[-1]
    if not (math.isfinite(first) and math.isfinite(last)):
        return math.nan
    sign = -1.0 if name == "token_similarity" else 1.0  # similarity rises to its collapse value
    start, end = sign * (first - c), sign * (last - c)
    if start <= 1e-12 * max(1.0, abs(c)):  # no distance from collapse to keep
        return math.nan
    return end / start


def verdict(ci: Interval) -> str:
    """kept, collapsed or partial for the interval of a share over seeds (see the module
    docstring); `... (1 seed)` when the mean alone decides, n/a without values."""
    if ci.n == 0:
        return "n/a"
    if ci.n == 1:
        return (
            "kept" if ci.mean >= KEPT else "collapsed" if ci.mean <= COLLAPSED else "partial"
        ) + " (1 seed)"
    if ci.low >= KEPT:
        return "kept"
    if ci.high <= COLLAPSED:
        return "collapsed"
    return "partial"


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


@dataclass
class RankConfig:
    """One configuration's collapse over its seeds, at init and trained: per (when, measure) the
    interval of the share kept (SPREAD measures), of the last block's value, and the mean of each
    layer's value."""

    mixer: str
    residual: str
    mlp: bool
    norm: str
    row: dict[str, Any]  # the group row: val loss, metric, n, cost
    jobs: list[Job]
    shares: dict[tuple[str, str], Interval] = field(default_factory=dict)
    last: dict[tuple[str, str], Interval] = field(default_factory=dict)
    depth: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    @property
    def variant(self) -> str:
        return self.residual + (", no norm" if self.norm == "none" else "")

    def verdict(self, when: str, name: str) -> str:
        return verdict(self.shares[when, name])


def rank_config(group: Group, confidence: float = 0.95) -> RankConfig:
    """The collapse of one configuration from its completed jobs' logged measures."""
    done = [j for j, r in group.members if r["status"] == "completed"]
    first = group.members[0][1]
    c = RankConfig(
        mixer=str(first["mixer"]),
        residual=str(first["residual"]),
        mlp=bool(first["mlp"]),
        norm=str(first["norm"]),
        row=group_row(group, confidence),
        jobs=done,
    )
    for when in WHEN:
        for name in [*SPREAD, "attention_entropy"]:
            profiles = [p for j in done if (p := j.profile(name, when)) is not None]
            if name in SPREAD:
                shares = [kept_share(name, p) for p in profiles]
                finite = [x for x in shares if math.isfinite(x)]  # n/a seeds: no share
                c.shares[when, name] = mean_interval(finite, confidence)
            c.last[when, name] = mean_interval([p[-1] for p in profiles], confidence)
            if profiles:
                n_layers = max(len(p) for p in profiles)
                c.depth[when, name] = [
                    _nanmean([p[k] for p in profiles if k < len(p)]) for k in range(n_layers)
                ]
    return c


def claim_verdict(a: str, b: str, on: str, c: Comparison, margin: float | None = None) -> str:
    """`a` against the reference `b` on `on` (val_loss, or the task metric: accuracy, higher is
    better) in words, from one comparison taken alone (no family-wise correction: a report of
    several comparisons corrects them together with attnzoo.analysis.compare.correct)."""
    if margin is not None and c.margin != margin:
        raise ValueError(f"the comparison was made with margin {c.margin}, not {margin}")
    row = comparison_row(a, b, on, c, lower_is_better=on != "metric")
    return correct([row], "none")[0]["sentence"]


LAYER_COLUMNS = ("job", "mixer", "residual", "mlp", "norm", "seed", "when", "step", "measure")


def write_layers(cs: list[RankConfig], path: Path) -> None:
    """runs_layers.csv: per completed job, at init (step 0) and trained (its last evaluation),
    each measure at every layer (`layer_0` the embedding, `layer_<l>` block l's output) on the
    run's fixed probe batch, and the share of layer 0's distance from collapse the last block
    keeps (`kept_share`, empty where n/a): every per-seed number behind the report's intervals
    and verdicts, so that each one recomputes."""
    rows, depth = [], 0
    for c in cs:
        for job in c.jobs:
            for when in WHEN:
                for name in [*SPREAD, "attention_entropy"]:
                    values = job.profile(name, when)
                    if values is None:
                        continue
                    records = [r for r in job.records if rank_layers(r, name)]
                    step = records[0 if when == "init" else -1].get("step") if records else None
                    share = kept_share(name, values) if name in SPREAD else math.nan
                    depth = max(depth, len(values))
                    rows.append(
                        {
                            "job": job.name,
                            "mixer": c.mixer,
                            "residual": c.residual,
                            "mlp": c.mlp,
                            "norm": c.norm,
                            "seed": get(job.config, "train.seed"),
                            "when": when,
                            "step": step,
                            "measure": name,
                            **{f"layer_{k}": v for k, v in enumerate(values)},
                            "kept_share": share,
                        }
                    )
    columns = [*LAYER_COLUMNS, *(f"layer_{k}" for k in range(depth)), "kept_share"]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        # every digit of a float64: a share near collapse is a ratio of two small differences
        writer.writerows({k: fmt(r.get(k), ".17g") for k in columns} for r in rows)
