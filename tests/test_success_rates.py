"""Success rates (attnzoo.stats.compare_rates and `comparisons(..., success=...)`): Wilson's and
Newcombe's intervals against their definition, a published value and their coverage over
simulated trials; Boschloo's exact test against a table worked by hand and its exact size under
the null, enumerated over every table; and a study's comparison read off committed per-seed
values."""

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import special

from attnzoo.analysis.compare import comparisons, correct
from attnzoo.analysis.groups import groups_from_rows
from attnzoo.stats import (
    compare_rates,
    newcombe_interval,
    rate_p,
    rate_resolvable,
    wilson_interval,
)

ROOT = Path(__file__).resolve().parents[1]
Z95 = float(special.ndtri(0.975))


@pytest.mark.parametrize("k, n", [(0, 5), (1, 3), (3, 3), (7, 10), (81, 263)])
def test_wilson_endpoints_solve_the_score_equation(k, n):
    """Wilson's interval is the set of p with |k/n − p| ≤ z √(p(1 − p)/n): at an endpoint inside
    (0, 1) the two sides are equal."""
    for p in wilson_interval(k, n):
        if 0 < p < 1:
            assert abs(k / n - p) == pytest.approx(Z95 * math.sqrt(p * (1 - p) / n), rel=1e-9)


def test_wilson_gives_newcombes_published_example():
    """Newcombe (1998, single proportion, method 3): 81/263 → 0.2553 to 0.3662."""
    low, high = wilson_interval(81, 263)
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)


def test_newcombes_difference_interval_covers_near_nominal():
    """Over 4000 simulated studies of 10 trials an arm at rates 0.7 and 0.4, the interval of the
    difference holds the true 0.3 close to 95% of the time (Newcombe reports method 10 near
    nominal at small n; the Wald interval falls well short)."""
    rng = np.random.default_rng(0)
    k_a, k_b = rng.binomial(10, 0.7, 4000), rng.binomial(10, 0.4, 4000)
    hits = [
        lo <= 0.3 <= hi for lo, hi in map(newcombe_interval, k_a, [10] * 4000, k_b, [10] * 4000)
    ]
    assert 0.93 <= np.mean(hits) <= 0.99


def test_boschloo_on_three_all_against_none_is_one_in_thirty_two():
    """3/3 against 0/3: only this table and its mirror are as extreme, with probability
    2 π³ (1 − π)³ under a common rate π, largest at π = 1/2: 2/64."""
    assert rate_p(3, 3, 0, 3) == pytest.approx(1 / 32, rel=1e-6)
    assert rate_p(2, 3, 2, 3) == pytest.approx(1.0)  # the same rate: no evidence at all
    assert rate_p(3, 3, 3, 3) == 1.0  # every trial the same: nothing to tell apart


def test_boschloo_never_rejects_more_often_than_its_level_under_the_null():
    """The exact size of the test at α = 0.05 with 8 trials an arm: the probability, summed
    over all 81 tables, of a p below α when both arms share a rate (0.2, 0.5, 0.8); an exact
    test keeps it ≤ α."""
    n = 8
    rejects = [(a, b) for a in range(n + 1) for b in range(n + 1) if rate_p(a, n, b, n) < 0.05]
    for rate in (0.2, 0.5, 0.8):
        pmf = [math.comb(n, k) * rate**k * (1 - rate) ** (n - k) for k in range(n + 1)]
        size = sum(pmf[a] * pmf[b] for a, b in rejects)
        assert 0 < size <= 0.05, (rate, size)


def test_the_smallest_resolvable_difference_follows_the_exact_p_values():
    """Three seeds an arm resolve all against none at α = 0.05 (p = 1/32) and nothing at the
    α/12 of a family of twelve; more seeds resolve smaller differences."""
    assert rate_resolvable(3, 3, 0.05) == 1.0
    assert math.isinf(rate_resolvable(3, 3, 0.05 / 12))
    assert rate_resolvable(10, 10, 0.05) < rate_resolvable(5, 5, 0.05) < 1.0


def test_compare_rates_reports_the_difference_its_interval_and_p():
    c = compare_rates(9, 10, 3, 10)
    assert (c.method, c.n_a, c.n_b, c.diff) == ("Boschloo exact", 10, 10, pytest.approx(0.6))
    assert (c.low, c.high) == pytest.approx(newcombe_interval(9, 10, 3, 10))
    assert c.p_value == pytest.approx(rate_p(9, 10, 3, 10)) and c.p_value < 0.05


def test_a_study_compares_success_rates_read_off_its_per_seed_values():
    """The committed recall study at width 64: each mixer's seeds that reach 0.9 test accuracy,
    counted here from runs.csv, against scaled-dot's, in one Holm family."""
    path = ROOT / "scripts/results/recall/screen/runs.csv"
    rows = [r for r in csv.DictReader(path.open()) if (r["width"], r["depth"]) == ("64", "2")]
    rows = [r | {"group": f"mixer={r['mixer']}"} for r in rows]
    rows = [{k: v for k, v in r.items() if k not in ("width", "depth")} for r in rows]
    groups = groups_from_rows(rows)
    got = comparisons(groups, "mixer.name", "test_metric", success=0.9, correction="none")
    got = correct(got, "holm")
    hits = {}
    for r in rows:
        k, n = hits.get(r["mixer"], (0, 0))
        hits[r["mixer"]] = (k + (float(r["final_test_metric"]) >= 0.9), n + 1)
    assert {r["config"] for r in got} == set(hits) - {"scaled_dot"}
    for r in got:
        (k, n), (k_ref, n_ref) = hits[r["config"]], hits["scaled_dot"]
        assert r["on"] == "success: test_metric ≥ 0.9" and r["split"] == "test"
        assert r["diff"] == pytest.approx(k / n - k_ref / n_ref)
        assert r["p"] == pytest.approx(rate_p(k, n, k_ref, n_ref))
        assert r["tests"] == len(got) and r["verdict"] in ("better", "worse", "not resolved")
