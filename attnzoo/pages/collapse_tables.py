"""Reading the rank-collapse-at-init study's committed tables (scripts/rank_collapse.py's
collapse_rate.csv, rank_collapse_seeds.csv, rank_collapse.csv, cubic_rate.csv, lambda_skip.csv):
their names, the rule's words and thresholds, and the per-seed quantities the pages quote."""

from __future__ import annotations

import math
from collections.abc import Sequence

from attnzoo.pages.tables import Tables, num
from attnzoo.pages.words import fmt, span

HEADER = "rank_collapse/rank_collapse.json"  # the command, machine and settings
RATE = "rank_collapse/collapse_rate.csv"
SEEDS = "rank_collapse/rank_collapse_seeds.csv"
CUBIC = "rank_collapse/cubic_rate.csv"
COLLAPSE = "rank_collapse/rank_collapse.csv"
LAMBDA = "rank_collapse/lambda_skip.csv"
SOFTMAX = ("scaled_dot", "quadratic", "metric")
KEEP_RANK = ("pooling", "identity", "fourier", "token_mlp")
DOUBLY, SINGLY, NO_COLLAPSE = (
    "collapses doubly exponentially",
    "collapses singly exponentially",
    "no collapse",
)
VANISHES = "state vanishes (rank undefined)"
KEPT, COLLAPSED = 0.5, 0.2  # attnzoo.analysis.verdicts' thresholds on r_L / r_0


def k_span(t: Tables, mixers: Sequence[str], column: str = "k") -> str:
    return span([num(t.one(RATE, mixer=m), column) for m in mixers], ".2f")


def skip_shares(t: Tables) -> dict[tuple[str, str, str], list[float]]:
    """r_L / r_0 per seed, for every skip stack of a mixer at its defaults (not the option rows,
    whose names say their option in parentheses): (mixer, variant, norm) -> shares."""
    curves: dict[tuple[str, str, str, str], dict[int, float]] = {}
    for r in t.rows(SEEDS):
        if "skip" in r["variant"] and "(" not in r["mixer"]:
            key = (r["mixer"], r["variant"], r["norm"], r["seed"])
            curves.setdefault(key, {})[int(r["depth"])] = num(r, "relative_residual")
    shares: dict[tuple[str, str, str], list[float]] = {}
    for (mixer, variant, norm, _), curve in sorted(curves.items()):
        shares.setdefault((mixer, variant, norm), []).append(curve[max(curve)] / curve[0])
    return shares


def skip_alone_shares(t: Tables, mixer: str) -> list[float]:
    """r_L / r_0 per seed of `mixer` with a skip alone (no norm, no MLP)."""
    curves: dict[str, dict[int, float]] = {}
    for r in t.rows(SEEDS, mixer=mixer, variant="+skip", norm="none"):
        curves.setdefault(r["seed"], {})[int(r["depth"])] = num(r, "relative_residual")
    return [c[max(c)] / c[0] for c in curves.values()]


def log10_after(t: Tables, mixer: str, depth: int, spec: str) -> str:
    """log10 r after `depth` blocks, mean [95% interval] over the seeds."""
    from attnzoo.stats import mean_interval

    rows = t.rows(CUBIC, mixer=mixer, depth=str(depth))
    i = mean_interval([math.log10(num(r, "residual")) for r in rows])
    return f"{fmt(i.mean, spec)} [{fmt(i.low, spec)}, {fmt(i.high, spec)}]"


def lambda_rows(t: Tables, mixer: str, norm: str) -> dict[float, dict[str, str]]:
    return {float(r["lambda"]): r for r in t.rows(LAMBDA, mixer=mixer, norm=norm)}
