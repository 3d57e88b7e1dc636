"""Cells read back from a committed report of the same study (--add-to): its tuning checked
against its choices, its groups from its per-seed values, its comparisons recomputed in the new
report's family."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from attnzoo.engine.cell import selection_from_rows
from attnzoo.engine.compare import cell_numbers, groups_of
from attnzoo.engine.options import protocol
from attnzoo.engine.spec import Cell, Spec
from attnzoo.studies import read_rows

# What reports written before these keys were recorded ran with (the scripts' defaults then).
PROTOCOL_DEFAULTS = {
    "confidence": 0.95,
    "override": [],
    "smoke": False,
    "max_extensions": 1,
    "success": None,
    "budget": None,
}


def committed_cells(
    folder: Path, args: argparse.Namespace, cells: list[Cell]
) -> tuple[list, list] | str:
    """The cells of a committed report of this study (--add-to), rebuilt from its tables: the
    tuning from tune_runs.csv (checked against the report's choices), the groups from runs.csv,
    the comparisons recomputed for this report's family; and the commands that ran them. A
    string says why they cannot join this run's report."""
    spec: Spec = args.spec
    name = f"{spec.name}.json"
    try:
        study = json.loads((folder / name).read_text())
        runs, tunes = read_rows(folder / "runs.csv"), read_rows(folder / "tune_runs.csv")
        curves = read_rows(folder / "curves.csv") if (folder / "curves.csv").exists() else []
    except (OSError, ValueError) as err:
        return f"--add-to {folder}: not a report of this study ({err})"
    keys = list(cells[0].where) if cells else []
    cell_keys = {*keys, "chosen_lr", "extensions", "groups"}
    if not {"command", "started", "machine", "cells"} <= set(study) or not all(
        cell_keys <= set(c) for c in study["cells"]
    ):
        return f"--add-to {folder}: not a report of this study ({name} lacks its fields)"
    for key, value in protocol(args).items():
        if (theirs := study.get(key, PROTOCOL_DEFAULTS.get(key))) != value:
            return (
                f"--add-to {folder}: its {key} is {theirs!r}, this run's {value!r}; allowed: "
                "the protocol of the report it adds to"
            )
    here = {tuple(c.where.values()) for c in cells}
    if both := sorted({tuple(c[k] for k in keys) for c in study["cells"]} & here):
        return (
            f"--add-to {folder}: ({', '.join(keys)}) {both} already in it; allowed: cells it "
            "does not have"
        )
    # reports whose arms are their mixers, written before runs.csv had an arm column
    runs = [{"arm": r["mixer"]} | r for r in runs]
    template = cells[0]
    out = []
    for c in study["cells"]:
        where = {k: c[k] for k in keys}

        def mine(r: dict, where: dict = where) -> bool:
            return all(str(r[k]) == str(v) for k, v in where.items())

        tuned = [r for r in tunes if mine(r)]
        arms = list(c["chosen_lr"])
        if (selected := selection_from_rows(tuned, c["chosen_lr"], arms, args.success)) is None:
            return (
                f"--add-to {folder}: its tune_runs.csv does not give its choices {c['chosen_lr']}"
            )
        groups = groups_of([r for r in runs if mine(r)], args.arms)
        cell = Cell(
            name="",
            where=where,
            arms=template.arms,
            choice=template.choice,
            measures=template.measures,
        )
        numbers = cell_numbers(
            cell,
            args,
            {
                "selected": selected,
                "extensions": c["extensions"],
                "chosen": c["chosen_lr"],
                "tune_runs": tuned,
                "runs": [r for r in runs if mine(r)],
            },
            groups,
            [r for r in curves if mine(r)],
        )
        out.append({"cell": cell, **where, **numbers, "table": c["groups"]})
    older = [x for e in study.get("earlier", []) for x in e["cells"]]
    ran = [x for x in ([c[k] for k in keys] for c in study["cells"]) if x not in older]
    return out, [
        *study.get("earlier", []),
        {
            "command": study["command"],
            "cells": ran,
            "started": study["started"],
            "machine": study["machine"],
        },
    ]
