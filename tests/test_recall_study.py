"""scripts/recall.py: the MQAR recall study's refusals (exit 2, nothing written) and, in the slow
tier, its whole pipeline at toy size."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "recall.py"
MIXERS = ["scaled_dot", "linear", "retention", "mamba2", "gla", "deltanet"]


def recall(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)  # fmt: skip


@pytest.mark.parametrize(
    "args,says",
    [
        (["--widths", "30"], "--widths: [30] are not multiples of the model's 4 heads"),
        (["--widths", "0,64"], "--widths: [0] are not positive"),
        (["--depths", "-1"], "--depths: [-1] are not positive"),
        (["--lrs", "1e-3"], "needs ≥ 2 positive learning rates"),
        (["--mixers", "linear", "gla"], "--mixers must include the reference, scaled_dot"),
        (["--mixers", "scaled_dot", "nystrom"], "invalid choice: 'nystrom'"),  # not causal
        (["--tune-seeds", "0,100", "--seeds", "0,1"], "share seed(s) 0"),
    ],
)
def test_bad_arguments_exit_2_naming_the_value_and_write_nothing(args, says, tmp_path):
    out = tmp_path / "out"
    proc = recall(*args, "--out", str(out), timeout=120)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert not out.exists()


@pytest.mark.slow  # ~1 min: 54 toy runs
def test_the_smoke_study_tunes_reruns_compares_and_resumes(tmp_path):
    out = tmp_path / "recall"
    proc = recall("--smoke", "--parallel", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (out / "recall.md").read_text()
    assert "## Width 16, depth 2" in md and "**Smoke run**" in md
    assert "Equivalence margin, fixed before the runs: ±0.05 accuracy" in md
    runs = list(csv.DictReader((out / "runs.csv").open()))
    assert sorted({(r["mixer"], r["seed"]) for r in runs}) == sorted(
        (m, s) for m in MIXERS for s in ("0", "1")
    )
    assert {(r["width"], r["depth"]) for r in runs} == {("16", "2")}
    assert all(r["final_test_metric"] not in ("", None) for r in runs)  # test read at the end
    tune = list(csv.DictReader((out / "tune_runs.csv").open()))
    assert len(tune) >= 6 * 3 * 2 and all(r["final_test_metric"] == "" for r in tune)  # val only
    family = list(csv.DictReader((out / "comparisons.csv").open()))
    assert sorted(r["config"].split(" ")[0] for r in family) == sorted(MIXERS[1:])
    assert {r["correction"] for r in family} == {"holm"} and {r["tests"] for r in family} == {"15"}
    assert (out / "recall.png").stat().st_size > 10_000
    again = recall("--smoke", "--parallel", "2", "--out", str(out))  # every sweep completed
    assert again.returncode == 0 and "$ -m attnzoo.train" not in again.stdout
    assert again.stdout.count("done already") >= 2
