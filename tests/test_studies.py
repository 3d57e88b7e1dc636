"""The study scripts at a tiny size: they run, write their files, and the numbers say what the
paper says."""

import csv
import json
import math
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

# The smoke runs below train the five original mixers (their counts of runs assume five).
FIVE = ("scaled_dot", "quadratic", "metric", "pooling", "identity")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # a subprocess per study script: the slow tier
def test_rank_collapse_study_writes_tables_and_pure_attention_falls_below_skip(tmp_path):
    out = tmp_path / "rc"
    cmd = [
        sys.executable,
        str(ROOT / "scripts/rank_collapse.py"),
        "--mixers",
        "scaled_dot",
        "metric",
        "--depth",
        "6",
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
        "rank_collapse_seeds.csv",
        "rank_collapse.md",
        "rank_collapse.png",
        "rank_collapse_measures.png",
        "collapse_rate.csv",
        "cubic_rate.csv",
        "cubic_rate.png",
        "path_counts.md",
        "lambda_skip.csv",
        "lambda_skip_seeds.csv",
        "rank_collapse.json",
        "lambda_skip.png",
    }
    header = json.loads((out / "rank_collapse.json").read_text())
    assert (header["dim"], header["heads"], header["tokens"], header["depth"]) == (16, 2, 8, 6)
    assert (header["seeds"], header["rate_seeds"]) == (2, 3) and "--depth 6" in header["command"]
    rows = list(csv.DictReader((out / "rank_collapse.csv").read_text().splitlines()))
    # (two mixers + scaled_dot's option rows: causal, two sinks, two gates) x variants x norms
    # x (depth + 1)
    assert len(rows) == 7 * 4 * 2 * 7
    sweep = list(csv.DictReader((out / "lambda_skip.csv").open()))
    assert {r["mixer"] for r in sweep} == {"scaled_dot (causal)"}  # the sweep's one stack here
    assert len(sweep) == 7 * 2  # λ x norms
    seeds = list(csv.DictReader((out / "rank_collapse_seeds.csv").open()))
    assert len(seeds) == 2 * len(rows)  # --seeds 2: the mean and std above are recomputable
    pure = [
        float(r["relative_residual"])
        for r in seeds
        if (r["mixer"], r["variant"], r["norm"], r["depth"]) == ("metric", "pure", "none", "2")
    ]
    mean = next(
        float(r["residual_mean"])
        for r in rows
        if (r["mixer"], r["variant"], r["norm"], r["depth"]) == ("metric", "pure", "none", "2")
    )
    assert sum(pure) / 2 == pytest.approx(mean)
    key = {(r["mixer"], r["variant"], r["norm"], int(r["depth"])): r for r in rows}
    res = {k: float(r["residual_mean"]) for k, r in key.items()}
    for mixer in ("scaled_dot", "metric"):
        for norm in ("none", "layernorm"):
            for depth in range(1, 7):
                assert res[mixer, "pure", norm, depth] < res[mixer, "+skip", norm, depth]
        assert res[mixer, "pure", "none", 6] < 1e-12  # float64 shows the fall past float32's floor
        # every measure agrees: pure attention ends at rank one, the skip keeps the tokens apart
        collapsed, kept = key[mixer, "pure", "none", 6], key[mixer, "+skip", "none", 6]
        for name in ("effective_rank", "stable_rank", "token_similarity"):
            assert float(collapsed[f"{name}_mean"]) == pytest.approx(1.0, abs=1e-6)
        assert float(kept["effective_rank_mean"]) > 2 and float(kept["token_similarity_mean"]) < 0.9
        assert float(key[mixer, "pure", "none", 0]["attention_entropy_mean"]) != float(
            key[mixer, "pure", "none", 0]["attention_entropy_mean"]
        )  # n/a (NaN) for the embedding
        assert 0 < float(collapsed["attention_entropy_mean"]) <= math.log(8) + 1e-9
    # the rate: log r_{l+1} against log r_l has a slope near the paper's 3, with an interval
    md = (out / "rank_collapse.md").read_text()
    assert (
        "| mixer | measured | collapse | r_L / r_0 | decrement ratio k | layers fitted | "
        "layers above floor | paper's k |"
    ) in md
    rate = list(csv.DictReader((out / "cubic_rate.csv").open()))
    control = "attnzoo.analysis.controls.FrozenStochastic"
    options = {
        "scaled_dot (causal)",
        "scaled_dot (sink learned)",
        "scaled_dot (sink zero_kv)",
        "scaled_dot (gate headwise)",
        "scaled_dot (gate elementwise)",
    }
    assert {r["mixer"] for r in rate} == {"scaled_dot", "metric", control, *options}
    table = {r["mixer"]: r for r in csv.DictReader((out / "collapse_rate.csv").open())}
    assert table["scaled_dot"]["verdict"] == "collapses doubly exponentially"
    assert table["scaled_dot"]["layers_fitted"] == "1–5"
    assert {int(r["seed"]) for r in rate} == set(range(3))  # --rate-seeds 3
    for mixer in ("scaled_dot", "metric"):
        cells = next(
            row for row in md.splitlines() if row.startswith(f"| {mixer} | split | collapses")
        )
        kind, paper = cells.split("|")[3].strip(), cells.split("|")[8]
        assert kind == "collapses doubly exponentially"
        assert cells.split("|")[2].strip() == "split" and cells.split("|")[6].strip() == "1–5"
        k, interval = paper.split("[")[0], paper.split("[")[1].split("]")[0]
        lo, hi = (float(x) for x in interval.split(","))
        assert lo <= float(k) <= hi and 2.5 < float(k) < 5.0
        ks = [float(r["fitted_exponent"]) for r in rate if r["mixer"] == mixer]
        assert any(k == k for k in ks)  # at least one seed was fitted
    # the control's row and its check (at this toy depth its rate need not resolve; the rule
    # itself is tested in test_analysis at a depth where it does)
    assert "| frozen random row-stochastic (control) | split | collapses" in md
    assert "- A frozen random row-stochastic mixer collapses singly exponentially: " in md
    assert "Which mixers collapse" in proc.stdout
    shares = [
        float(line.split("|")[2]) for line in (out / "path_counts.md").read_text().splitlines()[4:]
    ]
    assert sum(shares) == pytest.approx(1.0, rel=2e-3)  # each share printed to 3 figures
    assert len(shares) == 7  # depth 6: paths through 0..6 heads


def run_subprocess(name: str, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.mark.slow
def test_path_length_study_evaluates_every_length_next_to_the_full_model(tmp_path):
    pytest.importorskip("attnzoo.train", reason="the trainer is not merged yet")
    out = tmp_path / "pl"
    tiny = ["--depth", "2", "--heads", "2", "--dim", "16", "--steps", "30", "--n-paths", "3"]
    run_subprocess(
        "path_length.py", "--tasks", "sort", *tiny, "--eval-batches", "1", "--out", str(out)
    )
    assert {"path_length.csv", "path_length.json", "path_length.md", "path_length.png", "runs"} <= {
        p.name for p in out.iterdir()
    }
    header = json.loads((out / "path_length.json").read_text())
    assert (header["depth"], header["heads"], header["steps"], header["n_paths"]) == (2, 2, 30, 3)
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


VERDICT = re.compile(
    r"vs scaled_dot( \(train\.lr=[^)]*\))?: ((better|worse) than scaled_dot (by more than the margin [0-9.]+ )?\("
    r"|within margin ±[0-9.]+ \(TOST: Holm-adjusted p = "
    r"|not resolved with \d+ seeds \(could resolve \|Δ\| ≥ [0-9.e+-]+;"
    r"|too few seeds to tell)"
)


def _section(md: str, title: str) -> str:
    start = md.index(f"## {title}\n")
    end = md.find("\n## ", start + 1)
    return md[start : end if end != -1 else len(md)]


def check_mixer_report(out: Path, md: str, tasks: tuple[str, ...], flags: str) -> None:
    """What a smoke run's report must hold: the header, per task the LR chosen per mixer (and
    used by its fresh-seed runs), the groups with n_seeds and intervals, and a verdict per claim."""
    head = md.split("\n## ", 1)[0]
    # the header: command, machine (CPU, cores, torch from the process), wall time, margins, seeds
    assert re.search(rf"^Command: `python .*mixer_ablation\.py {re.escape(flags)} ", head, re.M)
    import torch

    assert re.search(
        rf"^Machine: .+, \d+ cores available, .*torch {re.escape(torch.__version__)}", head, re.M
    )
    assert re.search(r"^Wall time: \d+ s, this command", head, re.M)
    n_tune, n_fresh = 20 * len(tasks), 10 * len(tasks)  # what every run summed, resumed or not
    assert re.search(rf"runs: {n_tune} tuning, {n_fresh} fresh, \d+ s summed\.$", head, re.M)
    assert "±0.05 loss (nats)" in head and "±0.02 accuracy" in head  # before any number
    assert "Seeds: tuning 100, 101; reported 0, 1" in head
    assert re.search(r"One family: \d+ hypotheses in this report .* with Holm's step-down", head)
    runs = list(csv.DictReader((out / "runs.csv").open()))  # every fresh-seed run, per seed
    tune_runs = list(csv.DictReader((out / "tune_runs.csv").open()))  # and every tuning run
    assert len(runs) == 10 * len(tasks) and {r["seed"] for r in runs} == {"0", "1"}
    saved = json.loads((out / "mixer_ablation.json").read_text())
    # every comparison of the report's family with its raw and Holm-adjusted p
    family = list(csv.DictReader((out / "comparisons.csv").open()))
    tests = int(re.search(r"One family: (\d+) hypotheses in this report", head)[1])
    assert {r["task"] for r in family} == set(tasks) and 3 * len(family) >= tests
    assert all(
        r["reference"].startswith("scaled_dot") and r["correction"] == "holm" for r in family
    )
    tested = [r for r in family if r["p"] not in ("", "nan")]
    # each comparison's three hypotheses (two-sided, beyond the margin, TOST) in the family
    assert 3 * len(tested) == tests and all(r["tests"] == str(tests) for r in tested)
    assert all(float(r["p_adjusted"]) >= float(r["p"]) for r in tested)
    for task in tasks:
        sec = _section(md, task)
        # every run went through the trainer's multirun: 5 mixers x 2 LRs x 2 tuning seeds, then
        # 5 mixers x 2 fresh seeds at the chosen LRs (one sweep per chosen value)
        tuned = list((out / task / "tune").glob("*/summary.json"))
        finals = list((out / task / "final").glob("lr_*/*/summary.json"))
        assert len(tuned) == 20 and len(finals) == 10
        assert all(json.loads(p.read_text())["status"] == "completed" for p in tuned + finals)
        chosen = next(t["chosen_lr"] for t in saved["cells"] if t["task"] == task)
        assert set(chosen) == set(FIVE) and set(chosen.values()) <= {1e-3, 3e-3}
        selected = json.loads((out / task / "tune-summary" / "selected.json").read_text())
        assert {s["axes"]["mixer"]: s["value"] for s in selected} == chosen  # summarize's choice
        grid = sec.split("### Learning rate: grid and selection", 1)[1].split("### Fresh", 1)[0]
        for mixer, lr in chosen.items():
            # the selection table names the LR each mixer got; its fresh runs used exactly it
            assert re.search(rf"^\| {mixer} \| {lr:g} \| ", grid, re.M), mixer
            folder = out / task / "final" / f"lr_{lr:g}"
            ran = [(h / "overrides.yaml").read_text() for h in folder.glob("*/.hydra")]
            assert sum(f"mixer={mixer}\n" in o for o in ran) == 2  # seeds 0 and 1
        # groups over the fresh seeds: 2 seeds, a Student-t interval on the loss, every seed's
        rows = re.findall(
            r"^\| (\w+) \| ([0-9.e-]+) \| (\d+) \| (\S+) \[(\S+), (\S+)\] \| .* \| (0: \S+, 1: \S+) \|",
            sec,
            re.M,
        )
        assert {r[0] for r in rows} == set(FIVE)
        for mixer, lr, n, mean, low, high, _ in rows:
            assert int(n) == 2 and float(lr) == chosen[mixer]
            assert float(low) <= float(mean) <= float(high)
        against = sec.split("Against scaled_dot (test loss, margin ±0.05):", 1)[1]
        assert re.search(r" vs scaled_dot( \(train\.lr=[^)]*\))?: ", against)
        # selection read val (the claim's quantity), the claims read test; every tuning run is
        # in tune_runs.csv
        on = "val accuracy (max)" if task == "imdb" else "val loss (min)"
        assert f"selected on whole-split {on}" in grid.replace("\n", " ")
        assert "| test loss | test accuracy | per seed |" in sec and "read once at the end" in sec
        assert re.search(r"\| (yes|no|n/a) \| \d+ \| ", sec)  # the flattened column
        tune_rows = [r for r in tune_runs if r["job"].startswith(f"{task}/tune/")]
        assert len(tune_rows) == 20 and {r["seed"] for r in tune_rows} == {"100", "101"}
        assert (out / task / "report" / "groups.csv").exists()
    # the claims: each compared mixer against scaled-dot, with one of the three verdict forms
    claims = [line for line in md.splitlines() if line.startswith("  - ")]
    expected = {"imdb": {"quadratic", "pooling", "identity"}, "shakespeare_char": {"metric"}}
    assert md.count("- Claim: ") == len(tasks)
    assert sorted(line.split(" vs ")[0].split(" (")[0].strip(" -") for line in claims) == sorted(
        m for t in tasks for m in expected[t]
    )
    for line in claims:
        assert VERDICT.search(line), line


@pytest.mark.slow  # ~30 s: the default tier keeps the quick check that a missing corpus is skipped
def test_mixer_ablation_smoke_tunes_selects_reruns_fresh_seeds_and_tests_the_claim(tmp_path):
    """The replicated, tuned study end to end at toy size on IMDB (synthetic reviews): two LRs
    on tuning seeds 100-101, the chosen LR per mixer, fresh seeds 0-1, groups with intervals and
    a verdict per claim. About 30 s on 2 CPU cores."""
    pytest.importorskip("attnzoo.train", reason="the trainer is not merged yet")
    out = tmp_path / "ma"
    proc = run_subprocess(
        "mixer_ablation.py", "--smoke", "--tasks", "imdb", "--mixers", *FIVE, "--out", str(out)
    )
    md = (out / "mixer_ablation.md").read_text()
    assert md.strip() in proc.stdout  # the report is printed too
    check_mixer_report(out, md, ("imdb",), f"--smoke --tasks imdb --mixers {' '.join(FIVE)} --out")


@pytest.mark.slow
def test_mixer_ablation_smoke_both_tasks_in_parallel_and_a_rerun_resumes(tmp_path):
    pytest.importorskip("attnzoo.train", reason="the trainer is not merged yet")
    out = tmp_path / "ma"
    args = ("--smoke", "--parallel", "2", "--mixers", *FIVE, "--out", str(out))
    run_subprocess("mixer_ablation.py", *args)
    md = (out / "mixer_ablation.md").read_text()
    flags = f"--smoke --parallel 2 --mixers {' '.join(FIVE)} --out"
    check_mixer_report(out, md, ("shakespeare_char", "imdb"), flags)
    before = {p: p.stat().st_mtime_ns for p in out.glob("*/*/**/summary.json")}
    again = run_subprocess("mixer_ablation.py", *args)
    assert again.stdout.count("done already") == 2 + len(list(out.glob("*/final/lr_*")))
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/*/**/summary.json")} == before


def test_mixer_ablation_skips_a_task_without_its_corpus(tmp_path):
    pytest.importorskip("attnzoo.train", reason="the trainer is not merged yet")
    out = tmp_path / "ma"
    empty = tmp_path / "no_data"
    empty.mkdir()
    proc = run_subprocess(
        "mixer_ablation.py", "--smoke", "--data-dir", str(empty), "--out", str(out)
    )
    assert "skipping task 'shakespeare_char': its corpus is not in" in proc.stdout
    assert "skipping task 'imdb'" in proc.stdout
    md = (out / "mixer_ablation.md").read_text()
    assert "## imdb\n\nskipping task 'imdb'" in md and not (out / "imdb").exists()


def test_reanalysis_recomputes_the_committed_comparisons_from_their_per_seed_values(tmp_path):
    """The truth: the committed study's comparisons.csv, which the full pipeline computed from
    its run folders. Rebuilt from nothing but the committed runs.csv (10 significant digits),
    every difference, interval and raw p agrees, and the family is every hypothesis."""
    from attnzoo.studies import reanalyse

    study = ROOT / "scripts/results/mixer_ablation"
    committed = {
        (r["task"], r["config"], r["on"]): r
        for r in csv.DictReader((study / "comparisons.csv").open())
    }
    result = reanalyse([study / "runs.csv"], {"loss": 0.05, "accuracy": 0.02}, 0.95, "holm")
    family = result["family"]
    assert len(family) == len(committed) == 28
    for r in family:
        c = committed[r["task"], r["config"], r["on"]]
        for key in ("diff", "diff_ci_low", "diff_ci_high", "p", "p_margin", "p_tost"):
            assert r[key] == pytest.approx(float(c[key]), rel=1e-5, abs=1e-12), (r["config"], key)
        assert r["tests"] == 84 and r["method"] == c["method"] == "paired t"
    # a later file replaces its mixers' rows, and only theirs
    rows = list(csv.DictReader((study / "runs.csv").open()))
    rerun = [
        r | {"final_test_loss": str(float(r["final_test_loss"]) - 1.0)}
        for r in rows
        if r["mixer"] == "favor"
    ]
    with open(tmp_path / "runs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rerun)
    merged = reanalyse(
        [study / "runs.csv", tmp_path / "runs.csv"], {"loss": 0.05, "accuracy": 0.02}, 0.95, "holm"
    )["family"]
    for r, before in zip(merged, family, strict=True):
        if r["config"].startswith("favor") and r["on"] == "test_loss":
            assert r["diff"] == pytest.approx(before["diff"] - 1.0)
        else:
            assert r["diff"] == before["diff"]


def test_reanalysis_refuses_a_missing_file_and_writes_nothing(tmp_path, run_script):
    code, _, err = run_script(
        ROOT / "scripts/mixer_ablation.py",
        "--reanalyse",
        str(tmp_path / "runs.csv"),
        "--out",
        str(tmp_path / "out"),
    )
    assert code == 2 and "--reanalyse: no such file:" in err
    assert not (tmp_path / "out").exists()


def test_a_study_of_one_mixer_reruns_it_at_its_choice():
    """A sweep of one mixer varies no mixer, so its selection rows have no mixer axis: the
    choice is still that mixer's (it once ran no fresh seeds and no grid extension)."""
    from attnzoo.engine.cell import chosen_lrs, mixer_of

    one = [{"axes": {}, "value": 0.001}]
    assert mixer_of(one[0], ["favor"]) == "favor" and mixer_of(one[0], ["favor", "linear"]) is None
    assert chosen_lrs(one, ["favor"]) == ({"favor": 0.001}, {0.001: ["favor"]})
    two = [
        {"axes": {"mixer": "favor"}, "value": 0.001},
        {"axes": {"mixer": "linear"}, "value": 0.002},
    ]
    assert chosen_lrs(two, ["favor", "linear"])[1] == {0.001: ["favor"], 0.002: ["linear"]}
    # and it has nothing to compare with when the reference is not among its mixers
    from attnzoo.analysis.groups import groups_from_rows
    from attnzoo.engine.compare import against

    rows = [
        r
        for r in csv.DictReader((ROOT / "scripts/results/mixer_ablation/runs.csv").open())
        if r["mixer"] == "favor" and r["task"] == "imdb"
    ]
    measures, margins = ("test_loss", "test_metric"), {"loss": 0.05, "accuracy": 0.02}
    assert (
        against(groups_from_rows(rows), "mixer.name", "scaled_dot", measures, margins, 0.95) == []
    )


def test_tuning_and_fresh_seeds_must_be_two_each_and_disjoint(run_script):
    from attnzoo.studies import check_seeds

    assert check_seeds([100, 101], [0, 1, 2]) is None
    assert "≥ 2 tuning seeds (--tune-seeds)" in check_seeds([100], [0, 1])
    both = check_seeds([1, 100], [0, 1, 2])
    assert "--seeds 0,1,2 and --tune-seeds 1,100 share seed(s) 1" in both
    code, _, err = run_script(
        ROOT / "scripts/mixer_ablation.py", "--seeds", "0,1", "--tune-seeds", "1,2"
    )
    assert code == 2 and "--seeds 0,1 and --tune-seeds 1,2 share seed(s) 1" in err


def test_the_lr_grid_extends_past_an_edge_choice_until_interior_or_the_cap(tmp_path, monkeypatch):
    """tune_lr's loop with the sweeps and the selection stubbed: a mixer whose best LR keeps
    sitting at the high edge gets one more step (the grid's factor) per round, up to the cap;
    one whose choice is interior gets none."""
    from attnzoo.analysis import report
    from attnzoo.engine import cell as tuned
    from attnzoo.engine.report import tuning_lines

    ran = []
    monkeypatch.setattr(tuned, "sweep", lambda over, folder, *a: ran.append((over, folder)))

    def fake_select(folders, out, key, **kw):
        grid = [1e-3, 2e-3, 4e-3] + [4e-3 * 2**k for k in range(1, len(folders))]
        same = {"mean": 0.5, "candidates": [], "note": ""}
        return [
            {"axes": {"mixer": "pooling"}, "value": grid[-1], "grid": grid, "edge": "high"} | same,
            {"axes": {"mixer": "metric"}, "value": 2e-3, "grid": grid[:3], "edge": None} | same,
        ]

    monkeypatch.setattr(report, "write_tuning", fake_select)
    selected, ext, folders = tuned.tune_lr(
        ["experiment=imdb"],
        ["pooling", "metric"],
        [1e-3, 2e-3, 4e-3],
        [100, 101],
        tmp_path,
        {},
        {"by": "metric", "maximize": True},
        max_extensions=2,
    )
    assert [(e["round"], e["lr"], e["mixers"], e["edge"]) for e in ext] == [
        (1, 8e-3, ["pooling"], "high"),
        (2, 1.6e-2, ["pooling"], "high"),
    ]
    assert folders == [
        tmp_path / "tune",
        tmp_path / "tune-ext1/lr_0.008",
        tmp_path / "tune-ext2/lr_0.016",
    ]
    assert "train.lr=0.016" in ran[-1][0] and "mixer=pooling" in ran[-1][0]
    assert "train.seed=100,101" in ran[-1][0]
    assert all("train.final_splits=[val]" in over for over, _ in ran)  # tuning never reads test
    lines = tuning_lines(
        {"selected": selected, "extensions": ext},
        [1e-3, 2e-3, 4e-3],
        [100, 101],
        "whole-split val accuracy (max)",
        2,
    )
    text = "\n".join(lines)
    assert "- Extension 2: train.lr=0.016 for pooling (beyond the high edge)" in text
    assert "selected on whole-split val accuracy (max)" in text
    assert "still at an edge after 2 extension(s)" in text


def test_rank_ablation_share_of_spread_and_verdicts():
    from attnzoo.analysis.verdicts import kept_share, verdict
    from attnzoo.stats import mean_interval

    assert kept_share("relative_residual", [1.0, 0.5, 0.25]) == 0.25
    # ranks: the distance from rank 1 (collapse), (20 - 1) / (40 - 1)
    assert kept_share("effective_rank", [40.0, 20.0]) == pytest.approx(19 / 39)
    # token similarity: collapse is cos -> 1, so the spread is 1 - cos
    assert kept_share("token_similarity", [0.2, 0.6]) == pytest.approx(0.5)
    assert kept_share("token_similarity", [0.0, 1.0]) == 0.0
    assert math.isnan(kept_share("stable_rank", [math.nan, 1.0]))
    assert verdict(mean_interval([0.9, 0.95, 0.92])) == "kept"
    assert verdict(mean_interval([1e-4, 2e-4, 3e-4])) == "collapsed"
    assert verdict(mean_interval([0.1, 0.9, 0.5])) == "partial"  # the interval spans both
    assert verdict(mean_interval([0.6, 0.4])) == "partial"  # mean 0.5 but low < 0.5
    assert verdict(mean_interval([0.9])) == "kept (1 seed)"
    assert verdict(mean_interval([])) == "n/a"


def test_rank_ablation_reads_init_and_trained_profiles_from_the_records():
    from attnzoo.analysis import Job

    job = Job("0", None)
    job.records = [
        {"step": 0, "rank/stable_rank/layer_0": 8.0, "rank/stable_rank/layer_1": 4.0},
        {"step": 10, "train/loss": 1.0},
        {"step": 100, "rank/stable_rank/layer_0": 6.0, "rank/stable_rank/layer_1": 1.5},
    ]
    assert job.profile("stable_rank", "init") == [8.0, 4.0]
    assert job.profile("stable_rank", "trained") == [6.0, 1.5]
    assert job.profile("token_similarity", "trained") is None
    job.records = job.records[1:]  # resumed or truncated: no step-0 record, so no init profile
    assert job.profile("stable_rank", "init") is None


@pytest.mark.slow  # ~1 min: 24 toy runs in three sweeps
def test_rank_ablation_smoke_writes_the_report_and_pure_attention_collapses(tmp_path):
    out = tmp_path / "ra"
    proc = run_subprocess("rank_ablation.py", "--smoke", "--out", str(out))
    md = (out / "rank_ablation.md").read_text()
    assert md.strip() in proc.stdout
    assert re.search(r"^Command: `python .*rank_ablation\.py --smoke --out ", md, re.M)
    for name in ("relative_residual", "effective_rank", "stable_rank", "token_similarity"):
        assert (out / f"rank_ablation_{name}.png").stat().st_size > 0
    rows = list(csv.DictReader((out / "rank_ablation.csv").read_text().splitlines()))
    # 2 mixers x (3 grid residuals + deepnorm + none/add without norm), MLP on
    assert len(rows) == 2 * 6
    assert all(r["n_seeds"] == "2" for r in rows)
    by = {(r["mixer"], r["residual"], r["norm"]): r for r in rows}
    for mixer in ("scaled_dot", "pooling"):
        pure = by[mixer, "none", "none"]  # no skip, no norm: Dong et al.'s collapse, at init too
        assert pure["init_relative_residual_verdict"] == "collapsed"
        skip = by[mixer, "add", "layernorm"]
        assert float(skip["trained_relative_residual_kept_mean"]) > float(
            pure["trained_relative_residual_kept_mean"]
        )
    assert "| none, no norm | " in md and "## At init, MLP on" in md
    again = run_subprocess("rank_ablation.py", "--smoke", "--out", str(out))
    assert again.stdout.count("done already") == 3


def test_the_gpu_presets_compose_at_their_gpu_sizes():
    """What `--preset gpu` runs, before any --smoke override: the sizes docs/sweeps.md times
    for one H100."""
    import importlib.util

    from attnzoo.train import compose

    spec = importlib.util.spec_from_file_location("ma", ROOT / "scripts/mixer_ablation.py")
    ma = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ma)
    sizes = {  # task: (width, depth, heads, context, batch, steps)
        "shakespeare_char": (384, 6, 6, 256, 32, 2000),
        "imdb": (256, 4, 4, 256, 32, 2000),
    }
    for task, want in sizes.items():
        cfg = compose(ma.TASKS["gpu"][task])
        got = (
            cfg.model.dim,
            cfg.model.depth,
            cfg.model.heads,
            cfg.task.seq_len,
            cfg.train.batch_size,
            cfg.train.max_steps,
        )
        assert got == want and cfg.task.name == task and not cfg.train.compile
    rank = compose(["experiment=rank_ablation_gpu"])
    assert (rank.model.dim, rank.model.depth, rank.train.max_steps) == (128, 8, 600)


@pytest.mark.slow
def test_the_gpu_presets_run_at_toy_size_on_cpu_with_smoke(tmp_path):
    """`--preset gpu --smoke`: the GPU experiment files, their sizes overridden tiny, on CPU."""
    pytest.importorskip("attnzoo.train", reason="the trainer is not merged yet")
    out = tmp_path / "ma"
    run_subprocess(
        "mixer_ablation.py",
        "--preset",
        "gpu",
        "--smoke",
        "--tasks",
        "shakespeare_char",
        "--mixers",
        "scaled_dot",
        "pooling",
        "--out",
        str(out),
    )
    job = next((out / "shakespeare_char" / "tune").glob("*/.hydra")).parent
    overrides = (job / ".hydra" / "overrides.yaml").read_text()
    assert "experiment=shakespeare_char_study_gpu" in overrides
    assert "train.device=cpu" in overrides and "model.dim=16" in overrides
    md = (out / "mixer_ablation.md").read_text()
    assert "Every run of it also: `experiment=shakespeare_char_study_gpu" in md
    out = tmp_path / "ra"
    run_subprocess(
        "rank_ablation.py",
        "--preset",
        "gpu",
        "--smoke",
        "--sweeps",
        "grid",
        "--mixers",
        "pooling",
        "--residuals",
        "add",
        "--out",
        str(out),
    )
    job = next((out / "grid").glob("*/.hydra")).parent
    overrides = (job / ".hydra" / "overrides.yaml").read_text()
    assert "experiment=rank_ablation_gpu" in overrides and "train.device=cpu" in overrides
    assert "Preset `experiment=rank_ablation_gpu`" in (out / "rank_ablation.md").read_text()


def test_a_study_runs_every_mixer_that_can_run_each_task():
    from attnzoo import MIXERS
    from attnzoo.studies import mixers_for_task

    lm, left_out = mixers_for_task("shakespeare_char", list(MIXERS))
    assert set(left_out) == {
        m for m, c in MIXERS.items() if not getattr(c, "supports_causal", True)
    }
    assert "nystrom" in left_out and lm + left_out != [] and set(lm) | set(left_out) == set(MIXERS)
    # not causal: every mixer but the causal-only ones (stick-breaking, forgetting)
    able, left_out = mixers_for_task("imdb", list(MIXERS))
    assert left_out == [
        m for m, c in MIXERS.items() if not getattr(c, "supports_bidirectional", True)
    ]
    assert "stick_breaking" in left_out and able == [m for m in MIXERS if m not in left_out]


def test_the_studies_list_the_mixers_as_their_committed_tables_do():
    """The order of a study's tables is its spec's, not the registry's: the whole-zoo study's
    mixers are its committed table's rows, and any other mixer comes after them."""
    from attnzoo.studies import ZOO_MIXERS, in_zoo_order

    with (ROOT / "scripts/results/rank_collapse/rank_collapse.csv").open() as f:
        rows = [r["mixer"] for r in csv.DictReader(f) if "(" not in r["mixer"]]
    assert list(ZOO_MIXERS) == list(dict.fromkeys(rows))
    with (ROOT / "scripts/results/rank_ablation/rank_ablation.csv").open() as f:
        ablated = list(dict.fromkeys(r["mixer"] for r in csv.DictReader(f)))
    assert in_zoo_order(sorted(ablated)) == ablated
    given = ["mine", "sigmoid", "scaled_dot", "a_user_mixer", "quadratic"]
    assert in_zoo_order(given) == ["scaled_dot", "quadratic", "sigmoid", "mine", "a_user_mixer"]


STUDIES = (
    "architectures",
    "mixer_ablation",
    "path_length",
    "rank_ablation",
    "rank_collapse",
    "recall",
    "sinks",
)


@pytest.mark.parametrize(
    "name",
    STUDIES,
)
def test_a_study_writes_to_a_user_folder_by_default_never_the_committed_results(
    name, tmp_path, run_script
):
    """A first try (no --out) writes results/<script>/ where it is run, which git ignores; the
    committed results under scripts/results/ change only with an explicit --out."""
    code, out, err = run_script(ROOT / "scripts" / f"{name}.py", "--help")
    assert code == 0, err
    assert f"default results/{name}/" in " ".join(out.split())
    ignored = subprocess.run(["git", "check-ignore", "-q", f"results/{name}/report.md"], cwd=ROOT)
    kept = subprocess.run(["git", "check-ignore", "-q", "results/gpu/report.md"], cwd=ROOT)
    if (ROOT / ".git").exists():
        assert ignored.returncode == 0 and kept.returncode == 1  # the GPU check's is committed


@pytest.mark.parametrize(
    "name,jobs",
    [
        ("rank_ablation", 900),
        ("recall", 54),
        ("sinks", 66),
        pytest.param("mixer_ablation", 260, marks=pytest.mark.slow),
    ],
)
def test_a_study_is_priced_before_it_runs(name, jobs, tmp_path, run_script):
    """--dry-run: the jobs and the time they take, nothing run and nothing written."""
    out = tmp_path / "out"
    code, printed, err = run_script(
        ROOT / "scripts" / f"{name}.py", "--dry-run", "--parallel", "2", "--out", str(out)
    )
    assert code == 0, err
    assert f"total: {jobs} jobs, about " in printed and "2 at a time" in printed
    assert not out.exists()


def test_the_committed_reanalysis_is_what_its_command_writes(tmp_path):
    """scripts/results/mixer_ablation/reanalysis/ from the committed per-seed values (the study's
    runs.csv, FAVOR+'s rows from favor_rerun/runs.csv): the same family, byte for byte."""
    study = ROOT / "scripts/results/mixer_ablation"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/mixer_ablation.py"),
            "--reanalyse",
            str(study / "runs.csv"),
            str(study / "favor_rerun/runs.csv"),
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("comparisons.csv", "runs.csv"):
        assert (tmp_path / name).read_text() == (study / "reanalysis" / name).read_text(), name
    family = list(csv.DictReader((tmp_path / "comparisons.csv").open()))
    assert len(family) == 28 and {r["tests"] for r in family} == {"84"}


def test_a_grid_extension_line_names_what_is_tuned(monkeypatch, capsys, tmp_path):
    """The sink study tunes one mixer under several arms: its extension lines name the arm, a
    study of mixers names the mixers."""
    import attnzoo.analysis.report
    from attnzoo.engine import cell as tuned

    at_edge = [{"axes": {}, "grid": [1e-3, 1e-2], "edge": "high"}]
    for label, says in [
        ("the learned arm", "for the learned arm (high)"),
        (None, "for scaled_dot"),
    ]:
        chosen = iter([at_edge, [{"axes": {}, "grid": [1e-3, 1e-2, 1e-1], "edge": None}]])
        monkeypatch.setattr(
            attnzoo.analysis.report, "write_tuning", lambda *a, c=chosen, **k: next(c)
        )
        monkeypatch.setattr(tuned, "sweep", lambda *a, **k: None)
        _, extensions, _ = tuned.tune_lr(
            [], ["scaled_dot"], [1e-3, 1e-2], [0], tmp_path, {}, {}, 1, label
        )
        assert extensions == [{"round": 1, "lr": 0.1, "mixers": ["scaled_dot"], "edge": "high"}]
        assert f"extension 1: train.lr=0.1 {says}" in capsys.readouterr().out


@pytest.mark.slow  # a two-job sweep in a subprocess (~15 s)
def test_a_study_sweep_says_where_it_is_job_by_job(tmp_path, capsys):
    """The console gets a command that pastes, where the jobs' output goes, and one line per job
    as it ends (k of n, its status and loss, an estimate of the time left); run again, a
    completed sweep is not run twice."""
    from attnzoo import studies

    overrides = [
        "model.dim=16",
        "model.depth=1",
        "model.heads=2",
        "task.val_size=32",
        "task.test_size=32",
        "train.max_steps=3",
        "train.eval_every=3",
        "train.eval_batches=1",
        "train.progress=false",
        "logger.mode=disabled",
        "train.seed=0,1",
    ]
    log = tmp_path / "tune.log"
    studies.sweep(overrides, tmp_path / "sweep", 2, dict(os.environ), log)
    out = capsys.readouterr().out
    command = next(line for line in out.splitlines() if line.startswith("  $ "))
    assert re.match(r"  \$ \S*python\S* -m attnzoo\.train -m model\.dim=16 ", command), command
    assert f"2 jobs; their output goes to {log}" in out and "train.seed=0" in log.read_text()
    ended = re.findall(r"job (\d)/2 (\S+): completed, val/loss [\d.]+ \(.* so far, ~.* left\)", out)
    assert [k for k, _ in ended] == ["1", "2"], out
    assert {job for _, job in ended} == {"train.seed=0", "train.seed=1"}, out
    studies.sweep(overrides, tmp_path / "sweep", 2, dict(os.environ), log)
    assert "done already" in capsys.readouterr().out


def test_rank_collapse_dry_run_counts_the_models_and_writes_nothing(tmp_path, run_script):
    """The mixers asked for (no option rows for them) × 8 block variants × 2 seeds; the rate
    study adds its control; neither mixer has a λ-skip stack."""
    out = tmp_path / "report"
    code, printed, _ = run_script(
        ROOT / "scripts" / "rank_collapse.py",
        *("--dry-run", "--mixers", "pooling", "identity", "--seeds", "2"),
        *("--rate-seeds", "3", "--depth", "3", "--out", str(out)),
    )
    assert code == 0
    assert "the block variants: 32 models, ~" in printed  # 2 stacks × 8 variants × 2 seeds
    assert "the rate study: 9 models, ~" in printed  # (2 stacks + the control) × 3 seeds
    assert "the λ-skip sweep: 0 models, ~" in printed
    assert "nothing written" in printed and not out.exists()


@pytest.mark.parametrize("name,jobs", [("rank_ablation", 24), ("recall", 48), ("sinks", 48)])
def test_a_smoke_is_priced_from_its_own_grid_and_its_measured_jobs(
    name, jobs, tmp_path, run_script
):
    """--dry-run --smoke: the smoke's grid (not the full study's) at the smoke's measured seconds
    per job, which the basis names."""
    code, printed, err = run_script(
        ROOT / "scripts" / f"{name}.py", "--dry-run", "--smoke", "--parallel", "2"
    )
    assert code == 0, err
    assert f"total: {jobs} jobs, about " in printed and "(measured: its --smoke" in printed
    from attnzoo.studies import duration

    module = runpy.run_path(str(ROOT / "scripts" / f"{name}.py"))
    seconds = module["SPEC"].smoke_job_s if "SPEC" in module else module["SMOKE_JOB_S"]
    assert f"about {duration(jobs * seconds[0] / 2)} 2 at a time" in printed
