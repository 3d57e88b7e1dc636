"""The figures of the analysis. Each draws what the other modules computed (jobs, rows, groups,
intervals, fits) and computes nothing of its own: the summary's (the relative residual against
depth and the validation curves per job, intervals and validation bands per configuration), the
rank-collapse study's (every measure through depth, the rate of collapse beside the cubic rate)
and the rank ablation's (each measure through depth per residual variant)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from attnzoo.analysis.compare import attached_keys, blocks, config_name  # noqa: E402
from attnzoo.analysis.fits import FIT_LAYERS, FLOAT64_FLOOR, rate_pairs  # noqa: E402
from attnzoo.analysis.groups import X_AXES, Group, axis_name, curve_band  # noqa: E402
from attnzoo.analysis.runs import Job  # noqa: E402
from attnzoo.analysis.verdicts import RankConfig  # noqa: E402
from attnzoo.rank import MEASURES, RankProfile  # noqa: E402
from attnzoo.stats import Interval  # noqa: E402

# ---- the sweep summary ---------------------------------------------------------------------


def ablation(r: dict[str, Any]) -> str:
    """A job's block switches in words: `residual add, mlp on, norm layernorm`."""
    on = lambda v: "on" if v in (True, "true", "True") else "off" if v is not None else "?"
    return f"residual {r.get('residual') or '?'}, mlp {on(r['mlp'])}, norm {r['norm'] or '?'}"


def plot_rank(jobs: list[Job], rows: list[dict[str, Any]], path: Path) -> None:
    """rank_vs_depth.png: the relative residual after each block at the final evaluation, one
    panel per ablation (residual/MLP/norm), one line per job."""
    panels: dict[str, list[tuple[str, list[float]]]] = {}
    for job, r in zip(jobs, rows, strict=True):
        profile = job.rank_profile()
        if profile:
            label = f"{r['mixer']} (depth {r['depth']})"
            panels.setdefault(ablation(r), []).append((label, profile))
    n = max(len(panels), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.0 * n, 3.4), squeeze=False, sharey=True)
    for ax, (title, curves) in zip(axes[0], sorted(panels.items()), strict=False):
        for label, profile in curves:
            ax.semilogy(range(len(profile)), [max(v, 1e-17) for v in profile], marker="o", ms=3,
                        label=label)  # fmt: skip
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("layer (0 = embedding)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if not panels:
        axes[0][0].text(0.5, 0.5, "no job logged rank/layer_*", ha="center", va="center")
    axes[0][0].set_ylabel("relative residual at the final eval")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_val(jobs: list[Job], rows: list[dict[str, Any]], path: Path) -> None:
    """val_curves.png: validation loss against step, one line per job, one panel per mixer."""
    panels: dict[str, list[tuple[str, list[int], list[float]]]] = {}
    for job, r in zip(jobs, rows, strict=True):
        points = [(rec["step"], rec["val/loss"]) for rec in job.records
                  if "val/loss" in rec and "step" in rec]  # fmt: skip
        if points:
            steps, losses = zip(*points, strict=True)
            label = f"{ablation(r)}, depth {r['depth']} [{r['status']}]"
            panels.setdefault(str(r["mixer"]), []).append((label, list(steps), list(losses)))
    n = max(len(panels), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.0 * n, 3.4), squeeze=False, sharey=True)
    for ax, (mixer, curves) in zip(axes[0], sorted(panels.items()), strict=False):
        for label, steps, losses in curves:
            ax.plot(steps, losses, marker="o", ms=2, label=label)
        ax.set_title(mixer)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    if not panels:
        axes[0][0].text(0.5, 0.5, "no job logged val/loss", ha="center", va="center")
    axes[0][0].set_ylabel("validation loss")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def interval_panels(table: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """What intervals.png shows: the held-out test loss and metric where the runs have them
    (the numbers a study's claims are about), else the validation ones; then the rank."""
    rank = ("rank", "final relative residual")
    tested = [r.get("test_loss_mean") for r in table]
    if any(t is not None and not math.isnan(t) for t in tested):
        return [
            ("test_loss", "final held-out test loss"),
            ("test_metric", "final held-out test metric"),
            rank,
        ]
    return [("val_loss", "final validation loss"), ("metric", "final task metric"), rank]


def plot_intervals(groups: list[Group], table: list[dict[str, Any]], path: Path, conf: float):
    """intervals.png: per configuration, the mean over seeds with its interval as a whisker, of
    the final loss and metric (`interval_panels`: held-out test where there is one) and rank,
    each seed as a grey dot (`table`: the group rows with the seeds' values under `_values`)."""
    panels = interval_panels(table)
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.45 * len(groups) + 1.6), squeeze=False)
    names = [g.name for g in groups]
    for ax, (which, title) in zip(axes[0], panels, strict=True):
        for y, r in enumerate(table):
            mean, low, high = r[f"{which}_mean"], r[f"{which}_ci_low"], r[f"{which}_ci_high"]
            if mean is None or math.isnan(mean):
                continue
            if math.isnan(low):
                ax.plot([mean], [y], "o", mfc="none", color="C0")  # one seed: no whisker
            else:
                ax.errorbar([mean], [y], xerr=[[mean - low], [high - mean]], fmt="o",
                            color="C0", capsize=3)  # fmt: skip
            for seed_value in table[y]["_values"][which]:
                ax.plot([seed_value], [y], ".", color="0.6", ms=4)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names if which == panels[0][0] else [], fontsize=7)
        ax.set_ylim(-0.7, len(names) - 0.3)
        ax.invert_yaxis()
        ax.set_title(f"{title}: mean, {conf:.0%} t-interval", fontsize=9)
        ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_bands(
    panels: dict[str, list[tuple[str, list[float], list[Any]]]],
    xlabel: str,
    ylabel: str,
    path: Path,
) -> None:
    """One panel per title: per line (label, xs, intervals), the mean with its interval as a
    band (no band for one seed)."""
    n = max(len(panels), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False, sharey=True)
    for ax, (title, curves) in zip(axes[0], panels.items(), strict=False):
        for i, (label, xs, cis) in enumerate(curves):
            if not xs:
                continue
            ax.plot(xs, [c.mean for c in cis], color=f"C{i % 10}", label=f"{label} (n={cis[-1].n})")
            if cis[-1].n > 1:
                ax.fill_between(xs, [c.low for c in cis], [c.high for c in cis],
                                color=f"C{i % 10}", alpha=0.2, lw=0)  # fmt: skip
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    if not any(ax.lines for ax in axes[0]):
        axes[0][0].text(0.5, 0.5, "no completed job logged val/loss", ha="center", va="center")
    axes[0][0].set_ylabel(ylabel)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bands(
    groups: list[Group], axis: str | None, path: Path, confidence: float, x: str = "steps"
) -> None:
    """val_bands.png: validation loss against `x` (steps, tokens, wall or flops), mean over
    seeds with its interval as a band; one panel per configuration of the other axes, one line
    per value of the compared axis."""
    panels = blocks(groups, axis) if axis else {"all": groups}
    attached = attached_keys(groups, axis) if axis else []
    curves: dict[str, list[tuple[str, list[float], list[Interval]]]] = {}
    for title, members in panels.items():
        title = title if title != "all" else f"by {axis_name(axis or 'configuration')}"
        curves[title] = [
            (config_name(g, axis, attached) if axis else g.name, *curve_band(g, confidence, x))
            for g in members
        ]
    draw_bands(curves, X_AXES[x][1], f"validation loss (mean, {confidence:.0%} band)", path)


# ---- the rank ablation -------------------------------------------------------------------------


def plot_rank_ablation(
    cs: list[RankConfig], mixers: list[str], variants: list[str], out: Path
) -> None:
    """rank_ablation_<measure>.png for each measure: for each mixer (in the order of `mixers`,
    two to a row) a panel at init and one trained, one line per residual variant (MLP on; solid
    with the norm, dashed without; colours in the order of `variants`), mean over seeds."""
    colors = {
        v: plt.cm.tab10(i % 10)
        for i, v in enumerate(dict.fromkeys(v.split(",")[0] for v in variants))
    }
    per_row = min(2, len(mixers))
    rows = -(-len(mixers) // per_row)
    for name in MEASURES:
        fig, axes = plt.subplots(rows, 2 * per_row, figsize=(6.4 * per_row, 2.9 * rows + 1.0),
                                 squeeze=False, sharey=True)  # fmt: skip
        for i, mixer in enumerate(mixers):
            for j, when in enumerate(("init", "trained")):
                ax = axes[i // per_row][2 * (i % per_row) + j]
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
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
                ax.grid(alpha=0.3)
        for ax in [a for row in axes for a in row][2 * len(mixers) :]:
            ax.axis("off")
        for row in axes:
            row[0].set_ylabel(name, fontsize=8)
        handles, labels = axes[0][0].get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize=8)
        fig.suptitle(f"{name} through depth, MLP on, mean over seeds", fontsize=10)
        fig.tight_layout(rect=(0, 0.9 / (2.9 * rows + 1.0), 1, 1 - 0.4 / (2.9 * rows + 1.0)))
        fig.savefig(out / f"rank_ablation_{name}.png", dpi=90)
        plt.close(fig)


# ---- rank collapse at init ---------------------------------------------------------------------


def _variants_of(curves: dict[tuple[str, str, str], RankProfile], mixer: str):
    return [(variant, norm) for (m, variant, norm) in curves if m == mixer]


def residual_figure(
    curves: dict[tuple[str, str, str], RankProfile], mixers: list[str], depth: int
) -> plt.Figure:
    """Log relative residual against depth, one panel per mixer (four to a row), one line per
    (variant, norm) of `curves` (keyed by mixer, variant, norm; dashed: with LayerNorm)."""
    import torch

    cols = min(4, len(mixers))
    rows = -(-len(mixers) // cols)
    fig, grid = plt.subplots(rows, cols, squeeze=False, sharex=True, sharey=True,
                             figsize=(3.0 * cols + 1.6, 2.9 * rows + 0.5))  # fmt: skip
    axes = [ax for row in grid for ax in row]
    depths = range(depth + 1)
    for ax, mixer in zip(axes, mixers, strict=False):
        for variant, norm in _variants_of(curves, mixer):
            mean = torch.tensor(curves[mixer, variant, norm].mean)
            ax.semilogy(
                depths,
                mean.clamp_min(1e-17),
                marker="o",
                markersize=3,
                linestyle="-" if norm == "none" else "--",
                label=f"{variant}{'' if norm == 'none' else ' +LN'}",
            )
        ax.set_title(mixer)
        ax.grid(alpha=0.3)
    for ax in axes[len(mixers) :]:
        ax.axis("off")
    for row in grid:
        row[0].set_ylabel("‖res(H)‖ / ‖H‖")
    for ax in grid[-1]:
        ax.set_xlabel("depth")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.suptitle("Rank collapse at init: relative residual (float64 probe; dashed: with LayerNorm)")
    fig.tight_layout(rect=(0, 0, 1 - 1.4 / (3.0 * cols + 1.6), 1))
    return fig


def measures_figure(
    curves: dict[tuple[str, str, str], RankProfile], mixers: list[str], depth: int
) -> plt.Figure:
    """Rows: mixers; columns: measures; one line per variant (dashed: with LayerNorm)."""
    names = list(MEASURES)
    fig, axes = plt.subplots(len(mixers), len(names), squeeze=False, sharex=True,
                             figsize=(2.8 * len(names) + 1.8, 2.0 * len(mixers) + 0.6))  # fmt: skip
    depths = range(depth + 1)
    for row, mixer in enumerate(mixers):
        for col, name in enumerate(names):
            ax = axes[row][col]
            for variant, norm in _variants_of(curves, mixer):
                values = curves[mixer, variant, norm].measures[name]
                ax.plot(depths, values, marker="o", markersize=2,
                        linestyle="-" if norm == "none" else "--",
                        label=f"{variant}{'' if norm == 'none' else ' +LN'}")  # fmt: skip
            if name == "relative_residual":
                ax.set_yscale("log")
            mine = [v for (m, _, _), p in curves.items() if m == mixer for v in p.measures[name]]
            if all(math.isnan(v) for v in mine):
                ax.text(0.5, 0.5, "n/a: weights not\na distribution", transform=ax.transAxes,
                        ha="center", va="center", fontsize=8, color="gray")  # fmt: skip
                ax.set_yticks([])
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(name.replace("_", " "), fontsize=9)
            if col == 0:
                ax.set_ylabel(mixer, fontsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("depth")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.suptitle("Every measure at init, a row per mixer (float64 probe; attention entropy in "
                 "nats, n/a where the mixer's weights are not a distribution)", fontsize=9)  # fmt: skip
    height = 2.0 * len(mixers) + 0.6  # the suptitle keeps half an inch above the panels
    fig.tight_layout(rect=(0, 0, 1 - 1.6 / (2.8 * len(names) + 1.8), 1 - 0.5 / height))
    return fig


def _num(value: float, spec: str) -> str:
    return "n/a" if math.isnan(value) else format(value, spec)


def rate_figure(
    rate: dict[str, dict], depth: int, title: str, floor: float = FLOAT64_FLOOR
) -> plt.Figure:
    """Left: −log10 r on a log axis (log(−log r): a rate r_{l+1} = r_l^k is a line of slope
    log k), each seed of each mixer down to `floor`, beside the cubic rate r_{l+1} = c·r_l³
    (dashed; c fitted with the exponent held at 3) from the mixer's first layer. Right:
    log10 r_{l+1} against log10 r_l, the pairs the fit uses (attnzoo.analysis.fits.FIT_LAYERS),
    beside the line of slope 3 through the same c. `rate`: per mixer, its residual `curves` per
    seed and the fitted exponent's `mean` and `half` width."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.0))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (mixer, r) in enumerate(rate.items()):
        colour = colours[i % len(colours)]
        label = f"{mixer}: k = {_num(r['mean'], '.2f')} ± {_num(r['half'], '.2f')}"
        pairs_all = []
        for j, curve in enumerate(r["curves"]):
            pts = [(layer, -math.log10(v)) for layer, v in enumerate(curve) if v > floor]
            left.plot(*zip(*pts, strict=True), marker="o", markersize=3, color=colour, alpha=0.6,
                      label=label if j == 0 else None)  # fmt: skip
            pairs = rate_pairs(curve, floor)
            pairs_all += pairs
            if pairs:
                right.plot(*zip(*pairs, strict=True), marker="o", markersize=4, color=colour,
                           alpha=0.6, label=label if j == 0 else None)  # fmt: skip
        if not pairs_all:
            continue
        log_c = sum(y - 3 * x for x, y in pairs_all) / len(pairs_all)  # k held at 3
        first = [math.log10(c[1]) for c in r["curves"] if c[1] > floor]
        ref = [(1, sum(first) / len(first))]
        while ref[-1][0] < depth and 3 * ref[-1][1] + log_c > math.log10(floor):
            ref.append((ref[-1][0] + 1, 3 * ref[-1][1] + log_c))
        left.plot([x for x, _ in ref], [-y for _, y in ref], color=colour, linestyle="--",
                  linewidth=1)  # fmt: skip
        xs = [min(x for x, _ in pairs_all) - 0.3, max(x for x, _ in pairs_all) + 0.3]
        right.plot(xs, [3 * x + log_c for x in xs], color=colour, linestyle="--", linewidth=1)
    for ax in (left, right):
        ax.plot([], [], color="gray", linestyle="--", label="cubic rate r_{l+1} = c·r_l³")
    left.set_yscale("log")
    left.axhline(-math.log10(floor), color="gray", linewidth=0.8, linestyle=":")
    left.set_xlabel("depth l")
    left.set_ylabel("−log10 relative residual (log axis)")
    left.set_title("pure attention: the residual beside the cubic rate")
    left.grid(alpha=0.3, which="both")
    left.legend(fontsize=7)
    right.set_xlabel("log10 r_l")
    right.set_ylabel("log10 r_{l+1}")
    right.set_title(
        f"per-layer exponent k: the slope over layers {FIT_LAYERS.start}–{FIT_LAYERS.stop - 1}"
    )
    right.grid(alpha=0.3)
    right.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
