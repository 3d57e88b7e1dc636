"""The budget's pilot (--pilot STEPS): every arm at every learning rate of the grid, on the
first tuning seed, and the step by which each arm's best curve has flattened."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from attnzoo.analysis.tables import fmt, write_csv
from attnzoo.engine.cell import by_options
from attnzoo.engine.options import base_overrides, protocol
from attnzoo.engine.spec import CURVE, KIND, Cell
from attnzoo.studies import machine, sweep


def run_pilot(
    cells: list[Cell], args: argparse.Namespace, env: dict[str, str], data_dir: Path | None
) -> Path:
    """--pilot STEPS: every arm at every learning rate, on the first tuning seed, for STEPS
    steps, per cell; writes the curves (curves.csv), the budget they ask for (pilot.json) and its
    report (pilot.md). The budget is for the runs the study reports, at each arm's chosen rate:
    it is read off each arm's best pilot curve (the rate whose validation value ends best; of
    equal ends, the one that settles first); a curve at another rate still moving is named, not
    waited for."""
    from attnzoo.analysis import load_sweep
    from attnzoo.analysis.convergence import budget_from

    seed, rows, curves, sign, margin = args.tune_seeds[0], [], {}, {}, {}
    for cell in (c for c in cells if not c.skipped):
        key, column = CURVE[cell.choice.by]
        base = [*base_overrides(cell, args, data_dir), "train.final_splits=[val]"]
        print(f"{cell.title}: pilot of {args.pilot} steps, seed {seed}", flush=True)
        for options, same in by_options(list(cell.arms)).items():
            folder = args.out / cell.name / (same[0].name if options else "")
            grid = [
                f"mixer={','.join(a.mixer for a in same)}",
                f"train.lr={','.join(format(lr, 'g') for lr in args.lrs)}",
            ]
            jobs = len(same) * len(args.lrs)
            sweep(
                [*base, *options, *grid, f"train.seed={seed}"],
                folder,
                jobs,
                env,
                args.out / "pilot.log",
            )
            by_mixer = {a.mixer: a.name for a in same}
            for job in load_sweep(folder).jobs:
                arm, lr = by_mixer[job.config["mixer"]["name"]], job.config["train"]["lr"]
                points = [(x["step"], x[key]) for x in job.records if key in x and "step" in x]
                at = (cell.title, arm, lr)
                curves[at] = points
                sign[at] = 1 if cell.choice.maximize else -1
                margin[at] = args.margins[KIND[cell.choice.by]]
                rows += [
                    {**cell.where, "arm": arm, "lr": lr, "step": s, column: v} for s, v in points
                ]
    flat = {k: budget_from({k: v}, margin[k])[1][k] for k, v in curves.items()}

    def rank(at: tuple) -> tuple[float, float]:
        end = sign[at] * curves[at][-1][1] if curves[at] else float("-inf")
        return end, -(flat[at] if flat[at] is not None else float("inf"))

    best: dict[tuple, tuple] = {}
    for at in curves:
        if at[:2] not in best or rank(at) > rank(best[at[:2]]):
            best[at[:2]] = at
    settled = [flat[at] for at in best.values()]
    budget = None if not settled or None in settled else int(max(settled))
    columns = list(dict.fromkeys(k for r in rows for k in r))
    write_csv(args.out / "curves.csv", columns, rows)
    where = {c.title: c.where for c in cells}
    record = {
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "machine": machine(),
        **protocol(args),
        "pilot_steps": args.pilot,
        "pilot_seed": seed,
        "budget": budget,
        "best": [
            {**where[t], "arm": a, "lr": lr, "final": curves[(t, a, lr)][-1][1]}
            for (t, a), (_, _, lr) in best.items()
        ],
        "flat_from": [
            {**where[t], "arm": a, "lr": lr, "step": s} for (t, a, lr), s in flat.items()
        ],
    }
    (args.out / "pilot.json").write_text(json.dumps(record, indent=2) + "\n")
    (args.out / "pilot.md").write_text(pilot_text(record, best, flat, args))
    return args.out / "pilot.md"


def pilot_text(record: dict, best: dict, flat: dict, args: argparse.Namespace) -> str:
    """pilot.md: the command, what ran, and the budget with each arm's best curve, or why there
    is none, and the curves at other rates still moving."""
    chosen = set(best.values())

    def where(cell: str) -> str:  # the cell a curve is in, where the study has several
        return f", {cell}" if cell else ""

    moving = {
        at: f"{at[1]} at lr {at[2]:g}{f' ({at[0]})' if at[0] else ''}"
        for at, step in flat.items()
        if step is None
    }
    best_text = "; ".join(  # record["best"] lists the best curves in `best`'s order
        f"{b['arm']} {b['lr']:g} ({fmt(b['final'])}{where(cell)})"
        for (cell, _), b in zip(best, record["best"], strict=True)
    )
    margins = " or ".join(f"±{v:g} of {k}" for k, v in args.margins.items())
    if record["budget"] is not None:
        verdict = (
            f"Budget: {record['budget']} steps, the step by which each arm's best curve (the "
            f"rate whose validation value ends best: {best_text}) stays within a band narrower "
            f"than {margins} (each curve's step: `pilot.json`)."
        )
        if others := [text for at, text in moving.items() if at not in chosen]:
            verdict += (
                f" Still moving at the pilot's end, at rates that were not an arm's best: "
                f"{'; '.join(others)}; the study's report names every fresh seed still moving "
                "at the budget."
            )
    else:
        stuck = [text for at, text in moving.items() if at in chosen]
        verdict = (
            "No budget: an arm's best curve had not flattened within the pilot (moving by the "
            f"margin or more in its last fifth): {'; '.join(stuck)}. A longer pilot is needed."
        )
    lines = [
        f"# {args.spec.title}: the budget's pilot",
        "",
        f"Command: `{record['command']}`  ",
        f"Machine: {record['machine']}",
        "",
        f"Every arm ({', '.join(args.arms)}) at every learning rate "
        f"({', '.join(format(lr, 'g') for lr in args.lrs)}), seed {record['pilot_seed']}, "
        f"{args.pilot} steps, validation data only (curves: `curves.csv`).",
        "",
        verdict,
        "",
    ]
    return "\n".join(lines)
