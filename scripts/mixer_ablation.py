"""The replicated, tuned mixer study on real data (the NLP-MetaFormer experiments), one command.

For each task (`shakespeare_char` at nanoGPT's CPU recipe, `experiment=shakespeare_char`; `imdb`
with one block, `experiment=imdb model.depth=1`, the NLP-MetaFormer setting), every mixer that
can run it (a language model leaves out the mixers that cannot be causal; the report says so):

1. tune: a log-spaced `train.lr` grid per mixer on ≥ 2 tuning seeds (default 100, 101; disjoint
   from the fresh seeds), one `python -m attnzoo.train -m` sweep; a choice at an edge of the grid
   extends it one step beyond that edge (the grid's factor), up to --max-extensions times;
2. select: per mixer, the learning rate with the best mean over the tuning seeds of the quantity
   the claim is about, on the whole validation split: accuracy (max) on IMDB, loss (min) on
   Shakespeare (attnzoo.analysis.selection.select);
3. rerun: fresh seeds (default 0-4) at each mixer's chosen learning rate, one sweep per chosen
   value (the mixers that chose it);
4. report: the groups over the fresh seeds with Student-t intervals on the held-out test split
   (read once at the end of each run), each mixer against the reference fixed up front,
   scaled-dot (paired by seed, on test; both tasks, test loss and test accuracy), and the
   published claims read off those comparisons. Every hypothesis a verdict rests on (each
   comparison's two-sided test, its test against the margin and its TOST) is in one family
   (--correction, default holm). Verdicts: worse/better than scaled-dot, by more than the
   margin, within margin (--margin-accuracy, --margin-loss, stated before any number), or
   not resolved with n seeds (with the smallest difference those seeds could resolve).
   `--reanalyse RUNS_CSV...` recomputes them from committed per-seed values, no runs.

Every run goes through `python -m attnzoo.train -m` (--parallel N: `hydra/launcher=parallel`),
in <out>/<task>/tune, tune-ext<k>/lr_<value> and final/lr_<value>; the same command again skips
completed sweeps and resumes the others. A task whose corpus is not in --data-dir is skipped.

Outputs (in --out): mixer_ablation.md (the report), mixer_ablation.json (its numbers), runs.csv
and tune_runs.csv (every fresh-seed and tuning run: configuration, seed, final values, status),
comparisons.csv (the report's family, raw and adjusted p); per task tune-summary/ (the tuning
table, selected.*) and report/ (tables and figures over the fresh seeds).

    python scripts/mixer_ablation.py --data-dir DATA_DIR --parallel 2
    python scripts/mixer_ablation.py --smoke           # the whole pipeline at toy size, ~1 min
    python scripts/mixer_ablation.py --preset gpu --data-dir DATA_DIR --parallel 4  # one GPU

Only the learning rate is tuned; the task's preset sets the rest (flags/--override: every run).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
from pathlib import Path

from attnzoo import MIXERS
from attnzoo.analysis import summarize
from attnzoo.analysis.compare import COMPARISON_COLUMNS, correct
from attnzoo.analysis.convergence import flattened, flattened_text
from attnzoo.analysis.groups import group_row
from attnzoo.analysis.report import protocol_text, write_runs
from attnzoo.analysis.tables import ci_text, fmt, write_csv
from attnzoo.studies import (
    CORPUS,
    MARGIN_KIND,
    MIXER_STUDY_CLAIMS,
    SMOKE_SIZE,
    STUDY_REFERENCE,
    add_run_options,
    against_reference,
    check_seeds,
    data_dir_of,
    default_out,
    float_list,
    has_corpus,
    int_list,
    mixers_for_task,
    reanalyse,
    run_overrides,
    study_mixers,
    tuned_study_price,
    write_reanalysis,
    write_smoke_data,
)
from attnzoo.tuned import Arm, Clock, Plan, head_lines, run_cell, seeds_line, tuning_lines

# Seconds per job of --smoke for --dry-run (price divides by the jobs run at a time), measured:
# its --smoke on imdb with 3 mixers at --parallel 2 on 2 CPU cores: 61 s for 18 jobs.
SMOKE_JOB_S = (
    7.0,
    "measured: its --smoke on imdb with 3 mixers at --parallel 2 on 2 CPU cores: 61 s for 18 jobs",
)

# How selected.sh calls the summary, from where this runs.
SUMMARIZE = shlex.quote(os.path.relpath(Path(__file__).resolve().with_name("summarize.py")))
# What each task runs: its preset, and what the claim under test needs on top of it.
TASKS = {
    "shakespeare_char": ["experiment=shakespeare_char"],  # nanoGPT's CPU recipe
    "imdb": ["experiment=imdb", "model.depth=1"],  # NLP-MetaFormer's IMDB claim is for one block
}
# --preset gpu: about 1.5 hours of one H100, a task at a time (docs/sweeps.md, "GPU presets")
GPU_TASKS = {
    "shakespeare_char": ["experiment=shakespeare_char_study_gpu"],
    "imdb": ["experiment=imdb_gpu"],
}
# What the learning rate is selected on, per task: the quantity its claim is about, on the
# whole validation split (summary key, maximize, as the report states it).
SELECT_BY = {
    "shakespeare_char": ("val_loss", False, "whole-split val loss (min)"),
    "imdb": ("metric", True, "whole-split val accuracy (max)"),
}
# Seconds a run, for --dry-run: CPU measured (committed runs, 2 cores), GPU estimated (sweeps.md)
RUN_S = {
    "cpu": ({"shakespeare_char": 130.0, "imdb": 45.0}, "measured on 2 CPU cores"),
    "gpu": ({"shakespeare_char": 65.0, "imdb": 55.0}, "estimated for one H100"),
}
ON_TEXT = {"test_loss": "test loss", "test_metric": "test accuracy"}
# Why the default margins are what they are: differences a practitioner choosing a mixer acts on.
MARGIN_REASON = (
    "the defaults: 0.05 nats is a 5% change of perplexity, 2 points of accuracy the "
    "smallest drop read as a sign of decreasing accuracy"
)
# The toy size of --smoke: the whole pipeline in seconds.
SMOKE = [*SMOKE_SIZE, "model.depth=1", "train.rank_measures=[relative_residual]"]
SMOKE_TASK = {"imdb": ["task.tokenizer=bpe", "task.bpe_vocab_size=300"]}


def base_overrides(task: str, args: argparse.Namespace, data_dir: Path) -> list[str]:
    smoke = SMOKE + SMOKE_TASK.get(task, []) if args.smoke else []
    preset = (GPU_TASKS if args.preset == "gpu" else TASKS)[task]
    return [*preset, *run_overrides(args, data_dir), *smoke, *args.override]


def run_task(task: str, args: argparse.Namespace, data_dir: Path, env: dict[str, str]) -> dict:
    """Tune, select, rerun at fresh seeds and summarise one task; the numbers for the report."""
    by, maximize, _ = SELECT_BY[task]
    mixers, left_out = mixers_for_task(task, args.mixers)
    if left_out:
        print(f"{task}: {', '.join(left_out)} cannot run a causal task, left out")
    plan = Plan(args.lrs, args.tune_seeds, args.seeds, args.max_extensions, by, maximize, SUMMARIZE)
    base = base_overrides(task, args, data_dir)
    arms = [Arm(m, m) for m in mixers]
    cell = run_cell(args.out, task, {"task": task}, base, arms, plan, env)
    out = vars(cell) | {"task": task, "left_out": left_out, "groups": []}
    if not cell.finals:
        return out | {"error": "no LR was selected"}
    summarize(
        cell.finals,
        args.out / task / "report",
        compare_axis="mixer" if len(mixers) > 1 else None,
        margin=args.margin_loss,  # its comparisons are on the validation loss
        confidence=args.confidence,
        wandb_mode="disabled",
        script=SUMMARIZE,
    )
    groups = list(cell.groups.values())
    return out | {
        "groups": groups,
        "table": [group_row(g, args.confidence) for g in groups],
        "flat": {g.config.get("mixer.name"): flattened(g) for g in groups},
        "vs_reference": against_reference(groups, task, margins(args), args.confidence),
        "jobs": len(cell.runs),
    }


def margins(args: argparse.Namespace) -> dict[str, float]:  # by studies.MARGIN_KIND
    return {"loss": args.margin_loss, "accuracy": args.margin_accuracy}


# ---- the report --------------------------------------------------------------------------------


def claim_lines(result: dict) -> list[str]:
    """Each published claim, read off the report's corrected comparisons with scaled-dot."""
    lines = []
    for _task, sentence, mixers, ref, on in (
        c for c in MIXER_STUDY_CLAIMS if c[0] == result["task"]
    ):
        moving = [m for m in [ref, *mixers] if result["flat"].get(m, {}).get("flattened") is False]
        budget = f"; at this budget: {', '.join(moving)} not flattened" if moving else ""
        lines.append(f'- Claim: "{sentence}" (on {ON_TEXT[on]}{budget})')
        rows = {r["value"]: r["sentence"] for r in result["vs_reference"].get(on, [])}
        lines += [f"  - {rows.get(m, f'{m} vs {ref}: not run')}" for m in mixers]
    return lines


def task_section(result: dict, args: argparse.Namespace) -> list[str]:
    task = result["task"]
    lines = [f"## {task}", ""]
    if "skipped" in result:
        return lines + [result["skipped"], ""]
    cfg = result["groups"][0].config if result["groups"] else {}
    steps, batch, ctx = (
        cfg.get(k) for k in ("train.max_steps", "train.batch_size", "task.seq_len")
    )
    lines += [
        f"Preset and overrides (every run): "
        f"`{' '.join((GPU_TASKS if args.preset == 'gpu' else TASKS)[task])}`"
        + (" + the --smoke toy size" if args.smoke else "")
        + (f" + `{' '.join(args.override)}`" if args.override else "")
        + ".",
        f"Budget per run: {steps} steps of batch {batch}, context {ctx}; width "
        f"{cfg.get('model.dim')}, depth {cfg.get('model.depth')}, {cfg.get('model.heads')} heads. "
        f"{result.get('jobs', 0)} fresh-seed runs."
        + (
            f" Left out (cannot run a causal task): {', '.join(result['left_out'])}."
            if result.get("left_out")
            else ""
        ),
        "",
    ]
    on, cap = SELECT_BY[task][2], args.max_extensions
    lines += tuning_lines(result, args.lrs, args.tune_seeds, on, cap)
    lines += [
        f"### Fresh seeds {', '.join(map(str, args.seeds))} at the chosen learning rates",
        "",
        f"Mean over the completed seeds [{args.confidence:.0%} Student-t interval]. Test loss "
        "and test metric are on the held-out test split (the whole split, read once at the end "
        "of each run, never used for a choice); val loss is on the whole validation split. "
        "flattened: whether the sampled val loss moved by less than the seed sd over the last "
        "fifth of training (where no, the numbers hold at this budget, not at convergence).",
        "",
        "| mixer | train.lr | n_seeds | seeds | test loss | test metric | val loss | final rank "
        "| flattened | params | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, g in zip(result["table"], result["groups"], strict=True):
        metric = (f"{r['metric']} " if r["metric"] else "") + ci_text(
            r["test_metric_mean"], r["test_metric_ci_low"], r["test_metric_ci_high"]
        )
        lines.append(
            f"| {g.config.get('mixer.name')} | {fmt(g.config.get('train.lr'))} | "
            f"{r['n_seeds']} | {r['seeds']} | "
            f"{ci_text(r['test_loss_mean'], r['test_loss_ci_low'], r['test_loss_ci_high'])} | "
            f"{metric} | "
            f"{ci_text(r['val_loss_mean'], r['val_loss_ci_low'], r['val_loss_ci_high'])} | "
            f"{ci_text(r['rank_mean'], r['rank_ci_low'], r['rank_ci_high'])} | "
            f"{flattened_text(result['flat'][g.config.get('mixer.name')])} | "
            f"{fmt(r['params'])} | {r['note']} |"
        )
    lines += ["", f"### Against {STUDY_REFERENCE} (held-out test)", ""]
    for on, rows in result["vs_reference"].items():
        lines += [f"On {ON_TEXT[on]} (margin ±{margins(args)[MARGIN_KIND[on]]:g}):"]
        lines += [f"- {c['sentence']}" for c in rows] or ["- nothing to compare"]
        lines += [""]
    lines += ["### Published claims", ""] + claim_lines(result) + [""]
    return lines


def write_report(results: list[dict], args: argparse.Namespace, header: dict) -> Path:
    family = correct(
        [r for t in results for rows in t.get("vs_reference", {}).values() for r in rows],
        args.correction,
    )
    write_runs([r for t in results for r in t.get("runs", [])], args.out / "runs.csv")
    write_runs([r for t in results for r in t.get("tune_runs", [])], args.out / "tune_runs.csv")
    write_csv(args.out / "comparisons.csv", ["task", *COMPARISON_COLUMNS], family)
    lines = [
        *head_lines(
            "Mixer ablation: replicated, tuned",
            header,
            [r for t in results for r in t.get("tune_runs", [])],
            [r for t in results for r in t.get("runs", [])],
        ),
        "",
        f"Equivalence margins, fixed before the runs: ±{args.margin_loss:g} loss "
        f"(nats), ±{args.margin_accuracy:g} accuracy ({MARGIN_REASON}). "
        + protocol_text(family, args.confidence, 0.0, args.correction).replace("±0", "the margin")
        + " Per-seed values: `runs.csv`; every tuning run: `tune_runs.csv`; every comparison "
        "with raw and adjusted p: `comparisons.csv`.",
        seeds_line(args.tune_seeds, args.seeds) + f" Mixers: {', '.join(args.mixers)}.",
        "",
    ]
    if args.smoke:
        lines += ["**Smoke run**: toy sizes and synthetic data; the numbers mean nothing.", ""]
    for result in results:
        lines += task_section(result, args)
    path = args.out / "mixer_ablation.md"
    path.write_text("\n".join(lines) + "\n")
    plain = [
        {
            "task": r["task"],
            **({"skipped": r["skipped"]} if "skipped" in r else {}),
            "chosen_lr": r.get("chosen", {}),
            "selected_on": SELECT_BY[r["task"]][2],
            "extensions": r.get("extensions", []),
            "groups": r.get("table", []),
        }
        for r in results
    ]
    (args.out / "mixer_ablation.json").write_text(
        json.dumps({**header, "tasks": plain}, indent=2, default=str) + "\n"
    )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--mixers", nargs="+", default=study_mixers(), choices=list(MIXERS))
    parser.add_argument(
        "--lrs",
        type=float_list,
        default=[5e-4, 1e-3, 2e-3, 4e-3],
        help="the train.lr grid (comma-separated; default 5e-4,1e-3,2e-3,4e-3)",
    )
    parser.add_argument(
        "--tune-seeds",
        type=int_list,
        default=[100, 101],
        help="≥ 2, disjoint from --seeds (default 100,101)",
    )
    parser.add_argument(
        "--max-extensions",
        type=int,
        default=2,
        help="times the grid grows one step past an edge choice (default 2)",
    )
    parser.add_argument(
        "--seeds",
        type=int_list,
        default=[0, 1, 2, 3, 4],
        help="fresh seeds at the chosen LR (default 0,1,2,3,4)",
    )
    parser.add_argument(
        "--margin-loss",
        type=float,
        default=0.05,
        help="equivalence margin on the validation loss, nats (default 0.05)",
    )
    parser.add_argument(
        "--margin-accuracy",
        type=float,
        default=0.02,
        help="equivalence margin on accuracy (default 0.02: 2 points)",
    )
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--correction", choices=("holm", "bonferroni", "none"), default="holm")
    add_run_options(parser)
    parser.add_argument(
        "--out",
        type=Path,
        default=default_out("mixer_ablation"),
        help="report folder (default results/mixer_ablation/)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the whole pipeline at toy size: 3 steps, 2 LRs, tuning seeds "
        "100,101, fresh seeds 0,1, synthetic data unless --data-dir",
    )
    parser.add_argument(
        "--reanalyse",
        type=Path,
        nargs="+",
        metavar="RUNS_CSV",
        help="no runs: recompute the comparisons from committed per-seed values "
        "(runs.csv files; a later file's mixers replace an earlier's) "
        "into --out",
    )
    args = parser.parse_args()
    clock = Clock()
    if missing := [str(p) for p in args.reanalyse or [] if not p.is_file()]:
        parser.error(f"--reanalyse: no such file: {', '.join(missing)} (a study's runs.csv)")
    if args.reanalyse:
        header = {
            "command": clock.command,
            "margins": margins(args),
            "margin_reason": MARGIN_REASON,
            "confidence": args.confidence,
            "correction": args.correction,
        }
        result = reanalyse(args.reanalyse, margins(args), args.confidence, args.correction)
        print(write_reanalysis(result, args.out, header).read_text())
        return
    env = dict(os.environ)
    if args.smoke:
        if args.lrs == parser.get_default("lrs"):
            args.lrs = [1e-3, 3e-3]
        if args.seeds == parser.get_default("seeds"):
            args.seeds = [0, 1]
        args.tune_seeds = args.tune_seeds[:2]
        if args.data_dir is None and not args.dry_run:
            args.data_dir = str(args.out / "smoke_data")
            env |= write_smoke_data(Path(args.data_dir))
            env["ATTNZOO_CACHE_DIR"] = str(args.out / "smoke_cache")  # its tokenizer, not yours
    if len(args.lrs) < 2:
        parser.error("the study needs ≥ 2 learning rates (--lrs)")
    if problem := check_seeds(args.tune_seeds, args.seeds):
        parser.error(problem)
    if args.dry_run:
        seconds, basis = SMOKE_JOB_S if args.smoke else RUN_S[args.preset]
        cells = [
            (
                task,
                len(mixers_for_task(task, args.mixers)[0]),
                seconds if args.smoke else seconds[task],
                "",
            )
            for task in args.tasks
        ]
        print(tuned_study_price(args, cells, basis))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    data_dir = data_dir_of(args)
    results = []
    for task in args.tasks:
        if not has_corpus(task, data_dir):
            msg = (
                f"skipping task {task!r}: its corpus is not in {data_dir} (looked for "
                f"{', '.join(CORPUS[task])}); pass --data-dir"
            )
            print(msg)
            results.append({"task": task, "skipped": msg})
            continue
        results.append(run_task(task, args, data_dir, env))
    header = clock.header(
        preset=args.preset,
        lrs=args.lrs,
        tune_seeds=args.tune_seeds,
        seeds=args.seeds,
        margin_loss=args.margin_loss,
        margin_accuracy=args.margin_accuracy,
    )
    path = write_report(results, args, header)
    print(path.read_text())


if __name__ == "__main__":
    main()
