"""The sweep summary: the per-job table, the groups table with intervals, the comparisons, the
selection of a tuned value and the figures, written to one folder: what `python
scripts/summarize.py` writes (docs/sweeps.md describes each file)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from attnzoo.analysis.compare import COMPARISON_COLUMNS, comparisons, default_axis, resolve_axis
from attnzoo.analysis.figures import plot_bands, plot_intervals, plot_rank, plot_val
from attnzoo.analysis.groups import (
    GROUP_STATS,
    VALUES,
    X_AXES,
    Group,
    axis_name,
    group_row,
    split_of,
)
from attnzoo.analysis.runs import COLUMNS, Job
from attnzoo.analysis.selection import select
from attnzoo.analysis.sweep import load_sweep
from attnzoo.analysis.tables import CSV_SPEC, ci_text, fmt, md_table, write_csv
from attnzoo.replicates import NON_SEMANTIC, REPLICATE_KEY
from attnzoo.stats import RATE_TEST


def write_runs(rows: list[dict[str, Any]], path: Path, extra: tuple[str, ...] = ()) -> None:
    """The per-seed table behind every interval and comparison: one row per job (COLUMNS) with
    its configuration (`group`, as in groups.csv), seed, final values and status. summarize
    writes it as summary.csv; the study commands write it as runs.csv beside their reports,
    with `extra` columns of their own after `job` (a study's cell: its width, say)."""
    columns = ("job", *extra, *COLUMNS[1:])
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: fmt(r.get(k), CSV_SPEC) for k in columns} for r in rows)


def write_tables(rows: list[dict[str, Any]], out: Path, sweep: Path | str) -> None:
    """summary.csv (write_runs) and summary.md: one row per job (COLUMNS but the group), its
    status in bold where the job did not complete."""
    write_runs(rows, out / "summary.csv")
    shown = [c for c in COLUMNS if c != "group"]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    lines = [
        f"# Sweep summary: {sweep}",
        "",
        f"{len(rows)} jobs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ".",
        "",
        "tokens, flops and wall_s: what the run recorded in summary.json's `compute` (flops = "
        "tokens × the blocks' training FLOPs per token from attnzoo.flops: matmuls only, "
        "backward = 2 × forward, embedding and head excluded; wall_s = seconds in the training "
        "loop, evaluation included, over every resume); for runs that did not record them, "
        "tokens = steps × train.batch_size × context from the resolved config, and wall_s = "
        "summary.json's time.total_s.",
        "",
        "| " + " | ".join(shown) + " |",
        "|" + "---|" * len(shown),
    ]
    for r in rows:
        cells = [fmt(r[c]).replace("|", "/") for c in shown]
        if r["status"] != "completed":
            cells[shown.index("status")] = f"**{r['status']}**"
        lines.append("| " + " | ".join(cells) + " |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def write_groups(
    groups: list[Group],
    table: list[dict[str, Any]],
    compared: list[dict[str, Any]],
    orphans: list[str],
    out: Path,
    axis: str | None,
    confidence: float,
    margin: float | None,
    correction: str = "holm",
    on: str = "val_loss",
    why: str = "",
) -> None:
    """groups.csv and groups.md: one row per configuration, then the comparisons along `axis`
    on `on` in words; groups.md shows the loss and metric of `on`'s split and says which (and
    `why` that one)."""
    axes = [axis_name(k) for k in (groups[0].label if groups else {})]
    columns = ["group", *axes, *GROUP_STATS]
    write_csv(out / "groups.csv", columns, table)
    lines = [
        "# Sweep summary by configuration",
        "",
        f"{len(groups)} configuration(s); jobs whose resolved configs differ only in "
        f"`{REPLICATE_KEY}` (and in {', '.join(k for k in NON_SEMANTIC if k != REPLICATE_KEY)}) "
        "are replicates of one configuration. Values: mean over the completed seeds "
        f"[{confidence:.0%} Student-t interval]; a configuration with one seed has no interval.",
        "",
        f"Loss and metric: {SPLIT_WORDS[split_of(on) or 'val']}; comparisons on `{on}`"
        + (f" ({why})" if why else "")
        + ".",
        "",
    ]
    if orphans:
        lines += [f"Not placed (no readable config): jobs {', '.join(orphans)}.", ""]
    loss, metric = (
        ("test_loss", "test_metric") if split_of(on) == "test" else ("val_loss", "metric")
    )
    short = [
        "group",
        "n_seeds",
        loss,
        metric,
        "rank",
        "steps_per_s_mean",
        "params",
        "flops",
        "note",
    ]
    cells = []
    for r in table:
        cells.append(
            {
                **r,
                loss: ci_text(r[f"{loss}_mean"], r[f"{loss}_ci_low"], r[f"{loss}_ci_high"]),
                metric: (f"{r['metric']} " if r["metric"] else "")
                + ci_text(r[f"{metric}_mean"], r[f"{metric}_ci_low"], r[f"{metric}_ci_high"]),
                "rank": ci_text(r["rank_mean"], r["rank_ci_low"], r["rank_ci_high"]),
                "n_seeds": len(r["_values"][on]) if "_values" in r else r["n_seeds"],
            }
        )
    lines += md_table(short, cells)
    if axis is not None:
        lines += ["", f"## Differences along `{axis_name(axis)}`, on `{on}`", ""]
        how = protocol_text(compared, confidence, margin, correction)
        lines += [how, ""]
        lines += [
            f"- {c['block']}: {c['sentence']}" if c["block"] != "all" else f"- {c['sentence']}"
            for c in compared
        ] or [
            "- nothing to compare (no block holds the reference and another configuration with a completed seed)"
        ]
    (out / "groups.md").write_text("\n".join(lines) + "\n")


SPLIT_WORDS = {
    "val": "final values on the validation split (the split a tuning sweep selects on)",
    "test": "final values on the held-out test split (whole split; never used for selection)",
}
METRICS = ("auto", "val_loss", "metric", "test_loss", "test_metric")


def choose_metric(rows: list[dict[str, Any]], metric: str, tuning: bool) -> tuple[str, str]:
    """What the comparisons are made on, and why: `metric` when given (a ValueError when it is
    held-out test and no completed job has test numbers); `auto`: the held-out test loss when
    every completed job has one and the report is not a tuning sweep's (no selection: tuning
    reads val only), else the validation loss, saying when test numbers were there."""
    if metric not in METRICS:
        raise ValueError(f"--metric {metric!r}: allowed: {', '.join(METRICS)}")
    done = [r for r in rows if r["status"] == "completed"]
    tested = [r for r in done if isinstance(r["final_test_loss"], (int, float))]
    if metric != "auto":
        if split_of(metric) == "test" and not tested:
            raise ValueError(
                f"--metric {metric}: no completed job has held-out test numbers (runs that "
                "read train.final_splits=[val] have none); compare on val_loss or metric"
            )
        return metric, "--metric"
    if done and len(tested) == len(done) and not tuning:
        return "test_loss", "every completed job has held-out test numbers; --metric to change"
    if tested and tuning:
        return "val_loss", "a tuning sweep selects on val; --metric test_loss compares on test"
    if tested:
        return "val_loss", (
            f"{len(tested)} of {len(done)} completed jobs have held-out test numbers; "
            "--metric test_loss compares those"
        )
    return "val_loss", ""


def protocol_text(
    compared: list[dict[str, Any]], confidence: float, margin: float | None, correction: str
) -> str:
    """How the comparisons of a report were made and read: the reference, the tests, how many,
    the correction, and what each verdict rests on."""
    refs = sorted({str(c["reference"]) for c in compared})
    tests = compared[0]["tests"] if compared else 0
    n = sum(isinstance(c["p"], float) and c["p"] == c["p"] for c in compared)
    fixed = {"holm": "Holm's step-down", "bonferroni": "Bonferroni", "none": "no"}[correction]
    if compared and all(c["method"] == RATE_TEST for c in compared):
        return (
            "Each configuration's success rate (its seeds that reached the threshold, fixed "
            f"before the runs) against the reference's ({', '.join(refs)}): Boschloo's exact "
            "test, two-sided, and Newcombe's hybrid score interval of the difference, at "
            f"{confidence:.0%}. One family: {tests} hypotheses in this report ({n} "
            f"comparison(s), each its exact test), with {fixed} correction for multiple testing"
            + ("" if correction == "none" else " (verdicts from the adjusted p-values)")
            + '. "better"/"worse": the exact test rejects "the same rate"; "not resolved with n '
            'seeds" is not "equal": it says the smallest difference of rates those seeds could '
            "have resolved in this family (at level α/m, m the family's hypotheses)."
        )
    # comparisons made without a margin (a study's collapse measure beside its loss) have one
    with_margin = sum(c.get("margin") not in (None, "") for c in compared)
    text = (
        f"Each configuration against the reference fixed before the runs ({', '.join(refs) or 'none'}) "
        "with the other axes fixed: the paired t-test on the seeds both ran (Welch's t-test when "
        f"the seed sets differ), at {confidence:.0%}. One family: {tests} hypotheses in this "
        f"report ({n} comparison(s), each its two-sided test"
        + (
            ""
            if margin is None
            else ", its test against the margin and its TOST"
            if with_margin >= len(compared)
            else f"; {with_margin} of them also its test against the margin and its TOST"
        )
        + f"), with {fixed} correction for multiple testing over all of them"
        + ("" if correction == "none" else " (verdicts from the adjusted p-values)")
        + '. "better"/"worse": the two-sided test rejects "no difference"; "not resolved with n '
        'seeds" is not "equal": it says the smallest |Δ| those seeds could have resolved in this '
        "family (the half-width of the interval of the difference at level α/m, m the family's "
        "hypotheses)"
    )
    if margin is None:
        return text + "; pass --margin for the tests against a margin."
    return text + (
        f'; "worse/better by more than the margin": the test against ±{margin:g}, two-sided (the one-sided p in the observed direction, doubled); '
        f'"within margin": two one-sided tests (TOST) put the difference inside ±{margin:g}.'
    )


def write_selection(
    selected: list[dict[str, Any]],
    out: Path,
    final_dir: str,
    axis: str | None,
    script: str = "scripts/summarize.py",
) -> None:
    """selected.json (the choices), selected.md (a table) and selected.sh (the fresh-seed runs,
    then their summary by `script`, the summarize command as it is run from where selected.sh
    will be): `bash selected.sh` is the follow-up command."""
    (out / "selected.json").write_text(json.dumps(selected, indent=2, default=str) + "\n")
    compare_flag = f" --compare {axis_name(axis)}" if axis else ""
    report = f"python {script} {final_dir}/*/ --out {final_dir}-report{compare_flag}"
    lines = (
        [
            "#!/usr/bin/env bash",
            "# fresh-seed runs at the selected values, then their summary",
            "set -euo pipefail",
        ]
        + [s["command"] for s in selected]
        + [report]
    )
    (out / "selected.sh").write_text("\n".join(lines) + "\n")
    md = ["# Selected values", ""]
    if selected:
        s0 = selected[0]
        md += [
            f"Chosen by the best mean of {s0['select_by']} over the tuning seeds, per "
            f"configuration of the other axes; tuned: `{s0['tune_axis']}`.",
            "",
        ]
    md += [
        "| config | value | mean | n_seeds | candidates (value: mean) | note |",
        "|---|---|---|---|---|---|",
    ]
    for s in selected:
        cands = ", ".join(f"{fmt(c['value'])}: {fmt(c['mean'])}" for c in s["candidates"])
        md.append(
            f"| {s['config']} | {fmt(s['value'])} | {fmt(s['mean'])} | {s['n_seeds']} "
            f"| {cands} | {s['note']} |"
        )
    md += ["", "Rerun with fresh seeds (`bash selected.sh` does all of it):", "", "```"]
    md += [s["command"] for s in selected] + [report, "```"]
    (out / "selected.md").write_text("\n".join(md) + "\n")


def write_tuning(
    sweep: Path | list[Path],
    out: Path,
    tune_key: str,
    by: str = "val_loss",
    fresh_seeds: str = "0,1,2,3,4",
    final_dir: str = "multirun/final",
    script: str = "scripts/summarize.py",
    maximize: bool | None = None,
    success: float | None = None,
) -> list[dict[str, Any]]:
    """The summary's selection on a tuning sweep (or several folders read as one: a grid and
    its extensions), without its figures and groups: summary.{md,csv} and selected.{json,md,sh}
    in `out`; the selected entries (none when the sweep did not vary `tune_key`; `success`: the
    selection's threshold, selection.select)."""
    out.mkdir(parents=True, exist_ok=True)
    folders = sweep if isinstance(sweep, list) else [sweep]
    tuned = load_sweep(*folders)
    write_tables(tuned.rows, out, folders[0])
    if tune_key not in tuned.axes:
        return []
    selected = select(tuned.groups, tune_key, by, fresh_seeds, final_dir, maximize, success)
    write_selection(selected, out, final_dir, tuned.default_axis(without=tune_key), script)
    return selected


def wandb_mode_for(jobs: list[Job], mode: str) -> str:
    """`--wandb auto`: offline when any of the sweep's runs logged to W&B, else disabled."""
    if mode != "auto":
        return mode
    used = {((j.summary or {}).get("wandb") or {}).get("mode") for j in jobs}
    return "offline" if used & {"offline", "online"} else "disabled"


def log_wandb(
    jobs: list[Job],
    tables: dict[str, tuple[list[str], list[dict[str, Any]]]],
    out: Path,
    mode: str,
    sweep_name: str,
) -> str | None:
    """The groups (and comparisons) tables as W&B Tables in a summary run of the runs' project,
    tagged with the sweep; the run folder lands in `out`/wandb."""
    from attnzoo.tracking import log_tables

    logger = next(
        (j.config["logger"] for j in jobs if isinstance(j.config.get("logger"), dict)), {}
    )
    return log_tables(
        tables,
        mode=mode,
        run_dir=out,
        project=str(logger.get("project") or "attnzoo"),
        entity=logger.get("entity"),
        name=f"summary-{sweep_name}",
        tags=["summary", f"sweep:{sweep_name}"[:64]],
        config={"sweep": sweep_name, "jobs": len(jobs)},
    )


def summarize(
    sweep: Path | str | list[Path],
    out: Path | None = None,
    *,
    compare_axis: str | None = None,
    margin: float | None = None,
    confidence: float = 0.95,
    select_by: str | None = None,
    tune_axis: str | None = None,
    fresh_seeds: str = "0,1,2,3,4",
    final_dir: str = "multirun/final",
    x_axis: str = "steps",
    wandb_mode: str = "auto",
    script: str = "scripts/summarize.py",
    reference: Any = None,
    correction: str = "holm",
    metric: str = "auto",
) -> list[dict[str, Any]]:
    """Write the per-job and per-configuration tables and figures (see the module docstring);
    return the per-job rows. Several sweep folders are summarised as one (job names then start
    with the sweep folder's name). `script` is how selected.sh calls the summarize command.
    `metric`: what the comparisons (and groups.md, intervals.png) are on (`choose_metric`)."""
    sweeps = [Path(sweep)] if isinstance(sweep, (str, Path)) else [Path(s) for s in sweep]
    if not sweeps:
        raise ValueError("no sweep folder given")
    if out is None:
        if len(sweeps) > 1:
            raise ValueError("several sweep folders: say where to write with --out")
        out = sweeps[0]
    if x_axis not in X_AXES:
        raise ValueError(f"--x {x_axis!r}: allowed: {', '.join(X_AXES)}")
    if select_by is not None and select_by not in ("val_loss", "metric"):
        raise ValueError(f"--select-by {select_by!r}: allowed: val_loss, metric")
    sweep_ = load_sweep(*sweeps)
    jobs, rows = sweep_.jobs, sweep_.rows
    on, why = choose_metric(rows, metric, tuning=select_by is not None)
    out.mkdir(parents=True, exist_ok=True)
    write_tables(rows, out, sweeps[0] if len(sweeps) == 1 else ", ".join(map(str, sweeps)))
    plot_rank(jobs, rows, out / "rank_vs_depth.png")
    plot_val(jobs, rows, out / "val_curves.png")

    groups, orphans, axes = sweep_.groups, sweep_.orphans, sweep_.axes
    if tune_axis is not None:
        tune_key = resolve_axis(tune_axis, axes)
        axes_wo_tune = [a for a in axes if a != tune_key]
    else:
        tune_key, axes_wo_tune = None, axes
    axis = resolve_axis(compare_axis, axes) if compare_axis else default_axis(axes_wo_tune)
    table = []
    for g in groups:
        r = group_row(g, confidence)
        r["_values"] = {w: list(g.values(w).values()) for w in VALUES}
        table.append(r)
    compared = []
    if axis:
        compared = comparisons(groups, axis, on, confidence, margin, reference, correction)
    write_groups(
        groups, table, compared, orphans, out, axis, confidence, margin, correction, on, why
    )
    mode = wandb_mode_for(jobs, wandb_mode)
    if mode != "disabled":
        group_columns = ["group", *(axis_name(k) for k in (groups[0].label if groups else {}))]
        tables = {"groups": (group_columns + list(GROUP_STATS), table)}
        if compared:
            tables["comparisons"] = (list(COMPARISON_COLUMNS), compared)
        log_wandb(jobs, tables, out, mode, "+".join(s.name for s in sweeps))
    if compared:
        write_csv(out / "comparisons.csv", list(COMPARISON_COLUMNS), compared)
    plot_intervals(groups, table, out / "intervals.png", confidence, split_of(on))
    plot_bands(groups, axis, out / "val_bands.png", confidence, x_axis)
    if select_by is not None:
        if tune_key is None:
            raise ValueError("--select-by needs --tune-axis (e.g. --tune-axis train.lr)")
        chosen = select(groups, tune_key, select_by, fresh_seeds, final_dir)
        rest = [a for a in axes if a != tune_key]
        write_selection(chosen, out, final_dir, default_axis(rest), script)
    return rows
