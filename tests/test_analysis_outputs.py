"""The analysis commands write what they wrote before they moved into attnzoo.analysis: their
text outputs on deterministic fake sweeps (tests/fake_sweeps.py) against the files the original
scripts wrote on the same sweeps (tests/data/analysis_expected/)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_sweeps import (
    RANK_ABLATION_FILES,
    SUMMARIZE_FILES,
    SUMMARIZE_RUNS,
    make_rank_ablation,
    make_tune_sweep,
    normalised,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
EXPECTED = Path(__file__).parent / "data" / "analysis_expected"


def _run(script: str, args: list[str], cwd: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args], cwd=cwd, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _same_values(got: Any, expected: Any) -> bool:
    """Equal, floats to 1e-12 relative: a JSON output keeps every float at full precision, so
    its last digits follow the rounding of the t quantile, not the analysis."""
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and got.keys() == expected.keys()
            and all(_same_values(got[k], expected[k]) for k in expected)
        )
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(map(_same_values, got, expected))
        )
    if isinstance(expected, float) and isinstance(got, float):
        both_nan = math.isnan(got) and math.isnan(expected)
        return both_nan or math.isclose(got, expected, rel_tol=1e-12, abs_tol=1e-15)
    return got == expected


def _same_output(got: str, expected: Path) -> bool:
    """A text output as written before: byte for byte, a JSON one value for value."""
    if expected.suffix == ".json":
        return _same_values(json.loads(got), json.loads(expected.read_text()))
    return got == expected.read_text()


@pytest.mark.parametrize("name", list(SUMMARIZE_RUNS))
@pytest.mark.sample(1)
def test_summarize_writes_what_it_wrote_before(tmp_path: Path, name: str) -> None:
    make_tune_sweep(tmp_path / "sweep")
    _run("summarize.py", SUMMARIZE_RUNS[name], tmp_path)
    written = sorted(f for f in SUMMARIZE_FILES if (tmp_path / name / f).exists())
    assert written == sorted(p.name for p in (EXPECTED / name).iterdir())
    for f in written:
        got = normalised((tmp_path / name / f).read_text(), SCRIPTS, tmp_path)
        assert _same_output(got, EXPECTED / name / f), f"{name}/{f} differs"


@pytest.mark.slow  # the shares and verdicts recompute from the runs in the default tier
def test_rank_ablation_report_writes_what_it_wrote_before(tmp_path: Path) -> None:
    make_rank_ablation(tmp_path / "ra")
    _run("rank_ablation.py", ["--report-only", "--smoke", "--out", "ra"], tmp_path)
    for f in RANK_ABLATION_FILES:
        got = normalised((tmp_path / "ra" / f).read_text(), SCRIPTS, tmp_path)
        assert _same_output(got, EXPECTED / "rank_ablation" / f), f"{f} differs"


# Student-t 97.5% quantiles by degrees of freedom (tables), so that the check below shares no
# code with attnzoo.stats
T975 = {1: 12.706204736, 2: 4.302652730, 3: 3.182446305, 4: 2.776445105, 5: 2.570581836}
COLLAPSE_VALUE = {
    "relative_residual": 0.0,
    "effective_rank": 1.0,
    "stable_rank": 1.0,
    "token_similarity": 1.0,
}


def test_rank_ablation_shares_and_verdicts_recompute_from_runs_layers(tmp_path: Path) -> None:
    """Every share and verdict of rank_ablation.csv, recomputed from runs_layers.csv alone by the
    report's stated rule: share = (m_L − c) / (m_0 − c) ((c − s_L)/(c − s_0) for similarity),
    mean and Student-t 95% interval (ddof = 1) over seeds, kept at ≥ 0.5, collapsed at ≤ 0.2."""

    make_rank_ablation(tmp_path / "ra")
    _run("rank_ablation.py", ["--report-only", "--smoke", "--out", "ra"], tmp_path)
    check_shares_recompute(tmp_path / "ra")


def test_the_committed_rank_ablation_recomputes_from_its_runs_layers() -> None:
    """The committed study: its 900 runs' per-layer values at init and trained give every share,
    interval and verdict of its table."""
    check_shares_recompute(ROOT / "scripts/results/rank_ablation")


def check_shares_recompute(folder: Path) -> None:
    import csv
    import math
    import statistics

    layers = list(csv.DictReader((folder / "runs_layers.csv").open()))
    assert layers and {r["when"] for r in layers} == {"init", "trained"}
    assert layers[0]["layer_0"] != ""  # layer 0 (the embedding) is there
    shares: dict[tuple, list[float]] = {}
    for r in layers:
        if r["measure"] not in COLLAPSE_VALUE:
            continue
        values = [float(r[k]) for k in r if k.startswith("layer_") and r[k] != ""]
        c, sign = COLLAPSE_VALUE[r["measure"]], -1 if r["measure"] == "token_similarity" else 1
        share = sign * (values[-1] - c) / (sign * (values[0] - c))
        assert math.isclose(share, float(r["kept_share"]), rel_tol=1e-6)
        key = (r["mixer"], r["residual"], r["mlp"], r["norm"], r["when"], r["measure"])
        shares.setdefault(key, []).append(share)
    table = list(csv.DictReader((folder / "rank_ablation.csv").open()))
    checked = 0
    for row in table:
        for (mixer, residual, mlp, norm, when, measure), xs in shares.items():
            if (mixer, residual, mlp, norm) != (
                row["mixer"],
                row["residual"],
                row["mlp"],
                row["norm"],
            ):
                continue
            mean = statistics.fmean(xs)
            half = T975[len(xs) - 1] * statistics.stdev(xs) / math.sqrt(len(xs))
            prefix = f"{when}_{measure}_kept"
            assert math.isclose(float(row[f"{prefix}_mean"]), mean, rel_tol=1e-6, abs_tol=1e-9)
            assert math.isclose(
                float(row[f"{prefix}_ci_low"]), mean - half, rel_tol=1e-6, abs_tol=1e-9
            )
            word = (
                "kept" if mean - half >= 0.5 else "collapsed" if mean + half <= 0.2 else "partial"
            )
            assert row[f"{when}_{measure}_verdict"] == word
            checked += 1
    assert checked == len(shares) > 0
