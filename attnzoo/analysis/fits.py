"""How fast rank collapses: the per-layer exponent of the relative residual. Dong, Cordonnier &
Loukas (2021) prove res_{l+1} ≲ c·res_l³ for pure attention, so log r_{l+1} = k·log r_l + log c
with k = 3 up to a weight-dependent constant.

Both readings here use the same layers for every stack: FIT_LAYERS, the outputs of blocks 1 to
5. The embedding → block-1 step is left out (the embedding is not the output of a mixer, and
its residual sits near 1, outside any regime), and every layer of the range must be above the
measurement's floor (`floor`: FLOAT64_FLOOR for a plain float64 probe, about 50 times its
rounding floor of 2e-16; attnzoo.analysis.split_residual.SPLIT_FLOOR for the split
measurement, which reads the residual of a pure stack far past it). A stack whose residual
falls under the floor inside the range has no rate: NaN, never a rate read from fewer layers.

`fit_rate` is the least-squares slope k of log r_{l+1} = k·log r_l + log c over the range.
`exponent_growth` is a cruder reading over any falling stretch: the median ratio of successive
log-residuals.

Which kind of collapse. `decrement_ratio` reads the exponent without the constant: with
δ_l = log r_{l+1} − log r_l, r_{l+1} = c·r_l^k gives δ_{l+1} = k·δ_l whatever c is, so the
least-squares k of δ_{l+1} = k·δ_l over the range is 1 for a singly exponential decay
(r_l = a·ρ^l, every layer takes the same share) and k > 1 for a doubly exponential one.
`collapse_kind` puts a stack in words from its seeds, by a fixed rule: the share of the
input's residual the last layer keeps, r_L / r_0, decides whether it collapses (the
keep/collapse thresholds of attnzoo.analysis.verdicts, on the interval over seeds), and the
interval of the decrement ratio decides how (a factor, so on the log scale: a geometric mean
over seeds): doubly exponential when its lower end is above DOUBLY (1.5: each layer's decrement
half again the last one's; the cubic rate gives 3), singly exponential when it lies inside
[1/DOUBLY, DOUBLY] (geometric decay gives 1). A stack whose state itself vanishes to 0 (a
signal lost in magnitude, not in rank: the relative residual is NaN there) is VANISHES, never
read as collapsed. The rule is calibrated in the tests on curves
with known answers read exactly as the mixers' are: synthetic r_{l+1} = c·r_l^k with k = 1, 2
and 3 and noise as large as the seeds' own, the frozen stochastic control and local attention
(singly), and a floor moved 100 times either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from attnzoo.analysis.verdicts import kept_share, verdict
from attnzoo.stats import Interval, mean_interval

# Below this the float64 probe is at its rounding floor and log-ratios stop meaning anything.
FLOOR = 1e-13
FLOAT64_FLOOR = 1e-14  # a plain float64 probe's residual above this is read (50× its floor)
FIT_LAYERS = range(1, 6)  # the block outputs both rates are read from, for every stack
DOUBLY = 1.5  # a decrement ratio above this is doubly exponential, within [1/it, it] singly
# a stack some seed of which reaches an all-zero state (or a non-finite one): rank is undefined
VANISHES = "state vanishes (rank undefined)"
NOT_RESOLVED = "collapses, rate not resolved"


def fit_logs(
    curve: Sequence[float], floor: float = FLOAT64_FLOOR, layers: range = FIT_LAYERS
) -> list[float] | None:
    """log10 r_l for l in `layers`, or None when the curve is shorter or some r_l is not
    above `floor`."""
    if len(curve) < layers.stop or not all(curve[layer] > floor for layer in layers):
        return None
    return [math.log10(curve[layer]) for layer in layers]


def layers_above(curve: Sequence[float], floor: float = FLOAT64_FLOOR) -> int:
    """How many block outputs (layers 1, 2, ... in a row) are above `floor`."""
    n = 0
    for r in curve[1:]:
        if not r > floor:
            break
        n += 1
    return n


def rate_pairs(
    curve: Sequence[float], floor: float = FLOAT64_FLOOR, layers: range = FIT_LAYERS
) -> list[tuple[float, float]]:
    """(log10 r_l, log10 r_{l+1}) over the range, [] when the range is not all above `floor`."""
    logs = fit_logs(curve, floor, layers)
    return [] if logs is None else list(zip(logs, logs[1:], strict=False))


def fit_rate(
    residuals: Sequence[float], floor: float = FLOAT64_FLOOR, layers: range = FIT_LAYERS
) -> float:
    """The least-squares slope k of log r_{l+1} = k·log r_l + log c over `layers`; NaN when a
    layer of the range is not above `floor` or the residual does not move."""
    pairs = rate_pairs(residuals, floor, layers)  # log10: the slope is the same in any base
    if len(pairs) < 2:
        return math.nan
    mx = sum(x for x, _ in pairs) / len(pairs)
    my = sum(y for _, y in pairs) / len(pairs)
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    return sum((x - mx) * (y - my) for x, y in pairs) / sxx if sxx > 0 else math.nan


def exponent_growth(residuals: list[float]) -> float | None:
    """Median over layers of log r_{l+1} / log r_l, over the stretch where the residual is falling
    and still above float64's floor. Doubly exponential decay r_l ~ c^(3^l) gives 3."""
    ratios = [
        math.log(b) / math.log(a)
        for a, b in zip(residuals, residuals[1:], strict=False)
        if a < 0.5 and FLOOR < b < a
    ]
    return sorted(ratios)[len(ratios) // 2] if ratios else None


def decrement_ratio(
    residuals: Sequence[float], floor: float = FLOAT64_FLOOR, layers: range = FIT_LAYERS
) -> float:
    """The least-squares k of δ_{l+1} = k·δ_l, δ_l = log r_{l+1} − log r_l, over `layers` (see
    the module docstring): 1 for a singly exponential decay, the exponent k of r_{l+1} = c·r_l^k
    for a doubly exponential one. NaN when a layer of the range is not above `floor` or there is
    no decrement at all."""
    logs = fit_logs(residuals, floor, layers)
    if logs is None:
        return math.nan
    steps = [b - a for a, b in zip(logs, logs[1:], strict=False)]
    pairs = list(zip(steps, steps[1:], strict=False))
    sxx = sum(a * a for a, _ in pairs)
    return sum(a * b for a, b in pairs) / sxx if pairs and sxx > 0 else math.nan


def collapse_kind(
    curves: Sequence[Sequence[float]],
    confidence: float = 0.95,
    floor: float = FLOAT64_FLOOR,
    layers: range = FIT_LAYERS,
) -> tuple[str, Interval, Interval]:
    """How a stack's relative residual behaves over its seeds' curves (r_0 the input, r_L the
    last layer): "no collapse", "partial", "collapses singly exponentially", "collapses doubly
    exponentially", "collapses, rate not resolved", or VANISHES where some seed's state reaches
    0 (its relative residual is NaN: no rank to read; see the module docstring), with the
    intervals over seeds of the kept share r_L / r_0 and of the decrement ratio over `layers`
    (read above `floor`). The ratio is a factor, so its mean and interval are taken on the log
    scale (a geometric mean). The rate is not resolved unless every seed has every layer of the
    range above the floor and a positive ratio: no seed is dropped for being short."""
    shares = [kept_share("relative_residual", c) for c in curves]
    share = mean_interval([x for x in shares if math.isfinite(x)], confidence)
    ratios = [decrement_ratio(c, floor, layers) for c in curves]
    if ratios and all(math.isfinite(k) and k > 0 for k in ratios):
        logs = mean_interval([math.log(k) for k in ratios], confidence)
        ratio = Interval(
            logs.n,
            math.exp(logs.mean),
            math.nan,
            math.exp(logs.low),
            math.exp(logs.high),
            confidence,
            "geometric mean over seeds",
        )
    else:
        ratio = Interval(
            0,
            math.nan,
            math.nan,
            math.nan,
            math.nan,
            confidence,
            "some seed has no ratio over the layers above the floor",
        )
    if any(not all(math.isfinite(x) for x in c) for c in curves):
        return VANISHES, share, ratio
    kept = verdict(share)
    if kept == "kept":
        return "no collapse", share, ratio
    if kept != "collapsed":
        return kept, share, ratio
    if ratio.n >= 2 and ratio.low > DOUBLY:
        return "collapses doubly exponentially", share, ratio
    if ratio.n >= 2 and ratio.low >= 1 / DOUBLY and ratio.high <= DOUBLY:
        return "collapses singly exponentially", share, ratio
    return NOT_RESOLVED, share, ratio


def floor_free_kind(
    curves: Sequence[Sequence[float]], floors: Sequence[float], confidence: float = 0.95
) -> tuple[str, Interval, Interval]:
    """`collapse_kind` at `floors[0]` where every floor of `floors` reads the same kind; where
    they differ the rate rests on the cutoff, not on the stack, and is not resolved (the shares
    and the ratio at `floors[0]` kept for the table)."""
    kind, share, ratio = collapse_kind(curves, confidence, floors[0])
    if any(collapse_kind(curves, confidence, f)[0] != kind for f in floors[1:]):
        return NOT_RESOLVED, share, ratio
    return kind, share, ratio
