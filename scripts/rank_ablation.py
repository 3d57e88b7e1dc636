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
takes the share of the input's spread that the last block keeps, per seed, on the run's fixed
probe batch: last / first layer for relative residual, effective rank and stable rank (collapse
sends each to its floor: 0, 1, 1), (1 − last) / (1 − first) for token similarity (collapse sends
tokens' cosine to 1). Over the seeds, its mean and Student-t interval give the verdict, a rule
fixed before any run: **kept** when the interval's lower end is ≥ KEPT, **collapsed** when its
upper end is ≤ COLLAPSED, **partial** otherwise (with one seed the mean decides, and says so).
Attention entropy is reported as a value (n/a for pooling and identity).

Outputs (in --out): rank_ablation.md (command, machine, wall time, seeds, budget, the verdict
matrices at init and after training, validation loss, every configuration), rank_ablation.csv
and .json (the same numbers), rank_ablation_<measure>.png (each measure through depth, init and
trained, one line per residual variant, one panel per mixer). Running the command again skips
the sweeps whose jobs all completed and resumes the others.

    python scripts/rank_ablation.py --parallel 2                 # 300 jobs
    python scripts/rank_ablation.py --smoke                      # toy size, synthetic data, ~1 min
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import summarize as S  # this folder's: jobs, grouping, intervals
from _study import (
    SMOKE_SIZE,
    add_run_options,
    int_list,
    machine,
    run_overrides,
    sweep,
    write_smoke_data,
)

from attnzoo import MIXERS
from attnzoo.stats import Interval, mean_interval

RESIDUALS = ["none", "add", "scaled", "rezero", "layerscale", "denseformer", "attnres"]
# hidden-state measures with a verdict, and their short names in the matrices
SPREAD = {
    "relative_residual": "res",
    "effective_rank": "erank",
    "stable_rank": "srank",
    "token_similarity": "sim",
}
KEPT, COLLAPSED = 0.5, 0.2  # the verdict thresholds on the share of spread kept
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


# ---- per job: the measures through depth ----------------------------------------------------


def profile(job: S.Job, name: str, when: str) -> list[float] | None:
    """`rank/<name>/layer_<k>` for k = 0..L from the first (init) or last (trained) record
    that logged them; None when the job never did."""
    prefix = f"rank/{name}/layer_"
    records = [r for r in job.records if any(k.startswith(prefix) for k in r)]
    if not records:
        return None
    record = records[0] if when == "init" else records[-1]
    if when == "init" and record.get("step") != 0:
        return None
    layers = [int(k[len(prefix) :]) for k in record if k.startswith(prefix)]
    return [_num(record.get(f"{prefix}{k}")) for k in range(max(layers) + 1)]


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def kept_share(name: str, values: list[float]) -> float:
    """The share of the input's spread the last block keeps (see the module docstring)."""
    first, last = values[0], values[-1]
    if name == "token_similarity":
        first, last = 1.0 - first, 1.0 - last
    if not (math.isfinite(first) and math.isfinite(last)) or first <= 0:
        return math.nan
    return last / first


def verdict(ci: Interval) -> str:
    if ci.n == 0:
        return "n/a"
    if ci.n == 1:
        return (
            "kept" if ci.mean >= KEPT else "collapsed" if ci.mean <= COLLAPSED else "partial"
        ) + " (1 seed)"
    if ci.low >= KEPT:
        return "kept"
    if ci.high <= COLLAPSED:
        return "collapsed"
    return "partial"


# ---- per configuration ------------------------------------------------------------------------


@dataclass
class Config:
    """One configuration over its seeds."""

    mixer: str
    residual: str
    mlp: bool
    norm: str
    row: dict[str, Any]  # summarize's group row: val loss, metric, n, cost
    jobs: list[S.Job]
    shares: dict[tuple[str, str], Interval] = field(default_factory=dict)  # (when, measure)
    last: dict[tuple[str, str], Interval] = field(default_factory=dict)  # the last block's value
    depth: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # mean per layer

    @property
    def variant(self) -> str:
        return self.residual + (", no norm" if self.norm == "none" else "")


def configs(folders: list[Path], confidence: float) -> list[Config]:
    jobs = [j for folder in folders if folder.is_dir() for j in S.find_jobs(folder)]
    rows = [S.row(j) for j in jobs]
    groups, _ = S.group_jobs(jobs, rows)
    out = []
    for g in groups:
        done = [j for j, r in g.members if r["status"] == "completed"]
        first = g.members[0][1]
        c = Config(
            mixer=str(first["mixer"]),
            residual=str(first["residual"]),
            mlp=bool(first["mlp"]),
            norm=str(first["norm"]),
            row=S.group_row(g, confidence),
            jobs=done,
        )
        for when in ("init", "trained"):
            for name in [*SPREAD, "attention_entropy"]:
                profiles = [p for j in done if (p := profile(j, name, when)) is not None]
                if name in SPREAD:
                    shares = [kept_share(name, p) for p in profiles]
                    c.shares[when, name] = mean_interval(shares, confidence)
                c.last[when, name] = mean_interval([p[-1] for p in profiles], confidence)
                if profiles:
                    n_layers = max(len(p) for p in profiles)
                    c.depth[when, name] = [
                        _nanmean([p[k] for p in profiles if k < len(p)]) for k in range(n_layers)
                    ]
        out.append(c)
    return out


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


# ---- the report ---------------------------------------------------------------------------------


def _variants(cs: list[Config]) -> list[str]:
    order = RESIDUALS + ["deepnorm"] + [f"{r}, no norm" for r in RESIDUALS]
    present = {c.variant for c in cs}
    return [v for v in order if v in present] + sorted(present - set(order))


def _mixers(cs: list[Config]) -> list[str]:
    present = {c.mixer for c in cs}
    return [m for m in MIXERS if m in present]


def matrix_cell(c: Config | None, when: str) -> str:
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


def matrix(cs: list[Config], mlp: bool, cell) -> list[str]:
    mixers = _mixers(cs)
    at = {(c.mixer, c.variant): c for c in cs if c.mlp == mlp}
    lines = ["| residual | " + " | ".join(mixers) + " |", "|---|" + "---|" * len(mixers)]
    for v in _variants([c for c in cs if c.mlp == mlp]):
        lines.append(f"| {v} | " + " | ".join(cell(at.get((m, v))) for m in mixers) + " |")
    return lines


def _loss_cell(c: Config | None) -> str:
    if c is None:
        return "not run"
    r = c.row
    return S.ci_text(r["val_loss_mean"], r["val_loss_ci_low"], r["val_loss_ci_high"])


def full_rows(cs: list[Config]) -> list[dict[str, Any]]:
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


def write_report(cs: list[Config], args: argparse.Namespace, header: dict[str, Any]) -> Path:
    out: Path = args.out
    first = cs[0].jobs[0].config if cs and cs[0].jobs else {}
    get = lambda k: S.get(first, k)  # noqa: E731
    n_jobs = sum(len(c.jobs) for c in cs)
    lines = [
        "# Rank collapse ablation: residual variants × mixers, at init and trained",
        "",
        f"Command: `{header['command']}`",
        f"Machine: {header['machine']}",
        f"Wall time: {header['wall_s']:.0f} s (started {header['started']} UTC)",
        "",
        f"Task: {S.group_choice(first, 'task', [])}, context {get('task.seq_len')}; width "
        f"{get('model.dim')}, depth {get('model.depth')}, {get('model.heads')} heads; "
        f"{get('train.max_steps')} steps of batch {get('train.batch_size')} at train.lr "
        f"{get('train.lr')} (one learning rate for every configuration, not tuned); seeds "
        f"{', '.join(map(str, args.seeds))}; {n_jobs} completed runs in {len(cs)} configurations. "
        f"Preset `experiment=rank_ablation`"
        + (f" + `{' '.join(args.override)}`" if args.override else "")
        + (" + the --smoke toy size" if args.smoke else "")
        + ".",
        "",
        "How to read (the rule was fixed before the runs): for each measure of the hidden states, "
        "the share of the input's spread that the last block keeps on the run's fixed probe "
        "batch: last / first layer for the relative residual (`res`), effective rank (`erank`) "
        "and stable rank (`srank`); (1 − last) / (1 − first) for token similarity (`sim`). "
        f"Over the seeds: **kept** when the {args.confidence:.0%} Student-t interval of that share "
        f"lies at or above {KEPT:g}, **collapsed** when it lies at or below {COLLAPSED:g}, "
        "**partial** otherwise. Effective and stable rank cannot fall below 1, so their share "
        "has a floor of 1 / (the embedding's value).",
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
        "Share of spread kept by the last block, trained, mean [interval] (init mean in "
        "parentheses); attention entropy of the last block in nats, trained.",
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
            cells.append(f"{S.ci_text(t.mean, t.low, t.high)} ({S.fmt(i.mean, 3)})")
        ent = c.last["trained", "attention_entropy"]
        lines.append(
            f"| {c.mixer} | {c.residual} | {'on' if c.mlp else 'off'} | {c.norm} | "
            f"{c.row['n_seeds']} | {_loss_cell(c)} | "
            + " | ".join(cells)
            + f" | {S.ci_text(ent.mean, ent.low, ent.high) or 'n/a'} |"
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
            writer.writerows({k: S.fmt(v, S.CSV_DIGITS) for k, v in r.items()} for r in rows)
    (out / "rank_ablation.json").write_text(
        json.dumps({**header, "configurations": rows}, indent=2, default=str) + "\n"
    )
    return path


def plot(cs: list[Config], out: Path) -> None:
    """rank_ablation_<measure>.png: rows init / trained, one panel per mixer, one line per
    residual variant (MLP on; solid with the norm, dashed without), mean over seeds."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mixers, variants = _mixers(cs), _variants(cs)
    colors = {
        v: plt.cm.tab10(i % 10)
        for i, v in enumerate(dict.fromkeys(v.split(",")[0] for v in variants))
    }
    for name in [*SPREAD, "attention_entropy"]:
        fig, axes = plt.subplots(
            2, len(mixers), figsize=(3.2 * len(mixers), 6), squeeze=False, sharey=True
        )
        for row, when in enumerate(("init", "trained")):
            for col, mixer in enumerate(mixers):
                ax = axes[row][col]
                for c in cs:
                    if c.mixer != mixer or not c.mlp or (when, name) not in c.depth:
                        continue
                    ys = c.depth[when, name]
                    ax.plot(range(len(ys)), ys, marker="o", ms=3,
                            color=colors[c.residual], ls="--" if c.norm == "none" else "-",
                            label=c.variant)  # fmt: skip
                ax.set_title(f"{mixer}, {when}", fontsize=9)
                if name in ("relative_residual",):
                    ax.set_yscale("log")
                ax.set_xlabel("layer (0: embedding)", fontsize=8)
                ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
                ax.grid(alpha=0.3)
            axes[row][0].set_ylabel(name)
        handles, labels = axes[-1][0].get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize=8)
        fig.suptitle(f"{name} through depth, MLP on, mean over seeds", fontsize=10)
        fig.tight_layout(rect=(0, 0.08, 1, 0.96))
        fig.savefig(out / f"rank_ablation_{name}.png", dpi=90)
        plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mixers", nargs="+", default=list(MIXERS), choices=list(MIXERS))
    parser.add_argument("--residuals", nargs="+", default=RESIDUALS, choices=RESIDUALS,
                        help="the grid's model.residual values (deepnorm is its own sweep)")  # fmt: skip
    parser.add_argument("--sweeps", nargs="+", default=["grid", "deepnorm", "no_norm"],
                        choices=["grid", "deepnorm", "no_norm"])  # fmt: skip
    parser.add_argument("--seeds", type=int_list, default=[0, 1, 2], help="default 0,1,2")
    parser.add_argument("--confidence", type=float, default=0.95)
    add_run_options(parser)
    parser.add_argument("--out", type=Path, default=Path("scripts/results/rank_ablation"))
    parser.add_argument("--report-only", action="store_true",
                        help="write the report from the sweeps already in --out; run nothing")  # fmt: skip
    parser.add_argument("--smoke", action="store_true",
                        help="toy size, synthetic data unless --data-dir: 2 mixers, 3 residuals, "
                             "MLP on, seeds 0,1")  # fmt: skip
    args = parser.parse_args()
    if not 0.0 < args.confidence < 1.0:
        parser.error(f"--confidence must be in (0, 1), got {args.confidence}")
    if not args.seeds:
        parser.error("--seeds needs at least one seed (e.g. 0,1,2)")
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    start = time.perf_counter()
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    env = dict(os.environ)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        if args.mixers == parser.get_default("mixers"):
            args.mixers = ["scaled_dot", "pooling"]
        if args.residuals == parser.get_default("residuals"):
            args.residuals = ["none", "add", "attnres"]
        if args.seeds == parser.get_default("seeds"):
            args.seeds = [0, 1]
        if args.data_dir is None:
            args.data_dir = str(args.out / "smoke_data")
            env |= write_smoke_data(Path(args.data_dir))
    plan = sweeps(args)
    common = [
        "experiment=rank_ablation",
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
    cs = configs(folders, args.confidence)
    if not cs:
        sys.exit(f"no completed jobs under {args.out} ({', '.join(args.sweeps)})")
    path = write_report(cs, args, header)
    plot(cs, args.out)
    print(path.read_text())


if __name__ == "__main__":
    main()
