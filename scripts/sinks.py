"""The sink study: does a softmax language model that may put its attention nowhere keep more
rank, and does a plain one grow a first-token sink as Gu et al. (2024, arXiv 2410.10781) report?
One command, tuned and replicated.

Arms (each the trainer's mixer with one option; the reference, `none`, fixed up front):

    none      scaled_dot                      plain softmax: every row sums to 1
    learned   scaled_dot mixer.sink=learned   a logit per head in the softmax's denominator
    zero_kv   scaled_dot mixer.sink=zero_kv   one extra all-zero key and value ("softmax + 1")
    sigmoid   sigmoid                         σ(q·k/√d − log N): no normalisation at all
    gate      scaled_dot mixer.gate=headwise  σ(x W_g) per head on the output (Qiu et al. 2025)
    softpick  softpick                        ReLU(e^s − 1) / Σ|e^s − 1|: rows may sum to < 1

on Tiny Shakespeare at nanoGPT's CPU recipe (`experiment=shakespeare_char`, the mixer study's
task), per arm:

1. tune: `train.lr` over a log-spaced grid on ≥ 2 tuning seeds (default 100, 101), selected on
   whole-split val loss (min); a choice at an edge of a grid of more than two values extends it
   one step (the tuned-study pipeline, attnzoo.tuned);
2. rerun: fresh seeds (default 0-4: the committed pilot's spread of test loss projects that 5
   resolve the margin in this family, attnzoo.studies.seeds_projection) at the arm's chosen learning rate;
3. report: test loss on the held-out test split, per seed and as a Student-t interval; each arm
   against `none`, paired by seed, on test loss (margin --margin, nats, stated before the runs),
   every hypothesis in one family (--correction, default holm); and, at every evaluation of
   every fresh seed, per block: the first-token excess (the first token's share of each row
   above uniform's 1/n_i: 0 uniform, 1 a full sink; the heads' mean and the most sink-like
   head's), the sink share (the share of heads whose mean weight on the first token exceeds
   0.3, Gu et al.'s ε), the mean row sum of the weights (1 for plain softmax) and the rank
   measures, described, not tested (the plain model keeps its rank at this recipe, so there is
   no collapse for an arm to prevent): layers.csv, tables at init and at the end, the figure,
   and the sink measures on a planted sink and its negative, read as the runs are.

Outputs (in --out): sinks.md (the report), sinks.json, runs.csv and tune_runs.csv (every
fresh-seed and tuning run, with its arm), comparisons.csv (the family, raw and adjusted p),
layers.csv (arm, seed, step, block and the statistics), sink_logits.csv (every learned sink
logit at the end), controls.csv (the sink measures on the planted sink and its negative),
sinks.png. Run folders: the arms without an option share the sweeps in
<out>/ (tune/, final/), the others are in <out>/<arm>/; the same command again skips completed
sweeps.

    python scripts/sinks.py --data-dir DATA_DIR --parallel 2      # the CPU study
    python scripts/sinks.py --smoke                               # the pipeline at toy size
    python scripts/sinks.py --preset gpu --data-dir DATA_DIR --parallel 4   # one GPU
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
from pathlib import Path

from attnzoo.analysis.compare import COMPARISON_COLUMNS, comparisons, correct
from attnzoo.analysis.groups import group_row
from attnzoo.analysis.report import protocol_text, write_runs
from attnzoo.analysis.tables import ci_text, fmt, write_csv
from attnzoo.studies import (
    SMOKE_SIZE,
    add_tuned_options,
    data_dir_of,
    has_corpus,
    run_overrides,
    seeds_projection,
    tuned_options_problem,
    tuned_study_price,
    write_smoke_data,
)
from attnzoo.tuned import Arm, CellRuns, Clock, Plan, head_lines, run_cell, seeds_line, tuning_lines

# Seconds per job of --smoke for --dry-run (price divides by the jobs run at a time), measured:
# its --smoke at --parallel 2 on 2 CPU cores: 204 s for 32 jobs and 8 grid extensions.
SMOKE_JOB_S = (
    13.0,
    "measured: its --smoke at --parallel 2 on 2 CPU cores: 204 s for 32 jobs and 8 grid extensions",
)

SUMMARIZE = shlex.quote(os.path.relpath(Path(__file__).resolve().with_name("summarize.py")))
# arm: (mixer, its option, what it is); the first is the reference
ARMS = {
    "none": ("scaled_dot", [], "plain softmax (the reference)"),
    "learned": ("scaled_dot", ["mixer.sink=learned"], "a learned sink logit per head"),
    "zero_kv": ("scaled_dot", ["mixer.sink=zero_kv"], "an all-zero key and value"),
    "sigmoid": ("sigmoid", [], "sigmoid attention, b = −log N"),
    "gate": ("scaled_dot", ["mixer.gate=headwise"], "an output gate per head"),
    "softpick": ("softpick", [], "softpick: rows may sum to less than 1"),
}
DEFAULT_ARMS = list(ARMS)
REFERENCE = "none"
SEEDS = [0, 1, 2, 3, 4]  # fresh seeds: seeds_projection's count from the committed pilot
# The pilot: the first design's fresh-seed runs (none, learned, zero_kv, sigmoid; 3 seeds each,
# the CPU preset), whose spread of test loss sizes the seeds
PILOT = Path(__file__).resolve().parent / "results" / "sinks" / "pilot" / "runs.csv"
ON = "final_test_loss"
PRESETS = {
    "cpu": {
        "overrides": ["experiment=shakespeare_char"],
        "lrs": [1e-3, 2e-3, 4e-3],
        "seconds": 130.0,
        "basis": "the mixer study's Shakespeare runs, 2 CPU cores",
    },
    "gpu": {
        "overrides": ["experiment=shakespeare_char_study_gpu"],
        "lrs": [5e-4, 1e-3, 2e-3],
        "seconds": 65.0,
        "basis": "estimated for one H100",
    },
}
SMOKE = [*SMOKE_SIZE, "model.depth=2"]  # the default measures: the weights are captured
# layers.csv's columns: the metrics.jsonl key of each, per block k (the trainer's default
# train.rank_measures: the weights' statistics are captured with the attention entropy)
STATS = {
    "first_token_excess": "attention/first_token_excess/layer_{k}",
    "first_token_excess_max": "attention/first_token_excess_max/layer_{k}",
    "sink_share": "attention/sink_share/layer_{k}",
    "row_sum": "attention/row_sum/layer_{k}",
    "relative_residual": "rank/relative_residual/layer_{k}",
    "effective_rank": "rank/effective_rank/layer_{k}",
    "stable_rank": "rank/stable_rank/layer_{k}",
    "token_similarity": "rank/token_similarity/layer_{k}",
}
# and where the arm has an output gate, its mean value per block (blank for the others)
GATE_MEAN = ("gate_mean", "attention/gate_mean/layer_{k}")
SHOWN = {
    "first_token_excess": (
        "first-token excess (the heads' mean share of a row's weight on the first token above "
        "uniform's 1/n_i, scaled so that uniform weights read 0 and all weight on the first "
        "token 1)"
    ),
    "first_token_excess_max": "first-token excess of the most sink-like head",
    "sink_share": "sink share (heads with mean first-token weight > 0.3)",
    "row_sum": "mean row sum of the weights",
    "relative_residual": "relative residual (Dong et al.)",
    "effective_rank": "effective rank (Roy & Vetterli)",
}  # report and figure
SINK_MEASURES = ("first_token_excess", "first_token_excess_max", "sink_share")
MARGIN_REASON = "0.05 nats, a 5% change of perplexity, as the mixer study"


def run_arms(args: argparse.Namespace, env: dict[str, str]) -> CellRuns:
    """Tune and rerun every arm at fresh seeds; its jobs and the numbers for the report. The
    groups are labelled by arm (`arm`: the axis every comparison is on)."""
    base = [
        *PRESETS[args.preset]["overrides"],
        *run_overrides(args, args.data_dir),
        *(SMOKE if args.smoke else []),
        *args.override,
    ]
    arms = [Arm(a, ARMS[a][0], tuple(ARMS[a][1])) for a in args.arms]
    plan = Plan(
        args.lrs, args.tune_seeds, args.seeds, args.max_extensions, "val_loss", False, SUMMARIZE
    )
    cell = run_cell(args.out, "", {}, base, arms, plan, env)
    for arm, g in cell.groups.items():
        g.label = {"arm": arm}
    return cell


def hypotheses(args: argparse.Namespace) -> int:
    """The family's size: each arm against the reference, two-sided, against the margin, TOST."""
    return 3 * (len(args.arms) - 1)


def projection(args: argparse.Namespace) -> tuple[int | None, str]:
    """The fresh seeds the committed pilot's spread says resolve ±margin on test loss in this
    family, and a sentence that says so (studies.seeds_projection)."""
    return seeds_projection(
        PILOT, REFERENCE, args.arms, ON, args.margin, args.confidence, hypotheses(args), args.seeds
    )


def layer_rows(cell: CellRuns) -> list[dict]:
    """Every evaluation of every completed fresh seed, per block: the statistics (STATS)."""
    rows = []
    for arm, job in cell.completed():
        seed = job.config.get("train", {}).get("seed")
        for rec in job.records:
            for k in range(1, 1 + int(job.config.get("model", {}).get("depth", 0))):
                values = {s: rec.get(key.format(k=k)) for s, key in STATS.items()}
                # an evaluation that measured the block; a statistic n/a there (no row of its
                # weights sees the first token) is NaN
                if "step" in rec and values["relative_residual"] is not None:
                    values = {s: math.nan if v is None else v for s, v in values.items()}
                    rows.append(
                        {
                            "arm": arm,
                            "seed": seed,
                            "step": rec["step"],
                            "layer": k,
                            **values,
                            GATE_MEAN[0]: rec.get(GATE_MEAN[1].format(k=k)),
                        }
                    )
    return rows


def sink_logits(cell: CellRuns) -> list[dict]:
    """Every learned sink logit at the end of every completed fresh seed (its last checkpoint),
    per block and head: how far training moved them from their init, 0 (= zero_kv's sink)."""
    from attnzoo.checkpoint import read_checkpoint

    rows = []
    for arm, job in cell.completed():
        path = job.folder / "checkpoints" / "last.pt"
        if "mixer.sink=learned" not in ARMS[arm][1] or not path.is_file():
            continue
        state = read_checkpoint(path)["model"]
        for name, value in state.items():
            if name.endswith("mixer.sink_logit"):  # blocks.<i>.mixer.sink_logit, (heads,)
                block = int(name.split(".")[1]) + 1
                rows += [
                    {
                        "arm": arm,
                        "seed": job.config["train"]["seed"],
                        "block": block,
                        "head": h,
                        "logit": float(x),
                    }
                    for h, x in enumerate(value.flatten().tolist())
                ]
    return rows


def ends(rows: list[dict]) -> dict[tuple, dict[str, list[dict]]]:
    """Per (arm, seed): its rows at init (step 0) and at its last evaluated step."""
    out: dict[tuple, dict[str, list[dict]]] = {}
    for key in dict.fromkeys((r["arm"], r["seed"]) for r in rows):
        mine = [r for r in rows if (r["arm"], r["seed"]) == key]
        last = max(r["step"] for r in mine)
        out[key] = {
            "init": [r for r in mine if r["step"] == 0],
            "end": [r for r in mine if r["step"] == last],
        }
    return out


def stat_table(rows: list[dict], stat: str, arms: list[str]) -> list[str]:
    """Rows arm × (init, end), columns the blocks; each cell every seed's value, seed order."""
    by = ends(rows)
    layers = sorted({r["layer"] for r in rows})
    lines = [
        f"| arm | when | {' | '.join(f'block {k}' for k in layers)} |",
        "|---|---|" + "---|" * len(layers),
    ]
    for arm in arms:
        seeds = sorted(s for a, s in by if a == arm)
        for when in ("init", "end"):
            cells = []
            for k in layers:
                vals = [
                    next((r[stat] for r in by[(arm, s)][when] if r["layer"] == k), math.nan)
                    for s in seeds
                ]
                cells.append(" / ".join(f"{v:.2f}" for v in vals))
            lines.append(f"| {arm} | {when} | {' | '.join(cells)} |")
    return lines


def figure(rows: list[dict], arms: list[str], path: Path) -> None:
    """Rows: the statistics SHOWN; columns: the blocks; x: training step; a line per fresh seed,
    a colour per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = sorted({r["layer"] for r in rows}) or [1]
    fig, axes = plt.subplots(
        len(SHOWN),
        len(layers),
        figsize=(3.4 * len(layers), 2.2 * len(SHOWN)),
        squeeze=False,
        sharex=True,
    )
    for i, stat in enumerate(SHOWN):
        for j, k in enumerate(layers):
            ax = axes[i][j]
            for c, arm in enumerate(arms):
                seeds = dict.fromkeys(r["seed"] for r in rows if r["arm"] == arm)
                for n, seed in enumerate(seeds):
                    pts = sorted(
                        (r["step"], r[stat])
                        for r in rows
                        if (r["arm"], r["seed"], r["layer"]) == (arm, seed, k)
                    )
                    ax.plot(
                        *zip(*pts, strict=True),
                        color=f"C{c}",
                        lw=1,
                        alpha=0.8,
                        label=arm if n == 0 else None,
                    )
            ax.grid(alpha=0.3)
            ax.set_title(f"block {k}", fontsize=9)
            if stat in ("sink_share", "row_sum"):  # shares: the whole range, read at a glance
                ax.set_ylim(-0.03, 1.05)
            elif stat.startswith("first_token_excess"):  # 0 uniform, 1 a full sink
                ax.axhline(0, color="0.5", lw=0.8, ls=":")
                ax.set_ylim(-0.2, 1.05)
            if j == 0:
                ax.set_ylabel(SHOWN[stat].split(" (")[0], fontsize=9)
            if i == len(SHOWN) - 1:
                ax.set_xlabel("training step")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle("Fresh seeds, every evaluation: sinks, row sums and rank per block", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def control_rows() -> list[dict]:
    """The sink measures on their controls, read as the runs are read (the trainer's record of
    block 1): a planted first-token sink and the same block with nothing to prefer; a row per
    control and statistic (controls.csv)."""
    from attnzoo.analysis.controls import sink_control_readings

    return [
        {"control": name, "stat": stat, "value": value}
        for name, values in sink_control_readings().items()
        for stat, value in values.items()
    ]


def calibration_lines(controls: list[dict]) -> list[str]:
    by = {(r["control"], r["stat"]): r["value"] for r in controls}
    lines = [
        "The sink measures on controls with a known answer, read as the runs are "
        "(attnzoo.analysis.controls.planted_sink: one causal scaled-dot block whose first token "
        "is a BOS every query's key match prefers, and the same block without it; "
        "`controls.csv`):",
        "",
        "| control | " + " | ".join(SHOWN[s].split(" (")[0] for s in SINK_MEASURES) + " |",
        "|---|" + "---|" * len(SINK_MEASURES),
    ]
    for name in dict.fromkeys(r["control"] for r in controls):
        cells = " | ".join(f"{by[(name, s)]:.3f}" for s in SINK_MEASURES)
        lines.append(f"| {name} | {cells} |")
    return [*lines, ""]


def arms_text(names: list[str]) -> str:
    """`none (mixer=scaled_dot: plain softmax (the reference)); learned (...)`."""
    return "; ".join(
        f"{a} ({' '.join(['mixer=' + ARMS[a][0], *ARMS[a][1]])}: {ARMS[a][2]})" for a in names
    )


def write_report(cell: CellRuns, args: argparse.Namespace, header: dict) -> Path:
    groups = list(cell.groups.values())
    on_loss = comparisons(
        groups, "arm", "test_loss", args.confidence, args.margin, REFERENCE, "none"
    )
    family = correct(on_loss, args.correction)
    layers = layer_rows(cell)
    names = list(args.arms)
    write_runs(cell.runs, args.out / "runs.csv", ("arm",))
    write_runs(cell.tune_runs, args.out / "tune_runs.csv", ("arm",))
    write_csv(args.out / "comparisons.csv", COMPARISON_COLUMNS, family)
    columns = ["arm", "seed", "step", "layer", *STATS, GATE_MEAN[0]]
    write_csv(args.out / "layers.csv", columns, layers)
    controls = control_rows()
    write_csv(args.out / "controls.csv", ["control", "stat", "value"], controls)
    logits = sink_logits(cell)
    write_csv(args.out / "sink_logits.csv", ["arm", "seed", "block", "head", "logit"], logits)
    figure(layers, names, args.out / "sinks.png")
    lines = [
        *head_lines(
            "Sinks: attention that may go nowhere, its rank and its first-token sink",
            header,
            cell.tune_runs,
            cell.runs,
        ),
        f"Every run: `{' '.join(PRESETS[args.preset]['overrides'])}`"
        + (" + the --smoke toy size" if args.smoke else "")
        + (f" + `{' '.join(args.override)}`" if args.override else "")
        + f"; arms: {arms_text(names)}.",
        seeds_line(args.tune_seeds, args.seeds)
        + " Equivalence margin on test loss, fixed before the runs: "
        f"±{args.margin:g} ({MARGIN_REASON}). "
        + projection(args)[1]
        + " The rank measures are described, not tested: the plain model keeps its rank at "
        "this recipe, so there is no collapse for an arm to prevent. "
        + protocol_text(family, args.confidence, args.margin, args.correction)
        + " Per-seed values: `runs.csv`; tuning runs: `tune_runs.csv`; the family: "
        "`comparisons.csv`; every evaluation per block: `layers.csv`; the figure: `sinks.png`.",
        "",
    ]
    if args.smoke:
        lines += ["**Smoke run**: toy sizes; the numbers mean nothing.", ""]
    lines += tuning_lines(
        vars(cell), args.lrs, args.tune_seeds, "whole-split val loss (min)", args.max_extensions
    )
    lines += [
        "## Fresh seeds: test loss, final rank",
        "",
        "Mean [Student-t interval] over the fresh seeds, then every seed; test loss on the "
        "held-out test split (read once at the end of each run), val loss on the whole "
        "validation split, final rank = the last block's relative residual at the end.",
        "",
        "| arm | train.lr | n | test loss | per seed | val loss | final rank | params | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        r = group_row(g, args.confidence)
        seeds = ", ".join(
            f"{fmt(x['seed'])}: {x['final_test_loss']:.3f}"
            for x in g.completed
            if x["final_test_loss"] is not None
        )
        lines.append(
            f"| {g.label['arm']} | {fmt(g.config.get('train.lr'))} | {r['n_seeds']} | "
            f"{ci_text(r['test_loss_mean'], r['test_loss_ci_low'], r['test_loss_ci_high'])} | "
            f"{seeds} | {ci_text(r['val_loss_mean'], r['val_loss_ci_low'], r['val_loss_ci_high'])}"
            f" | {ci_text(r['rank_mean'], r['rank_ci_low'], r['rank_ci_high'])} | "
            f"{fmt(r['params'])} | {r['note']} |"
        )
    lines += ["", f"Against {REFERENCE} (one {args.correction} family):"]
    lines += [f"- {c['sentence']}" for c in family] or ["- nothing to compare"]
    lines += ["", "## Per block, at init and at the end of training", ""]
    lines += calibration_lines(controls)
    for stat in SHOWN:
        lines += [f"{SHOWN[stat]}: every fresh seed (seed order), `a / b / c`.", ""]
        lines += [*stat_table(layers, stat, names), ""]
    if gated := [
        a for a in names if any(r[GATE_MEAN[0]] is not None for r in layers if r["arm"] == a)
    ]:
        lines += ["mean output gate σ(x W_g): every fresh seed (seed order), `a / b / c`.", ""]
        lines += [*stat_table(layers, GATE_MEAN[0], gated), ""]
    if logits:
        values = [r["logit"] for r in logits]
        lines += [
            f"Learned sink logits at the end (`sink_logits.csv`, every block, head and "
            f"fresh seed; 0 at init, which is zero_kv's sink): {min(values):+.3f} to "
            f"{max(values):+.3f}.",
            "",
        ]
    path = args.out / "sinks.md"
    path.write_text("\n".join(lines) + "\n")
    plain = {
        arm: {
            "chosen_lr": cell.chosen.get(arm),
            "extensions": [e for e in cell.extensions if arm in e["mixers"]],
            "groups": [group_row(g, args.confidence) for a, g in cell.groups.items() if a == arm],
        }
        for arm in args.arms
    }
    (args.out / "sinks.json").write_text(
        json.dumps(
            {
                **header,
                "reference": REFERENCE,
                "arm_text": {a: ARMS[a][2] for a in args.arms},
                "arms": plain,
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--arms",
        type=lambda s: s.split(","),
        default=DEFAULT_ARMS,
        help=f"comma-separated, of {', '.join(ARMS)} (default: {','.join(DEFAULT_ARMS)})",
    )
    add_tuned_options(parser, "sinks", "test loss, nats", seeds=SEEDS)
    args = parser.parse_args()
    preset = PRESETS[args.preset]
    args.lrs = args.lrs or preset["lrs"]
    if bad := [a for a in args.arms if a not in ARMS]:
        parser.error(f"--arms: {', '.join(bad)} unknown; allowed: {', '.join(ARMS)}")
    if REFERENCE not in args.arms:
        parser.error(f"--arms must include the reference, {REFERENCE}")
    args.arms = [a for a in ARMS if a in args.arms]  # the reference first
    if problem := tuned_options_problem(args):
        parser.error(problem)
    if args.smoke:
        args.seeds = args.seeds[:2]
    if args.dry_run:
        seconds, basis = SMOKE_JOB_S if args.smoke else (preset["seconds"], preset["basis"])
        print(
            tuned_study_price(
                args, [(f"{len(args.arms)} arms", len(args.arms), seconds, "")], basis
            )
        )
        print(projection(args)[1])
        return
    env = dict(os.environ)
    if args.smoke:
        args.data_dir = args.out / "smoke_data"
        env |= write_smoke_data(args.data_dir)
    else:
        args.data_dir = data_dir_of(args)
        if not has_corpus("shakespeare_char", args.data_dir):
            parser.error(
                f"--data-dir {args.data_dir}: no Tiny Shakespeare there "
                "(tinyshakespeare/input.txt); docs/data.md says how to fetch it"
            )
    clock = Clock()
    args.out.mkdir(parents=True, exist_ok=True)
    cell = run_arms(args, env)
    header = clock.header(
        preset=args.preset,
        lrs=args.lrs,
        tune_seeds=args.tune_seeds,
        seeds=args.seeds,
        margin=args.margin,
        margin_reason=MARGIN_REASON,
        confidence=args.confidence,
        correction=args.correction,
    )
    print(write_report(cell, args, header).read_text())


if __name__ == "__main__":
    main()
