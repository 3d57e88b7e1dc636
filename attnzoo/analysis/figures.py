"""The figures of the analysis. Each draws what the other modules computed (jobs, rows, groups,
intervals, fits) and computes nothing of its own: the summary's (the relative residual against
depth and the validation curves per job, intervals and validation bands per configuration), the
rank-collapse study's (every measure through depth, the rate of collapse beside the cubic rate),
the rank ablation's (each measure through depth per residual variant) and the recall study's."""

from __future__ import annotations

import math
import textwrap
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

# Sixteen colours that stay apart (matplotlib's tab10, then six more) and nine markers cycling on
# their own period: no two of the first 16 series share a colour, no two of the first 144 share
# both, and two series whose curves coincide still differ in the marker a legend shows.
SERIES_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#000000",
    "#e6ab02",
    "#000080",
    "#d000d0",
    "#006d6d",
    "#66c2a5",
)
SERIES_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<")
PANELS_PER_ROW = 4  # a figure with more panels wraps into rows (at most ~1800 px wide)
DPI = 110


def series_style(i: int) -> dict[str, str]:
    """The colour and marker of the i-th series of a figure (SERIES_COLOURS, SERIES_MARKERS)."""
    return {
        "color": SERIES_COLOURS[i % len(SERIES_COLOURS)],
        "marker": SERIES_MARKERS[i % len(SERIES_MARKERS)],
    }


def series_styles(labels: list[str]) -> dict[str, dict[str, Any]]:
    """One style per distinct label, in order of first appearance (a label keeps it in every
    panel of a figure): series_style's colour and marker, hollow, the first series drawn widest
    and each later one narrower, so that curves which coincide (stacks collapsed to the same
    floor) show as concentric markers, each visible, rather than the last one alone."""
    distinct = list(dict.fromkeys(labels))
    last = max(len(distinct) - 1, 1)
    return {
        label: {
            **series_style(i),
            "mfc": "none",
            "mew": 1.2,
            "ms": 8.0 - 5.0 * i / last,
            "lw": 2.4 - 1.4 * i / last,
        }
        for i, label in enumerate(distinct)
    }


def panel_grid(n: int, width: float = 4.0, height: float = 3.4, sharey: bool = True):
    """A figure of `n` panels (at least one), PANELS_PER_ROW to a row, the unused ones hidden:
    the figure and its panels in reading order."""
    cols = min(PANELS_PER_ROW, max(n, 1))
    rows = -(-max(n, 1) // cols)
    fig, grid = plt.subplots(
        rows, cols, figsize=(width * cols, height * rows), squeeze=False, sharey=sharey
    )
    axes = [ax for row in grid for ax in row]
    for ax in axes[max(n, 1) :]:
        ax.axis("off")
    return fig, axes


def figure_legend(fig: plt.Figure, handles: list[Any], labels: list[str]) -> None:
    """One legend for the whole figure, below its panels (never over a curve), as many columns
    as fit the figure's width."""
    if not labels:
        return
    per_column = 0.8 + 0.065 * max(len(label) for label in labels)  # inches at fontsize 8
    ncol = max(1, min(len(labels), int(fig.get_figwidth() / per_column)))
    fig.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=ncol,
        fontsize=8,
        frameon=False,
    )


def save(fig: plt.Figure, path: Path) -> None:
    """Lay out, write (the legend below the panels included) and close."""
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def ablation(r: dict[str, Any]) -> str:
    """A job's block switches in words: `residual add, mlp on, norm layernorm`."""
    on = lambda v: "on" if v in (True, "true", "True") else "off" if v is not None else "?"
    return f"residual {r.get('residual') or '?'}, mlp {on(r['mlp'])}, norm {r['norm'] or '?'}"


# the axes a panel of rank_vs_depth.png already names (its title is the job's ablation)
_ABLATION_AXES = (
    "mixer=",
    "model.residual=",
    "model.mlp=",
    "model.norm=",
    "model.depth=",
)


def _other_axes(r: dict[str, Any], shown: tuple[str, ...]) -> str:
    """The job's configuration (its `group`) without the axes a panel already shows."""
    parts = str(r.get("group") or "").split(", ")
    return ", ".join(p for p in parts if p and p != "all" and not p.startswith(shown))


def residual_scale(values: list[float]) -> str:
    """ "log" where relative residuals span more than a decade or reach 0 (a collapse), else
    "linear": 0.85 to 1 on a log axis has one tick label and reads as flat."""
    positive = [v for v in values if v > 0 and math.isfinite(v)]
    spread = bool(positive) and max(positive) > 10 * min(positive)
    return "log" if spread or 0 < len(positive) < len(values) else "linear"


def plot_rank(jobs: list[Job], rows: list[dict[str, Any]], path: Path) -> None:
    """rank_vs_depth.png: the relative residual after each block at the final evaluation, one
    panel per ablation (residual/MLP/norm, PANELS_PER_ROW to a row), one style per mixer (and
    other varied axes) across the panels, one legend below. A configuration's seeds are thin
    faint lines and their mean a bold one. The axis is logarithmic where the values span more
    than a decade (a collapse), linear otherwise, so a narrow range keeps readable ticks."""
    panels: dict[str, dict[str, list[list[float]]]] = {}
    for job, r in zip(jobs, rows, strict=True):
        profile = job.rank_profile()
        if profile:
            rest = _other_axes(r, _ABLATION_AXES)
            label = f"{r['mixer']} (depth {r['depth']})" + (f", {rest}" if rest else "")
            panels.setdefault(ablation(r), {}).setdefault(label, []).append(profile)
    log = (
        residual_scale(
            [v for seeds in panels.values() for ps in seeds.values() for p in ps for v in p]
        )
        == "log"
    )
    styles = series_styles([label for seeds in panels.values() for label in seeds])
    fig, axes = panel_grid(len(panels))
    handles: dict[str, Any] = {}
    for ax, (title, seeds) in zip(axes, sorted(panels.items()), strict=False):
        for label, profiles in seeds.items():
            style = styles[label]
            depth = min(len(p) for p in profiles)
            draw = [[max(v, 1e-17) if log else v for v in p[:depth]] for p in profiles]
            for p in draw if len(draw) > 1 else []:
                ax.plot(range(depth), p, color=style.get("color"), lw=0.6, alpha=0.3)
            mean = [sum(col) / len(col) for col in zip(*draw, strict=True)]
            (line,) = ax.plot(range(depth), mean, **style)
            handles.setdefault(f"{label}: mean of {len(draw)} seed(s)", line)
        ax.set_yscale("log" if log else "linear")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("layer (0 = embedding)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3, which="both")
    if not panels:
        axes[0].text(0.5, 0.5, "no job logged rank/layer_*", ha="center", va="center")
    for ax in axes[::PANELS_PER_ROW]:
        ax.set_ylabel("relative residual at the final eval")
    figure_legend(fig, list(handles.values()), list(handles))
    save(fig, path)


def plot_val(jobs: list[Job], rows: list[dict[str, Any]], path: Path) -> None:
    """val_curves.png: validation loss against step, one line per job, one panel per mixer
    (PANELS_PER_ROW to a row), one style per configuration of the other axes across the panels
    (dashed: a job that did not complete), one legend below."""
    panels: dict[str, list[tuple[str, bool, list[int], list[float]]]] = {}
    for job, r in zip(jobs, rows, strict=True):
        points = [
            (rec["step"], rec["val/loss"])
            for rec in job.records
            if "val/loss" in rec and "step" in rec
        ]
        if points:
            steps, losses = zip(*points, strict=True)
            label = _other_axes(r, ("mixer=",)) or f"{ablation(r)}, depth {r['depth']}"
            done = r["status"] == "completed"
            panels.setdefault(str(r["mixer"]), []).append((label, done, list(steps), list(losses)))
    styles = series_styles([c[0] for curves in panels.values() for c in curves])
    fig, axes = panel_grid(len(panels))
    handles: dict[str, Any] = {}
    unfinished = False
    for ax, (mixer, curves) in zip(axes, sorted(panels.items()), strict=False):
        for label, done, steps, losses in curves:
            (line,) = ax.plot(steps, losses, ls="-" if done else "--", **styles[label])
            if done or label not in handles:
                handles[label] = line
            unfinished |= not done
        ax.set_title(mixer)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    if not panels:
        axes[0].text(0.5, 0.5, "no job logged val/loss", ha="center", va="center")
    for ax in axes[::PANELS_PER_ROW]:
        ax.set_ylabel("validation loss")
    labels = list(handles)
    if unfinished:
        handles["dashed"] = plt.Line2D([], [], color="gray", ls="--")
        labels.append("dashed: a job that did not complete")
    figure_legend(fig, list(handles.values()), labels)
    save(fig, path)


def interval_panels(table: list[dict[str, Any]], split: str | None = None) -> list[tuple[str, str]]:
    """What intervals.png shows: the loss and metric of `split` (test or val); without one, the
    held-out test loss and metric where the runs have them (the numbers a study's claims are
    about), else the validation ones; then the rank."""
    rank = ("rank", "final relative residual")
    tested = [r.get("test_loss_mean") for r in table]
    if split == "test" or (
        split is None and any(t is not None and not math.isnan(t) for t in tested)
    ):
        return [
            ("test_loss", "final held-out test loss"),
            ("test_metric", "final held-out test metric"),
            rank,
        ]
    return [("val_loss", "final validation loss"), ("metric", "final task metric"), rank]


def plot_intervals(
    groups: list[Group],
    table: list[dict[str, Any]],
    path: Path,
    conf: float,
    split: str | None = None,
):
    """intervals.png: per configuration, the mean over seeds with its interval as a whisker, of
    the final loss and metric (`interval_panels`: held-out test where there is one) and rank,
    each seed as a grey dot (`table`: the group rows with the seeds' values under `_values`)."""
    panels = interval_panels(table, split)
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
                ax.errorbar(
                    [mean], [y], xerr=[[mean - low], [high - mean]], fmt="o", color="C0", capsize=3
                )
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
    """One panel per title (PANELS_PER_ROW to a row): per line (label, xs, intervals), the mean
    with its interval as a band (no band for one seed); one style per label across the panels,
    one legend below (with the seeds behind each line: n=3, or n=2-3 where panels differ)."""
    labels = [label for curves in panels.values() for label, xs, _ in curves if xs]
    styles = series_styles(labels)
    seeds: dict[str, set[int]] = {}
    fig, axes = panel_grid(len(panels), width=4.2)
    handles: dict[str, Any] = {}
    for ax, (title, curves) in zip(axes, panels.items(), strict=False):
        for label, xs, cis in curves:
            if not xs:
                continue
            style = styles[label]
            (line,) = ax.plot(xs, [c.mean for c in cis], **style)
            handles.setdefault(label, line)
            seeds.setdefault(label, set()).add(cis[-1].n)
            if cis[-1].n > 1:
                ax.fill_between(
                    xs,
                    [c.low for c in cis],
                    [c.high for c in cis],
                    color=style["color"],
                    alpha=0.2,
                    lw=0,
                )
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    if not any(ax.lines for ax in axes):
        axes[0].text(0.5, 0.5, "no completed job logged val/loss", ha="center", va="center")
    for ax in axes[::PANELS_PER_ROW]:
        ax.set_ylabel(ylabel)
    n = lambda s: f"n={min(s)}" if len(s) == 1 else f"n={min(s)}-{max(s)}"
    figure_legend(fig, list(handles.values()), [f"{k} ({n(seeds[k])})" for k in handles])
    save(fig, path)


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
        fig, axes = plt.subplots(
            rows, 2 * per_row, figsize=(6.4 * per_row, 2.9 * rows + 1.0), squeeze=False, sharey=True
        )
        for i, mixer in enumerate(mixers):
            for j, when in enumerate(("init", "trained")):
                ax = axes[i // per_row][2 * (i % per_row) + j]
                for c in cs:
                    if c.mixer != mixer or not c.mlp or (when, name) not in c.depth:
                        continue
                    ys = c.depth[when, name]
                    ax.plot(
                        range(len(ys)),
                        ys,
                        marker="o",
                        ms=3,
                        color=colors[c.residual],
                        ls="--" if c.norm == "none" else "-",
                        label=c.variant,
                    )
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
    (variant, norm) of `curves` (keyed by mixer, variant, norm; dashed: with LayerNorm). The
    eight lines of a panel often coincide (a collapsed stack at float64's floor, a skip stack
    at 1): `series_styles` draws them as concentric hollow markers, so each stays visible."""
    import torch

    cols = min(4, len(mixers))
    rows = -(-len(mixers) // cols)
    height = 2.9 * rows + 0.9
    fig, grid = plt.subplots(
        rows, cols, squeeze=False, sharex=True, sharey=True, figsize=(3.0 * cols + 1.9, height)
    )
    axes = [ax for row in grid for ax in row]
    depths = range(depth + 1)
    labels = {
        (v, n): f"{v}{'' if n == 'none' else ' +LN'}"
        for m in mixers
        for v, n in _variants_of(curves, m)
    }
    styles = series_styles(list(labels.values()))
    for ax, mixer in zip(axes, mixers, strict=False):
        for variant, norm in _variants_of(curves, mixer):
            label = labels[variant, norm]
            mean = torch.tensor(curves[mixer, variant, norm].mean)
            ax.semilogy(
                depths,
                mean.clamp_min(1e-17),
                linestyle="-" if norm == "none" else "--",
                label=label,
                **styles[label],
            )
        ax.set_title(mixer, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in axes[len(mixers) :]:
        ax.axis("off")
    for row in grid:
        row[0].set_ylabel("‖res(H)‖ / ‖H‖")
    for c in range(cols):  # the depth axis under the lowest panel of each column
        lowest = [grid[r][c] for r in range(rows) if r * cols + c < len(mixers)][-1]
        lowest.xaxis.set_tick_params(labelbottom=True)
        lowest.xaxis.set_major_locator(MaxNLocator(integer=True))
        lowest.set_xlabel("depth")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="center right", fontsize=8)
    fig.suptitle("Rank collapse at init: relative residual (float64 probe; dashed: with LayerNorm)")
    fig.tight_layout(rect=(0, 0, 1 - 1.7 / (3.0 * cols + 1.9), 1 - 0.5 / height))
    return fig


def measures_figure(
    curves: dict[tuple[str, str, str], RankProfile], mixers: list[str], depth: int
) -> plt.Figure:
    """Rows: mixers; columns: measures; one line per variant (dashed: with LayerNorm)."""
    names = list(MEASURES)
    fig, axes = plt.subplots(
        len(mixers),
        len(names),
        squeeze=False,
        sharex=True,
        figsize=(2.8 * len(names) + 1.8, 2.0 * len(mixers) + 0.6),
    )
    depths = range(depth + 1)
    for row, mixer in enumerate(mixers):
        for col, name in enumerate(names):
            ax = axes[row][col]
            for variant, norm in _variants_of(curves, mixer):
                values = curves[mixer, variant, norm].measures[name]
                ax.plot(
                    depths,
                    values,
                    marker="o",
                    markersize=2,
                    linestyle="-" if norm == "none" else "--",
                    label=f"{variant}{'' if norm == 'none' else ' +LN'}",
                )
            if name == "relative_residual":
                ax.set_yscale("log")
            mine = [v for (m, _, _), p in curves.items() if m == mixer for v in p.measures[name]]
            if all(math.isnan(v) for v in mine):
                ax.text(
                    0.5,
                    0.5,
                    "n/a: weights not\na distribution",
                    transform=ax.transAxes,
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="gray",
                )
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
    fig.suptitle(
        "Every measure at init, a row per mixer (float64 probe; attention entropy in "
        "nats, n/a where the mixer's weights are not a distribution)",
        fontsize=9,
    )
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
    seed, the paper's exponent's `mean` and `half` width (the least-squares slope the right
    panel shows) and, where given, the decrement `ratio` (an Interval), the other estimator, so
    the legend names both."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.0))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (mixer, r) in enumerate(rate.items()):
        colour = colours[i % len(colours)]
        label = f"{mixer}: paper's k {_num(r['mean'], '.2f')} ± {_num(r['half'], '.2f')}"
        if r.get("ratio") is not None:
            label += f", decrement ratio {_num(r['ratio'].mean, '.2f')}"
        pairs_all = []
        for j, curve in enumerate(r["curves"]):
            pts = [(layer, -math.log10(v)) for layer, v in enumerate(curve) if v > floor]
            left.plot(
                *zip(*pts, strict=True),
                marker="o",
                markersize=3,
                color=colour,
                alpha=0.6,
                label=label if j == 0 else None,
            )
            pairs = rate_pairs(curve, floor)
            pairs_all += pairs
            if pairs:
                right.plot(
                    *zip(*pairs, strict=True),
                    marker="o",
                    markersize=4,
                    color=colour,
                    alpha=0.6,
                    label=label if j == 0 else None,
                )
        if not pairs_all:
            continue
        log_c = sum(y - 3 * x for x, y in pairs_all) / len(pairs_all)  # k held at 3
        first = [math.log10(c[1]) for c in r["curves"] if c[1] > floor]
        ref = [(1, sum(first) / len(first))]
        while ref[-1][0] < depth and 3 * ref[-1][1] + log_c > math.log10(floor):
            ref.append((ref[-1][0] + 1, 3 * ref[-1][1] + log_c))
        left.plot(
            [x for x, _ in ref], [-y for _, y in ref], color=colour, linestyle="--", linewidth=1
        )
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
    left.legend(fontsize=7, loc="lower right")  # the curves rise from the lower left
    right.set_xlabel("log10 r_l")
    right.set_ylabel("log10 r_{l+1}")
    right.set_title(
        f"the paper's k: the least-squares slope over layers {FIT_LAYERS.start}–"
        f"{FIT_LAYERS.stop - 1}"
    )
    right.grid(alpha=0.3)
    right.legend(fontsize=7)
    lines = textwrap.wrap(title, 150)
    fig.suptitle("\n".join(lines), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.035 * len(lines)))
    return fig


def lambda_figure(sweep: list[Any], title: str) -> plt.Figure:
    """r_L / r_0 against λ (symmetric-log axis), one panel per norm, one line per mixer: mean
    over seeds with its 95% interval as a band; the verdict thresholds as dotted lines. `sweep`:
    attnzoo.analysis.stacks.LambdaRow."""
    from attnzoo.analysis.verdicts import COLLAPSED, KEPT

    norms = list(dict.fromkeys(r.norm for r in sweep))
    fig, axes = plt.subplots(
        1, len(norms), figsize=(5.2 * len(norms), 4.0), sharey=True, squeeze=False
    )
    for ax, norm in zip(axes[0], norms, strict=True):
        for i, name in enumerate(dict.fromkeys(r.stack for r in sweep)):
            rows = sorted(
                (r for r in sweep if r.stack == name and r.norm == norm), key=lambda r: r.lam
            )
            lams = [r.lam for r in rows]
            floor = 1e-17  # a log axis: a share of 0 is drawn at the bottom
            style = series_style(i)
            ax.plot(
                lams, [max(r.share.mean, floor) for r in rows], markersize=4, label=name, **style
            )
            ax.fill_between(
                lams,
                [max(r.share.low, floor) for r in rows],
                [max(r.share.high, floor) for r in rows],
                alpha=0.15,
                color=style.get("color"),
            )
        for y in (KEPT, COLLAPSED):
            ax.axhline(y, color="gray", linewidth=0.8, linestyle=":")
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_yscale("log")
        ax.set_xlabel("λ")
        ax.set_title(f"norm: {norm}")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("r_L / r_0 (kept share of the input's residual)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


# ---- the recall study -------------------------------------------------------------------------


def recall_figure(
    cells: list[dict[str, Any]], on: str, path: Path, success: float | None = None
) -> None:
    """The recall study's figure (scripts/recall.py), one row of panels: per depth, the measure
    `on` against width (a line through each mixer's means, every seed a dot, the mixers nudged
    apart by a fixed share of a width step, every depth on the same width axis), then, per depth
    that kept them, the sampled validation accuracy against training step at its widest width
    with curves (every fresh seed a line); one legend of the mixers below. With `success` (a
    threshold fixed before the runs) the line is each mixer's share of seeds that reached it,
    the outcome the study compares, not a mean no seed has. A cell is a dict with width, depth,
    chosen (arm: lr), groups (labelled by arm) and curves (rows of arm, seed, step,
    val_accuracy)."""
    depths = sorted({c["depth"] for c in cells})
    widths = sorted({c["width"] for c in cells})
    mixers = list(dict.fromkeys(m for c in cells for m in c["chosen"]))
    by_width = sorted(cells, key=lambda c: c["width"])
    shown = {}
    for depth in depths:
        kept = [c for c in by_width if c["depth"] == depth and c["curves"]]
        if kept:
            shown[depth] = kept[-1]
    n = len(depths) + len(shown)
    fig, grid = plt.subplots(1, n, figsize=(4.6 * n, 4.6), squeeze=False)
    axes = list(grid[0])
    for ax, depth in zip(axes, depths, strict=False):
        for i, mixer in enumerate(mixers):
            xs, means = [], []
            for c in (c for c in by_width if c["depth"] == depth):
                for g in (g for g in c["groups"] if g.label.get("arm") == mixer):
                    values = list(g.values(on).values())
                    x = c["width"] * 2 ** (0.06 * (i - (len(mixers) - 1) / 2))
                    ax.scatter([x] * len(values), values, s=12, color=f"C{i}", alpha=0.6)
                    if values:
                        xs.append(x)
                        if success is None:
                            means.append(sum(values) / len(values))
                        else:
                            means.append(sum(v >= success for v in values) / len(values))
            if success is None:
                ax.plot(xs, means, "-o", color=f"C{i}", label=mixer, markersize=3)
            else:  # a share is not a seed: a larger, outlined marker
                ax.plot(xs, means, "-D", color=f"C{i}", label=mixer, markersize=7, mec="black")
        if success is not None:
            ax.axhline(success, color="0.5", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_xticks(widths, [str(w) for w in widths])
        ax.set_xlim(widths[0] / 2**0.5, widths[-1] * 2**0.5)
        ax.set(
            xlabel="model width (model.dim)",
            ylabel="MQAR test accuracy (fresh seeds)"
            if success is None
            else f"test accuracy (dots); share of seeds ≥ {success:g} (◆)",
            ylim=(-0.02, 1.02),
            title=f"depth {depth}: test accuracy against width",
        )
        ax.grid(alpha=0.3)
    for ax, (depth, cell) in zip(axes[len(depths) :], shown.items(), strict=True):
        for i, mixer in enumerate(mixers):
            for seed in dict.fromkeys(r["seed"] for r in cell["curves"]):
                curve = [
                    (float(r["step"]), float(r["val_accuracy"]))
                    for r in cell["curves"]
                    if r["arm"] == mixer and r["seed"] == seed
                ]
                if curve:
                    ax.plot(*zip(*curve, strict=True), color=f"C{i}", lw=1, alpha=0.7)
        ax.set(
            xlabel="training step",
            ylabel="val accuracy (sampled)",
            ylim=(-0.02, 1.02),
            title=f"depth {depth}, width {cell['width']}: every fresh seed",
        )
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.04),
        ncol=len(labels),
        fontsize=8,
    )
    unkept = [str(d) for d in depths if d not in shown]
    if unkept:  # cells read from a report written before curves were kept
        note = f"no validation curves were kept for depth {', '.join(unkept)}"
        fig.text(0.5, 0.0, note, ha="center", va="bottom", fontsize=7)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
