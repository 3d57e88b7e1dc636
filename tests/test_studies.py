"""The study scripts at a tiny size: they run, write their files, and the numbers say what the
paper says."""

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a subprocess per study script: the slow tier

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
        "--rate-seeds",
        "3",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    assert {p.name for p in out.iterdir()} == {
        "rank_collapse.csv",
        "rank_collapse.md",
        "rank_collapse.png",
        "rank_collapse_measures.png",
        "cubic_rate.csv",
        "cubic_rate.png",
        "path_counts.md",
    }
    rows = list(csv.DictReader((out / "rank_collapse.csv").read_text().splitlines()))
    assert len(rows) == 2 * 4 * 2 * 5  # mixers x variants x norms x (depth + 1)
    key = {(r["mixer"], r["variant"], r["norm"], int(r["depth"])): r for r in rows}
    res = {k: float(r["residual_mean"]) for k, r in key.items()}
    for mixer in ("scaled_dot", "metric"):
        for norm in ("none", "layernorm"):
            for depth in range(1, 5):
                assert res[mixer, "pure", norm, depth] < res[mixer, "+skip", norm, depth]
        assert res[mixer, "pure", "none", 4] < 1e-12  # float64 shows the fall past float32's floor
        # every measure agrees: pure attention ends at rank one, the skip keeps the tokens apart
        collapsed, kept = key[mixer, "pure", "none", 4], key[mixer, "+skip", "none", 4]
        for name in ("effective_rank", "stable_rank", "token_similarity"):
            assert float(collapsed[f"{name}_mean"]) == pytest.approx(1.0, abs=1e-6)
        assert float(kept["effective_rank_mean"]) > 2 and float(kept["token_similarity_mean"]) < 0.9
        assert float(key[mixer, "pure", "none", 0]["attention_entropy_mean"]) != float(
            key[mixer, "pure", "none", 0]["attention_entropy_mean"]
        )  # n/a (NaN) for the embedding
        assert 0 < float(collapsed["attention_entropy_mean"]) <= math.log(8) + 1e-9
    # the rate: log r_{l+1} against log r_l has a slope near the paper's 3, with an interval
    md = (out / "rank_collapse.md").read_text()
    assert "| mixer | per-layer exponent k | 95% interval | seeds fitted | k per seed |" in md
    rate = list(csv.DictReader((out / "cubic_rate.csv").open()))
    assert {r["mixer"] for r in rate} == {"scaled_dot", "metric"}
    assert {int(r["seed"]) for r in rate} == set(range(3))  # --rate-seeds 3
    for mixer in ("scaled_dot", "metric"):
        line = next(
            row for row in md.splitlines() if row.startswith(f"| {mixer} | ") and "[" in row
        )
        k, interval = line.split("|")[2:4]
        lo, hi = (float(x) for x in interval.strip(" []").split(","))
        assert lo <= float(k) <= hi and 2.5 < float(k) < 5.0
        ks = [float(r["fitted_exponent"]) for r in rate if r["mixer"] == mixer]
        assert any(k == k for k in ks)  # at least one seed was fitted
    assert "per-layer exponent" in proc.stdout
    shares = [
        float(line.split("|")[2]) for line in (out / "path_counts.md").read_text().splitlines()[4:]
    ]
    assert sum(shares) == pytest.approx(1.0, rel=1e-3)
    assert len(shares) == 5


def run_script(name: str, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def test_path_length_study_evaluates_every_length_next_to_the_full_model(tmp_path):
    pytest.importorskip("attnzoo.train", reason="the trainer is not merged yet")
    out = tmp_path / "pl"
    tiny = ["--depth", "2", "--heads", "2", "--dim", "16", "--steps", "30", "--n-paths", "3"]
    run_script("path_length.py", "--tasks", "sort", *tiny, "--eval-batches", "1", "--out", str(out))
    assert {"path_length.csv", "path_length.md", "path_length.png", "runs"} <= {
        p.name for p in out.iterdir()
    }
    rows = list(csv.DictReader((out / "path_length.csv").open()))
    assert [r["k"] for r in rows] == ["0", "1", "2", "full"]
    # C(L,k)·H^k paths of length k; all of them are summed when there are no more than n_paths
    assert [r["paths_total"] for r in rows[:3]] == ["1", "4", "4"]
    assert [r["paths_used"] for r in rows[:3]] == ["1", "3", "3"]
    for r in rows:
        assert 0.0 <= float(r["metric"]) <= 1.0 and float(r["loss"]) > 0
    summary = json.loads((out / "runs" / "sort" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["step"] == 30
    cfg = (out / "runs" / "sort" / ".hydra" / "config.yaml").read_text()
    assert "mlp: false" in cfg and "norm: none" in cfg  # the preset: paths are exact


def test_mixer_ablation_study_tabulates_each_mixer_and_skips_unknown_tasks(tmp_path):
    pytest.importorskip("attnzoo.train", reason="the trainer is not merged yet")
    out = tmp_path / "ma"
    tiny = ["--dim", "16", "--depth", "1", "--heads", "2", "--steps", "4", "--batch-size", "4"]
    proc = run_script(
        "mixer_ablation.py",
        *("--tasks", "sort", "no_such_task", "--mixers", "scaled_dot", "identity"),
        *tiny,
        *("--out", str(out)),
    )
    assert "skipping task 'no_such_task'" in proc.stdout
    rows = {r["mixer"]: r for r in csv.DictReader((out / "mixer_ablation.csv").open())}
    assert list(rows) == ["scaled_dot", "identity"]
    assert all(r["status"] == "completed" and r["task"] == "sort" for r in rows.values())
    # matched width and depth: the two differ by exactly scaled-dot's 4·D² weights per block
    assert int(rows["scaled_dot"]["params"]) - int(rows["identity"]["params"]) == 4 * 16 * 16
    for mixer, r in rows.items():
        summary = json.loads((out / "runs" / "sort" / mixer / "summary.json").read_text())
        assert float(r["final_val_loss"]) == pytest.approx(summary["final"]["val/loss"])
        assert float(r["steps_per_s"]) > 0 and 0 < float(r["final_rank"]) <= 1
        assert r["metric"] == "accuracy" and 0 <= float(r["final_metric"]) <= 1
    md = (out / "mixer_ablation.md").read_text()
    assert "| sort | scaled_dot | completed |" in md and "no_such_task" in md
    assert (out / "mixer_ablation.png").stat().st_size > 0
