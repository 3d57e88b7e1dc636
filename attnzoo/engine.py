"""The tuned-study engine: one command line, one protocol and one report for every tuned study
(scripts/mixer_ablation.py, scripts/recall.py, scripts/sinks.py). A study is a `Spec`: its arms,
its cells (runs that share their overrides: a task, a model size), its presets, its reference,
its margins and outcome, and what its report adds (a figure, tables of its own). `main(spec)`
runs it:

1. the options every study takes (the grid, the seeds, the margins, --success, --pilot,
   --budget-from, --add-to, --dry-run, --smoke, ...), each refused with the value and what is
   allowed (exit 2, nothing written);
2. per cell, attnzoo.tuned.run_cell: tune `train.lr` on the tuning seeds (validation only), grid
   extension at an edge, fresh seeds at each arm's choice;
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
import json
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnzoo.analysis.compare import COMPARISON_COLUMNS, comparisons, correct, successes
from attnzoo.analysis.convergence import still_moving
from attnzoo.analysis.groups import Group, group_row, groups_from_rows
from attnzoo.analysis.report import protocol_text, write_runs
from attnzoo.analysis.runs import COLUMNS as RUN_COLUMNS
from attnzoo.analysis.tables import ci_text, fmt, write_csv
from attnzoo.studies import (
    add_run_options,
    check_seeds,
    default_out,
    float_list,
    int_list,
    machine,
    price,
    read_rows,
    run_overrides,
    sweep,
    tuned_study_price,
    write_smoke_data,
)
from attnzoo.tuned import (
    Arm,
    Clock,
    Plan,
    by_options,
    head_lines,
    seeds_line,
    selection_from_rows,
    tuning_lines,
)
from attnzoo.tuned import run_cell as tuned_cell

# How selected.sh calls the summary, from where a study runs.
SUMMARIZE = shlex.quote(
    os.path.relpath(Path(__file__).resolve().parents[1] / "scripts" / "summarize.py")
)
# What a quantity's margin is in: a loss in nats, an accuracy in its fraction.
KIND = {"test_loss": "loss", "test_metric": "accuracy", "val_loss": "loss", "metric": "accuracy"}
# The sampled validation curve of what a learning rate is chosen on (metrics.jsonl key, and the
# column curves.csv names it by).
CURVE = {"val_loss": ("val/loss", "val_loss"), "metric": ("val/accuracy", "val_accuracy")}
# How a report names a fresh-seed measure (the table's columns; a group_row key prefix).
SHOWN = {
    "test_loss": "test loss",
    "test_metric": "test accuracy",
    "val_loss": "val loss",
    "metric": "val accuracy",
}


@dataclass(frozen=True)
class Preset:
    """A study's sizes: what every run trains (`overrides`), the default learning-rate grid and
    the seconds a run takes, with where that figure comes from (for --dry-run)."""

    overrides: tuple[str, ...]
    lrs: tuple[float, ...]
    seconds: float
    basis: str


@dataclass(frozen=True)
class Choice:
    """What the learning rate is chosen on: a summary key of the whole validation split
    (`val_loss`, `metric`), whether higher is better, and how the report says it."""

    by: str
    maximize: bool
    text: str


LOSS = Choice("val_loss", False, "whole-split val loss (min)")
ACCURACY = Choice("metric", True, "whole-split val accuracy (max)")


@dataclass(frozen=True)
class Cell:
    """Runs that share their overrides: its folder under --out (`name`, "" for --out itself),
    the columns its rows get (`where`, which also title its report section), its arms, its overrides (after the
    preset's), what its learning rate is chosen on, what its arms are compared on (held-out
    test), its seconds per run for the price (None: the preset's) and how they were had, and a
    sentence for its section (what was left out). A cell with `skipped` does not run: it says
    why."""

    name: str
    where: dict[str, Any]
    arms: tuple[Arm, ...]
    overrides: tuple[str, ...] = ()
    choice: Choice = LOSS
    measures: tuple[str, ...] = ("test_loss",)
    seconds: tuple[float, str] | None = None
    note: str = ""
    skipped: str = ""

    @property
    def title(self) -> str:
        return title(self.where)


def title(where: dict[str, Any]) -> str:
    """A cell's name in the report: its one column's value (a task: `imdb`), or its columns
    (`Width 64, depth 2`); "" for a study of one cell."""
    if len(where) == 1:
        return str(next(iter(where.values())))
    return ", ".join(f"{k} {v}" for k, v in where.items()).capitalize()


@dataclass
class Spec:
    """A tuned study. `arms`: every arm it may run, by name (`default_arms` run when not told;
    `arms_flag`, the option that picks them: --mixers or --arms); `reference`: the arm every
    other is compared with, fixed up front; `cells(args)`: its cells for the parsed options;
    `margins`: the default equivalence margin per kind (loss, accuracy) and why; `shown`: the
    fresh-seed table's test measures; `success`: whether --success may replace the means by
    success rates. The hooks add what is the study's own: `options(parser)` its options,
    `check(args)` why they cannot run (None when they can), `header(args)` a sentence for the
    report's head, `cell_lines(cell, args)` lines after a cell's verdicts, `report(cells, args)`
    lines after the cells (its own tables, written to --out), `figure(cells, args)`."""

    name: str
    title: str
    doc: str
    presets: dict[str, Preset]
    arms: dict[str, Arm]
    default_arms: list[str]
    reference: str
    cells: Callable[[argparse.Namespace], list[Cell]]
    margins: dict[str, float]
    margin_reason: str
    smoke: tuple[str, ...]
    smoke_job_s: tuple[float, str]
    shown: tuple[str, ...] = ("test_loss",)
    arms_flag: str = "arms"
    seeds: tuple[int, ...] = (0, 1, 2)
    tune_seeds: tuple[int, ...] = (100, 101)
    max_extensions: int = 1
    smoke_lrs: tuple[float, ...] | None = None
    success: bool = False
    options: Callable[[argparse.ArgumentParser], None] | None = None
    check: Callable[[argparse.Namespace], str | None] | None = None
    header: Callable[[argparse.Namespace], str] | None = None
    cell_lines: Callable[[dict[str, Any], argparse.Namespace], list[str]] | None = None
    report: Callable[[list[dict[str, Any]], argparse.Namespace], list[str]] | None = None
    figure: Callable[[list[dict[str, Any]], argparse.Namespace], None] | None = None
    files: str = ""  # the spec's own outputs, named in the report's head
    corpora: bool = True  # whether its runs read corpora (--smoke writes toy ones)


# ---- the command line -------------------------------------------------------------------------


def parser_of(spec: Spec) -> argparse.ArgumentParser:
    """Every option of a tuned study: the spec's own first, then the arms, the grid, the seeds,
    the margins, the analysis, the budget, the run options, --out and --smoke."""
    parser = argparse.ArgumentParser(
        description=spec.doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if spec.options:
        spec.options(parser)
    parser.add_argument(
        f"--{spec.arms_flag}",
        dest="arms",
        nargs="+",
        default=list(spec.default_arms),
        help=f"of {', '.join(spec.arms)}; space- or comma-separated (default: "
        f"{' '.join(spec.default_arms)}); must include the reference, {spec.reference}",
    )
    parser.add_argument(
        "--lrs", type=float_list, default=None, help="the train.lr grid (default: the preset's)"
    )
    tune = ",".join(map(str, spec.tune_seeds))
    parser.add_argument(
        "--tune-seeds",
        type=int_list,
        default=list(spec.tune_seeds),
        help=f"≥ 2, disjoint from --seeds (default {tune})",
    )
    seeds = ",".join(map(str, spec.seeds))
    parser.add_argument(
        "--seeds", type=int_list, default=list(spec.seeds), help=f"fresh seeds (default {seeds})"
    )
    parser.add_argument(
        "--max-extensions",
        type=int,
        default=spec.max_extensions,
        help=f"times the grid grows one step past an edge choice (default {spec.max_extensions})",
    )
    for kind, value in spec.margins.items():
        parser.add_argument(
            margin_flag(spec, kind),
            dest=f"margin_{kind}",
            type=float,
            default=value,
            help=f"equivalence margin on {kind}{' (nats)' if kind == 'loss' else ''}, fixed "
            f"before the runs (default {value:g})",
        )
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--correction", choices=("holm", "bonferroni", "none"), default="holm")
    if spec.success:
        parser.add_argument(
            "--success",
            type=float,
            default=None,
            metavar="ACCURACY",
            help="compare success rates instead of means: a seed succeeds when its test "
            "accuracy reaches ACCURACY (fixed before the runs, in (0, 1]); Boschloo's exact "
            "test, no margin; the learning rate is chosen by the same outcome",
        )
    parser.add_argument(
        "--pilot",
        type=int,
        default=None,
        metavar="STEPS",
        help="run the budget's pilot instead of the study: every arm at every learning rate, "
        "the first tuning seed, STEPS steps; writes the step by which each arm's best curve "
        "has flattened (pilot.json)",
    )
    parser.add_argument(
        "--budget-from",
        type=Path,
        default=None,
        metavar="PILOT",
        help="train for the budget a pilot of this protocol found (its pilot.json)",
    )
    parser.add_argument(
        "--add-to",
        type=Path,
        default=None,
        metavar="REPORT",
        help="a committed report of this study: its cells join this run's report, every "
        "comparison in one family (same protocol; new cells only)",
    )
    add_run_options(parser)
    parser.add_argument(
        "--out",
        type=Path,
        default=default_out(spec.name),
        help=f"report folder (default results/{spec.name}/)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the whole pipeline at toy size (3 steps), the first two tuning and fresh seeds, "
        "synthetic data unless --data-dir",
    )
    return parser


def margin_flag(spec: Spec, kind: str) -> str:
    """--margin for a study with one margin, --margin-<kind> for one with several."""
    return "--margin" if len(spec.margins) == 1 else f"--margin-{kind}"


def parse(spec: Spec, argv: list[str] | None = None) -> argparse.Namespace:
    """The options, completed (the arms in the spec's order, the preset's grid, --smoke's seeds,
    the pilot's budget) and checked: a problem exits 2 naming the value and what is allowed."""
    parser = parser_of(spec)
    args = parser.parse_args(argv)
    args.spec = spec
    chosen = [a for text in args.arms for a in text.split(",") if a]
    flag = f"--{spec.arms_flag}"
    if bad := [a for a in chosen if a not in spec.arms]:
        parser.error(f"{flag}: {', '.join(bad)} unknown; allowed: {', '.join(spec.arms)}")
    if spec.reference not in chosen:
        parser.error(f"{flag} must include the reference, {spec.reference}")
    args.arms = [a for a in spec.arms if a in chosen]
    args.margins = {kind: getattr(args, f"margin_{kind}") for kind in spec.margins}
    args.success = getattr(args, "success", None)
    args.budget = None
    preset = spec.presets[args.preset]
    if args.lrs is None:
        args.lrs = list(spec.smoke_lrs if args.smoke and spec.smoke_lrs else preset.lrs)
    if args.smoke:
        args.seeds, args.tune_seeds = args.seeds[:2], args.tune_seeds[:2]
    if problem := options_problem(spec, args) or (spec.check and spec.check(args)):
        parser.error(problem)
    if args.budget_from is not None:
        if isinstance(budget := pilot_budget(args.budget_from, args), str):
            parser.error(budget)
        args.budget = budget
    return args


def options_problem(spec: Spec, args: argparse.Namespace) -> str | None:
    """Why the options cannot run a study (None when they can), each named with what is
    allowed."""
    if len(args.lrs) < 2 or min(args.lrs) <= 0:
        return f"--lrs {args.lrs}: the study needs ≥ 2 positive learning rates"
    if problem := check_seeds(args.tune_seeds, args.seeds):
        return problem
    for kind, value in args.margins.items():
        if not value > 0:
            return (
                f"{margin_flag(spec, kind)} {value}: the equivalence margin must be a "
                "positive number"
            )
    if not 0 < args.confidence < 1:
        return f"--confidence {args.confidence}: allowed: a level strictly between 0 and 1"
    if args.max_extensions < 0:
        return f"--max-extensions {args.max_extensions}: allowed: an int ≥ 0"
    if args.success is not None and not 0 < args.success <= 1:
        return f"--success {args.success}: allowed: an accuracy in (0, 1]"
    if args.pilot is not None and not args.pilot > 0:
        return f"--pilot {args.pilot}: allowed: a positive number of steps"
    if args.pilot is not None and (args.add_to or args.budget_from):
        return "--pilot runs alone: not with --add-to or --budget-from"
    return None


def protocol(args: argparse.Namespace) -> dict[str, Any]:
    """What a study's numbers depend on besides its cells: cells join one report, and a pilot
    gives a study its budget, only where all of it is the same."""
    spec: Spec = args.spec
    margins = (
        {"margin": args.margins[next(iter(spec.margins))]}
        if len(spec.margins) == 1
        else {f"margin_{k}": v for k, v in args.margins.items()}
    )
    return {
        "preset": args.preset,
        spec.arms_flag: args.arms,
        "lrs": args.lrs,
        "tune_seeds": args.tune_seeds,
        "seeds": args.seeds,
        **margins,
        "correction": args.correction,
        "confidence": args.confidence,
        "override": args.override,
        "smoke": args.smoke,
        "max_extensions": args.max_extensions,
        "success": args.success,
        "budget": args.budget,
    }


def preset_overrides(args: argparse.Namespace) -> list[str]:
    """The preset's overrides and, with --smoke, the smoke's, their step count replaced by
    --budget-from's (or --pilot's)."""
    spec: Spec = args.spec
    steps = args.pilot or args.budget
    given = [*spec.presets[args.preset].overrides, *(spec.smoke if args.smoke else [])]
    return [o for o in given if steps is None or not o.startswith("train.max_steps=")] + (
        [f"train.max_steps={steps}"] if steps is not None else []
    )


def base_overrides(cell: Cell, args: argparse.Namespace, data_dir: Path | None) -> list[str]:
    """Every override of a cell's runs: the preset (and smoke), the cell's, how the runs run,
    then --override."""
    return [
        *preset_overrides(args),
        *cell.overrides,
        *run_overrides(args, data_dir),
        *args.override,
    ]


def preset_steps(cell: Cell, args: argparse.Namespace) -> int:
    """The training steps a cell's run trains at the preset's budget (with --smoke: its smoke's),
    as the trainer composes them."""
    from attnzoo.train import compose

    spec: Spec = args.spec
    over = [*spec.presets[args.preset].overrides, *(spec.smoke if args.smoke else [])]
    return int(compose([*over, *cell.overrides, *args.override]).train.max_steps)


# ---- running it -------------------------------------------------------------------------------


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
    runs = tuned_cell(args.out, cell.name, cell.where, base, list(cell.arms), plan(cell, args), env)
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


def cell_numbers(
    cell: Cell, args: argparse.Namespace, runs: dict, groups: list[Group], curves: list[dict]
) -> dict:
    """A cell's comparisons with the reference (uncorrected: the report corrects every cell's
    together) beside its groups and curves, from its groups (run here or read back from a
    committed report's tables)."""
    compared = []
    if any(g.label.get("arm") == args.spec.reference for g in groups):
        for on in cell.measures:
            success = args.success if KIND[on] == "accuracy" else None
            margin = None if success is not None else args.margins[KIND[on]]
            rows = comparisons(
                groups, "arm", on, args.confidence, margin, args.spec.reference, "none", success
            )
            compared += [r | cell.where for r in rows]
    return runs | {"groups": groups, "compared": compared, "curves": curves}


# ---- the budget's pilot ----------------------------------------------------------------------


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
    chosen = set(best.values())
    moving = {at: f"{at[1]} at lr {at[2]:g} ({at[0]})" for at, step in flat.items() if step is None}
    ends = {b["arm"]: b for b in record["best"]}
    best_text = "; ".join(
        f"{a} {lr:g} ({fmt(ends[a]['final'])}, {t})" for (t, a), (_, _, lr) in best.items()
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


def pilot_budget(folder: Path, args: argparse.Namespace) -> int | str:
    """The budget of a committed pilot (--budget-from), or why it cannot give one: its
    protocol must be this run's but for the budget."""
    path = folder / "pilot.json"
    if not path.is_file():
        return f"--budget-from {folder}: no pilot.json there (run --pilot STEPS first)"
    pilot = json.loads(path.read_text())
    mine = protocol(args)
    for key in ("preset", args.spec.arms_flag, "lrs", "override", "smoke"):
        if pilot.get(key) != mine[key]:
            return (
                f"--budget-from {folder}: the pilot's {key} is {pilot.get(key)!r}, this run's "
                f"{mine[key]!r}; allowed: a pilot of this protocol"
            )
    margins = {k: v for k, v in mine.items() if k.startswith("margin")}
    if bad := [k for k, v in margins.items() if pilot.get(k) != v]:
        return (
            f"--budget-from {folder}: the pilot's {bad[0]} is {pilot.get(bad[0])!r}, this run's "
            f"{margins[bad[0]]!r}; allowed: a pilot of this protocol"
        )
    if pilot["budget"] is None:
        return f"--budget-from {folder}: its curves had not flattened (pilot.md); no budget"
    return int(pilot["budget"])


# ---- cells from a committed report (--add-to) --------------------------------------------------

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


def groups_of(rows: list[dict], arms: list[str]) -> list[Group]:
    """The groups of committed per-seed rows (a runs.csv with an arm column), labelled by arm,
    in the order of `arms`."""
    groups = groups_from_rows(rows, by=("arm",))
    for g in groups:
        g.label = {"arm": g.config["arm.name"]}
    return sorted(groups, key=lambda g: arms.index(g.label["arm"]))


# ---- the report -------------------------------------------------------------------------------


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
        f"Every run: `{' '.join(preset_overrides(args))}`"
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


def arm_text(arm: Arm) -> str:
    """`mixer=scaled_dot mixer.sink=learned: a learned sink logit per head`."""
    over = " ".join([f"mixer={arm.mixer}", *arm.options])
    return f"{over}: {arm.about}" if arm.about else over


def arms_text(spec: Spec, names: list[str]) -> str:
    if all(spec.arms[a].mixer == a and not spec.arms[a].options for a in names):
        return ", ".join(names)  # arms that are mixers
    return "; ".join(f"{a} ({arm_text(spec.arms[a])})" for a in names)
