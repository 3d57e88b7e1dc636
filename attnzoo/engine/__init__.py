"""The tuned-study engine: one command line, one protocol and one report for every tuned study
(scripts/mixer_ablation.py, scripts/recall.py, scripts/sinks.py). A study is a `Spec`: its arms,
its cells (runs that share their overrides: a task, a model size), its presets, its reference,
its margins and outcome, and what its report adds (a figure, tables of its own). `main(spec)`
runs it:

1. the options every study takes (the grid, the seeds, the margins, --success, --pilot,
   --budget-from, --add-to, --dry-run, --smoke, ...), each refused with the value and what is
   allowed (exit 2, nothing written);
2. per cell (attnzoo.engine.cell.run_cell): tune `train.lr` on the tuning seeds (validation
   only), grid extension at an edge, fresh seeds at each arm's choice;
3. every arm against the reference fixed up front, on held-out test, per measure: paired by seed
   with the margin stated before the runs, or, with --success, success rates by Boschloo's
   exact test; every hypothesis of every cell in one family-wise correction;
4. the report: <name>.md, <name>.json, runs.csv, tune_runs.csv, comparisons.csv and curves.csv
   (every fresh seed's sampled validation curve, and whether it was still moving by the margin
   at the end), then the spec's own tables and figure.

--pilot STEPS runs, instead, every arm at every learning rate on the first tuning seed for STEPS
steps and writes the step by which each arm's best curve has flattened (pilot.json); with
--budget-from PILOT the study trains that many steps. --add-to REPORT adds cells to a committed
report of the same protocol, read back from its tables, all comparisons in one family.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from attnzoo.analysis.groups import group_row
from attnzoo.engine.cell import Plan, run_cell
from attnzoo.engine.committed import committed_cells
from attnzoo.engine.compare import cell_numbers
from attnzoo.engine.options import base_overrides, parse, parser_of, preset_steps, protocol
from attnzoo.engine.pilot import run_pilot
from attnzoo.engine.report import moving_arms, moving_line, write_report
from attnzoo.engine.spec import (
    ACCURACY,
    CURVE,
    LOSS,
    SUMMARIZE,
    Arm,
    Cell,
    Choice,
    Preset,
    Spec,
)
from attnzoo.studies import Clock, price, tuned_study_price, write_smoke_data

__all__ = [
    "ACCURACY",
    "LOSS",
    "SUMMARIZE",
    "Arm",
    "Cell",
    "Choice",
    "Preset",
    "Spec",
    "main",
    "moving_arms",
    "moving_line",
    "parse",
    "study",
]


def main(spec: Spec, argv: list[str] | None = None) -> None:
    """The study's command: parse and check, then `study`."""
    study(parse(spec, argv))


def study(args: argparse.Namespace) -> None:
    """Price it (--dry-run), or run it (or its pilot) and write its report."""
    spec: Spec = args.spec
    cells = spec.cells(args)
    earlier: tuple[list, list] = ([], [])
    if args.add_to is not None:
        got = committed_cells(args.add_to, args, cells)
        if isinstance(got, str):
            parser_of(spec).error(got)
        earlier = got
    if args.dry_run:
        print(dry_run(cells, args))
        return
    env = dict(os.environ)
    if args.smoke and args.data_dir is None and spec.corpora:
        args.data_dir = str(args.out / "smoke_data")
        env |= write_smoke_data(Path(args.data_dir))
        env["ATTNZOO_CACHE_DIR"] = str(args.out / "smoke_cache")  # its tokenizer, not yours
    data_dir = Path(args.data_dir) if args.data_dir else None
    clock = Clock()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.pilot is not None:
        print(run_pilot(cells, args, env, data_dir).read_text())
        return
    results = [run(cell, args, env, data_dir) for cell in cells]
    header = clock.header(**protocol(args), margin_reason=spec.margin_reason)
    if earlier[1]:
        header["earlier"] = earlier[1]
    print(write_report([*results, *earlier[0]], args, header).read_text())


def dry_run(cells: list[Cell], args: argparse.Namespace) -> str:
    """What the study (or its pilot) will cost, before it runs; nothing is written."""
    spec: Spec = args.spec
    running = [c for c in cells if not c.skipped]
    if args.smoke:
        per_cell = [(c, spec.smoke_job_s[0], "") for c in running]
        basis = spec.smoke_job_s[1]
    else:
        preset = spec.presets[args.preset]
        per_cell = [(c, *(c.seconds or (preset.seconds, ""))) for c in running]
        basis = preset.basis
    steps = args.pilot or args.budget

    def scale(cell: Cell) -> float:  # seconds per run at the preset's steps, to these steps
        return 1.0 if steps is None or args.smoke else steps / preset_steps(cell, args)

    if args.pilot is not None:
        runs = [
            (f"{c.title or spec.name} pilot", len(c.arms) * len(args.lrs), s * scale(c))
            for c, s, _ in per_cell
        ]
        return (
            price(runs, args.parallel, f"{basis}, scaled to the pilot's steps")
            + "\nnothing written"
        )
    how = ", scaled to the budget" if steps is not None and not args.smoke else ""
    priced = [
        (c.title or spec.name, len(c.arms), s * scale(c), (h + how).strip(", "))
        for c, s, h in per_cell
    ]
    text = tuned_study_price(args, priced, basis)
    if spec.header:
        text += "\n" + spec.header(args)
    return text + "\nnothing written"


def plan(cell: Cell, args: argparse.Namespace) -> Plan:
    return Plan(
        args.lrs,
        args.tune_seeds,
        args.seeds,
        args.max_extensions,
        cell.choice.by,
        cell.choice.maximize,
        SUMMARIZE,
        args.success,
    )


def run(cell: Cell, args: argparse.Namespace, env: dict[str, str], data_dir: Path | None) -> dict:
    """Tune, rerun at fresh seeds and compare one cell: the numbers for the report."""
    out = {"cell": cell, **cell.where}
    if cell.skipped:
        print(cell.skipped, flush=True)
        return out | {"skipped": cell.skipped, "runs": [], "tune_runs": [], "compared": []}
    if cell.note:
        print(f"{cell.title}: {cell.note}", flush=True)
    base = base_overrides(cell, args, data_dir)
    runs = run_cell(args.out, cell.name, cell.where, base, list(cell.arms), plan(cell, args), env)
    for arm, g in runs.groups.items():
        g.label = {"arm": arm}
    key, column = CURVE[cell.choice.by]
    curves = [
        {
            **cell.where,
            "arm": arm,
            "seed": job.config["train"]["seed"],
            "step": x["step"],
            column: x[key],
        }
        for arm, job in runs.completed()
        for x in job.records
        if key in x and "step" in x
    ]
    groups = list(runs.groups.values())
    table = [group_row(g, args.confidence) for g in groups]
    return out | cell_numbers(cell, args, vars(runs), groups, curves) | {"table": table}
