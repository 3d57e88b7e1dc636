"""What the atlas's figures share in drawing: every seed as a thin line under its mean.

fig, axes = panels(2, "title")          # a row of panels, non-interactive backend
seed_lines(ax, rows, x="depth", y="residual", label="pure", color="C0")
save(fig, png)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def panels(n: int, title: str, width: float = 5.0, height: float = 4.0, rows: int = 1):
    """A figure of `rows` × `n` panels (axes as a flat list) with `title` above them."""
    fig, axes = plt.subplots(rows, n, figsize=(width * n, height * rows), squeeze=False)
    fig.suptitle(title, fontsize=10)
    return fig, [ax for row in axes for ax in row]


def by_seed(rows: Sequence[dict], x: str, y: str) -> dict[int, tuple[list, list]]:
    """{seed: (xs, ys)} in x order; rows whose y is None or NaN are left out."""
    out: dict[int, list[tuple]] = defaultdict(list)
    for r in rows:
        v = r.get(y)
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            out[r["seed"]].append((r[x], v))
    return {s: tuple(map(list, zip(*sorted(pts), strict=True))) for s, pts in sorted(out.items())}


def seed_lines(
    ax,
    rows: Sequence[dict],
    x: str,
    y: str,
    label: str,
    color: str,
    geometric: bool = False,
    marker: str | None = None,
    linestyle: str = "-",
) -> None:
    """Each seed's curve thin and faint, their mean (geometric for a log axis) thick, labelled
    with `label` and the number of seeds."""
    curves = by_seed(rows, x, y)
    if not curves:
        return
    for xs, ys in curves.values():
        ax.plot(xs, ys, color=color, alpha=0.3, lw=0.8, linestyle=linestyle)
    points: dict[object, list[float]] = defaultdict(list)
    for xs, ys in curves.values():
        for a, b in zip(xs, ys, strict=True):
            points[a].append(b)
    xs = sorted(points)
    if geometric:
        ys = [
            math.exp(sum(math.log(v) for v in points[a]) / len(points[a]))
            if all(v > 0 for v in points[a])
            else math.nan
            for a in xs
        ]
    else:
        ys = [sum(points[a]) / len(points[a]) for a in xs]
    ax.plot(
        xs,
        ys,
        color=color,
        lw=2,
        marker=marker,
        ms=3,
        linestyle=linestyle,
        label=f"{label} ({len(curves)} seeds)",
    )


def save(fig, png: Path, dpi: int = 110) -> None:
    fig.tight_layout()
    fig.savefig(png, dpi=dpi)
    plt.close(fig)
