"""Statistics over seeds: intervals for a configuration, and tests for a difference between two.

A sweep's seeds (`train.seed=0,1,2,3,4`) are replicates of one configuration. With the 3 to 10
seeds a study can afford, the choices here are:

**Interval for a mean: Student's t**, `x̄ ± t₀.₉₇₅,ₙ₋₁ · s / √n` with `s² = Σ(xᵢ − x̄)² / (n − 1)`.
It is exact when the seed-to-seed values are normal and robust to moderate skew. The percentile
bootstrap is not used: at n = 5 it resamples from only 126 distinct multisets, its spread is the
plug-in `s · √((n − 1) / n)`, and it uses normal-like quantiles where t₀.₉₇₅,₄ = 2.78 is needed,
so a nominal 95% interval covers the true mean only about 80-85% of the time (tests/test_stats.py
measures both: t ≈ 0.95, bootstrap well below). One seed gives no interval at all (`Interval` with
`low = high = nan` and a note), never a made-up one.

**Is a difference resolved: the paired t-test on matching seeds**, Welch's t-test otherwise. In a
sweep every configuration runs the same seeds, and a seed fixes the data order and the
initialisation stream, so two configurations' runs at one seed share part of their noise; the
paired test works on the per-seed differences `dᵢ = aᵢ − bᵢ` and removes it:

    d̄ ± t₁₋α/₂,ₙ₋₁ · s_d / √n,          p = 2 · P(T_{n−1} > |d̄| / (s_d / √n))

It is valid whatever the correlation (it only costs degrees of freedom, n − 1 instead of up to
2n − 2, when there is none). When the seed sets differ (a failed job, different sweeps), Welch:

    se = √(s_a²/n_a + s_b²/n_b),   ν = se⁴ / ((s_a²/n_a)² / (n_a − 1) + (s_b²/n_b)² / (n_b − 1))

"Resolved" means the (1 − α) interval of the difference excludes 0 (equivalently p < α).

**Is it negligible: two one-sided tests (TOST)** with a margin δ chosen by the user: the
difference is "within margin" when both H₀: Δ ≤ −δ and H₀: Δ ≥ δ are rejected at level α, i.e.
when the (1 − 2α) interval of the difference lies inside (−δ, δ):

    p_TOST = max(P(T_ν > (d̄ + δ) / se), P(T_ν < (d̄ − δ) / se))

"Not resolved" is not "equal": only TOST can say a difference is smaller than δ.

**Is it worse (or better) by more than δ: a one-sided test against the margin.** "a is worse
than b by more than δ" needs H₀: Δ ≤ δ rejected, `p = P(T_ν > (d̄ − δ) / se)` (and "better by more
than δ", H₀: Δ ≥ −δ, `p = P(T_ν < (d̄ + δ) / se)`). Which side is read off the sign of d̄, so
`p_margin` is twice the smaller of the two (Bonferroni over the two sides); at δ = 0 it is the
two-sided p.

**Many comparisons: a family-wise correction.** A report makes m comparisons, each against a
reference fixed before the runs; at level α each, some would come out "resolved" by chance alone.
`adjust` corrects a family of p-values so that the chance of any false claim in it stays ≤ α:
Holm's step-down (the default: with the p-values sorted, p₍ᵢ₎ is multiplied by m − i + 1, then
made non-decreasing; never less powerful than Bonferroni), Bonferroni (m · p), or none. Tests
that could not be made (NaN) are not counted in m.

The t distribution (`t_cdf`, `t_sf`, `t_ppf`) is SciPy's special functions: `scipy.special.stdtr`
(the upper tail P(T > t) as stdtr(df, −t), never as 1 − P(T ≤ t), which cancels to noise in the
last digits of a small p-value), and for the quantile the inverse incomplete beta function
`betaincinv`; both take the fractional degrees of freedom of Welch's test. tests/test_stats.py
checks them against printed table values and closed forms, and the tests against SciPy's own
t-tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

__all__ = [
    "CORRECTIONS",
    "Comparison",
    "Interval",
    "adjust",
    "bonferroni",
    "compare",
    "holm",
    "mean_interval",
    "paired_t",
    "t_cdf",
    "t_ppf",
    "t_sf",
    "welch_t",
]


# ---- the t distribution ---------------------------------------------------------------------


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with `df` degrees of freedom (df may be fractional, as Welch's)."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    return float(special.stdtr(df, t))


def t_sf(t: float, df: float) -> float:
    """P(T > t), the upper tail, as P(T ≤ −t) by symmetry: accurate to its last digit however
    small, where 1 − t_cdf(t, df) keeps only the digits of the difference from 1 (a p-value of
    1e-8 to about 8 significant digits, the noise after them different in each SciPy)."""
    return t_cdf(-t, df)


def t_ppf(q: float, df: float) -> float:
    """The q-quantile of Student's t with `df` degrees of freedom: the t with P(T ≤ t) = q.

    Read off the inverse of the regularised incomplete beta function, P(|T| > |t|) =
    I_{df / (df + t²)}(df / 2, 1 / 2): `scipy.special.betaincinv` gives t to about 1e-14 at the
    degrees of freedom a study's seeds give, in every SciPy this package admits, where SciPy's own
    t quantile (`stdtrit`) is accurate to only about 1e-9 before SciPy 1.17, enough to move the
    last digits of a committed table."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile level must be in (0, 1), got {q}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    x = float(special.betaincinv(df / 2.0, 0.5, 2.0 * min(q, 1.0 - q)))
    return math.copysign(math.sqrt(df * (1.0 - x) / x), q - 0.5)


# ---- an interval for one configuration -------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """Mean over seeds with its Student-t interval; `low`/`high` are nan (and `note` says why)
    when there are fewer than two values."""

    n: int
    mean: float
    std: float
    low: float
    high: float
    confidence: float
    note: str = ""

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2.0


def _finite(values: Sequence[float]) -> np.ndarray:
    x = np.asarray(list(values), dtype=np.float64)
    if x.ndim != 1:
        raise ValueError("values must be a flat sequence of numbers")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"values must be finite, got {x.tolist()} (drop diverged runs first)")
    return x


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """x̄ ± t_{(1+c)/2, n−1} · s / √n, s the sample standard deviation (ddof = 1).

    n = 1: mean = the value, std and the interval nan, with a note; n = 0: everything nan."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    x = _finite(values)
    n = len(x)
    if n == 0:
        return Interval(0, math.nan, math.nan, math.nan, math.nan, confidence, "no values")
    mean = float(x.mean())
    if n == 1:
        note = "one seed: no interval (run more seeds)"
        return Interval(1, mean, math.nan, math.nan, math.nan, confidence, note)
    std = float(x.std(ddof=1))
    half = t_ppf((1.0 + confidence) / 2.0, n - 1) * std / math.sqrt(n)
    return Interval(n, mean, std, mean - half, mean + half, confidence)


# ---- a difference between two configurations --------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Difference `a − b` of two configurations' means, its interval, and the verdicts.

    `verdict` is one of "resolved", "within margin", "resolved, within margin" (a real but
    negligible difference), "not resolved", or "too few seeds"."""

    method: str
    n_a: int
    n_b: int
    diff: float
    low: float
    high: float
    p_value: float
    df: float
    confidence: float
    margin: float | None
    p_tost: float | None
    resolved: bool
    within_margin: bool
    p_margin: float | None = None  # one-sided against the margin on d̄'s side, both sides counted

    @property
    def half_width(self) -> float:
        """Half the width of the interval of the difference: the smallest |Δ| these seeds resolve."""
        return (self.high - self.low) / 2.0

    @property
    def verdict(self) -> str:
        if math.isnan(self.p_value):
            return "too few seeds"
        if self.resolved and self.within_margin:
            return "resolved, within margin"
        if self.resolved:
            return "resolved"
        if self.within_margin:
            return "within margin"
        return "not resolved"


def _t_tests(
    method: str,
    n_a: int,
    n_b: int,
    diff: float,
    se: float,
    df: float,
    confidence: float,
    margin: float | None,
) -> Comparison:
    """Two-sided t-test, (confidence) interval and TOST for an estimate `diff` with standard
    error `se` and `df` degrees of freedom."""
    alpha = 1.0 - confidence
    p_margin = None
    if se == 0.0:  # every seed gave the same difference: the data cannot tell more
        p = 1.0 if diff == 0.0 else 0.0
        p_tost = None if margin is None else (0.0 if abs(diff) < margin else 1.0)
        p_margin = None if margin is None else (0.0 if abs(diff) > margin else 1.0)
        low = high = diff
    else:
        p = 2.0 * t_sf(abs(diff) / se, df)
        half = t_ppf(1.0 - alpha / 2.0, df) * se
        low, high = diff - half, diff + half
        p_tost = None
        if margin is not None:
            p_lower = t_sf((diff + margin) / se, df)  # H0: diff <= -margin
            p_upper = t_cdf((diff - margin) / se, df)  # H0: diff >= +margin
            p_tost = max(p_lower, p_upper)
            # beyond the margin: H0 diff <= +margin (diff >= 0) or H0 diff >= -margin (diff < 0)
            if diff >= 0:
                one_sided = t_sf((diff - margin) / se, df)  # 1 - p_upper, without the cancelling
            else:
                one_sided = t_cdf((diff + margin) / se, df)  # 1 - p_lower
            p_margin = min(1.0, 2.0 * one_sided)
    return Comparison(
        method=method,
        n_a=n_a,
        n_b=n_b,
        diff=diff,
        low=low,
        high=high,
        p_value=p,
        df=df,
        confidence=confidence,
        margin=margin,
        p_tost=p_tost,
        resolved=p < alpha,
        within_margin=p_tost is not None and p_tost < alpha,
        p_margin=p_margin,
    )


def _too_few(method: str, a: np.ndarray, b: np.ndarray, confidence: float, margin: float | None):
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else math.nan
    nan = math.nan
    return Comparison(
        method, len(a), len(b), diff, nan, nan, nan, nan, confidence, margin, None, False, False
    )


def paired_t(
    a: Sequence[float],
    b: Sequence[float],
    confidence: float = 0.95,
    margin: float | None = None,
) -> Comparison:
    """Paired t-test on per-seed differences dᵢ = aᵢ − bᵢ (a[i] and b[i] from the same seed):
    d̄ ± t_{1−α/2, n−1} s_d / √n; TOST against ±margin when a margin is given."""
    x, y = _finite(a), _finite(b)
    if len(x) != len(y):
        raise ValueError(f"paired values need equal lengths, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return _too_few("paired t", x, y, confidence, margin)
    d = x - y
    se = float(d.std(ddof=1)) / math.sqrt(len(d))
    return _t_tests("paired t", len(x), len(y), float(d.mean()), se, len(d) - 1, confidence, margin)


def welch_t(
    a: Sequence[float],
    b: Sequence[float],
    confidence: float = 0.95,
    margin: float | None = None,
) -> Comparison:
    """Welch's unequal-variance t-test on two independent samples, with the
    Welch-Satterthwaite degrees of freedom; TOST against ±margin when a margin is given."""
    x, y = _finite(a), _finite(b)
    if len(x) < 2 or len(y) < 2:
        return _too_few("Welch t", x, y, confidence, margin)
    va, vb = float(x.var(ddof=1)) / len(x), float(y.var(ddof=1)) / len(y)
    se = math.sqrt(va + vb)
    if se == 0.0:
        df = float(len(x) + len(y) - 2)
    else:
        df = (va + vb) ** 2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1))
    diff = float(x.mean() - y.mean())
    return _t_tests("Welch t", len(x), len(y), diff, se, df, confidence, margin)


def compare(
    a: Mapping[int, float],
    b: Mapping[int, float],
    confidence: float = 0.95,
    margin: float | None = None,
) -> Comparison:
    """Compare two configurations given as {seed: value}: the paired t-test when both ran the
    same seeds (at least two), Welch's t-test otherwise."""
    if set(a) == set(b) and len(a) >= 2:
        seeds = sorted(a)
        return paired_t([a[s] for s in seeds], [b[s] for s in seeds], confidence, margin)
    return welch_t(list(a.values()), list(b.values()), confidence, margin)


# ---- success rates: an outcome that either happened or did not -----------------------------------

RATE_TEST = "Boschloo exact"  # the method of a comparison of success rates (compare_rates)


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for a proportion k / n (Newcombe 1998, "Two-sided confidence
    intervals for the single proportion", method 3): the p with |k/n − p| ≤ z √(p(1 − p)/n)."""
    if n < 1:
        return math.nan, math.nan
    z = float(special.ndtri(0.5 + confidence / 2))
    phat, z2 = k / n, z * z
    centre = (phat + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(phat * (1 - phat) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_interval(
    k_a: int, n_a: int, k_b: int, n_b: int, confidence: float = 0.95
) -> tuple[float, float]:
    """The interval of p_a − p_b from the two Wilson intervals (Newcombe 1998, "Interval
    estimation for the difference between independent proportions", method 10): it stays in
    [−1, 1] and keeps its coverage near nominal at the few trials a study affords."""
    pa, pb = k_a / n_a, k_b / n_b
    (la, ua), (lb, ub) = (
        wilson_interval(k_a, n_a, confidence),
        wilson_interval(k_b, n_b, confidence),
    )
    d = pa - pb
    return (
        d - math.sqrt((pa - la) ** 2 + (ub - pb) ** 2),
        d + math.sqrt((ua - pa) ** 2 + (pb - lb) ** 2),
    )


def rate_p(k_a: int, n_a: int, k_b: int, n_b: int) -> float:
    """Boschloo's exact test of p_a = p_b, two-sided (scipy.stats.boschloo_exact): Fisher's
    p-value as the statistic, maximised over the common rate; uniformly more powerful than
    Fisher's test and, like it, never above its level under the null."""
    if n_a < 1 or n_b < 1:
        return math.nan
    if (k_a + k_b) in (0, n_a + n_b):  # every trial the same outcome: nothing to tell apart
        return 1.0
    from scipy.stats import boschloo_exact  # scipy.stats takes a second to import: here only

    table = [[k_a, k_b], [n_a - k_a, n_b - k_b]]
    return float(boschloo_exact(table, alternative="two-sided").pvalue)


def compare_rates(k_a: int, n_a: int, k_b: int, n_b: int, confidence: float = 0.95) -> Comparison:
    """Success rate a − b (k successes of n trials each): the difference of the rates, its
    Newcombe interval and Boschloo's exact two-sided p. No margin: with a handful of trials a
    rate moves in steps of 1/n, and an equivalence claim would need far more of them."""
    if n_a < 1 or n_b < 1:
        return _too_few(RATE_TEST, np.zeros(n_a), np.zeros(n_b), confidence, None)
    low, high = newcombe_interval(k_a, n_a, k_b, n_b, confidence)
    p = rate_p(k_a, n_a, k_b, n_b)
    return Comparison(
        method=RATE_TEST,
        n_a=n_a,
        n_b=n_b,
        diff=k_a / n_a - k_b / n_b,
        low=low,
        high=high,
        p_value=p,
        df=math.nan,
        confidence=confidence,
        margin=None,
        p_tost=None,
        resolved=p < 1 - confidence,
        within_margin=False,
    )


def rate_resolvable(n_a: int, n_b: int, alpha: float) -> float:
    """The smallest difference of success rates that n_a and n_b trials can resolve at level
    `alpha`: over the tables whose reference succeeds every time, the least 1 − k/n_a whose
    exact p is below `alpha`; inf when not even all against none is."""
    for k in range(n_a - 1, -1, -1):
        if rate_p(k, n_a, n_b, n_b) < alpha:
            return 1 - k / n_a
    return math.inf


def seeds_to_resolve(
    sd: float, margin: float, confidence: float = 0.95, m: int = 1, most: int = 1000
) -> int | None:
    """The fewest seeds n (≥ 2) at which a paired difference whose per-seed values spread with
    standard deviation `sd` (a pilot's) has an interval at level α/m (Bonferroni's, the widest
    of Holm's steps) no wider than ±`margin`: t_{1 − α/(2m), n − 1} · sd / √n ≤ margin, α = 1 −
    `confidence` — the seeds a family of m hypotheses needs to resolve a difference of the
    margin, which is the "could resolve |Δ| ≥ ..." the reports state after the runs. None when
    more than `most` would be needed."""
    if not sd >= 0 or not margin > 0 or m < 1:
        raise ValueError(f"need sd ≥ 0, margin > 0 and m ≥ 1; got sd={sd}, margin={margin}, m={m}")
    q = 1.0 - (1.0 - confidence) / (2 * m)
    for n in range(2, most + 1):
        if t_ppf(q, n - 1) * sd / math.sqrt(n) <= margin:
            return n
    return None


# ---- a family of comparisons ------------------------------------------------------------------

CORRECTIONS = ("holm", "bonferroni", "none")


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order: sorted ascending,
    p̃₍ᵢ₎ = max_{j ≤ i} min(1, (m − j + 1) p₍ⱼ₎) (i, j from 1). A NaN (a test not made) stays
    NaN and is not counted in m."""
    p = [float(x) for x in p_values]
    made = sorted((x, i) for i, x in enumerate(p) if not math.isnan(x))
    m, out, running = len(made), [math.nan] * len(p), 0.0
    for rank, (x, i) in enumerate(made):
        running = max(running, min(1.0, (m - rank) * x))
        out[i] = running
    return out


def bonferroni(p_values: Sequence[float]) -> list[float]:
    """m · p, at most 1; NaN (a test not made) stays NaN and is not counted in m."""
    p = [float(x) for x in p_values]
    m = sum(not math.isnan(x) for x in p)
    return [x if math.isnan(x) else min(1.0, m * x) for x in p]


def adjust(p_values: Sequence[float], correction: str = "holm") -> list[float]:
    """The family's p-values adjusted by `correction` (CORRECTIONS): compare each with α."""
    if correction == "holm":
        return holm(p_values)
    if correction == "bonferroni":
        return bonferroni(p_values)
    if correction == "none":
        return [float(x) for x in p_values]
    raise ValueError(f"correction {correction!r}: allowed: {', '.join(CORRECTIONS)}")
