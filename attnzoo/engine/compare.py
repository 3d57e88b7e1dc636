"""A cell's comparisons with its study's reference, on held-out test: per measure, paired by
seed with the margin stated before the runs, or, with --success, success rates by Boschloo's
exact test; uncorrected, for the report corrects every cell's together."""

from __future__ import annotations

import argparse

from attnzoo.analysis.compare import comparisons
from attnzoo.analysis.groups import Group, groups_from_rows
from attnzoo.engine.spec import KIND, Cell


def against(
    groups: list[Group],
    axis: str,
    reference: str,
    measures: tuple[str, ...],
    margins: dict[str, float],
    confidence: float,
    success: float | None = None,
) -> list[dict]:
    """Every group against `reference` along `axis`, per measure: paired by seed with the margin
    of its kind, or, for an accuracy with `success`, success rates by Boschloo's exact test.
    Uncorrected; none where the reference did not run (a rerun of some arms)."""
    if not any(g.label.get(axis) == reference for g in groups):
        return []
    rows = []
    for on in measures:
        rate = success if KIND[on] == "accuracy" else None
        margin = None if rate is not None else margins[KIND[on]]
        rows += comparisons(groups, axis, on, confidence, margin, reference, "none", rate)
    return rows


def cell_numbers(
    cell: Cell, args: argparse.Namespace, runs: dict, groups: list[Group], curves: list[dict]
) -> dict:
    """A cell's comparisons with the reference (uncorrected: the report corrects every cell's
    together) beside its groups and curves, from its groups (run here or read back from a
    committed report's tables)."""
    rows = against(
        groups,
        "arm",
        args.spec.reference,
        cell.measures,
        args.margins,
        args.confidence,
        args.success,
    )
    compared = [r | cell.where for r in rows]
    return runs | {"groups": groups, "compared": compared, "curves": curves}


def groups_of(rows: list[dict], arms: list[str]) -> list[Group]:
    """The groups of committed per-seed rows (a runs.csv with an arm column), labelled by arm,
    in the order of `arms`."""
    groups = groups_from_rows(rows, by=("arm",))
    for g in groups:
        g.label = {"arm": g.config["arm.name"]}
    return sorted(groups, key=lambda g: arms.index(g.label["arm"]))
