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
The tuned-study engine (attnzoo.engine) runs every step; this file is the study's spec: its
tasks, presets and claims.

Outputs (in --out): mixer_ablation.md (the report), mixer_ablation.json (its numbers), runs.csv
and tune_runs.csv (every fresh-seed and tuning run: configuration, seed, final values, status),
comparisons.csv (the report's family, raw and adjusted p), curves.csv (the fresh seeds' sampled
validation curves); per task tune-summary/ (the tuning table, selected.*) and report/ (tables
and figures over the fresh seeds).

    python scripts/mixer_ablation.py --data-dir DATA_DIR --parallel 2
    python scripts/mixer_ablation.py --smoke           # the whole pipeline at toy size, ~1 min
    python scripts/mixer_ablation.py --preset gpu --data-dir DATA_DIR --parallel 4  # one GPU

Only the learning rate is tuned; the task's preset sets the rest (flags/--override: every run).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnzoo import MIXERS
from attnzoo.analysis import summarize
from attnzoo.engine import (
    ACCURACY,
    LOSS,
    SUMMARIZE,
    Arm,
    Cell,
    Preset,
    Spec,
    moving_arms,
    parse,
    study,
)
from attnzoo.studies import (
    CORPUS,
    MIXER_STUDY_CLAIMS,
    SMOKE_SIZE,
    STUDY_REFERENCE,
    Clock,
    compared_measures,
    data_dir_of,
    has_corpus,
    mixers_for_task,
    reanalyse,
    study_mixers,
    write_reanalysis,
)

# What each task runs, per preset: its experiment, and what the claim under test needs on top.
TASKS = {
    "cpu": {
        "shakespeare_char": ["experiment=shakespeare_char"],  # nanoGPT's CPU recipe
        # NLP-MetaFormer's IMDB claim is for one block
        "imdb": ["experiment=imdb", "model.depth=1"],
    },
    # about 1.5 hours of one H100, a task at a time (docs/sweeps.md, "GPU presets")
    "gpu": {
        "shakespeare_char": ["experiment=shakespeare_char_study_gpu"],
        "imdb": ["experiment=imdb_gpu"],
    },
}
# What the learning rate is chosen on, per task: the quantity its claim is about.
CHOICE = {"shakespeare_char": LOSS, "imdb": ACCURACY}
GRID = (5e-4, 1e-3, 2e-3, 4e-3)
# The presets' sizes are the tasks' (TASKS); seconds a run, for --dry-run: CPU measured
# (committed runs, 2 cores), GPU estimated (sweeps.md)
PRESETS = {
    "cpu": Preset((), GRID, 130.0, "measured on 2 CPU cores"),
    "gpu": Preset((), GRID, 65.0, "estimated for one H100"),
}
RUN_S = {
    "cpu": {"shakespeare_char": 130.0, "imdb": 45.0},
    "gpu": {"shakespeare_char": 65.0, "imdb": 55.0},
}
# The toy size of --smoke, per task on top of the study's.
SMOKE_TASK = {"imdb": ["task.tokenizer=bpe", "task.bpe_vocab_size=300"]}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", nargs="+", default=list(CHOICE), choices=list(CHOICE))
    parser.add_argument(
        "--reanalyse",
        type=Path,
        nargs="+",
        metavar="RUNS_CSV",
        help="no runs: recompute the comparisons from committed per-seed values "
        "(runs.csv files; a later file's mixers replace an earlier's) into --out",
    )


def check(args: argparse.Namespace) -> str | None:
    if missing := [str(p) for p in args.reanalyse or [] if not p.is_file()]:
        return f"--reanalyse: no such file: {', '.join(missing)} (a study's runs.csv)"
    return None


def cells(args: argparse.Namespace) -> list[Cell]:
    """A cell per task: every mixer that can run it (a language model leaves out the mixers
    that cannot be causal); a task whose corpus is not in --data-dir is skipped."""
    data_dir = data_dir_of(args) if args.data_dir or not args.smoke else None
    out = []
    for task in args.tasks:
        able, left_out = mixers_for_task(task, args.arms)
        smoke = SMOKE_TASK.get(task, []) if args.smoke else []
        skipped = ""
        if data_dir is not None and not args.dry_run and not has_corpus(task, data_dir):
            skipped = (
                f"skipping task {task!r}: its corpus is not in {data_dir} (looked for "
                f"{', '.join(CORPUS[task])}); pass --data-dir"
            )
        out.append(
            Cell(
                task,
                {"task": task},
                tuple(ARMS[m] for m in able),
                (*TASKS[args.preset][task], *smoke),
                CHOICE[task],
                compared_measures(task),
                (RUN_S[args.preset][task], ""),
                f"Left out (cannot run a causal task): {', '.join(left_out)}." if left_out else "",
                skipped,
            )
        )
    if data_dir is not None and not args.dry_run:
        args.data_dir = str(data_dir)
    return out


def claims(cell: dict, args: argparse.Namespace) -> list[str]:
    """Each published claim on this task, read off the report's corrected comparisons with
    scaled-dot, with the arms whose curves had not flattened at this budget."""
    moving = moving_arms(cell, args)
    lines = []
    for _task, sentence, mixers, ref, on in (c for c in MIXER_STUDY_CLAIMS if c[0] == cell["task"]):
        unsettled = [m for m in [ref, *mixers] if m in moving]
        budget = f"; at this budget: {', '.join(unsettled)} not flattened" if unsettled else ""
        lines.append(f'- Claim: "{sentence}" (on {on.replace("_", " ")}{budget})')
        rows = {r["value"]: r["sentence"] for r in cell["family"] if r["on"] == on}
        lines += [f"  - {rows.get(m, f'{m} vs {ref}: not run')}" for m in mixers]
    return ["### Published claims", "", *lines, ""] if lines else []


def figure(results: list[dict], args: argparse.Namespace) -> None:
    """Per task, the tables and figures over the fresh seeds (report/)."""
    for cell in results:
        if cell.get("finals"):
            summarize(
                cell["finals"],
                args.out / cell["task"] / "report",
                compare_axis="mixer" if len(cell["groups"]) > 1 else None,
                margin=args.margins["loss"],  # its comparisons are on the validation loss
                confidence=args.confidence,
                wandb_mode="disabled",
                script=SUMMARIZE,
            )


ARMS = {m: Arm(m, m) for m in MIXERS}
SPEC = Spec(
    name="mixer_ablation",
    title="Mixer ablation: replicated, tuned",
    doc=__doc__,
    presets=PRESETS,
    arms=ARMS,
    default_arms=study_mixers(),
    arms_flag="mixers",
    reference=STUDY_REFERENCE,
    cells=cells,
    # differences a practitioner choosing a mixer acts on
    margins={"loss": 0.05, "accuracy": 0.02},
    margin_reason="the defaults: 0.05 nats is a 5% change of perplexity, 2 points of accuracy "
    "the smallest drop read as a sign of decreasing accuracy",
    smoke=(*SMOKE_SIZE, "model.depth=1", "train.rank_measures=[relative_residual]"),
    # measured: its --smoke on imdb with 3 mixers at --parallel 2 on 2 CPU cores: 61 s, 18 jobs
    smoke_job_s=(
        7.0,
        "measured: its --smoke on imdb with 3 mixers at --parallel 2 on 2 CPU cores: 61 s for "
        "18 jobs",
    ),
    shown=("test_loss", "test_metric"),
    seeds=(0, 1, 2, 3, 4),
    max_extensions=2,
    needs_reference=False,  # `--mixers favor`: a rerun, joined to the study by --reanalyse
    smoke_lrs=(1e-3, 3e-3),
    options=options,
    check=check,
    cell_lines=claims,
    figure=figure,
)


def main() -> None:
    args = parse(SPEC)
    if not args.reanalyse:
        study(args)
        return
    header = {
        "command": Clock().command,
        "margins": args.margins,
        "margin_reason": SPEC.margin_reason,
        "confidence": args.confidence,
        "correction": args.correction,
    }
    result = reanalyse(args.reanalyse, args.margins, args.confidence, args.correction)
    print(write_reanalysis(result, args.out, header).read_text())


if __name__ == "__main__":
    main()
