"""The command line every tuned study takes: the spec's own options, then the arms, the grid,
the seeds, the margins, the analysis (--success), the budget (--pilot, --budget-from), --add-to,
the run options, --out and --smoke; each value checked, a problem refused with the value and
what is allowed (exit 2, nothing written); and the overrides every run of a cell gets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from attnzoo.engine.spec import Cell, Spec
from attnzoo.studies import (
    add_run_options,
    check_seeds,
    default_out,
    float_list,
    int_list,
    run_overrides,
)


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
        f"{' '.join(spec.default_arms)}); compared with the reference, {spec.reference}"
        + ("" if not spec.needs_reference else ", which they must include"),
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
            metavar=kind.upper(),
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
    if spec.needs_reference and spec.reference not in chosen:
        parser.error(f"{flag} must include the reference, {spec.reference}")
    args.arms = [a for a in spec.arms if a in chosen]
    args.margins = {kind: getattr(args, f"margin_{kind}") for kind in spec.margins}
    args.success = getattr(args, "success", None)
    args.budget = None
    if args.preset not in spec.presets:
        parser.error(f"--preset {args.preset}: allowed: {', '.join(spec.presets)} (this study's)")
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
