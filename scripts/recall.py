"""The recall study: multi-query associative recall (MQAR) accuracy against model width and
depth, per mixer, tuned and replicated, in one command (Zoology's Figure 2, Arora et al. 2023;
recall against depth as Wang et al. 2025 measure it).

For each cell (width, depth) of the grid and each mixer (default: scaled_dot, linear, retention,
mamba2, gla and deltanet; the causal mixers only, MQAR is read left to right):

1. tune: `train.lr` over a log-spaced grid on ≥ 2 tuning seeds (default 100, 101), selected on
   the whole validation split's accuracy (max); a choice at an edge of a grid of more than two
   values extends it one step, up to --max-extensions times (the tuned-study engine,
   attnzoo.engine, runs every step);
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
accuracy against width, a panel per depth, every seed a dot and a line through each mixer's
mean, or with --success its share of seeds that succeeded; the validation curves beside).
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
refused. Every tuned study takes --pilot, --budget-from and --add-to (attnzoo.engine); this
file is the study's spec: its cells, presets, mixers and figure.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnzoo.analysis.figures import recall_figure
from attnzoo.engine import ACCURACY, Arm, Cell, Preset, Spec, main
from attnzoo.mixers import causal_mixers
from attnzoo.studies import SMOKE_SIZE, STUDY_REFERENCE, int_list, read_rows

RECALL_MIXERS = ["scaled_dot", "linear", "retention", "mamba2", "gla", "deltanet"]
# What every run of a preset trains: the task at its size, the block, the budget. The CPU preset
# is sized for 2 cores; the GPU preset is Zoology's harder setting (its vocabulary, 16 pairs in
# 128 tokens), estimated for one H100, not measured.
PRESETS = {
    "cpu": Preset(
        (
            "task=mqar",
            "model.mlp=false",
            "train.max_steps=1000",
            "train.batch_size=64",
            "train.eval_every=100",
            "task.val_size=1024",
            "task.test_size=1024",
            "train.rank_measures=[relative_residual]",
        ),
        (1e-3, 3e-3, 1e-2),
        176.0,
        "the committed runs' means per cell, 2 CPU cores",
    ),
    "gpu": Preset(
        (
            "task=mqar",
            "task.vocab_size=8192",
            "task.seq_len=128",
            "task.num_kv_pairs=16",
            "model.mlp=false",
            "train.max_steps=4000",
            "train.batch_size=128",
            "train.eval_every=250",
            "train.rank_measures=[relative_residual]",
        ),
        (3e-4, 1e-3, 3e-3, 1e-2),
        120.0,
        "estimated for one H100",
    ),
}
# each preset's cells: widths × depths
GRID = {"cpu": ([64], [2]), "gpu": ([64, 128, 256, 512], [2, 4])}
# the committed report of the defaults' protocol (the screen: six mixers, 3 seeds, four cells)
COMMITTED = Path(__file__).resolve().parent / "results" / "recall" / "screen"


def cell_seconds(width: int, depth: int, preset: str) -> tuple[float, str]:
    """Seconds per run of a cell, and how they were had. CPU preset: the committed report's mean
    over the cell's runs where it has the cell, else its width-64, depth-2 figure scaled by
    width × depth (a rough guide: depth 1 ran 0.65× depth 2, width 32 0.49× width 64). GPU
    preset: one estimate for every cell (small models leave a GPU mostly idle)."""
    seconds = PRESETS[preset].seconds
    if preset != "cpu":
        return seconds, "estimated"
    if (COMMITTED / "runs.csv").exists():
        rows = [
            r
            for name in ("runs.csv", "tune_runs.csv")
            for r in read_rows(COMMITTED / name)
            if (r["width"], r["depth"]) == (str(width), str(depth)) and r.get("wall_s")
        ]
        if rows:
            return sum(float(r["wall_s"]) for r in rows) / len(rows), "measured"
    return seconds * width / 64 * depth / 2, "scaled"


def options(parser: argparse.ArgumentParser) -> None:
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


def check(args: argparse.Namespace) -> str | None:
    widths, depths = GRID[args.preset]
    args.widths, args.depths = args.widths or widths, args.depths or depths
    if args.smoke:
        args.widths, args.depths = [16], args.depths[:1]
    for name in ("widths", "depths"):
        if bad := [v for v in getattr(args, name) if v < 1]:
            return f"--{name}: {bad} are not positive; allowed: ints ≥ 1"
    if bad := [w for w in args.widths if w % 4]:
        return f"--widths: {bad} are not multiples of the model's 4 heads"
    return None


def cells(args: argparse.Namespace) -> list[Cell]:
    """A cell per (width, depth), depth by depth; every mixer in each, chosen on val accuracy
    and compared on test accuracy."""
    arms = tuple(ARMS[m] for m in args.arms)
    return [
        Cell(
            f"dim{w}_depth{d}",
            {"width": w, "depth": d},
            arms,
            (f"model.dim={w}", f"model.depth={d}"),
            ACCURACY,
            ("test_metric",),
            cell_seconds(w, d, args.preset),
        )
        for d in args.depths
        for w in args.widths
    ]


def figure(results: list[dict], args: argparse.Namespace) -> None:
    recall_figure(results, "test_metric", args.out / "recall.png", args.success)


# MQAR is read left to right: the causal mixers, the default ones first
ARMS = {m: Arm(m, m) for m in dict.fromkeys([*RECALL_MIXERS, *causal_mixers()])}
SPEC = Spec(
    name="recall",
    title="Recall: MQAR accuracy against width and depth",
    doc=__doc__,
    presets=PRESETS,
    arms=ARMS,
    default_arms=RECALL_MIXERS,
    arms_flag="mixers",
    reference=STUDY_REFERENCE,
    cells=cells,
    margins={"accuracy": 0.05},
    margin_reason="5 points of accuracy: a difference in recall a reader of the figure acts on",
    smoke=(
        *(o for o in SMOKE_SIZE if not o.startswith("model.dim=")),  # the cell sets the width
        "task.num_kv_pairs=2",
        "task.vocab_size=16",
        "task.val_size=8",
        "task.test_size=8",
    ),
    # measured: its --smoke at --parallel 2 on 2 CPU cores: 119 s for 48 jobs, 6 extensions
    smoke_job_s=(
        5.0,
        "measured: its --smoke at --parallel 2 on 2 CPU cores: 119 s for 48 jobs and 6 grid "
        "extensions",
    ),
    shown=("test_metric",),
    success=True,
    options=options,
    check=check,
    figure=figure,
    files="; the figure: `recall.png`",
    corpora=False,  # MQAR is drawn, not read
)

if __name__ == "__main__":
    main(SPEC)
