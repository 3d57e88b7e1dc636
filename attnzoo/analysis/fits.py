"""How fast rank collapses: the per-layer exponent of the relative residual. Dong, Cordonnier &
Loukas (2021) prove res_{l+1} ≲ c·res_l³ for pure attention, so log r_{l+1} = k·log r_l + log c
with k = 3 up to a weight-dependent constant.

`fit_rate` is the least-squares slope k over the layers in the cubic regime: the residual has
left the first block's input (r_l ≤ RATE_START; the embedding sits near 1, outside the regime)
and its successor is above RATE_FLOOR (about 50 times the float64 probe's floor of 2e-16).
`exponent_growth` is a cruder reading over any falling stretch: the median ratio of successive
log-residuals.

Which kind of collapse. `decrement_ratio` reads the exponent without the constant: with
δ_l = log r_{l+1} − log r_l, r_{l+1} = c·r_l^k gives δ_{l+1} = k·δ_l whatever c is, so the
least-squares k of δ_{l+1} = k·δ_l over consecutive layers above the floor is 1 for a singly
exponential decay (r_l = a·ρ^l, every layer takes the same share) and k > 1 for a doubly
exponential one; it needs three layers above the floor, where `fit_rate` needs three in the
cubic regime, so it reads the mixers that reach the floor in three layers too. `collapse_kind`
puts a stack in words from its seeds, by a fixed rule: the share of the input's
residual the last layer keeps, r_L / r_0, decides whether it collapses (the keep/collapse
thresholds of attnzoo.analysis.verdicts, on the interval over seeds), and the interval of the
decrement ratio decides how (a factor, so on the log scale: a geometric mean over seeds):
doubly exponential when its lower end is above DOUBLY (1.5: each layer's decrement half again
the last one's; the cubic rate gives 3), singly exponential when it lies inside
[1/DOUBLY, DOUBLY] (geometric decay gives 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from attnzoo.analysis.verdicts import kept_share, verdict
from attnzoo.stats import Interval, mean_interval

# Below this the float64 probe is at its rounding floor and log-ratios stop meaning anything.
FLOOR = 1e-13
RATE_START, RATE_FLOOR = 0.75, 1e-14
DOUBLY = 1.5  # a decrement ratio above this is doubly exponential, within [1/it, it] singly


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


def decrement_ratio(residuals: list[float]) -> float:
    """The least-squares k of δ_{l+1} = k·δ_l, δ_l = log r_{l+1} − log r_l, over the consecutive
    layers whose residuals are all above RATE_FLOOR (see the module docstring): 1 for a singly
    exponential decay, the exponent k of r_{l+1} = c·r_l^k for a doubly exponential one. NaN
    with fewer than three layers above the floor or no decrement at all."""
    logs = []
    for r in residuals:
        if not r > RATE_FLOOR:
            break
        logs.append(math.log10(r))
    steps = [b - a for a, b in zip(logs, logs[1:], strict=False)]
    pairs = list(zip(steps, steps[1:], strict=False))
    sxx = sum(a * a for a, _ in pairs)
    return sum(a * b for a, b in pairs) / sxx if pairs and sxx > 0 else math.nan


def collapse_kind(
    curves: Sequence[list[float]], confidence: float = 0.95
) -> tuple[str, Interval, Interval]:
    """How a stack's relative residual behaves over its seeds' curves (r_0 the input, r_L the
    last layer): "no collapse", "partial", "collapses singly exponentially", "collapses doubly
    exponentially", or "collapses, rate not resolved" (see the module docstring), with the
    intervals over seeds of the kept share r_L / r_0 and of the decrement ratio. The ratio is a
    factor, so its mean and interval are taken on the log scale (a geometric mean; a seed whose
    ratio is not positive leaves the rate unresolved): a seed read from three layers and one
    read from four then differ by a factor, not by an offset that swamps the interval."""
    shares = [kept_share("relative_residual", c) for c in curves]
    share = mean_interval([x for x in shares if math.isfinite(x)], confidence)
    ratios = [k for k in (decrement_ratio(c) for c in curves) if math.isfinite(k)]
    if ratios and min(ratios) > 0:
        logs = mean_interval([math.log(k) for k in ratios], confidence)
        ratio = Interval(logs.n, math.exp(logs.mean), math.nan, math.exp(logs.low),
                         math.exp(logs.high), confidence, "geometric mean over seeds")  # fmt: skip
    else:
        ratio = Interval(len(ratios), math.nan, math.nan, math.nan, math.nan, confidence,
                         "no positive ratio in some seed")  # fmt: skip
    kept = verdict(share)
    if kept == "kept":
        return "no collapse", share, ratio
    if kept != "collapsed":
        return kept, share, ratio
    if ratio.n >= 2 and ratio.low > DOUBLY:
        return "collapses doubly exponentially", share, ratio
    if ratio.n >= 2 and ratio.low >= 1 / DOUBLY and ratio.high <= DOUBLY:
        return "collapses singly exponentially", share, ratio
    return "collapses, rate not resolved", share, ratio
