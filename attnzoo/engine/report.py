"""A tuned study's report: what every report opens with (the command, the machine, the runs),
its learning-rate section per cell, its fresh-seed table, its verdicts against the reference and
the seeds still moving, then the spec's own sections; <name>.md, <name>.json and the tables
(runs.csv, tune_runs.csv, comparisons.csv, curves.csv)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from attnzoo.analysis.compare import COMPARISON_COLUMNS, correct, successes
from attnzoo.analysis.convergence import still_moving
from attnzoo.analysis.groups import Group
from attnzoo.analysis.report import protocol_text, write_runs
from attnzoo.analysis.runs import COLUMNS as RUN_COLUMNS
from attnzoo.analysis.tables import ci_text, fmt, write_csv
from attnzoo.engine.cell import mixer_of
from attnzoo.engine.options import preset_overrides
from attnzoo.engine.spec import CURVE, KIND, SHOWN, Cell, Choice, Spec, arms_text, title
from attnzoo.studies import lr_text


def head_lines(
    title: str,
    header: dict[str, Any],
    tune_runs: list[dict[str, Any]],
    runs: list[dict[str, Any]],
    earlier: list[str] = (),
) -> list[str]:
    """A report's first lines: its title, the command, the machine, `earlier` (lines on runs
    this report reads from an earlier one's tables), the wall time, and how many tuning and
    fresh-seed runs it holds with their seconds summed."""
    summed = sum(float(r.get("wall_s") or 0) for r in [*tune_runs, *runs])
    return [
        f"# {title}",
        "",
        f"Command: `{header['command']}`",
        f"Machine: {header['machine']}",
        *earlier,
        f"Wall time: {header['wall_s']:.0f} s, this command (started {header['started']} UTC; "
        f"runs done before it are kept); runs: {len(tune_runs)} tuning, {len(runs)} fresh, "
        f"{summed:.0f} s summed.",
    ]


def seeds_line(tune_seeds: list[int], seeds: list[int]) -> str:
    """Which seeds tuned and which are reported."""
    return (
        f"Seeds: tuning {', '.join(map(str, tune_seeds))}; reported "
        f"{', '.join(map(str, seeds))} (fresh: the numbers below are not the ones the "
        "learning rate was chosen on)."
    )


def tuning_lines(
    result: dict[str, Any], lrs: list[float], tune_seeds: list[int], on: str, cap: int
) -> list[str]:
    """The report's learning-rate section for one cell: the grid, what the choice was made on,
    every extension of the grid past an edge, and per mixer (or arm, where a selection row names
    one) the choice and its candidates."""
    from attnzoo.analysis.tables import fmt

    success = next((s["success"] for s in result["selected"] if s.get("success") is not None), None)
    rule = (
        "the value with the best mean over the tuning seeds"
        if success is None
        else f"the value whose tuning seeds reach {success:g} most often, then the best mean"
    )
    lines = [
        "### Learning rate: grid and selection",
        "",
        f"Grid `train.lr` = {', '.join(map(lr_text, lrs))} on tuning seeds "
        f"{', '.join(map(str, tune_seeds))}; per mixer {rule}, "
        f"selected on {on} (attnzoo.analysis.selection.select). A choice at an "
        f"edge of a grid of more than two values extends it one step beyond that edge (the "
        f"grid's factor), at most {cap} time(s). Every tuning run: `tune_runs.csv`.",
        "",
    ]
    ext = result.get("extensions", [])
    lines += [
        f"- Extension {e['round']}: train.lr={lr_text(e['lr'])} for {', '.join(e['mixers'])} "
        f"(beyond the {e['edge']} edge)"
        for e in ext
    ] or ["- No extension: every choice was interior (or the grid has two values)."]
    mixers = list(result.get("chosen", {}))
    # an arm with options (the sink study's) is named by its arm, not its mixer
    named = any(
        s.get("arm", mixer_of(s, mixers)) != mixer_of(s, mixers) for s in result["selected"]
    )
    lines += [
        "",
        f"| {'arm' if named else 'mixer'} | chosen train.lr | mean {on} (tuning) | "
        f"candidates (lr: mean{'' if success is None else ', seeds reaching it'}) | note |",
        "|---|---|---|---|---|",
    ]
    for s in result["selected"]:
        cands = ", ".join(
            f"{fmt(c['value'])}: {fmt(c['mean'])}"
            + (
                f" ({round(c['success_rate'] * c['n_seeds'])}/{c['n_seeds']})"
                if "success_rate" in c
                else ""
            )
            for c in s["candidates"]
        )
        note = s["note"] + (f"; still at an edge after {cap} extension(s)" if s.get("edge") else "")
        lines.append(
            f"| {s.get('arm') or mixer_of(s, mixers)} | {fmt(s['value'])} | {fmt(s['mean'])} | {cands} | "
            f"{note.strip('; ')} |"
        )
    return lines + [""]


def per_seed(group: Group, on: str) -> str:
    return ", ".join(
        f"{fmt(r['seed'])}: {r[f'final_{on}']:.3f}"
        for r in group.completed
        if r[f"final_{on}"] is not None
    )


def moving_arms(cell: dict, args: argparse.Namespace) -> set[str]:
    """The arms of which a fresh seed's sampled validation curve moved by the margin or more
    over the last fifth of training."""
    choice: Choice = cell["cell"].choice
    moving = still_moving(cell["curves"], args.margins[KIND[choice.by]], key=CURVE[choice.by][1])
    return {arm for arm, _, _ in moving}


def moving_line(cell: dict, args: argparse.Namespace) -> str:
    """Which fresh seeds had not flattened at the end of training, in words."""
    choice: Choice = cell["cell"].choice
    column = CURVE[choice.by][1]
    margin = args.margins[KIND[choice.by]]
    what = SHOWN[choice.by].replace("val", "validation")
    moving = still_moving(cell["curves"], margin, key=column)
    if not moving:
        return (
            f"Flattened: every fresh seed's sampled {what} moved by less than the margin "
            f"(±{margin:g}) over the last fifth of training."
        )
    by: dict[str, list[str]] = {}
    for arm, seed, change in moving:
        by.setdefault(arm, []).append(f"{seed} ({change:+.2f})")
    listed = "; ".join(f"{a} seed(s) {', '.join(v)}" for a, v in by.items())
    return (
        f"Not flattened at this budget (sampled {what} moved by the margin ±{margin:g} or more "
        f"over the last fifth of training): {listed}."
    )


def cell_lines(cell: dict, family: list[dict], args: argparse.Namespace) -> list[str]:
    spec: Spec = args.spec
    meta: Cell = cell["cell"]
    lines = [f"## {meta.title}", ""] if meta.title else []
    if "skipped" in cell:
        return lines + [cell["skipped"], ""]
    if meta.overrides or meta.note:
        said = f"Every run of it also: `{' '.join(meta.overrides)}`." if meta.overrides else ""
        lines += [f"{said} {meta.note}".strip(), ""]
    lines += tuning_lines(cell, args.lrs, args.tune_seeds, meta.choice.text, args.max_extensions)
    first = spec.shown[0]
    lines += [
        f"Fresh seeds {', '.join(map(str, args.seeds))} at the chosen learning rates: mean "
        f"[{args.confidence:.0%} Student-t interval], then every seed's {SHOWN[first]}. Test "
        "values are on the held-out test split (the whole split, read once at the end of each "
        f"run, never used for a choice); {SHOWN[meta.choice.by]} on the whole validation split; "
        "final rank: the last block's relative residual at the end; flattened: no seed's sampled "
        "validation curve moved by the margin or more over the last fifth of training.",
        "",
        f"| arm | train.lr | n | {' | '.join(SHOWN[m] for m in spec.shown)} | per seed | "
        f"{SHOWN[meta.choice.by]} | final rank | flattened | params | note |",
        "|---|---|---|" + "---|" * len(spec.shown) + "---|---|---|---|---|---|",
    ]
    moving = moving_arms(cell, args)
    for r, g in zip(cell["table"], cell["groups"], strict=True):
        arm = g.label["arm"]
        shown = [ci_text(r[f"{m}_mean"], r[f"{m}_ci_low"], r[f"{m}_ci_high"]) for m in spec.shown]
        v = meta.choice.by
        flat = "n/a" if not cell["curves"] else ("no" if arm in moving else "yes")
        lines.append(
            f"| {arm} | {fmt(g.config.get('train.lr'))} | {r['n_seeds']} | {' | '.join(shown)} "
            f"| {per_seed(g, first)} | {ci_text(r[f'{v}_mean'], r[f'{v}_ci_low'], r[f'{v}_ci_high'])}"
            f" | {ci_text(r['rank_mean'], r['rank_ci_low'], r['rank_ci_high'])} | {flat} | "
            f"{fmt(r['params'])} | {r['note']} |"
        )
    mine = [r for r in family if all(r.get(k) == v for k, v in meta.where.items())]
    if args.success is not None:
        counts = ", ".join(
            f"{g.label['arm']} {k}/{n}"
            for g in cell["groups"]
            for k, n in [successes(g.values("test_metric"), args.success, False)]
        )
        lines += ["", f"Seeds whose test accuracy reached {args.success:g}: {counts}."]
    for on in meta.measures:
        success = args.success is not None and KIND[on] == "accuracy"
        what = (
            f"success rate, test accuracy ≥ {args.success:g}"
            if success
            else f"{SHOWN[on]}, margin ±{args.margins[KIND[on]]:g}"
        )
        rows = [r for r in mine if r["on"] == on or (success and r["on"].startswith("success"))]
        lines += ["", f"Against {spec.reference} ({what}):"]
        lines += [f"- {r['sentence']}" for r in rows] or ["- nothing to compare"]
    lines += ["", moving_line(cell, args), ""]
    if spec.cell_lines:
        lines += spec.cell_lines(cell | {"family": mine}, args)
    return lines


def write_report(cells: list[dict], args: argparse.Namespace, header: dict) -> Path:
    """<name>.md and .json, runs.csv, tune_runs.csv, comparisons.csv and curves.csv in --out,
    then the spec's own tables and figure."""
    spec: Spec = args.spec
    out = args.out
    keys = list(dict.fromkeys(k for c in cells for k in c["cell"].where))
    family = correct([r for c in cells for r in c["compared"]], args.correction)
    extra = (*(k for k in keys if k not in RUN_COLUMNS), "arm")  # beside runs.csv's own columns
    write_runs([r for c in cells for r in c["runs"]], out / "runs.csv", extra)
    write_runs([r for c in cells for r in c["tune_runs"]], out / "tune_runs.csv", extra)
    write_csv(out / "comparisons.csv", [*keys, *COMPARISON_COLUMNS], family)
    curves = [r for c in cells for r in c.get("curves", [])]
    write_csv(out / "curves.csv", list(dict.fromkeys(k for r in curves for k in r)), curves)
    if spec.figure:
        spec.figure([c for c in cells if "skipped" not in c], args)
    earlier = [
        f"{'; '.join(title(dict(zip(keys, x, strict=True))) for x in e['cells'])}: "
        f"run by `{e['command']}` (started {e['started']} UTC; {e['machine']}), read here from "
        f"its tables (`runs.csv`, `tune_runs.csv`, {spec.name}.json's choices) with this report's "
        "protocol; their comparisons are recomputed in this report's family."
        for e in header.get("earlier", [])
    ]
    ran = [c for c in cells if "skipped" not in c]
    margins = ", ".join(
        f"±{v:g} {k}{' (nats)' if k == 'loss' else ''}"
        for k, v in args.margins.items()
        if args.success is None or k != "accuracy"
    )
    analysis = (
        f"Success, fixed before the runs: test accuracy ≥ {args.success:g}. "
        if args.success is not None
        else ""
    ) + (
        f"Equivalence margin{'s' if ',' in margins else ''}, fixed before the runs: {margins} "
        f"({spec.margin_reason}). "
        if margins
        else ""
    )
    lines = [
        *head_lines(
            spec.title,
            header,
            [r for c in cells for r in c["tune_runs"]],
            [r for c in cells for r in c["runs"]],
            earlier,
        ),
        (
            f"Every run: `{' '.join(preset_overrides(args))}`"
            if preset_overrides(args)
            else "Every run: its cell's overrides (below)"
        )
        + (" (the --smoke toy size)" if args.smoke else "")
        + (f" + `{' '.join(args.override)}`" if args.override else "")
        + f"; arms: {arms_text(spec, args.arms)}.",
        seeds_line(args.tune_seeds, args.seeds)
        + " "
        + analysis
        + (spec.header(args) + " " if spec.header else "")
        + protocol_text(family, args.confidence, 0.0, args.correction).replace("±0", "the margin")
        + " Per-seed values: `runs.csv`; every tuning run: `tune_runs.csv`; every comparison "
        "with raw and adjusted p: `comparisons.csv`; the fresh seeds' validation curves: "
        f"`curves.csv`{spec.files}.",
        "",
    ]
    if args.smoke:
        lines += ["**Smoke run**: toy sizes; the numbers mean nothing.", ""]
    for cell in cells:
        lines += cell_lines(cell, family, args)
    if spec.report:
        lines += spec.report(ran, args)
    path = out / f"{spec.name}.md"
    path.write_text("\n".join(lines) + "\n")
    plain = [
        {
            **c["cell"].where,
            **({"skipped": c["skipped"]} if "skipped" in c else {}),
            "chosen_lr": c.get("chosen", {}),
            "selected_on": c["cell"].choice.text,
            "extensions": c.get("extensions", []),
            "groups": c.get("table", []),
        }
        for c in cells
    ]
    about = {a: spec.arms[a].about for a in args.arms if spec.arms[a].about}
    arms = {"reference": spec.reference} | ({"arm_text": about} if about else {})
    (out / f"{spec.name}.json").write_text(
        json.dumps({**header, **arms, "cells": plain}, indent=2, default=str) + "\n"
    )
    return path
