"""attnzoo.stats: the t distribution against table values and closed forms, intervals and their
coverage over seeded synthetic draws, and the paired / Welch / TOST tests against hand
computations and SciPy's own t-tests."""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from attnzoo.stats import (
    adjust,
    bonferroni,
    compare,
    holm,
    mean_interval,
    paired_t,
    seeds_to_resolve,
    t_cdf,
    t_ppf,
    t_sf,
    welch_t,
)


@pytest.mark.parametrize(
    "df, q, expected",
    [  # printed t tables (and, for df = 1 and 2, the closed forms)
        (1, 0.975, 12.706204736),  # tan(pi (q - 1/2))
        (2, 0.975, 4.302652730),  # (2q - 1) sqrt(2 / (1 - (2q - 1)^2))
        (4, 0.975, 2.776445105),
        (9, 0.975, 2.262157163),
        (10, 0.975, 2.228138852),
        (30, 0.975, 2.042272456),
        (4, 0.95, 2.131846786),
        (10, 0.995, 3.169272673),
        (1e6, 0.975, 1.959966),  # the normal quantile in the limit
    ],
)
def test_t_quantiles_match_tables(df, q, expected):
    """The tables print ten significant digits; the distribution is symmetric about 0."""
    tol = 1e-6 if df == 1e6 else 1e-9
    assert t_ppf(q, df) == pytest.approx(expected, abs=tol)
    assert t_ppf(1 - q, df) == pytest.approx(-expected, abs=tol)
    assert t_cdf(expected, df) == pytest.approx(q, abs=tol)
    assert t_cdf(-expected, df) == pytest.approx(1 - q, abs=tol)


def test_t_cdf_closed_forms_for_one_and_two_degrees_of_freedom():
    """df = 1 is the Cauchy distribution; df = 2 has P(T ≤ t) = 1/2 + t / (2 √(2 + t²))."""
    for t in (-7.0, -1.3, 0.0, 0.4, 2.5, 40.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
        assert t_cdf(t, 3.7) + t_cdf(-t, 3.7) == pytest.approx(1.0, abs=1e-12)
    assert (t_cdf(math.inf, 4), t_cdf(-math.inf, 4), t_ppf(0.5, 4)) == (1.0, 0.0, 0.0)


def test_small_p_values_are_exact_to_their_last_digits():
    """The upper tail is computed as such, not as 1 − P(T ≤ t): that difference keeps only the
    digits below 1, so a p of 1e-10 would carry about 6 correct ones. The truths have no
    cancellation: for df = 1, P(T > t) = atan(1 / t) / π; for df = 2, P(T > t) =
    1 / ((√(2 + t²) + t) √(2 + t²))."""
    for t in (3.0, 1e3, 2.0**33, 1e12):
        root = math.sqrt(2 + t * t)
        assert t_sf(t, 1) == pytest.approx(math.atan(1 / t) / math.pi, rel=1e-13)
        assert t_sf(t, 2) == pytest.approx(1 / ((root + t) * root), rel=1e-13)
        assert t_sf(-t, 3.7) == t_cdf(t, 3.7)
    # two seeds (df = 1), differences 1 ± 2⁻³³: d̄ = 1, se = 2⁻³³, t = 2³³,
    # p = 2 atan(2⁻³³) / π ≈ 7e-11
    k = 2.0**-33
    up = paired_t([1 + k, 1 - k], [0.0, 0.0], margin=0.5)
    down = paired_t([0.0, 0.0], [1 + k, 1 - k], margin=0.5)
    for c in (up, down):
        assert c.df == 1 and c.p_value == pytest.approx(2 * math.atan(k) / math.pi, rel=1e-12)
        # beyond ±0.5: the one-sided tail at (1 − 0.5) / se = 2³², doubled
        assert c.p_margin == pytest.approx(2 * math.atan(2 * k) / math.pi, rel=1e-12)
        assert c.p_tost == pytest.approx(1.0)


def test_t_refuses_levels_outside_0_1_and_non_positive_degrees_of_freedom():
    for q in (0.0, 1.0, 1.5, math.nan):
        with pytest.raises(ValueError, match="quantile level"):
            t_ppf(q, 3)
    for df in (0, -2.5):
        with pytest.raises(ValueError, match="degrees of freedom"):
            t_cdf(1.0, df)
        with pytest.raises(ValueError, match="degrees of freedom"):
            t_ppf(0.975, df)


def test_interval_by_hand():
    ci = mean_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    # mean 3, s = sqrt(10 / 4), half-width t_{.975,4} s / sqrt(5)
    half = 2.776445105 * math.sqrt(2.5) / math.sqrt(5)
    assert (ci.n, ci.mean, ci.std) == (5, 3.0, pytest.approx(math.sqrt(2.5)))
    assert (ci.low, ci.high) == (pytest.approx(3 - half), pytest.approx(3 + half))
    assert ci.note == ""


def test_one_seed_has_no_interval_and_says_so():
    ci = mean_interval([2.5])
    assert ci.n == 1 and ci.mean == 2.5
    assert math.isnan(ci.std) and math.isnan(ci.low) and math.isnan(ci.high)
    assert "one seed" in ci.note
    assert mean_interval([]).n == 0
    with pytest.raises(ValueError, match="finite"):
        mean_interval([1.0, math.nan])


def test_t_interval_covers_95_percent_of_synthetic_normal_draws():
    rng = np.random.default_rng(20261125)
    mu, sigma = 2.3, 0.07  # a final loss and a plausible seed-to-seed spread
    for n in (3, 5, 10):
        draws = rng.normal(mu, sigma, size=(2000, n))
        hits = [(ci := mean_interval(row)).low <= mu <= ci.high for row in draws]
        assert 0.93 <= np.mean(hits) <= 0.97, (n, np.mean(hits))


def test_percentile_bootstrap_undercovers_at_five_seeds():
    """Why the module uses the t-interval: the percentile bootstrap's nominal 95% is far lower
    with five seeds (about 84% here)."""
    rng = np.random.default_rng(7)
    draws = rng.normal(0.0, 1.0, size=(2000, 5))
    resampled = np.take_along_axis(
        np.repeat(draws[:, None, :], 1000, axis=1), rng.integers(0, 5, size=(2000, 1000, 5)), 2
    ).mean(axis=2)
    low, high = np.percentile(resampled, [2.5, 97.5], axis=1)
    coverage = np.mean((low <= 0) & (high >= 0))
    assert coverage < 0.90


def test_interval_shrinks_as_seeds_are_added():
    """Values with a known spread (sample sd exactly sigma): the half-width is t s / sqrt(n)."""
    rng = np.random.default_rng(3)
    sigma, widths = 0.05, []
    base = rng.normal(size=20)
    for n in (2, 3, 5, 10, 20):
        z = base[:n] - base[:n].mean()
        values = 1.0 + sigma * z / z.std(ddof=1)
        ci = mean_interval(values)
        assert ci.low < ci.mean < ci.high
        assert ci.half_width == pytest.approx(t_ppf(0.975, n - 1) * sigma / math.sqrt(n))
        widths.append(ci.half_width)
    assert widths == sorted(widths, reverse=True)


def test_paired_t_by_hand():
    a, b = [1.1, 1.2, 1.3], [1.0, 1.0, 1.0]  # differences 0.1, 0.2, 0.3
    c = paired_t(a, b)
    t = 0.2 / (0.1 / math.sqrt(3))
    assert c.method == "paired t" and c.df == 2
    assert c.diff == pytest.approx(0.2)
    assert c.p_value == pytest.approx(2 * (1 - (0.5 + t / (2 * math.sqrt(2 + t * t)))))
    assert c.p_value == pytest.approx(scipy_stats.ttest_rel(a, b).pvalue)
    half = 4.302652730 * 0.1 / math.sqrt(3)
    assert (c.low, c.high) == (pytest.approx(0.2 - half), pytest.approx(0.2 + half))
    assert c.verdict == "not resolved"  # p = 0.074 with three seeds


def test_welch_by_hand():
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0]
    c = welch_t(a, b)
    va, vb = np.var(a, ddof=1) / 4, np.var(b, ddof=1) / 3
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    assert c.method == "Welch t" and c.df == pytest.approx(df)
    assert c.diff == pytest.approx(2.5 - 4.0)
    assert c.p_value == pytest.approx(scipy_stats.ttest_ind(a, b, equal_var=False).pvalue)


def test_compare_pairs_matching_seeds_and_falls_back_to_welch():
    a = {0: 1.00, 1: 1.10, 2: 0.90, 3: 1.05}
    b = {0: 1.02, 1: 1.13, 2: 0.91, 3: 1.08}  # b is a shifted by ~0.02: only pairing sees it
    paired = compare(b, a)
    assert paired.method == "paired t" and paired.verdict == "resolved"
    assert welch_t(list(b.values()), list(a.values())).verdict == "not resolved"
    unpaired = compare(b, {k: v for k, v in a.items() if k != 3})  # a seed of a failed
    assert unpaired.method == "Welch t" and (unpaired.n_a, unpaired.n_b) == (4, 3)
    assert compare({0: 1.0}, {0: 1.1}).verdict == "too few seeds"


def test_paired_test_rejects_5_percent_under_the_null():
    rng = np.random.default_rng(11)
    seed_effect = rng.normal(0, 0.1, size=(2000, 5))  # shared by both configurations
    a = seed_effect + rng.normal(0, 0.02, size=(2000, 5))
    b = seed_effect + rng.normal(0, 0.02, size=(2000, 5))
    rate = np.mean([paired_t(x, y).resolved for x, y in zip(a, b, strict=True)])
    assert 0.03 <= rate <= 0.07


def test_tost_says_within_margin_only_when_the_interval_fits():
    rng = np.random.default_rng(5)
    margin, n = 0.05, 10
    # a true difference of 0: with a small spread, TOST finds it within the margin
    a, b = rng.normal(1.0, 0.01, n), rng.normal(1.0, 0.01, n)
    c = compare(dict(enumerate(a)), dict(enumerate(b)), margin=margin)
    assert c.within_margin and c.verdict == "within margin"
    # a true difference at the margin: TOST claims equivalence at most ~5% of the time
    claims = [
        paired_t(
            rng.normal(1.0 + margin, 0.02, n), rng.normal(1.0, 0.02, n), margin=margin
        ).within_margin
        for _ in range(1000)
    ]
    assert np.mean(claims) <= 0.07
    # a wide interval: neither resolved nor within margin
    wide = paired_t([1.0, 1.3, 0.8], [1.0, 1.0, 1.0], margin=margin)
    assert wide.verdict == "not resolved" and wide.p_tost > 0.05
    # the (1 - 2 alpha) interval inside (-margin, margin) <=> TOST rejects
    half90 = t_ppf(0.95, c.df) * (c.high - c.low) / 2 / t_ppf(0.975, c.df)
    assert c.within_margin == (-margin < c.diff - half90 and c.diff + half90 < margin)


def test_holm_step_down_by_hand():
    """m = 5 sorted p = .001 .01 .02 .03 .2: × 5, 4, 3, 2, 1 = .005 .04 .06 .06 .2, each at least
    the one before (the fourth, .03 × 2 = .06, equals it); given out of order, answered in order."""
    p = [0.03, 0.2, 0.001, 0.02, 0.01]
    assert holm(p) == pytest.approx([0.06, 0.2, 0.005, 0.06, 0.04])
    # the step-down is monotone: sorted .01 .04 .045 give .03 .08 .045, the last raised to .08
    assert holm([0.01, 0.045, 0.04]) == pytest.approx([0.03, 0.08, 0.08])
    assert holm([0.4, 0.6]) == [0.8, 0.8]  # 0.4 × 2, then 0.6 × 1 raised to it
    assert holm([0.3, 0.9]) == pytest.approx([0.6, 0.9])
    # a test that was not made (NaN) stays NaN and is not counted in m
    got = holm([0.01, math.nan, 0.04])
    assert got[0] == pytest.approx(0.02) and math.isnan(got[1]) and got[2] == pytest.approx(0.04)
    assert bonferroni([0.01, math.nan, 0.3])[::2] == pytest.approx([0.02, 0.6])
    assert bonferroni([0.6, 0.1]) == pytest.approx([1.0, 0.2])
    assert adjust([0.01, 0.04], "none") == [0.01, 0.04]
    assert adjust([0.01, 0.04], "bonferroni") == pytest.approx([0.02, 0.08])
    with pytest.raises(ValueError, match="allowed: holm, bonferroni, none"):
        adjust([0.1], "fdr")


def test_holm_is_never_less_powerful_than_bonferroni_and_controls_the_family():
    rng = np.random.default_rng(2)
    for _ in range(200):
        p = rng.uniform(0, 0.2, size=rng.integers(1, 12)).tolist()
        assert all(h <= b + 1e-15 for h, b in zip(holm(p), bonferroni(p), strict=True))
    # 14 true nulls of 5 paired seeds: any false rejection in at most ~5% of the families
    seed_effect = rng.normal(0, 0.1, size=(1000, 14, 5))
    a = seed_effect + rng.normal(0, 0.02, size=(1000, 14, 5))
    b = seed_effect + rng.normal(0, 0.02, size=(1000, 14, 5))
    raw = np.array(
        [
            [paired_t(x, y).p_value for x, y in zip(fa, fb, strict=True)]
            for fa, fb in zip(a, b, strict=True)
        ]
    )
    assert np.mean((raw < 0.05).any(axis=1)) > 0.4  # uncorrected: about 1 - 0.95^14
    assert np.mean([min(holm(row)) < 0.05 for row in raw]) <= 0.07


def test_one_sided_test_against_the_margin_by_hand():
    a, b = [1.3, 1.4, 1.5], [1.0, 1.0, 1.0]  # differences 0.3, 0.4, 0.5: mean 0.4, se 0.1/sqrt(3)
    se = 0.1 / math.sqrt(3)
    c = paired_t(a, b, margin=0.1)
    # H0: diff <= 0.1, one-sided p = P(T_2 > t), t = (0.4 - 0.1) / se, counted for both sides;
    # P(T_2 > t) = 1/2 - t / (2 sqrt(2 + t^2)), and SciPy's one-sided paired test says the same
    t = 0.3 / se
    assert c.p_margin == pytest.approx(2 * (0.5 - t / (2 * math.sqrt(2 + t * t))))
    shifted = scipy_stats.ttest_rel(np.subtract(a, 0.1), b, alternative="greater").pvalue
    assert c.p_margin == pytest.approx(2 * shifted)
    assert c.p_margin < 0.05 and c.half_width == pytest.approx(4.302652730 * se)
    # the mirror image: better by more than the margin, the same p
    assert paired_t(b, a, margin=0.1).p_margin == pytest.approx(c.p_margin)
    # a difference near the margin is not "beyond" it; at margin 0 it is the two-sided test
    assert paired_t(a, b, margin=0.38).p_margin > 0.5
    assert paired_t(a, b, margin=0.0).p_margin == pytest.approx(c.p_value)
    assert paired_t(a, b).p_margin is None


def test_seeds_to_resolve_reads_the_t_table():
    """σ = margin at 95%, one hypothesis: t_{.975,5} / √6 = 2.571 / 2.449 = 1.050 > 1 and
    t_{.975,6} / √7 = 2.447 / 2.646 = 0.925 ≤ 1 (Student's table), so 7 seeds; ten hypotheses
    (Bonferroni's 0.005 per hypothesis: t_{.9975}) need more; no spread needs the fewest, 2."""
    assert seeds_to_resolve(1.0, 1.0) == 7
    assert seeds_to_resolve(1.0, 1.0, m=10) > 7
    assert seeds_to_resolve(0.0, 0.05) == 2
    # large n: the t quantile is the normal's, so n ≈ (z σ / margin)²; z_{.975} = 1.95996
    n = seeds_to_resolve(1.0, 0.1)
    assert (1.95996 / 0.1) ** 2 <= n <= (1.95996 / 0.1) ** 2 + 5
    assert seeds_to_resolve(1.0, 1e-4, most=50) is None
    with pytest.raises(ValueError, match="margin > 0"):
        seeds_to_resolve(1.0, 0.0)
