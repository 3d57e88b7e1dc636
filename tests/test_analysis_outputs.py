"""The analysis commands write what they wrote before they moved into attnzoo.analysis: their
text outputs on deterministic fake sweeps (tests/fake_sweeps.py) against the files the original
scripts wrote on the same sweeps (tests/data/analysis_expected/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    proc = subprocess.run([sys.executable, str(SCRIPTS / script), *args], cwd=cwd,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("name", list(SUMMARIZE_RUNS))
def test_summarize_writes_what_it_wrote_before(tmp_path: Path, name: str) -> None:
    make_tune_sweep(tmp_path / "sweep")
    _run("summarize.py", SUMMARIZE_RUNS[name], tmp_path)
    written = sorted(f for f in SUMMARIZE_FILES if (tmp_path / name / f).exists())
    assert written == sorted(p.name for p in (EXPECTED / name).iterdir())
    for f in written:
        got = normalised((tmp_path / name / f).read_text(), SCRIPTS, tmp_path)
        assert got == (EXPECTED / name / f).read_text(), f"{name}/{f} differs"


def test_rank_ablation_report_writes_what_it_wrote_before(tmp_path: Path) -> None:
    make_rank_ablation(tmp_path / "ra")
    _run("rank_ablation.py", ["--report-only", "--smoke", "--out", "ra"], tmp_path)
    for f in RANK_ABLATION_FILES:
        got = normalised((tmp_path / "ra" / f).read_text(), SCRIPTS, tmp_path)
        assert got == (EXPECTED / "rank_ablation" / f).read_text(), f"{f} differs"
