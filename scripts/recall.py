"""The recall study: multi-query associative recall (MQAR) accuracy against model width and
depth, per mixer, tuned and replicated, in one command (Zoology's Figure 2, Arora et al. 2023;
recall against depth as Wang et al. 2025 measure it).

For each cell (width, depth) of the grid and each mixer (default: scaled_dot, linear, retention,
mamba2, gla and deltanet; the causal mixers only, MQAR is read left to right):

1. tune: `train.lr` over a log-spaced grid on ≥ 2 tuning seeds (default 100, 101), selected on
   the whole validation split's accuracy (max); a choice at an edge of a grid of more than two
   values extends it one step, up to --max-extensions times (attnzoo.tuned.tune_lr);
2. rerun: fresh seeds (default 0, 1, 2) at each mixer's chosen learning rate;
3. report: test accuracy on the held-out test split (never read by a choice), per seed and as a
   Student-t interval, and each mixer against scaled-dot, the reference fixed up front, paired
   by seed; every comparison of every cell in one family (--correction, default holm), with
   the equivalence margin --margin (accuracy, stated before the runs). With --success ACCURACY
   (a threshold fixed before the runs) the outcome of a seed is instead whether its test
   accuracy reached it, and each mixer's success rate is compared with scaled-dot's by
   Boschloo's exact test (attnzoo.stats.compare_rates), in the same one family: the analysis
   for outcomes that are success or failure (the 1/8 plateau, or recall near 1). The tuning
   then chooses by the same outcome: the learning rate whose tuning seeds reach the threshold
   on validation accuracy most often, the best mean among those.

The task is the trainer's `task=mqar` (its defaults: vocabulary 256, 64 tokens, 8 key-value
pairs, every key queried) on blocks with the MLP switched off (model.mlp=false: the study asks
what the mixers recall alone). Everything else is the trainer's default block (pre-norm,
LayerNorm, learned positions, 4 heads).

Outputs (in --out): recall.md (the report), recall.json, runs.csv and tune_runs.csv (every
fresh-seed and tuning run, with its width and depth), comparisons.csv (the family, raw and
adjusted p), curves.csv (the fresh seeds' sampled validation accuracy), recall.png (test
accuracy against width, a panel per depth, every seed a dot; validation curves below).
The run folders are in <out>/dim<W>_depth<L>/; the same command again skips completed sweeps.
--add-to REPORT adds cells to a committed report of the same protocol, its cells read back from
its tables (runs.csv, curves.csv; tune_runs.csv, checked against its choices), all comparisons
in one family.

    python scripts/recall.py --parallel 2                   # the six-mixer screen (results/recall/screen)
    python scripts/recall.py --widths 32 --add-to scripts/results/recall/screen   # one more width
    python scripts/recall.py --smoke                        # the pipeline at toy size, ~1 min
    python scripts/recall.py --preset gpu --parallel 4      # one GPU: widths 64-512, depths 2, 4

The study committed in scripts/results/recall (docs/results.md), success rates on 10 fresh
seeds at a budget its pilot chose (STUDY is the same arguments in both commands):

    STUDY="--mixers scaled_dot mamba2 deltanet --lrs 1e-3,3e-3,1e-2,3e-2 --tune-seeds 100,101,102
           --seeds 0,1,2,3,4,5,6,7,8,9 --success 0.9 --parallel 2"
    python scripts/recall.py $STUDY --pilot 2000 --out results/recall/pilot   # the budget's pilot
    python scripts/recall.py $STUDY --budget-from results/recall/pilot --out results/recall

The budget: --pilot STEPS trains every mixer at every learning rate of the grid, on the first
tuning seed, for STEPS steps in every cell, and writes the validation curves (curves.csv) and the
step by which each mixer's best curve (the learning rate whose validation accuracy ends highest)
has flattened (pilot.json, pilot.md: from that step on it stays within a band narrower than
--margin, seen over at least the last fifth of the pilot; attnzoo.analysis.convergence.
budget_from): the budget is for the runs the study reports, at a mixer's chosen rate, and curves
at other rates still moving are named, not waited for. --budget-from PILOT then trains the study
for that many steps; a pilot in which a best curve had not flattened gives no budget and is
refused.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import sys
from pathlib import Path

from attnzoo.analysis.compare import COMPARISON_COLUMNS, comparisons, correct, successes
from attnzoo.analysis.convergence import still_moving
from attnzoo.analysis.figures import recall_figure
from attnzoo.analysis.groups import group_row, groups_from_rows
from attnzoo.analysis.report import protocol_text, write_runs
from attnzoo.analysis.tables import ci_text, fmt, write_csv
from attnzoo.mixers import causal_mixers
from attnzoo.studies import (
    SMOKE_SIZE,
    STUDY_REFERENCE,
    add_tuned_options,
    int_list,
    machine,
    price,
    read_rows,
    run_overrides,
    sweep,
    tuned_options_problem,
    tuned_study_price,
)
from attnzoo.tuned import (
    Arm,
    Clock,
    Plan,
    head_lines,
    seeds_line,
    selection_from_rows,
    tuning_lines,
)
from attnzoo.tuned import run_cell as tuned_cell

# Seconds per job of --smoke for --dry-run (price divides by the jobs run at a time), measured:
# its --smoke at --parallel 2 on 2 CPU cores: 119 s for 48 jobs and 6 grid extensions.
SMOKE_JOB_S = (
    5.0,
    "measured: its --smoke at --parallel 2 on 2 CPU cores: 119 s for 48 jobs and 6 grid extensions",
)

SUMMARIZE = shlex.quote(os.path.relpath(Path(__file__).resolve().with_name("summarize.py")))
RECALL_MIXERS = ["scaled_dot", "linear", "retention", "mamba2", "gla", "deltanet"]
# What every run of a preset trains: the task at its size, the block, the budget. The CPU preset
# is sized for 2 cores; the GPU preset is Zoology's harder setting (its vocabulary, 16 pairs in
# 128 tokens), estimated for one H100, not measured.
PRESETS = {
    "cpu": {
        "overrides": [
            "task=mqar",
            "model.mlp=false",
            "train.max_steps=1000",
            "train.batch_size=64",
            "train.eval_every=100",
            "task.val_size=1024",
            "task.test_size=1024",
            "train.rank_measures=[relative_residual]",
        ],
        "widths": [64],
        "depths": [2],
        "lrs": [1e-3, 3e-3, 1e-2],
        "seconds": 176.0,
        "basis": "the committed runs' means per cell, 2 CPU cores",
    },
    "gpu": {
        "overrides": [
            "task=mqar",
            "task.vocab_size=8192",
            "task.seq_len=128",
            "task.num_kv_pairs=16",
            "model.mlp=false",
            "train.max_steps=4000",
            "train.batch_size=128",
            "train.eval_every=250",
            "train.rank_measures=[relative_residual]",
        ],
        "widths": [64, 128, 256, 512],
        "depths": [2, 4],
        "lrs": [3e-4, 1e-3, 3e-3, 1e-2],
        "seconds": 120.0,
        "basis": "estimated for one H100",
    },
}
SMOKE = [
    *(o for o in SMOKE_SIZE if not o.startswith("model.dim=")),  # the cell sets the width
    "task.num_kv_pairs=2",
    "task.vocab_size=16",
    "task.val_size=8",
    "task.test_size=8",
]
CURVE_COLUMNS = ["width", "depth", "mixer", "seed", "step", "val_accuracy"]
# the committed report of the defaults' protocol (the screen: six mixers, 3 seeds, four cells)
COMMITTED = Path(__file__).resolve().parent / "results" / "recall" / "screen"
ON = "test_metric"  # test accuracy: the quantity the study is about
MARGIN_REASON = "5 points of accuracy: a difference in recall a reader of the figure acts on"


def cell_name(width: int, depth: int) -> str:
    return f"dim{width}_depth{depth}"


def preset_steps(preset: str) -> int:
    """The training steps of a preset's runs."""
    (steps,) = [o for o in PRESETS[preset]["overrides"] if o.startswith("train.max_steps=")]
    return int(steps.split("=")[1])


def preset_overrides(args: argparse.Namespace) -> list[str]:
    """The preset's overrides and, with --smoke, the smoke's, their step count replaced by
    --budget-from's (or --pilot's)."""
    steps = args.pilot or args.budget
    given = [*PRESETS[args.preset]["overrides"], *(SMOKE if args.smoke else [])]
    return [o for o in given if steps is None or not o.startswith("train.max_steps=")] + (
        [f"train.max_steps={steps}"] if steps is not None else []
    )


def run_cell(width: int, depth: int, args: argparse.Namespace, env: dict[str, str]) -> dict:
    """Tune, rerun at fresh seeds and compare one (width, depth) cell."""
    base = [
        *preset_overrides(args),
        f"model.dim={width}",
        f"model.depth={depth}",
        *run_overrides(args, None),
        *args.override,
    ]
    where = {"width": width, "depth": depth}
    arms = [Arm(m, m) for m in args.mixers]
    cell = tuned_cell(args.out, cell_name(width, depth), where, base, arms, plan(args), env)
    groups = list(cell.groups.values())
    curves = [
        {
            **where,
            "mixer": mixer,
            "seed": r["seed"],
            "step": x["step"],
            "val_accuracy": x["val/accuracy"],
        }
        for mixer, g in cell.groups.items()
        for job, r in g.members
        if r["status"] == "completed"
        for x in job.records
        if "val/accuracy" in x and "step" in x
    ]
    compared = compare_cell(groups, args)
    return vars(cell) | {
        **where,
        "groups": groups,
        "table": [group_row(g, args.confidence) for g in groups],
        "compared": [c | where for c in compared],
        "curves": curves,
    }


def compare_cell(groups: list, args: argparse.Namespace) -> list[dict]:
    """Each mixer of a cell against scaled-dot on test accuracy, uncorrected (the report corrects
    every cell's together): paired by seed with the margin, or with --success the success rates
    by Boschloo's exact test."""
    return comparisons(
        groups,
        "mixer.name",
        ON,
        args.confidence,
        None if args.success is not None else args.margin,
        STUDY_REFERENCE,
        "none",
        success=args.success,
    )


def plan(args: argparse.Namespace) -> Plan:
    """The recall protocol: the choice on the whole validation split's accuracy (max); with
    --success, on how many tuning seeds reach it, then the mean."""
    return Plan(
        args.lrs,
        args.tune_seeds,
        args.seeds,
        args.max_extensions,
        "metric",
        True,
        SUMMARIZE,
        args.success,
    )


# What reports written before these keys were recorded ran with (the script's defaults then).
PROTOCOL_DEFAULTS = {
    "confidence": 0.95,
    "override": [],
    "smoke": False,
    "max_extensions": 1,
    "success": None,
    "budget": None,
}


def cell_seconds(width: int, depth: int, preset: str) -> tuple[float, str]:
    """Seconds per run of a cell, and how they were had. CPU preset: the committed report's mean
    over the cell's runs where it has the cell, else its width-64, depth-2 figure scaled by
    width × depth (a rough guide: depth 1 ran 0.65× depth 2, width 32 0.49× width 64). GPU
    preset: one estimate for every cell (small models leave a GPU mostly idle)."""
    if preset != "cpu":
        return PRESETS[preset]["seconds"], "estimated"
    if (COMMITTED / "runs.csv").exists():
        rows = [
            r
            for name in ("runs.csv", "tune_runs.csv")
            for r in read_rows(COMMITTED / name)
            if (r["width"], r["depth"]) == (str(width), str(depth)) and r.get("wall_s")
        ]
        if rows:
            return sum(float(r["wall_s"]) for r in rows) / len(rows), "measured"
    return PRESETS[preset]["seconds"] * width / 64 * depth / 2, "scaled"


def protocol(args: argparse.Namespace) -> dict:
    """What a cell's numbers depend on besides its width and depth: cells join one report only
    where all of it is the same."""
    return {
        "preset": args.preset,
        "mixers": args.mixers,
        "lrs": args.lrs,
        "tune_seeds": args.tune_seeds,
        "seeds": args.seeds,
        "margin": args.margin,
        "correction": args.correction,
        "confidence": args.confidence,
        "override": args.override,
        "smoke": args.smoke,
        "max_extensions": args.max_extensions,
        "success": args.success,
        "budget": args.budget,
    }


def run_pilot(cells: list, args: argparse.Namespace, env: dict[str, str]) -> Path:
    """--pilot STEPS: every mixer at every learning rate, on the first tuning seed, for STEPS
    steps, per cell; writes the curves, the budget they ask for and its report."""
    from attnzoo.analysis import load_sweep
    from attnzoo.analysis.convergence import budget_from

    seed, rows, curves = args.tune_seeds[0], [], {}
    for width, depth in cells:
        base = [
            *preset_overrides(args),
            f"model.dim={width}",
            f"model.depth={depth}",
            *run_overrides(args, None),
            *args.override,
            "train.final_splits=[val]",  # a pilot sees validation data only
        ]
        grid = [
            f"mixer={','.join(args.mixers)}",
            f"train.lr={','.join(format(lr, 'g') for lr in args.lrs)}",
        ]
        folder = args.out / cell_name(width, depth)
        print(f"width {width}, depth {depth}: pilot of {args.pilot} steps, seed {seed}", flush=True)
        sweep(
            [*base, *grid, f"train.seed={seed}"],
            folder,
            len(args.mixers) * len(args.lrs),
            env,
            args.out / "pilot.log",
        )
        for job in load_sweep(folder).jobs:
            mixer, lr = job.config["mixer"]["name"], job.config["train"]["lr"]
            points = [(x["step"], x["val/accuracy"]) for x in job.records if "val/accuracy" in x]
            curves[(width, depth, mixer, lr)] = points
            rows += [
                {
                    "width": width,
                    "depth": depth,
                    "mixer": mixer,
                    "lr": lr,
                    "step": s,
                    "val_accuracy": v,
                }
                for s, v in points
            ]
    # The budget is for the runs the study reports, at each mixer's chosen rate: it is read off
    # each mixer's best pilot curve (the rate whose validation accuracy ends highest; of equal
    # ends, the one that settles first); a curve at another rate still moving is named, not
    # waited for.
    _, flat = budget_from(curves, args.margin)

    def rank(key: tuple) -> tuple[float, float]:
        settled = flat[key]
        end = curves[key][-1][1] if curves[key] else float("-inf")
        return end, -(settled if settled is not None else float("inf"))

    best_key: dict[tuple, tuple] = {}
    for key in curves:
        if key[:3] not in best_key or rank(key) > rank(best_key[key[:3]]):
            best_key[key[:3]] = key
    best = {cell: (key[3], rank(key)[0]) for cell, key in best_key.items()}
    budget, _ = budget_from({key: curves[key] for key in best_key.values()}, args.margin)
    write_csv(
        args.out / "curves.csv", ["width", "depth", "mixer", "lr", "step", "val_accuracy"], rows
    )
    record = {
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "machine": machine(),
        **protocol(args),
        "pilot_steps": args.pilot,
        "pilot_seed": seed,
        "budget": budget if budget is None else int(budget),
        "best": [
            {"width": w, "depth": d, "mixer": m, "lr": lr, "final": end}
            for (w, d, m), (lr, end) in best.items()
        ],
        "flat_from": [
            {"width": w, "depth": d, "mixer": m, "lr": lr, "step": step}
            for (w, d, m, lr), step in flat.items()
        ],
    }
    (args.out / "pilot.json").write_text(json.dumps(record, indent=2) + "\n")
    moving = {
        (w, d, m, lr): f"{m} at lr {lr:g} (width {w}, depth {d})"
        for (w, d, m, lr), step in flat.items()
        if step is None
    }
    chosen = set(best_key.values())
    moving_best = [text for key, text in moving.items() if key in chosen]
    others = [text for key, text in moving.items() if key not in chosen]
    best_text = "; ".join(
        f"{m} {lr:g} ({end:.3f}, width {w}, depth {d})" for (w, d, m), (lr, end) in best.items()
    )
    verdict = (
        f"Budget: {int(budget)} steps, the step by which each mixer's best curve (the rate whose "
        f"validation accuracy ends highest: {best_text}) stays within a band narrower than "
        f"±{args.margin:g} of accuracy (each curve's step: `pilot.json`)."
        if budget is not None
        else "No budget: a mixer's best curve had not flattened within the pilot (moving by the "
        f"margin or more in its last fifth): {'; '.join(moving_best)}. A longer pilot is needed."
    )
    if budget is not None and others:
        verdict += (
            f" Still moving at the pilot's end, at rates that were not a mixer's best: "
            f"{'; '.join(others)}; the study's report names every fresh seed still moving at "
            "the budget."
        )
    lines = [
        "# Recall: the budget's pilot",
        "",
        f"Command: `{record['command']}`  ",
        f"Machine: {record['machine']}",
        "",
        f"Every mixer ({', '.join(args.mixers)}) at every learning rate "
        f"({', '.join(format(lr, 'g') for lr in args.lrs)}), seed {seed}, {args.pilot} steps, "
        f"validation accuracy only (curves: `curves.csv`).",
        "",
        verdict,
        "",
    ]
    (args.out / "pilot.md").write_text("\n".join(lines))
    return args.out / "pilot.md"


def pilot_budget(folder: Path, args: argparse.Namespace) -> int | str:
    """The budget of a committed pilot (--budget-from), or why it cannot give one: its
    protocol must be this run's but for the budget."""
    path = folder / "pilot.json"
    if not path.is_file():
        return f"--budget-from {folder}: no pilot.json there (run --pilot STEPS first)"
    pilot = json.loads(path.read_text())
    for key in ("preset", "mixers", "lrs", "override", "margin", "smoke"):
        if pilot.get(key) != getattr(args, key):
            return (
                f"--budget-from {folder}: the pilot's {key} is {pilot.get(key)!r}, this run's "
                f"{getattr(args, key)!r}; allowed: a pilot of this protocol"
            )
    if pilot["budget"] is None:
        return f"--budget-from {folder}: its curves had not flattened (pilot.md); no budget"
    return int(pilot["budget"])


def committed_cells(folder: Path, args: argparse.Namespace, grid: list) -> tuple[list, list] | str:
    """The cells of a committed report of this study (--add-to), rebuilt from its tables: the
    tuning from tune_runs.csv (checked against recall.json's choices), the groups from runs.csv,
    the comparisons recomputed for this report's family; and the commands that ran them. A
    string says why they cannot join this run's report."""
    try:
        study = json.loads((folder / "recall.json").read_text())
        runs, tunes = read_rows(folder / "runs.csv"), read_rows(folder / "tune_runs.csv")
        curves = read_rows(folder / "curves.csv") if (folder / "curves.csv").exists() else []
    except (OSError, ValueError) as err:
        return f"--add-to {folder}: not a report of this study ({err})"
    cell_keys = {"width", "depth", "chosen_lr", "extensions", "groups"}
    if not {"command", "started", "machine", "cells"} <= set(study) or not all(
        cell_keys <= set(c) for c in study["cells"]
    ):
        return f"--add-to {folder}: not a report of this study (recall.json lacks its fields)"
    study.setdefault("mixers", list(study["cells"][0]["chosen_lr"]) if study["cells"] else [])
    for key, value in protocol(args).items():
        if (theirs := study.get(key, PROTOCOL_DEFAULTS.get(key))) != value:
            return (
                f"--add-to {folder}: its {key} is {theirs!r}, this run's {value!r}; allowed: "
                "the protocol of the report it adds to"
            )
    if both := sorted({(c["width"], c["depth"]) for c in study["cells"]} & set(grid)):
        return (
            f"--add-to {folder}: (width, depth) {both} already in it; allowed: cells it "
            "does not have"
        )
    cells = []
    for c in study["cells"]:
        where, key = {"width": c["width"], "depth": c["depth"]}, [c["width"], c["depth"]]
        here = [r for r in runs if [int(r["width"]), int(r["depth"])] == key]
        tuned = [r for r in tunes if [int(r["width"]), int(r["depth"])] == key]
        if (
            selected := selection_from_rows(tuned, c["chosen_lr"], args.mixers, args.success)
        ) is None:
            return (
                f"--add-to {folder}: its tune_runs.csv does not give its choices {c['chosen_lr']}"
            )
        order = {m: i for i, m in enumerate(args.mixers)}
        groups = sorted(groups_from_rows(here), key=lambda g: order[g.config.get("mixer.name")])
        compared = compare_cell(groups, args)
        cells.append(
            {
                **where,
                "selected": selected,
                "extensions": c["extensions"],
                "chosen": c["chosen_lr"],
                "tune_runs": tuned,
                "groups": groups,
                "table": sorted(c["groups"], key=lambda r: order[r["mixer"]]),
                "compared": [r | where for r in compared],
                "runs": here,
                "curves": [r for r in curves if [int(r["width"]), int(r["depth"])] == key],
            }
        )
    older = [x for e in study.get("earlier", []) for x in e["cells"]]
    ran = [x for x in ([c["width"], c["depth"]] for c in study["cells"]) if x not in older]
    return cells, [
        *study.get("earlier", []),
        {
            "command": study["command"],
            "cells": ran,
            "started": study["started"],
            "machine": study["machine"],
        },
    ]


# ---- the report --------------------------------------------------------------------------------


def per_seed(group) -> str:
    return ", ".join(
        f"{fmt(r['seed'])}: {r['final_test_metric']:.3f}"
        for r in group.completed
        if r["final_test_metric"] is not None
    )


def cell_lines(cell: dict, family: list[dict], args: argparse.Namespace) -> list[str]:
    lines = [f"## Width {cell['width']}, depth {cell['depth']}", ""]
    lines += tuning_lines(
        cell, args.lrs, args.tune_seeds, "whole-split val accuracy (max)", args.max_extensions
    )
    verdicts = {
        r["config"].split(" ")[0]: r["sentence"]
        for r in family
        if (r["width"], r["depth"]) == (cell["width"], cell["depth"])
    }
    lines += [
        f"Fresh seeds {', '.join(map(str, args.seeds))}: test accuracy on the held-out test "
        f"split (mean [{args.confidence:.0%} Student-t interval], then every seed); val accuracy "
        "on the whole validation split.",
        "",
        "| mixer | train.lr | n | test accuracy | per seed | val accuracy | final rank | params "
        "| note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r, g in zip(cell["table"], cell["groups"], strict=True):
        lines.append(
            f"| {g.config.get('mixer.name')} | {fmt(g.config.get('train.lr'))} | {r['n_seeds']} "
            f"| {ci_text(r['test_metric_mean'], r['test_metric_ci_low'], r['test_metric_ci_high'])}"
            f" | {per_seed(g)} | {ci_text(r['metric_mean'], r['metric_ci_low'], r['metric_ci_high'])}"
            f" | {ci_text(r['rank_mean'], r['rank_ci_low'], r['rank_ci_high'])} | "
            f"{fmt(r['params'])} | {r['note']} |"
        )
    if args.success is None:
        lines += ["", f"Against {STUDY_REFERENCE} (test accuracy, margin ±{args.margin:g}):"]
    else:
        counts = ", ".join(
            f"{g.config.get('mixer.name')} {k}/{n}"
            for g in cell["groups"]
            for k, n in [successes(g.values(ON), args.success, False)]
        )
        lines += [
            "",
            f"Seeds whose test accuracy reached {args.success:g}: {counts}.",
            "",
            f"Against {STUDY_REFERENCE} (success rate, test accuracy ≥ {args.success:g}):",
        ]
    lines += [f"- {s}" for s in verdicts.values()] or ["- nothing to compare"]
    return lines + ["", moving_line(cell, args.margin), ""]


def moving_line(cell: dict, margin: float) -> str:
    """Which fresh seeds had not flattened at the end of training, in words."""
    moving = still_moving(cell["curves"], margin)
    if not moving:
        return (
            "Flattened: every fresh seed's sampled validation accuracy moved by less than the "
            f"margin (±{margin:g}) over the last fifth of training."
        )
    by: dict[str, list[str]] = {}
    for mixer, seed, change in moving:
        by.setdefault(mixer, []).append(f"{seed} ({change:+.2f})")
    listed = "; ".join(f"{m} seed(s) {', '.join(v)}" for m, v in by.items())
    return (
        "Not flattened at this budget (sampled validation accuracy moved by the margin "
        f"±{margin:g} or more over the last fifth of training): {listed}."
    )


def write_report(cells: list[dict], args: argparse.Namespace, header: dict) -> Path:
    family = correct([c for cell in cells for c in cell["compared"]], args.correction)
    write_runs([r for c in cells for r in c["runs"]], args.out / "runs.csv", ("width",))
    write_runs([r for c in cells for r in c["tune_runs"]], args.out / "tune_runs.csv", ("width",))
    write_csv(args.out / "comparisons.csv", ["width", "depth", *COMPARISON_COLUMNS], family)
    write_csv(args.out / "curves.csv", CURVE_COLUMNS, [r for c in cells for r in c["curves"]])
    recall_figure(cells, ON, args.out / "recall.png")
    preset = PRESETS[args.preset]["overrides"]
    earlier = [
        f"{'; '.join(f'Width {w}, depth {d}' for w, d in e['cells'])}: run by "
        f"`{e['command']}` (started {e['started']} UTC; {e['machine']}), read here from its "
        "tables (`runs.csv`, `tune_runs.csv`, recall.json's choices) with this report's "
        "protocol; their comparisons are recomputed in this report's family."
        for e in header.get("earlier", [])
    ]
    lines = [
        *head_lines(
            "Recall: MQAR accuracy against width and depth",
            header,
            [r for c in cells for r in c["tune_runs"]],
            [r for c in cells for r in c["runs"]],
            earlier,
        ),
        f"Every run: `{' '.join(preset)}`"
        + (" + the --smoke toy size" if args.smoke else "")
        + (f" + `{' '.join(args.override)}`" if args.override else "")
        + "; widths "
        f"{', '.join(map(str, sorted({c['width'] for c in cells})))}, depths "
        f"{', '.join(map(str, sorted({c['depth'] for c in cells})))}; "
        f"mixers {', '.join(args.mixers)}.",
        seeds_line(args.tune_seeds, args.seeds)
        + (
            f" Equivalence margin, fixed before the runs: ±{args.margin:g} accuracy "
            f"({MARGIN_REASON}). "
            if args.success is None
            else f" Success, fixed before the runs: test accuracy ≥ {args.success:g}. "
        )
        + protocol_text(family, args.confidence, args.margin, args.correction)
        + " Per-seed values: `runs.csv`; every tuning run: `tune_runs.csv`; every comparison "
        "with raw and adjusted p: `comparisons.csv`; validation curves of the fresh seeds: "
        "`curves.csv`; the figure: `recall.png`.",
        "",
    ]
    if args.smoke:
        lines += ["**Smoke run**: toy sizes; the numbers mean nothing.", ""]
    for cell in sorted(cells, key=lambda c: (c["depth"], c["width"])):
        lines += cell_lines(cell, family, args)
    path = args.out / "recall.md"
    path.write_text("\n".join(lines) + "\n")
    plain = [
        {
            "width": c["width"],
            "depth": c["depth"],
            "chosen_lr": c["chosen"],
            "extensions": c["extensions"],
            "groups": c["table"],
        }
        for c in cells
    ]
    (args.out / "recall.json").write_text(
        json.dumps({**header, "cells": plain}, indent=2, default=str) + "\n"
    )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--mixers",
        nargs="+",
        default=RECALL_MIXERS,
        choices=causal_mixers(),
        help="causal mixers (MQAR is read left to right)",
    )
    parser.add_argument(
        "--widths",
        type=int_list,
        default=None,
        help="model.dim values, comma-separated (default: the preset's)",
    )
    parser.add_argument(
        "--depths",
        type=int_list,
        default=None,
        help="model.depth values, comma-separated (default: the preset's)",
    )
    parser.add_argument(
        "--add-to",
        type=Path,
        default=None,
        metavar="REPORT",
        help="a committed report of this study: its cells join this run's "
        "report, every comparison in one family (same protocol; new cells "
        "only)",
    )
    parser.add_argument(
        "--success",
        type=float,
        default=None,
        metavar="ACCURACY",
        help="compare success rates instead of means: a seed succeeds when its test accuracy "
        "reaches ACCURACY (fixed before the runs, in (0, 1]); Boschloo's exact test, no margin",
    )
    parser.add_argument(
        "--pilot",
        type=int,
        default=None,
        metavar="STEPS",
        help="run the budget's pilot instead of the study: every mixer at every learning rate, "
        "one seed, STEPS steps; writes the step by which each mixer's best curve has flattened",
    )
    parser.add_argument(
        "--budget-from",
        type=Path,
        default=None,
        metavar="PILOT",
        help="train for the budget a pilot of this protocol found (its pilot.json)",
    )
    add_tuned_options(parser, "recall", "test accuracy")
    args = parser.parse_args()
    args.budget = None
    preset = PRESETS[args.preset]
    args.widths = args.widths or preset["widths"]
    args.depths = args.depths or preset["depths"]
    args.lrs = args.lrs or preset["lrs"]
    if args.smoke:
        args.widths, args.depths, args.seeds = [16], args.depths[:1], args.seeds[:2]
    for name in ("widths", "depths"):
        if bad := [v for v in getattr(args, name) if v < 1]:
            parser.error(f"--{name}: {bad} are not positive; allowed: ints ≥ 1")
    if bad := [w for w in args.widths if w % 4]:
        parser.error(f"--widths: {bad} are not multiples of the model's 4 heads")
    if problem := tuned_options_problem(args):
        parser.error(problem)
    if STUDY_REFERENCE not in args.mixers:
        parser.error(f"--mixers must include the reference, {STUDY_REFERENCE}")
    if args.success is not None and not 0 < args.success <= 1:
        parser.error(f"--success {args.success}: allowed: an accuracy in (0, 1]")
    if args.pilot is not None and not args.pilot > 0:
        parser.error(f"--pilot {args.pilot}: allowed: a positive number of steps")
    if args.pilot is not None and (args.add_to or args.budget_from):
        parser.error("--pilot runs alone: not with --add-to or --budget-from")
    if args.budget_from is not None:
        if isinstance(budget := pilot_budget(args.budget_from, args), str):
            parser.error(budget)
        args.budget = budget
    cells = list(itertools.product(args.widths, args.depths))
    if args.pilot is not None:
        runs = len(cells) * len(args.mixers) * len(args.lrs)
        if args.dry_run:
            steps = preset_steps(args.preset)
            per = cell_seconds(*cells[0], args.preset)[0] * args.pilot / steps
            print(
                price(
                    [("pilot", runs, per)],
                    args.parallel,
                    "the study's runs, scaled to the pilot's steps",
                )
            )
            return
        args.out.mkdir(parents=True, exist_ok=True)
        print(run_pilot(cells, args, dict(os.environ)).read_text())
        return
    earlier: tuple[list, list] | str = ([], [])
    if args.add_to is not None and isinstance(
        earlier := committed_cells(args.add_to, args, cells), str
    ):
        parser.error(earlier)
    if args.dry_run:
        priced = []
        for w, d in cells:
            per, how = (SMOKE_JOB_S[0], "smoke") if args.smoke else cell_seconds(w, d, args.preset)
            if args.budget is not None and not args.smoke:  # the pilot's budget, not the preset's
                per, how = (
                    per * args.budget / preset_steps(args.preset),
                    how + ", scaled to the budget",
                )
            priced.append((f"width {w}, depth {d}", len(args.mixers), per, how))
        basis = SMOKE_JOB_S[1] if args.smoke else preset["basis"]
        print(tuned_study_price(args, priced, basis))
        return
    clock = Clock()
    args.out.mkdir(parents=True, exist_ok=True)
    results = [run_cell(w, d, args, dict(os.environ)) for w, d in cells]
    header = clock.header(**protocol(args), margin_reason=MARGIN_REASON)
    if earlier[1]:
        header["earlier"] = earlier[1]
    results += earlier[0]
    print(write_report(results, args, header).read_text())


if __name__ == "__main__":
    main()
