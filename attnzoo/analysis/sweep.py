"""A sweep as one object: its jobs, one row per job, its configurations (seeds as replicates) and
the axes they vary, with the calls a researcher makes on it: the groups with their intervals, a
comparison along an axis, the selection of a tuned value per configuration."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnzoo.analysis.compare import comparisons, default_axis, resolve_axis
from attnzoo.analysis.groups import Group, group_jobs, group_row, varying_axes
from attnzoo.analysis.runs import Job, SweepWarning, find_sweep_jobs, row
from attnzoo.analysis.selection import select


@dataclass
class Sweep:
    """The jobs of one or more sweep folders read as one sweep (see `load_sweep`)."""

    folders: list[Path]
    jobs: list[Job]
    rows: list[dict[str, Any]]  # one per job: the columns of summary.csv
    groups: list[Group]  # one per configuration, in order of first appearance
    orphans: list[str]  # the jobs without a readable config, by name

    @property
    def axes(self) -> list[str]:
        """The config keys that vary between configurations (group choices first: mixer.name)."""
        return varying_axes(self.groups)

    def axis(self, name: str) -> str:
        """The config key of a varied axis given as `mixer`, `mixer.name` or `model.residual`; a
        ValueError naming the sweep's axes for any other."""
        return resolve_axis(name, self.axes)

    def default_axis(self, without: str | None = None) -> str | None:
        """The axis to compare along when none is named: the only one, or the mixer, or the
        first (leaving out `without`, a tuned axis)."""
        return default_axis([a for a in self.axes if a != without])

    def group_table(self, confidence: float = 0.95) -> list[dict[str, Any]]:
        """One row per configuration (the columns of groups.csv): n, mean, std and Student-t
        interval of the final validation loss, metric and each collapse measure, and cost."""
        return [group_row(g, confidence) for g in self.groups]

    def compare(
        self,
        axis: str | None = None,
        on: str = "val_loss",
        confidence: float = 0.95,
        margin: float | None = None,
        reference: Any = None,
        correction: str = "holm",
    ) -> list[dict[str, Any]]:
        """Along `axis` (default: `default_axis()`), each configuration against the reference
        fixed up front (`reference`; by default scaled_dot for the mixer, add for the residual
        when the sweep ran them, else the axis's first value in the sweep) within its block,
        on `on` (val_loss, metric, rank or a collapse measure): paired t-test on shared seeds,
        Welch's otherwise, with `margin` the (two-sided) test against it and TOST; p-values
        corrected together by `correction` (holm, bonferroni, none). The rows of
        comparisons.csv."""
        key = self.axis(axis) if axis else self.default_axis()
        if not key:
            return []
        return comparisons(self.groups, key, on, confidence, margin, reference, correction)

    def select(
        self,
        tune_axis: str,
        by: str = "val_loss",
        fresh_seeds: str = "0,1,2,3,4",
        final_dir: str = "multirun/final",
        maximize: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Per configuration of the other axes, the value of `tune_axis` (e.g. `train.lr`) with
        the best mean of `by` over the tuning seeds (highest when `maximize`, lowest when not;
        by default the direction of `by`), and the overrides that rerun it with `fresh_seeds`.
        The entries of selected.json."""
        return select(self.groups, self.axis(tune_axis), by, fresh_seeds, final_dir, maximize)


def load_sweep(*folders: Path | str) -> Sweep:
    """Read the multirun folder(s) of `python -m attnzoo.train -m` (each holding 0/, 1/, ...):
    several folders are read as one sweep, their jobs named `<folder>/<job>`. A ValueError
    when a folder does not exist; every problem of a job is its status or a note, and one
    warning names every job that did not complete (with its status and why) and every
    configuration left without a completed seed."""
    paths = [Path(f) for f in folders]
    if not paths:
        raise ValueError("no sweep folder given")
    jobs = find_sweep_jobs(paths)
    rows = [row(j) for j in jobs]
    groups, orphans = group_jobs(jobs, rows)
    sweep = Sweep(paths, jobs, rows, groups, orphans)
    message = incomplete_message(sweep)
    if message:
        warnings.warn(message, SweepWarning, stacklevel=2)
    return sweep


def incomplete_message(sweep: Sweep) -> str:
    """The jobs that did not complete, each with its status and why, and the configurations
    without a completed seed (n=0); empty when every job completed."""
    bad = [j for j in sweep.jobs if j.status != "completed"]
    if not bad:
        return ""
    jobs = "; ".join(f"{j.name} ({j.status}" + (f": {j.reason})" if j.reason else ")") for j in bad)
    text = f"{len(bad)} of {len(sweep.jobs)} job(s) did not complete: {jobs}."
    empty = [g.name for g in sweep.groups if not g.values("val_loss")]
    if empty:
        text += f" No completed seed (n=0, no values) in: {'; '.join(empty)}."
    if sweep.orphans:
        text += f" Not in any configuration (no readable config): {', '.join(sweep.orphans)}."
    return text
