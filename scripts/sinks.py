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
   one step (the tuned-study engine, attnzoo.engine, runs every step; this file is the study's
   spec: its arms, presets and tables of its own);
2. rerun: fresh seeds (default 0-4: the committed pilot's spread of test loss projects that 5
   resolve the margin in this family, attnzoo.studies.seeds_projection) at the arm's chosen
   learning rate;
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
curves.csv (every fresh seed's sampled validation loss), layers.csv (arm, seed, step, block and the statistics), sink_logits.csv (every learned sink
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
import math
from pathlib import Path

from attnzoo.analysis.tables import write_csv
from attnzoo.engine import LOSS, Arm, Cell, Preset, Spec, main
from attnzoo.studies import SMOKE_SIZE, data_dir_of, has_corpus, seeds_projection

ARMS = {
    "none": Arm("none", "scaled_dot", (), "plain softmax (the reference)"),
    "learned": Arm(
        "learned", "scaled_dot", ("mixer.sink=learned",), "a learned sink logit per head"
    ),
    "zero_kv": Arm("zero_kv", "scaled_dot", ("mixer.sink=zero_kv",), "an all-zero key and value"),
    "sigmoid": Arm("sigmoid", "sigmoid", (), "sigmoid attention, b = −log N"),
    "gate": Arm("gate", "scaled_dot", ("mixer.gate=headwise",), "an output gate per head"),
    "softpick": Arm("softpick", "softpick", (), "softpick: rows may sum to less than 1"),
}
REFERENCE = "none"
# The pilot: the first design's fresh-seed runs (none, learned, zero_kv, sigmoid; 3 seeds each,
# the CPU preset), whose spread of test loss sizes the seeds
PILOT = Path(__file__).resolve().parent / "results" / "sinks" / "pilot" / "runs.csv"
ON = "final_test_loss"
PRESETS = {
    "cpu": Preset(
        ("experiment=shakespeare_char",),
        (1e-3, 2e-3, 4e-3),
        130.0,
        "the mixer study's Shakespeare runs, 2 CPU cores",
    ),
    "gpu": Preset(
        ("experiment=shakespeare_char_study_gpu",),
        (5e-4, 1e-3, 2e-3),
        65.0,
        "estimated for one H100",
    ),
}

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


def hypotheses(args: argparse.Namespace) -> int:
    """The family's size: each arm against the reference, two-sided, against the margin, TOST."""
    return 3 * (len(args.arms) - 1)


def projection(args: argparse.Namespace) -> tuple[int | None, str]:
    """The fresh seeds the committed pilot's spread says resolve ±margin on test loss in this
    family, and a sentence that says so (studies.seeds_projection)."""
    return seeds_projection(
        PILOT,
        REFERENCE,
        args.arms,
        ON,
        args.margins["loss"],
        args.confidence,
        hypotheses(args),
        args.seeds,
    )


def layer_rows(cells: list[dict]) -> list[dict]:
    """Every evaluation of every completed fresh seed, per block: the statistics (STATS)."""
    rows = []
    for arm, job in completed(cells):
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


def sink_logits(cells: list[dict]) -> list[dict]:
    """Every learned sink logit at the end of every completed fresh seed (its last checkpoint),
    per block and head: how far training moved them from their init, 0 (= zero_kv's sink)."""
    from attnzoo.checkpoint import read_checkpoint

    rows = []
    for arm, job in completed(cells):
        path = job.folder / "checkpoints" / "last.pt"
        if "mixer.sink=learned" not in ARMS[arm].options or not path.is_file():
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


def completed(cells: list[dict]) -> list[tuple[str, object]]:
    """(arm, job) for every fresh seed that completed, in arm order."""
    return [
        (g.label["arm"], job)
        for c in cells
        for g in c["groups"]
        for job, r in g.members
        if r["status"] == "completed"
    ]


def header(args: argparse.Namespace) -> str:
    return (
        projection(args)[1]
        + " The rank measures are described, not tested: the plain model keeps its rank at "
        "this recipe, so there is no collapse for an arm to prevent."
    )


def report(cells: list[dict], args: argparse.Namespace) -> list[str]:
    """layers.csv, controls.csv, sink_logits.csv and sinks.png, and the report's section per
    block at init and at the end, with the measures' controls."""
    layers = layer_rows(cells)
    names = list(args.arms)
    columns = ["arm", "seed", "step", "layer", *STATS, GATE_MEAN[0]]
    write_csv(args.out / "layers.csv", columns, layers)
    controls = control_rows()
    write_csv(args.out / "controls.csv", ["control", "stat", "value"], controls)
    logits = sink_logits(cells)
    write_csv(args.out / "sink_logits.csv", ["arm", "seed", "block", "head", "logit"], logits)
    figure(layers, names, args.out / "sinks.png")
    lines = ["## Per block, at init and at the end of training", ""]
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
    return lines


def check(args: argparse.Namespace) -> str | None:
    if args.smoke or args.dry_run or has_corpus("shakespeare_char", data_dir_of(args)):
        return None
    return (
        f"--data-dir {data_dir_of(args)}: no Tiny Shakespeare there "
        "(tinyshakespeare/input.txt); docs/data.md says how to fetch it"
    )


def cells(args: argparse.Namespace) -> list[Cell]:
    """One cell: every arm on Tiny Shakespeare, its learning rate chosen on val loss."""
    if not args.smoke:
        args.data_dir = str(data_dir_of(args))
    arms = tuple(ARMS[a] for a in args.arms)
    return [Cell("", {}, arms, choice=LOSS, measures=("test_loss",))]


SPEC = Spec(
    name="sinks",
    title="Sinks: attention that may go nowhere, its rank and its first-token sink",
    doc=__doc__,
    presets=PRESETS,
    arms=ARMS,
    default_arms=list(ARMS),
    reference=REFERENCE,
    cells=cells,
    margins={"loss": 0.05},
    margin_reason="0.05 nats, a 5% change of perplexity, as the mixer study",
    smoke=(*SMOKE_SIZE, "model.depth=2"),  # the default measures: the weights are captured
    # measured: its --smoke at --parallel 2 on 2 CPU cores: 204 s for 32 jobs, 8 grid extensions
    smoke_job_s=(
        13.0,
        "measured: its --smoke at --parallel 2 on 2 CPU cores: 204 s for 32 jobs and 8 grid "
        "extensions",
    ),
    shown=("test_loss",),
    seeds=(0, 1, 2, 3, 4),  # seeds_projection's count from the committed pilot
    check=check,
    header=header,
    report=report,
    files="; every evaluation per block: `layers.csv`; the figure: `sinks.png`",
)

if __name__ == "__main__":
    main(SPEC)
