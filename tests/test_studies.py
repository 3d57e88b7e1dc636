"""The study scripts at a tiny size: they run, write their files, and the numbers say what the
paper says."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_rank_collapse_study_writes_tables_and_pure_attention_falls_below_skip(tmp_path):
    out = tmp_path / "rc"
    cmd = [
        sys.executable,
        str(ROOT / "scripts/rank_collapse.py"),
        "--mixers",
        "scaled_dot",
        "metric",
        "--depth",
        "4",
        "--seeds",
        "2",
        "--dim",
        "16",
        "--heads",
        "2",
        "--tokens",
        "8",
        "--batch",
        "2",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    assert {p.name for p in out.iterdir()} == {
        "rank_collapse.csv",
        "rank_collapse.md",
        "rank_collapse.png",
        "path_counts.md",
    }
    rows = list(csv.DictReader((out / "rank_collapse.csv").read_text().splitlines()))
    assert len(rows) == 2 * 4 * 2 * 5  # mixers x variants x norms x (depth + 1)
    res = {
        (r["mixer"], r["variant"], r["norm"], int(r["depth"])): float(r["residual_mean"])
        for r in rows
    }
    for mixer in ("scaled_dot", "metric"):
        for norm in ("none", "layernorm"):
            for depth in range(1, 5):
                assert res[mixer, "pure", norm, depth] < res[mixer, "+skip", norm, depth]
        assert res[mixer, "pure", "none", 4] < 1e-12  # float64 shows the fall past float32's floor
    shares = [
        float(line.split("|")[2]) for line in (out / "path_counts.md").read_text().splitlines()[4:]
    ]
    assert sum(shares) == pytest.approx(1.0, rel=1e-3)
    assert len(shares) == 5
