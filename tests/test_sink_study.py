"""scripts/sinks.py: the sink study's refusals (exit 2, nothing written) and, in the slow tier,
its whole pipeline at toy size."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "sinks.py"
EVERY_ARM = ["none", "learned", "zero_kv", "sigmoid", "gate", "softpick"]  # the default arms


def sinks(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    "args,says",
    [
        (["--arms", "none,softmax1"], "--arms: softmax1 unknown; allowed: none, learned"),
        (["--arms", "learned,sigmoid"], "--arms must include the reference, none"),
        (["--lrs", "1e-3"], "needs ≥ 2 positive learning rates"),
        (["--lrs", "1e-3,-1"], "needs ≥ 2 positive learning rates"),
        (["--seeds", "0"], "≥ 2 fresh seeds (--seeds)"),
        (["--tune-seeds", "0,100", "--seeds", "0,1"], "share seed(s) 0"),
        (["--data-dir", "no/such/folder"], "--data-dir no/such/folder: no Tiny Shakespeare"),
        (["--margin", "0"], "--margin 0.0: the equivalence margin must be a positive number"),
        (["--confidence", "95"], "--confidence 95.0: allowed: a level strictly between 0 and 1"),
        (["--max-extensions", "-1"], "--max-extensions -1: allowed: an int ≥ 0"),
    ],
)
def test_bad_arguments_exit_2_naming_the_value_and_write_nothing(args, says, tmp_path, run_script):
    out = tmp_path / "out"
    code, _, err = run_script(SCRIPT, *args, "--out", str(out))
    assert code == 2 and says in err, err
    assert not out.exists()


def rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open()))


# a grid of two learning rates: no extension (the recall and mixer smokes extend theirs), 24 runs
SMOKE = ["--smoke", "--lrs", "1e-3,4e-3", "--parallel", "2"]


def test_the_fresh_seeds_are_what_the_committed_pilot_projects(run_script):
    """The default fresh seeds resolve the margin in the default family by the pilot's spread:
    the standard deviation of each arm's paired test-loss differences (statistics.stdev here),
    the largest taken for the arms the pilot did not run, through Student's t at α/m."""
    import runpy
    import statistics
    from types import SimpleNamespace

    from attnzoo.stats import t_ppf

    module = SimpleNamespace(**runpy.run_path(str(SCRIPT)))
    runs = rows(module.PILOT)
    loss = {(r["arm"], r["seed"]): float(r["final_test_loss"]) for r in runs}
    sds = [
        statistics.stdev(loss[(a, s)] - loss[("none", s)] for s in ("0", "1", "2"))
        for a in ("learned", "zero_kv", "sigmoid")
    ]
    seeds = list(module.SPEC.seeds)
    args = SimpleNamespace(arms=EVERY_ARM, margins={"loss": 0.05}, confidence=0.95, seeds=seeds)
    n, sentence = module.projection(args)
    assert n == len(seeds) == 5 and f"{max(sds):.4f}" in sentence and "m = 15" in sentence
    q = 1 - 0.05 / (2 * 15)
    assert t_ppf(q, n - 1) * max(sds) / n**0.5 <= 0.05 < t_ppf(q, n - 2) * max(sds) / (n - 1) ** 0.5
    code, out, _ = run_script(SCRIPT, "--dry-run")
    assert code == 0 and "5 fresh seeds give an interval" in out and "66 jobs" in out


@pytest.mark.slow  # ~1.5 min: 36 toy runs
def test_the_smoke_study_tunes_reruns_compares_logs_every_block_and_resumes(tmp_path):
    out = tmp_path / "sinks"
    proc = sinks(*SMOKE, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (out / "sinks.md").read_text()
    assert "**Smoke run**" in md and "Equivalence margin, fixed before the runs: ±0.05 loss" in md
    runs = rows(out / "runs.csv")
    assert sorted((r["arm"], r["seed"]) for r in runs) == sorted(
        (a, s) for a in EVERY_ARM for s in ("0", "1")
    )
    assert all(r["final_test_loss"] not in ("", None) for r in runs)  # test read at the end
    tune = rows(out / "tune_runs.csv")
    assert len(tune) == 6 * 2 * 2 and all(r["final_test_loss"] == "" for r in tune)  # val only
    assert sorted(r["arm"] for r in tune) == sorted(EVERY_ARM * 4)
    # the arms without an option share the sweeps in --out, an option's arm has its folder
    assert {r["job"].split("/")[0] for r in tune} == {"tune", "learned", "zero_kv", "gate"}
    family = rows(out / "comparisons.csv")
    # each other arm on test loss (two-sided, margin, TOST); the rank is described, not tested
    assert sorted(r["config"] for r in family) == sorted(EVERY_ARM[1:])
    assert {r["correction"] for r in family} == {"holm"} and {r["tests"] for r in family} == {"15"}
    layers = rows(out / "layers.csv")
    assert {(r["arm"], r["seed"], r["layer"]) for r in layers} == {
        (a, s, k) for a in EVERY_ARM for s in ("0", "1") for k in ("1", "2")
    }
    assert {r["step"] for r in layers} == {"0", "3"}  # at init and at the one evaluation
    row_sum = {a: [float(r["row_sum"]) for r in layers if r["arm"] == a] for a in EVERY_ARM}
    # a softmax row is a distribution, the gate's too (it acts on the output, not the weights)
    assert all(abs(v - 1) < 1e-6 for a in ("none", "gate") for v in row_sum[a])
    # a sink takes mass from every row; sigmoid at b = −log N gives each key about 1/N; softpick
    # rows sum to less than 1
    assert all(v < 0.999 for a in ("learned", "zero_kv", "sigmoid", "softpick") for v in row_sum[a])
    gate = {a: [r["gate_mean"] for r in layers if r["arm"] == a] for a in EVERY_ARM}
    assert all(0 < float(g) < 1 for g in gate["gate"])  # σ(x W_g), one mean per block
    assert all(g == "" for a in EVERY_ARM if a != "gate" for g in gate[a])
    assert "mean output gate" in md
    # the continuous sink measures are logged for every block and the controls calibrate them
    assert all(-1 <= float(r["first_token_excess"]) <= 1 for r in layers)
    assert all(
        float(r["first_token_excess"]) <= float(r["first_token_excess_max"]) + 1e-12 for r in layers
    )
    assert "| planted BOS sink (positive) | 1.000 | 1.000 | 1.000 |" in md
    controls = {(r["control"], r["stat"]): float(r["value"]) for r in rows(out / "controls.csv")}
    assert controls[("planted BOS sink (positive)", "first_token_excess")] > 0.99
    assert (out / "sinks.png").stat().st_size > 10_000
    again = sinks(*SMOKE, "--out", str(out))  # every sweep completed
    assert again.returncode == 0 and "-m attnzoo.train" not in again.stdout
    assert again.stdout.count("done already") >= 8  # four tunings, at least four reruns
