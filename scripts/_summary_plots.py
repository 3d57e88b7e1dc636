"""The figures of scripts/summarize.py: the relative residual against depth and the validation
curves per job, the intervals per configuration, and validation bands over seeds. They draw
what summarize computed (jobs, rows, groups, intervals) and compute nothing of their own.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def ablation(r: dict[str, Any]) -> str:
    on = lambda v: "on" if v in (True, "true", "True") else "off" if v is not None else "?"
    residual = r.get("residual") or f"skip {on(r['skip'])}"
    return f"residual {residual}, mlp {on(r['mlp'])}, norm {r['norm'] or '?'}"


def plot_rank(jobs: list[Any], rows: list[dict[str, Any]], path: Path) -> None:
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


def plot_val(jobs: list[Any], rows: list[dict[str, Any]], path: Path) -> None:
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


def plot_intervals(groups: list[Any], table: list[dict[str, Any]], path: Path, conf: float):
    """Mean over seeds with its interval as a whisker, per configuration and measure."""
    panels = [("val_loss", "final validation loss"), ("metric", "final task metric"),
              ("rank", "final relative residual")]  # fmt: skip
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
        ax.set_yticklabels(names if which == "val_loss" else [], fontsize=7)
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
