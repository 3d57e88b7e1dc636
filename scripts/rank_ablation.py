"""The rank-collapse ablation, trained, with seeds: which residual variants keep rank through depth,
for each mixer, by which measures, and at what validation loss. One command.

Three `python -m attnzoo.train -m experiment=rank_ablation` sweeps (the preset: Tiny Shakespeare
characters, width 64, depth 4; every collapse measure logged per layer at step 0 and at each
evaluation):

    grid      every mixer x model.residual (none, add, scaled, rezero, layerscale, denseformer,
              attnres) x model.mlp on/off x seeds
    deepnorm  model=deepnorm model.residual=deepnorm (post-norm, so not in the pre-norm grid)
    no_norm   model.residual=none,add x model.norm=none: the third switch of the skip/MLP/norm
              ablation

For every configuration (mixer, residual, MLP, norm) and every hidden-state measure, the report
takes the share of layer 0's distance from collapse that the last block keeps, per seed, on the
run's fixed probe batch: (m_last − c) / (m_0 − c) with c the measure's collapse value (0 for the
relative residual, 1 for effective and stable rank, 1 for token similarity), so a last layer at
stable rank 1 is collapsed whatever the embedding's stable rank; n/a when layer 0 is already at
c. Over the seeds, its mean and Student-t interval give the verdict, a rule fixed before any run
(attnzoo.analysis.verdicts): **kept** when the interval's lower end is ≥ KEPT, **collapsed**
when its upper end is ≤ COLLAPSED, **partial** otherwise (with one seed the mean decides, and
says so).
Attention entropy is reported as a value (n/a for pooling and identity).

Outputs (in --out): rank_ablation.md (command, machine, wall time, seeds, budget, the verdict
matrices at init and after training, validation loss, every configuration), rank_ablation.csv
and .json (the same numbers), runs.csv (one row per job: its configuration, seed, final values
and status), runs_layers.csv (per job, at init and trained, every measure at every layer from
layer 0 and the share kept: every number each share and verdict is computed from),
rank_ablation_<measure>.png (each measure through depth, init and
trained, one line per residual variant, one panel per mixer). Running the command again skips
the sweeps whose jobs all completed and resumes the others.

    python scripts/rank_ablation.py --parallel 2                 # 900 jobs (9 mixers, 5 seeds)
    python scripts/rank_ablation.py --smoke                      # toy size, synthetic data, ~1 min
    python scripts/rank_ablation.py --preset gpu --parallel 16 --data-dir DATA_DIR  # depth 8, one GPU
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from attnzoo import MIXERS
from attnzoo.analysis.figures import plot_rank_ablation
from attnzoo.analysis.groups import group_jobs
from attnzoo.analysis.report import write_runs
from attnzoo.analysis.runs import find_sweep_jobs, get, group_choice, row, shared_config
from attnzoo.analysis.tables import CSV_SPEC, ci_text, fmt
from attnzoo.analysis.verdicts import (
    COLLAPSED,
    KEPT,
    SPREAD,
    RankConfig,
    rank_config,
    verdict,
    write_layers,
)
from attnzoo.studies import (
    SMOKE_SIZE,
    add_run_options,
    default_out,
    in_zoo_order,
    int_list,
    machine,
    price,
    run_overrides,
    study_mixers,
    sweep,
    write_smoke_data,
)

# Seconds per job of --smoke for --dry-run (price divides by the jobs run at a time), measured:
# its --smoke at --parallel 2 on 2 CPU cores: 71 s for 24 jobs.
SMOKE_JOB_S = (6.0, "measured: its --smoke at --parallel 2 on 2 CPU cores: 71 s for 24 jobs")

RESIDUALS = ["none", "add", "scaled", "rezero", "layerscale", "denseformer", "attnres"]
# Seconds per job, start-up included, for --dry-run: on CPU measured (900 runs in 4495 s at
# --parallel 2 on 2 cores, torch 2.13); on one H100 the estimate of docs/sweeps.md (not measured).
RUN_S = {"cpu": (10.0, "measured on 2 CPU cores"), "gpu": (30.0, "estimated for one H100")}
SMOKE = [*SMOKE_SIZE, "model.depth=2"]  # every measure, at a toy size


def mlp_values(args: argparse.Namespace) -> list[bool]:
    return [True] if args.smoke else [True, False]


def sweeps(args: argparse.Namespace) -> dict[str, tuple[list[str], int]]:
    """Each sweep's own overrides and its number of jobs."""
    per_variant = len(args.mixers) * len(mlp_values(args)) * len(args.seeds)
    return {
        "grid": ([f"model.residual={','.join(args.residuals)}"], per_variant * len(args.residuals)),
        "deepnorm": (["model=deepnorm", "model.residual=deepnorm"], per_variant),
        "no_norm": (["model.residual=none,add", "model.norm=none"], per_variant * 2),
    }


# the scope every run shares, as the results pages state it (name -> resolved-config key)
SCOPE = {
    "task": "task.name",
    "dim": "model.dim",
    "depth": "model.depth",
    "heads": "model.heads",
    "seq_len": "task.seq_len",
    "batch_size": "train.batch_size",
    "max_steps": "train.max_steps",
    "lr": "train.lr",
}


def configs(
    folders: list[Path], confidence: float
) -> tuple[list[RankConfig], list[dict], dict[str, Any]]:
    """Every configuration of the sweeps in `folders` (those that exist), with its verdicts; one
    row per job (runs.csv; job names start with their sweep's); and the scope all jobs share."""
    jobs = find_sweep_jobs([folder for folder in folders if folder.is_dir()])
    rows = [row(j) for j in jobs]
    groups, _ = group_jobs(jobs, rows)
    return [rank_config(g, confidence) for g in groups], rows, shared_config(jobs, SCOPE)


# ---- the report ---------------------------------------------------------------------------------


def _variants(cs: list[RankConfig]) -> list[str]:
    order = RESIDUALS + ["deepnorm"] + [f"{r}, no norm" for r in RESIDUALS]
    present = {c.variant for c in cs}
    return [v for v in order if v in present] + sorted(present - set(order))


def _mixers(cs: list[RankConfig]) -> list[str]:
    return in_zoo_order(sorted({c.mixer for c in cs}))


def matrix_cell(c: RankConfig | None, when: str) -> str:
    """`kept: res, sim · partial: erank · collapsed: srank`, or `kept by all 4`."""
    if c is None:
        return "not run"
    by: dict[str, list[str]] = {}
    for name, short in SPREAD.items():
        v = verdict(c.shares[when, name]).removesuffix(" (1 seed)")
        by.setdefault(v, []).append(short)
    if len(by) == 1:
        (v,) = by
        return f"{v} by all {len(SPREAD)}" if v != "n/a" else "n/a"
    return " · ".join(
        f"{v}: {', '.join(by[v])}" for v in ("kept", "partial", "collapsed", "n/a") if v in by
    )


def matrix(cs: list[RankConfig], mlp: bool, cell) -> list[str]:
    mixers = _mixers(cs)
    at = {(c.mixer, c.variant): c for c in cs if c.mlp == mlp}
    lines = ["| residual | " + " | ".join(mixers) + " |", "|---|" + "---|" * len(mixers)]
    for v in _variants([c for c in cs if c.mlp == mlp]):
        lines.append(f"| {v} | " + " | ".join(cell(at.get((m, v))) for m in mixers) + " |")
    return lines


def _loss_cell(c: RankConfig | None) -> str:
    if c is None:
        return "not run"
    r = c.row
    return ci_text(r["val_loss_mean"], r["val_loss_ci_low"], r["val_loss_ci_high"])


def full_rows(cs: list[RankConfig]) -> list[dict[str, Any]]:
    rows = []
    for c in cs:
        r = c.row
        row = {
            "mixer": c.mixer,
            "residual": c.residual,
            "mlp": c.mlp,
            "norm": c.norm,
            "n_seeds": r["n_seeds"],
            "seeds": r["seeds"],
            "val_loss_mean": r["val_loss_mean"],
            "val_loss_ci_low": r["val_loss_ci_low"],
            "val_loss_ci_high": r["val_loss_ci_high"],
            "metric": r["metric"],
            "metric_mean": r["metric_mean"],
            "metric_ci_low": r["metric_ci_low"],
            "metric_ci_high": r["metric_ci_high"],
            "params": r["params"],
            "note": r["note"],
        }
        for when in ("init", "trained"):
            for name in [*SPREAD, "attention_entropy"]:
                last = c.last[when, name]
                row[f"{when}_{name}_last_mean"] = last.mean
                row[f"{when}_{name}_last_ci_low"] = last.low
                row[f"{when}_{name}_last_ci_high"] = last.high
                if name in SPREAD:
                    share = c.shares[when, name]
                    row[f"{when}_{name}_kept_mean"] = share.mean
                    row[f"{when}_{name}_kept_ci_low"] = share.low
                    row[f"{when}_{name}_kept_ci_high"] = share.high
                    row[f"{when}_{name}_verdict"] = verdict(share)
        rows.append(row)
    return rows


def write_report(cs: list[RankConfig], args: argparse.Namespace, header: dict[str, Any]) -> Path:
    out: Path = args.out
    first = cs[0].jobs[0].config if cs and cs[0].jobs else {}
    at = lambda k: get(first, k)  # noqa: E731
    n_jobs = sum(len(c.jobs) for c in cs)
    lines = [
        "# Rank collapse ablation: residual variants × mixers, at init and trained",
        "",
        f"Command: `{header['command']}`",
        f"Machine: {header['machine']}",
        f"Wall time: {header['wall_s']:.0f} s (started {header['started']} UTC)",
        "",
        f"Task: {group_choice(first, 'task', [])}, context {at('task.seq_len')}; width "
        f"{at('model.dim')}, depth {at('model.depth')}, {at('model.heads')} heads; "
        f"{at('train.max_steps')} steps of batch {at('train.batch_size')} at train.lr "
        f"{at('train.lr')} (one learning rate for every configuration, not tuned); seeds "
        f"{', '.join(map(str, args.seeds))}; {n_jobs} completed runs in {len(cs)} configurations. "
        f"Preset `experiment=rank_ablation{'_gpu' if args.preset == 'gpu' else ''}`"
        + (f" + `{' '.join(args.override)}`" if args.override else "")
        + (" + the --smoke toy size" if args.smoke else "")
        + ".",
        "",
        "How to read (thresholds fixed before the runs): for each measure of the hidden states, "
        "the share of layer 0's distance from collapse that the last block keeps on the run's "
        "fixed probe batch, (m_last − c) / (m_0 − c) with c the measure's collapse value: 0 for "
        "the relative residual (`res`), 1 for effective rank (`erank`) and stable rank (`srank`: "
        "rank one), 1 for token similarity (`sim`: all tokens equal), i.e. (1 − s_last) / "
        "(1 − s_0). A last layer at the collapse value has share 0 whatever layer 0's value; "
        "n/a when layer 0 is already at it. "
        f"Over the seeds: **kept** when the {args.confidence:.0%} Student-t interval of that share "
        f"lies at or above {KEPT:g}, **collapsed** when it lies at or below {COLLAPSED:g}, "
        "**partial** otherwise. Intervals are Student-t with the sample standard deviation "
        "(ddof = 1). Per-seed values: `runs.csv` (final values), `runs_layers.csv` (every "
        "measure at every layer, layer 0 included, at init and trained, and each seed's share).",
        "",
        "",
    ]
    if args.smoke:
        lines += ["**Smoke run**: toy sizes and synthetic data; the numbers mean nothing.", ""]
    for mlp in (True, False):
        if not any(c.mlp == mlp for c in cs):
            continue
        tag = "MLP on" if mlp else "MLP off"
        lines += [f"## After training, {tag}", ""]
        lines += matrix(cs, mlp, lambda c: matrix_cell(c, "trained")) + [""]
        lines += [f"Validation loss after training, {tag} (mean [interval]):", ""]
        lines += matrix(cs, mlp, _loss_cell) + [""]
    for mlp in (True, False):
        if any(c.mlp == mlp for c in cs):
            tag = "MLP on" if mlp else "MLP off"
            lines += [f"## At init, {tag}", ""]
            lines += matrix(cs, mlp, lambda c: matrix_cell(c, "init")) + [""]
    lines += [
        "## Every configuration",
        "",
        "Share of layer 0's distance from collapse kept by the last block, trained, mean "
        "[interval] (init mean in parentheses); attention entropy of the last block in nats, "
        "trained.",
        "",
        "| mixer | residual | MLP | norm | n | val loss | "
        + " | ".join(SPREAD.values())
        + " | entropy |",
        "|---|---|---|---|---|---|" + "---|" * (len(SPREAD) + 1),
    ]
    for c in sorted(
        cs, key=lambda c: (_mixers(cs).index(c.mixer), not c.mlp, _variants(cs).index(c.variant))
    ):
        cells = []
        for name in SPREAD:
            t, i = c.shares["trained", name], c.shares["init", name]
            cells.append(f"{ci_text(t.mean, t.low, t.high)} ({fmt(i.mean, '.3g')})")
        ent = c.last["trained", "attention_entropy"]
        lines.append(
            f"| {c.mixer} | {c.residual} | {'on' if c.mlp else 'off'} | {c.norm} | "
            f"{c.row['n_seeds']} | {_loss_cell(c)} | "
            + " | ".join(cells)
            + f" | {ci_text(ent.mean, ent.low, ent.high) or 'n/a'} |"
        )
    lines += [
        "",
        "Figures: " + ", ".join(f"`rank_ablation_{m}.png`" for m in [*SPREAD, "attention_entropy"]),
        "",
    ]
    path = out / "rank_ablation.md"
    path.write_text("\n".join(lines) + "\n")
    rows = full_rows(cs)
    if rows:
        with open(out / "rank_ablation.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows({k: fmt(v, CSV_SPEC) for k, v in r.items()} for r in rows)
    (out / "rank_ablation.json").write_text(
        json.dumps({**header, "configurations": rows}, indent=2, default=str) + "\n"
    )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--mixers", nargs="+", default=study_mixers(causal=True), choices=list(MIXERS)
    )
    parser.add_argument(
        "--residuals",
        nargs="+",
        default=RESIDUALS,
        choices=RESIDUALS,
        help="the grid's model.residual values (deepnorm is its own sweep)",
    )
    parser.add_argument(
        "--sweeps",
        nargs="+",
        default=["grid", "deepnorm", "no_norm"],
        choices=["grid", "deepnorm", "no_norm"],
    )
    parser.add_argument("--seeds", type=int_list, default=[0, 1, 2, 3, 4], help="default 0-4")
    parser.add_argument("--confidence", type=float, default=0.95)
    add_run_options(parser)
    parser.add_argument(
        "--out",
        type=Path,
        default=default_out("rank_ablation"),
        help="report folder (default results/rank_ablation/)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="write the report from the sweeps already in --out; run nothing",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="toy size, synthetic data unless --data-dir: 2 mixers, 3 residuals, MLP on, seeds 0,1",
    )
    args = parser.parse_args()
    if not 0.0 < args.confidence < 1.0:
        parser.error(f"--confidence must be in (0, 1), got {args.confidence}")
    if not args.seeds:
        parser.error("--seeds needs at least one seed (e.g. 0,1,2)")
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    start = time.perf_counter()
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    env = dict(os.environ)
    if args.smoke:  # the smoke's own grid, which --dry-run prices too
        if args.mixers == parser.get_default("mixers"):
            args.mixers = ["scaled_dot", "pooling"]
        if args.residuals == parser.get_default("residuals"):
            args.residuals = ["none", "add", "attnres"]
        if args.seeds == parser.get_default("seeds"):
            args.seeds = [0, 1]
    if args.dry_run:
        seconds, basis = SMOKE_JOB_S if args.smoke else RUN_S[args.preset]
        plan = sweeps(args)
        print(price([(n, plan[n][1], seconds) for n in args.sweeps], args.parallel, basis))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    if args.smoke and args.data_dir is None:
        args.data_dir = str(args.out / "smoke_data")
        env |= write_smoke_data(Path(args.data_dir))
    plan = sweeps(args)
    common = [
        "experiment=rank_ablation" + ("_gpu" if args.preset == "gpu" else ""),
        f"mixer={','.join(args.mixers)}",
        f"train.seed={','.join(map(str, args.seeds))}",
        f"model.mlp={','.join(str(v).lower() for v in mlp_values(args))}",
        *run_overrides(args, args.data_dir),
        *(SMOKE if args.smoke else []),
        *args.override,
    ]
    folders = [args.out / name for name in args.sweeps]
    if not args.report_only:
        for name in args.sweeps:
            overrides, n = plan[name]
            print(f"{name}: {n} jobs")
            sweep([*common, *overrides], args.out / name, n, env, args.out / f"{name}.log")
    header = {
        "command": command,
        "machine": machine(),
        "started": started,
        "wall_s": time.perf_counter() - start,
        "seeds": args.seeds,
        "thresholds": {"kept": KEPT, "collapsed": COLLAPSED},
    }
    run_file = args.out / "run.json"  # the run's command and wall time, for --report-only
    if not args.report_only:
        run_file.write_text(json.dumps(header, indent=2) + "\n")
    elif run_file.exists():
        header = json.loads(run_file.read_text()) | {"report_command": command}
    cs, runs, header["scope"] = configs(folders, args.confidence)
    header["confidence"] = args.confidence
    if not cs:
        sys.exit(f"no completed jobs under {args.out} ({', '.join(args.sweeps)})")
    path = write_report(cs, args, header)
    write_runs(runs, args.out / "runs.csv")
    write_layers(cs, args.out / "runs_layers.csv")
    plot_rank_ablation(cs, _mixers(cs), _variants(cs), args.out)
    print(path.read_text())


if __name__ == "__main__":
    main()
