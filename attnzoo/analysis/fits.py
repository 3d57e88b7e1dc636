"""How fast rank collapses: the per-layer exponent of the relative residual. Dong, Cordonnier &
Loukas (2021) prove res_{l+1} ≲ c·res_l³ for pure attention, so log r_{l+1} = k·log r_l + log c
with k = 3 up to a weight-dependent constant.

`fit_rate` is the least-squares slope k over the layers in the cubic regime: the residual has
left the first block's input (r_l ≤ RATE_START; the embedding sits near 1, outside the regime)
and its successor is above RATE_FLOOR (about 50 times the float64 probe's floor of 2e-16).
`exponent_growth` is a cruder reading over any falling stretch: the median ratio of successive
log-residuals.
"""

from __future__ import annotations

import math

# Below this the float64 probe is at its rounding floor and log-ratios stop meaning anything.
FLOOR = 1e-13
RATE_START, RATE_FLOOR = 0.75, 1e-14


def rate_pairs(curve: list[float]) -> list[tuple[float, float]]:
    """(log10 r_l, log10 r_{l+1}) over the layers the fit uses."""
    return [
        (math.log10(a), math.log10(b))
        for a, b in zip(curve, curve[1:], strict=False)
        if a <= RATE_START and RATE_FLOOR < b < a
    ]


def fit_rate(residuals: list[float]) -> float:
    """The least-squares slope k of log r_{l+1} = k·log r_l + log c over the pairs in the cubic
    regime (see RATE_START, RATE_FLOOR); NaN with fewer than two pairs."""
    pairs = rate_pairs(residuals)  # log10: the slope is the same in any base
    if len(pairs) < 2:
        return math.nan
    mx = sum(x for x, _ in pairs) / len(pairs)
    my = sum(y for _, y in pairs) / len(pairs)
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    return sum((x - mx) * (y - my) for x, y in pairs) / sxx


def exponent_growth(residuals: list[float]) -> float | None:
    """Median over layers of log r_{l+1} / log r_l, over the stretch where the residual is falling
    and still above float64's floor. Doubly exponential decay r_l ~ c^(3^l) gives 3."""
    ratios = [
        math.log(b) / math.log(a)
        for a, b in zip(residuals, residuals[1:], strict=False)
        if a < 0.5 and FLOOR < b < a
    ]
    return sorted(ratios)[len(ratios) // 2] if ratios else None
