"""scripts/summarize.py and attnzoo.analysis on synthetic sweep folders with every kind of broken
job."""

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from attnzoo import analysis
from attnzoo.analysis.groups import curve_band
from attnzoo.analysis.runs import OTHER_MEASURES
from attnzoo.flops import train_flops_per_token
from attnzoo.stats import mean_interval, t_ppf
from attnzoo.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import summarize  # noqa: E402 - the command: its main()


def make_job(folder: Path, mixer: str, skip: bool, steps: int, status: str | None, **extra):
    """A job folder laid out as attnzoo.train leaves it; rank halves each layer (skip) or
    falls 100x a layer (no skip), validation loss falls with the step."""
    (folder / ".hydra").mkdir(parents=True)
    cfg = {
        "mixer": {"name": mixer},
        "model": {
            "dim": 16,
            "depth": 3,
            "heads": 2,
            "residual": "add" if skip else "none",
            "mlp": True,
            "norm": "none",
        },
        "task": {"name": "sort", "seq_len": 8},
        "train": {"max_steps": steps},
    }
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"mixer={mixer}"]))
    lines = []
    for step in range(0, steps + 1, 10):
        record = {"step": step, "train/loss": 3.0 - step / 100, "val/loss": 2.5 - step / 100}
        record["val/accuracy"] = step / 100
        ranks = [(0.5 if skip else 0.01) ** layer for layer in range(4)]
        record |= {f"rank/layer_{i}": r for i, r in enumerate(ranks)} | {"rank/last": ranks[-1]}
        lines.append(json.dumps(record))
    text = "\n".join(lines) + "\n"
    if extra.get("truncate"):
        text += '{"step": 999, "val/lo'  # a job killed mid-write
    (folder / "metrics.jsonl").write_text(text)
    if status is not None:
        summary = {
            "status": status,
            "step": steps,
            "steps_per_s": 12.5,
            "params": 1234,
            "final": {"val/loss": 2.5 - steps / 100, "val/accuracy": steps / 100},
            "error": extra.get("error"),
        }
        (folder / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "multirun" / "2026-11-22_12-00-00"
    make_job(root / "0", "scaled_dot", True, 50, "completed")
    make_job(root / "1", "scaled_dot", False, 20, "failed", error="Traceback...\nValueError: boom")
    make_job(root / "2", "pooling", True, 30, None, truncate=True)
    make_job(root / "3", "pooling", False, 30, "completed")
    (root / "3" / "summary.json").write_text('{"status": "compl')  # corrupt
    (root / "5" / ".hydra").mkdir(parents=True)  # started, nothing written
    # job 4 left no folder; the grid has 7 jobs, so 6 is missing too
    # the grid: a preset's sweeper params (3 mixers) times the command line's (2 x 2)
    overrides = ["model.residual=add,none", "+x=1,2"]
    params = {"mixer": "scaled_dot,pooling,identity"}
    grid = {"hydra": {"overrides": {"task": overrides}, "sweeper": {"params": params}}}
    (root / "multirun.yaml").write_text(yaml.safe_dump(grid))
    return root


def test_summary_lists_every_job_with_its_status(sweep, tmp_path, run_script):
    out = tmp_path / "report"
    code, printed, err = run_script(ROOT / "scripts/summarize.py", str(sweep), "--out", str(out))
    assert code == 0, err
    assert {p.name for p in out.iterdir()} == {
        "summary.md",
        "summary.csv",
        "rank_vs_depth.png",
        "val_curves.png",
        "groups.md",
        "groups.csv",
        "intervals.png",
        "val_bands.png",
    }
    rows = {r["job"]: r for r in csv.DictReader((out / "summary.csv").open())}
    assert list(rows) == [str(i) for i in range(12)]  # 3 x 2 x 2 grid
    status = {job: r["status"] for job, r in rows.items()}
    assert status["0"] == "completed" and status["1"] == "failed"
    assert status["2"] == "incomplete" and status["3"] == "corrupt"
    assert all(status[str(i)] == "missing" for i in (4, 5, 6, 11))
    done = rows["0"]
    assert (done["mixer"], done["residual"], done["mlp"], done["norm"], done["depth"]) == (
        "scaled_dot",
        "add",
        "True",
        "none",
        "3",
    )
    assert (done["residual"], rows["1"]["residual"]) == ("add", "none")
    assert done["task"] == "sort" and done["metric"] == "accuracy"
    assert float(done["final_val_loss"]) == pytest.approx(2.0)
    assert float(done["final_metric"]) == pytest.approx(0.5)
    assert float(done["final_rank"]) == pytest.approx(0.125)
    assert float(done["steps_per_s"]) == 12.5 and done["params"] == "1234"
    assert "ValueError: boom" in rows["1"]["note"] and rows["1"]["overrides"] == "mixer=scaled_dot"
    # the truncated job still reports what it logged before it was killed
    assert float(rows["2"]["final_val_loss"]) == pytest.approx(2.2)
    assert "1 unreadable line" in rows["2"]["note"]
    assert float(rows["3"]["final_rank"]) == pytest.approx(1e-6)
    md = (out / "summary.md").read_text()
    assert "**failed**" in md and "12 jobs" in md and "| completed |" in md
    assert "did not complete" in printed


def test_summary_defaults_to_the_sweep_folder_and_plots_rank_profiles(sweep):
    jobs = analysis.find_jobs(sweep)
    profiles = {j.name: j.rank_profile() for j in jobs}
    assert profiles["1"] == pytest.approx([1.0, 0.01, 1e-4, 1e-6])
    assert profiles["4"] is None
    analysis.summarize(sweep)
    assert (sweep / "summary.csv").exists() and (sweep / "rank_vs_depth.png").stat().st_size > 0


def test_not_a_folder_is_an_error(tmp_path, run_script):
    code, _, err = run_script(ROOT / "scripts/summarize.py", str(tmp_path / "nope"))
    assert code == 2 and "is not a folder" in err


# ---- seeds as replicates ------------------------------------------------------------------


def make_run(
    folder: Path,
    mixer: str,
    seed: int,
    loss: float,
    lr: float = 3e-3,
    status: str = "completed",
    residual: str | None = None,
) -> None:
    """A completed job of a seed sweep, its final validation loss `loss` (the curve ends there),
    accuracy 1 - loss / 3, with run-specific non-semantic keys (logger name, data_dir)."""
    (folder / ".hydra").mkdir(parents=True)
    cfg = {
        "mixer": {"name": mixer} | ({"window": 3} if mixer == "pooling" else {}),
        "model": {"dim": 16, "depth": 2, "heads": 2, "mlp": True, "mlp_ratio": 4.0}
        | ({"residual": residual} if residual else {}),
        "task": {"name": "sort", "seq_len": 8},
        "train": {"max_steps": 20, "batch_size": 4, "lr": lr, "seed": seed, "progress": False},
        "logger": {"mode": "offline", "name": f"run-{folder.name}"},
        "data_dir": str(folder / "data"),
        "paths": {"run_dir": str(folder.resolve())},  # a run-dir path, as a trainer may record
    }
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg))
    overrides = [f"mixer={mixer}", f"train.lr={lr}", f"train.seed={seed}", "model.mlp=True"]
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    records = [
        {
            "step": s,
            "val/loss": loss + (20 - s) / 10,
            "val/accuracy": 1 - loss / 3,
            "rank/last": 0.5,
        }
        for s in (0, 10, 20)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {
        "status": status,
        "step": 20,
        "steps_per_s": 10.0,
        "params": 999,
        "time": {"total_s": 2.0},
        "final": records[-1],
    }
    (folder / "summary.json").write_text(json.dumps(summary))


def read_groups(out: Path) -> dict[str, dict[str, str]]:
    return {r["group"]: r for r in csv.DictReader((out / "groups.csv").open())}


def test_groups_average_seeds_and_compare_against_the_reference(tmp_path):
    sweep, losses = tmp_path / "sweep", {}
    losses["scaled_dot"] = [2.00, 2.05, 1.98, 2.03, 2.01]
    losses["pooling"] = [2.02, 2.08, 2.01, 2.04, 9.99]  # seed 4 failed
    job = 0
    for mixer, values in losses.items():
        for seed, loss in enumerate(values):
            status = "failed" if loss > 9 else "completed"
            make_run(sweep / str(job), mixer, seed, loss, status=status)
            job += 1
    make_run(sweep / str(job), "identity", 0, 2.5)  # one seed only
    out = tmp_path / "report"
    analysis.summarize(sweep, out, margin=0.1)

    groups = read_groups(out)
    assert list(groups) == ["mixer=scaled_dot", "mixer=pooling", "mixer=identity"]
    sd, pool, ident = groups.values()
    assert (sd["n_seeds"], sd["n_jobs"], sd["seeds"]) == ("5", "5", "0 1 2 3 4")
    assert (pool["n_seeds"], pool["n_jobs"], pool["seeds"]) == ("4", "5", "0 1 2 3")
    assert "seed 4 failed" in pool["note"]
    for r, values in ((sd, losses["scaled_dot"]), (pool, losses["pooling"][:4])):
        x = np.array(values)
        half = t_ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
        assert float(r["val_loss_mean"]) == pytest.approx(x.mean(), rel=1e-3)
        assert float(r["val_loss_std"]) == pytest.approx(x.std(ddof=1), rel=1e-3)
        assert float(r["val_loss_ci_low"]) == pytest.approx(x.mean() - half, rel=1e-3)
        assert float(r["val_loss_ci_high"]) == pytest.approx(x.mean() + half, rel=1e-3)
        assert float(r["metric_mean"]) == pytest.approx(1 - x.mean() / 3, rel=1e-3)
        assert r["metric"] == "accuracy" and float(r["rank_mean"]) == 0.5
        assert r["params"] == "999" and r["tokens"] == str(20 * 4 * 8)
        assert float(r["flops"]) == pytest.approx(
            train_flops_per_token(r["mixer"], 16, 2, 2, 8) * 20 * 4 * 8
        )
    assert ident["n_seeds"] == "1" and ident["val_loss_mean"] == "2.5"
    assert ident["val_loss_ci_low"] == "nan" and "one seed: no interval" in ident["note"]

    compared = {r["config"]: r for r in csv.DictReader((out / "comparisons.csv").open())}
    assert set(compared) == {"pooling", "identity"}
    assert compared["pooling"]["reference"] == "scaled_dot"
    assert compared["pooling"]["method"] == "Welch t"  # seed 4 is missing from pooling
    assert compared["identity"]["verdict"] == "too few seeds"
    md = (out / "groups.md").read_text()
    assert "pooling vs scaled_dot: " in md and "TOST ±0.1" in md
    assert compared["pooling"]["verdict"] in md.split("pooling vs scaled_dot: ")[1]
    assert (out / "intervals.png").stat().st_size > 0 and (out / "val_bands.png").stat().st_size > 0


def holm_by_definition(p: list[float]) -> list[float]:
    """Holm's adjusted p from its definition (Holm 1979): the i-th smallest of m becomes
    max over j ≤ i of min(1, (m − j + 1) · p_(j)); in the input's order."""
    m, order = len(p), sorted(range(len(p)), key=lambda i: p[i])
    out = [0.0] * m
    for rank, i in enumerate(order):
        out[i] = max(min(1.0, (m - j) * p[order[j]]) for j in range(rank + 1))
    return out


def test_matching_seeds_are_paired_and_a_negligible_difference_is_within_margin(tmp_path):
    sweep, rng = tmp_path / "sweep", np.random.default_rng(0)
    seed_effect = rng.normal(0, 0.05, 8)
    for i, seed in enumerate(range(8)):
        make_run(sweep / str(i), "scaled_dot", seed, 2.0 + seed_effect[seed])
        make_run(sweep / str(8 + i), "metric", seed, 2.001 + seed_effect[seed])
    out = tmp_path / "report"
    analysis.summarize(sweep, out, compare_axis="mixer", margin=0.01)
    (row_,) = csv.DictReader((out / "comparisons.csv").open())
    assert row_["method"] == "paired t" and row_["n"] == "8"
    assert row_["verdict"] == "worse, within margin"  # real (exactly 0.001) but negligible
    # one comparison with a margin: a family of its three hypotheses (two-sided, beyond, TOST)
    keys = ("p", "p_margin", "p_tost")
    adjusted = holm_by_definition([float(row_[k]) for k in keys])
    assert row_["tests"] == "3"
    assert [float(row_[f"{k}_adjusted"]) for k in keys] == pytest.approx(adjusted, rel=1e-9)
    assert float(row_["diff"]) == pytest.approx(0.001, abs=1e-9)
    with pytest.raises(ValueError, match="not an axis this sweep varied"):
        analysis.summarize(sweep, out, compare_axis="model.norm")


def test_a_family_is_corrected_together_and_each_verdict_names_its_test(tmp_path, monkeypatch):
    """Five mixers against scaled_dot on 5 paired seeds, differences built per seed: the verdicts
    come from Holm-adjusted p-values over the 4 tests (comparisons.csv keeps both), "by more
    than the margin" from the test against it, and "not resolved" says what the
    seeds could resolve."""
    sweep, job = tmp_path / "sweep", 0
    noise = [0.0, 0.01, -0.01, 0.02, -0.02]  # the per-seed wobble of every difference
    shift = {
        "scaled_dot": 0.0,
        "quadratic": 0.2,
        "metric": 0.02,
        "pooling": -0.001,
        "identity": 0.05,
    }
    scale = {"scaled_dot": 0.0, "quadratic": 1.0, "metric": 0.9, "pooling": 0.1, "identity": 5.0}
    for mixer in shift:
        for seed in range(5):
            loss = 2.0 + 0.1 * seed + shift[mixer] + scale[mixer] * noise[seed]
            make_run(sweep / str(job), mixer, seed, loss)
            job += 1
    out = tmp_path / "report"
    monkeypatch.setattr(
        sys,
        "argv",
        ["summarize.py", str(sweep), "--out", str(out), "--margin", "0.02", "--wandb", "disabled"],
    )
    summarize.main()
    rows = {r["config"]: r for r in csv.DictReader((out / "comparisons.csv").open())}
    assert set(rows) == {"quadratic", "metric", "pooling", "identity"}
    # one family: the 4 comparisons' 12 hypotheses (two-sided, against the margin, TOST)
    p = {(m, k): float(r[k]) for m, r in rows.items() for k in ("p", "p_margin", "p_tost")}
    for (m, k), q in zip(p, holm_by_definition(list(p.values())), strict=True):
        assert float(rows[m][f"{k}_adjusted"]) == pytest.approx(q, rel=1e-6)
        assert rows[m]["tests"] == "12" and rows[m]["correction"] == "holm"
    assert 0.01 < p["metric", "p"] < 0.05 < float(rows["metric"]["p_adjusted"])  # taken back
    assert rows["metric"]["verdict"] == "not resolved"
    assert rows["quadratic"]["verdict"] == "worse by more than the margin"
    assert (
        "worse than scaled_dot by more than the margin 0.02 (test against 0.02, two-sided"
        in (rows["quadratic"]["sentence"])
    )
    assert rows["pooling"]["verdict"] == "within margin"
    ident = rows["identity"]
    assert ident["verdict"] == "not resolved" and float(ident["resolvable"]) > float(
        ident["half_width"]
    )
    assert (
        f"not resolved with 5 seeds (could resolve |Δ| ≥ {float(ident['resolvable']):.2g}"
        in (ident["sentence"])
    )
    md = (out / "groups.md").read_text()
    assert "One family: 12 hypotheses in this report (4 comparison(s)" in md
    # without the correction, the raw p decides, and says so
    analysis.summarize(sweep, out, margin=0.02, correction="none", wandb_mode="disabled")
    raw = {r["config"]: r for r in csv.DictReader((out / "comparisons.csv").open())}
    assert raw["metric"]["verdict"] == "worse" and raw["metric"]["p_adjusted"] == raw["metric"]["p"]
    assert "with no correction for multiple testing" in (out / "groups.md").read_text()
    # another reference, named on the command line
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "summarize.py",
            str(sweep),
            "--out",
            str(out),
            "--reference",
            "pooling",
            "--wandb",
            "disabled",
        ],
    )
    summarize.main()
    rows = list(csv.DictReader((out / "comparisons.csv").open()))
    assert {r["reference"] for r in rows} == {"pooling"} and len(rows) == 4


def test_interval_contains_the_mean_and_shrinks_as_seeds_are_added(tmp_path):
    sigma, widths, base = 0.04, [], np.random.default_rng(1).normal(size=10)
    for n in (2, 3, 5, 10):
        z = base[:n] - base[:n].mean()
        values = 2.0 + sigma * z / z.std(ddof=1)  # sample sd exactly sigma
        sweep = tmp_path / f"n{n}"
        for seed, v in enumerate(values):
            make_run(sweep / str(seed), "scaled_dot", seed, float(v))
        analysis.summarize(sweep)
        (r,) = read_groups(sweep).values()
        low, mean, high = (
            float(r[k]) for k in ("val_loss_ci_low", "val_loss_mean", "val_loss_ci_high")
        )
        assert low < mean < high and r["n_seeds"] == str(n)
        assert (high - low) / 2 == pytest.approx(
            t_ppf(0.975, n - 1) * sigma / math.sqrt(n), rel=1e-3
        )
        widths.append(high - low)
    assert widths == sorted(widths, reverse=True)


def test_select_by_val_loss_picks_the_best_lr_per_configuration(tmp_path):
    sweep, job = tmp_path / "tune", 0
    best = {"scaled_dot": 3e-3, "pooling": 1e-2}
    for mixer in best:
        for lr in (1e-3, 3e-3, 1e-2):
            for seed in (100, 101):
                loss = 2.0 + abs(math.log(lr / best[mixer])) + 0.01 * (seed - 100)
                make_run(sweep / str(job), mixer, seed, loss, lr=lr)
                over = sweep / str(job) / ".hydra" / "overrides.yaml"  # tuning reads val only
                over.write_text(over.read_text() + "- train.final_splits=[val]\n")
                job += 1
    out = tmp_path / "report"
    analysis.summarize(
        sweep, out, select_by="val_loss", tune_axis="train.lr", final_dir="multirun/final"
    )
    selected = json.loads((out / "selected.json").read_text())
    chosen = {s["axes"]["mixer"]: s for s in selected}
    assert {m: s["value"] for m, s in chosen.items()} == best
    assert (
        chosen["scaled_dot"]["mean"] == pytest.approx(2.005) and chosen["pooling"]["n_seeds"] == 2
    )
    assert chosen["scaled_dot"]["note"] == "" and "edge of the grid" in chosen["pooling"]["note"]
    ov = chosen["pooling"]["overrides"]
    assert "mixer=pooling" in ov and "train.lr=0.01" in ov and "train.seed=0,1,2,3,4" in ov
    assert not any(o.startswith(("train.seed=10", "train.final_splits")) for o in ov)
    assert any(o.startswith("hydra.sweep.dir=multirun/final/") for o in ov)
    from hydra.core.override_parser.overrides_parser import OverridesParser

    OverridesParser.create().parse_overrides(ov)  # the follow-up command parses as Hydra's
    script = (out / "selected.sh").read_text()
    assert script.count("python -m attnzoo.train -m") == 2
    assert "summarize.py multirun/final/*/ --out multirun/final-report --compare mixer" in script
    assert "train.lr=0.003" in (out / "selected.md").read_text()
    # the comparison is along the mixer, not the tuned axis
    with pytest.raises(ValueError, match="needs --tune-axis"):
        analysis.summarize(sweep, out, select_by="val_loss")


@pytest.mark.parametrize("maximize", [False, True])
def test_an_exact_tie_goes_to_the_smallest_value_whatever_the_job_order(tmp_path, maximize):
    sweep = tmp_path / "tune"
    for job, lr in enumerate((1e-2, 3e-3, 1e-3)):  # the larger values ran first
        loss = 2.0 if lr != 1e-3 else (2.5 if not maximize else 1.5)  # 1e-2 and 3e-3 tie
        for seed in (100, 101):
            make_run(sweep / f"{job}{seed}", "pooling", seed, loss, lr=lr)
    groups = analysis.load_sweep(sweep).groups
    chosen = analysis.select(groups, "train.lr", "val_loss", maximize=maximize)
    assert [c["value"] for c in chosen] == [3e-3]


def test_several_sweeps_are_summarised_together(tmp_path, monkeypatch, capsys):
    """The fresh-seed reruns of selected.sh: one sweep per configuration, each at its own
    learning rate, summarised as one; the mixers are still compared (lr attached to each)."""
    final = tmp_path / "final"
    for i, (mixer, lr) in enumerate((("scaled_dot", 3e-3), ("pooling", 1e-2))):
        for seed in range(3):
            make_run(final / f"{i:02d}" / str(seed), mixer, seed, 2.0 + seed / 10 + i, lr=lr)
    out = tmp_path / "report"
    sweeps = sorted(str(p) for p in final.iterdir())
    monkeypatch.setattr(sys, "argv", ["summarize.py", *sweeps, "--out", str(out)])
    summarize.main()
    stdout = capsys.readouterr().out
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert [r["job"] for r in rows][:2] == ["00/0", "00/1"] and len(rows) == 6
    groups = read_groups(out)
    assert list(groups) == ["mixer=scaled_dot, train.lr=0.003", "mixer=pooling, train.lr=0.01"]
    assert all(g["n_seeds"] == "3" for g in groups.values())
    sentence = "pooling (train.lr=0.01) vs scaled_dot (train.lr=0.003): worse than scaled_dot"
    assert sentence in stdout
    monkeypatch.setattr(sys, "argv", ["summarize.py", *sweeps])
    with pytest.raises(SystemExit):
        summarize.main()
    assert "say where to write with --out" in capsys.readouterr().err


def test_repeated_seeds_are_kept_and_not_paired(tmp_path):
    """The same configuration and seeds in two sweeps: six values, not three; compared with
    another configuration by Welch's test, since seeds no longer identify one run."""
    for sweep, offset in (("a", 0.0), ("b", 0.01)):
        for seed in range(3):
            make_run(tmp_path / sweep / str(seed), "scaled_dot", seed, 2.0 + seed / 10 + offset)
            make_run(tmp_path / sweep / str(3 + seed), "pooling", seed, 2.2 + seed / 10 + offset)
    out = tmp_path / "report"
    analysis.summarize([tmp_path / "a", tmp_path / "b"], out)
    groups = read_groups(out)
    assert [g["n_seeds"] for g in groups.values()] == ["6", "6"]
    assert float(groups["mixer=scaled_dot"]["val_loss_mean"]) == pytest.approx(2.105)
    (c,) = csv.DictReader((out / "comparisons.csv").open())
    assert c["method"] == "Welch t" and (c["n"], c["n_reference"]) == ("6", "6")


# ---- a real sweep -------------------------------------------------------------------------


@pytest.mark.slow  # a six-job multirun of the trainer in a subprocess
def test_real_seed_sweep_groups_match_the_per_job_rows(tmp_path):
    """A tiny multirun of the trainer (2 mixers x 3 seeds, basic launcher): groups.csv holds what
    the per-job rows give, computed here."""
    out = tmp_path / "sweep"
    env = {**os.environ, "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "attnzoo.train",
        "-m",
        "task=sort",
        "mixer=scaled_dot,pooling",
        "train.seed=0,1,2",
        "train.max_steps=4",
        "train.eval_every=2",
        "model.dim=16",
        "model.depth=1",
        "logger.mode=disabled",
        "train.progress=false",
        f"hydra.sweep.dir={out}",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    analysis.summarize(out)
    jobs = list(csv.DictReader((out / "summary.csv").open()))
    assert [r["status"] for r in jobs] == ["completed"] * 6
    groups = read_groups(out)
    assert list(groups) == ["mixer=scaled_dot", "mixer=pooling"]
    for mixer, g in zip(("scaled_dot", "pooling"), groups.values(), strict=True):
        members = [r for r in jobs if r["mixer"] == mixer]
        assert sorted(r["seed"] for r in members) == ["0", "1", "2"] and g["n_seeds"] == "3"
        for col, key in (
            ("final_val_loss", "val_loss"),
            ("final_metric", "metric"),
            ("final_rank", "rank"),
        ):
            x = np.array([float(r[col]) for r in members])
            ci = mean_interval(x)
            assert float(g[f"{key}_mean"]) == pytest.approx(x.mean(), rel=1e-3)
            assert float(g[f"{key}_ci_low"]) == pytest.approx(ci.low, rel=1e-3, abs=1e-6)
            assert (
                float(g[f"{key}_ci_low"]) <= float(g[f"{key}_mean"]) <= float(g[f"{key}_ci_high"])
            )
        for m in OTHER_MEASURES:  # the last layer's value, from each job's metrics
            finals = []
            for r in members:
                logged = read_metrics(out / r["job"] / "metrics.jsonl")[-1]
                value = logged.get(f"rank/{m}/layer_1")
                if value is None:
                    assert r[f"final_{m}"] == ""
                else:
                    assert float(r[f"final_{m}"]) == pytest.approx(value, rel=1e-6)
                finals += [value] if value is not None else []
            if mixer == "pooling" and m == "attention_entropy":  # no softmax attention: n/a
                assert finals == [] and g[f"{m}_mean"] in ("", "nan")
                continue
            x = np.array(finals)
            assert len(x) == 3
            ci = mean_interval(x)
            assert float(g[f"{m}_mean"]) == pytest.approx(x.mean(), rel=1e-3)
            assert float(g[f"{m}_std"]) == pytest.approx(x.std(ddof=1), rel=1e-3, abs=1e-9)
            assert float(g[f"{m}_ci_low"]) == pytest.approx(ci.low, rel=1e-3, abs=1e-6)
            assert float(g[f"{m}_ci_high"]) == pytest.approx(ci.high, rel=1e-3, abs=1e-6)
        assert {r["residual"] for r in members} == {"add"}
        assert g["params"] == members[0]["params"] and g["tokens"] == str(4 * 64 * 8)
        assert float(g["wall_s_mean"]) > 0
    (c,) = csv.DictReader((out / "comparisons.csv").open())
    assert c["method"] == "paired t" and c["n"] == "3" and c["reference"] == "scaled_dot"


def _record_compute(folder: Path, tokens_per_step: int, flops_per_token: float, s_per_step: float):
    """Add what the trainer now records: compute/* on every line, `compute` in summary.json."""
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    for r in records:
        r["compute/tokens"] = r["step"] * tokens_per_step
        r["compute/flops"] = r["compute/tokens"] * flops_per_token
        r["compute/train_s"] = r["step"] * s_per_step
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = json.loads((folder / "summary.json").read_text())
    last = records[-1]
    summary["compute"] = {
        "tokens": last["compute/tokens"],
        "flops": last["compute/flops"],
        "train_s": last["compute/train_s"],
        "wall_s": 7.5,
    }
    (folder / "summary.json").write_text(json.dumps(summary))


def test_recorded_compute_is_read_and_bands_are_drawn_against_it(tmp_path, monkeypatch, capsys):
    sweep = tmp_path / "sweep"
    for job, (mixer, seed) in enumerate([("scaled_dot", 0), ("scaled_dot", 1), ("pooling", 0)]):
        make_run(sweep / str(job), mixer, seed, 2.0 + job / 10)
    for job, s_per_step in (("0", 0.1), ("1", 0.3)):  # the scaled_dot seeds recorded theirs
        _record_compute(sweep / job, 50, 1000.0, s_per_step)
    out = tmp_path / "report"
    analysis.summarize(sweep, out)
    rows = {r["job"]: r for r in csv.DictReader((out / "summary.csv").open())}
    assert rows["0"]["tokens"] == str(20 * 50) and float(rows["0"]["flops"]) == 20 * 50 * 1000.0
    assert float(rows["0"]["wall_s"]) == 7.5  # summary.json's compute, not time.total_s
    assert rows["2"]["tokens"] == str(20 * 4 * 8) and float(rows["2"]["wall_s"]) == 2.0  # rebuilt

    sd, pool = analysis.load_sweep(sweep).groups
    assert curve_band(sd, 0.95, "steps")[0] == [0, 10, 20]
    assert curve_band(sd, 0.95, "tokens")[0] == [0, 500, 1000]
    assert curve_band(sd, 0.95, "flops")[0] == [0, 500_000, 1_000_000]
    assert curve_band(sd, 0.95, "wall")[0] == pytest.approx([0, 2.0, 4.0])  # the mean
    per_token = train_flops_per_token("pooling", 16, 2, 2, 8)
    assert curve_band(pool, 0.95, "tokens")[0] == [0, 320, 640]  # from the config
    assert curve_band(pool, 0.95, "flops")[0] == pytest.approx(
        [0, 320 * per_token, 640 * per_token]
    )
    assert curve_band(pool, 0.95, "wall") == ([], [])  # never logged its time

    monkeypatch.setattr(sys, "argv", ["summarize.py", str(sweep), "--out", str(out), "--x", "wall"])
    summarize.main()
    assert (out / "val_bands.png").stat().st_size > 0
    monkeypatch.setattr(sys, "argv", ["summarize.py", str(sweep), "--x", "bogus"])
    with pytest.raises(SystemExit):
        summarize.main()
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_wandb_offline_logs_the_groups_table(tmp_path, monkeypatch):
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    sweep = tmp_path / "sweep"
    for job, (mixer, seed) in enumerate([("scaled_dot", 0), ("scaled_dot", 1), ("pooling", 0)]):
        make_run(sweep / str(job), mixer, seed, 2.0 + job / 10)
    analysis.summarize(sweep, tmp_path / "plain")  # the runs' summaries name no W&B run: none
    assert not (tmp_path / "plain" / "wandb").exists()
    analysis.summarize(sweep, tmp_path / "out", wandb_mode="offline")
    (table_file,) = (tmp_path / "out" / "wandb").glob(
        "offline-run-*/files/media/table/groups_*.table.json"
    )
    table = json.loads(table_file.read_text())
    groups = read_groups(tmp_path / "out")
    assert table["columns"] == list(next(iter(groups.values())))
    assert [row[0] for row in table["data"]] == list(groups)
    n_seeds = table["columns"].index("n_seeds")
    assert [row[n_seeds] for row in table["data"]] == [2, 1]


def test_a_residual_sweep_shows_each_variant(tmp_path):
    """model.residual=none,add,rezero (and a job that leaves it at its default): the residual
    column is the variant each job ran (attnzoo.residual.resolve)."""
    sweep = tmp_path / "sweep"
    for job, residual in enumerate(("none", "add", "rezero", None)):
        make_run(sweep / str(job), "scaled_dot", 0, 2.0, residual=residual)
    analysis.summarize(sweep, tmp_path / "report")
    rows = list(csv.DictReader((tmp_path / "report" / "summary.csv").open()))
    assert [r["residual"] for r in rows] == ["none", "add", "rezero", "add"]


def test_interval_figure_shows_held_out_test_where_the_runs_have_it():
    from attnzoo.analysis.figures import interval_panels

    val_only = [{"test_loss_mean": None}, {"test_loss_mean": float("nan")}]
    assert [w for w, _ in interval_panels(val_only)] == ["val_loss", "metric", "rank"]
    held_out = [*val_only, {"test_loss_mean": 0.46}]
    panels = interval_panels(held_out)
    assert [w for w, _ in panels] == ["test_loss", "test_metric", "rank"]
    assert all("held-out test" in title for _, title in panels[:2])


# ---- figures with many series --------------------------------------------------------------

MIXERS_11 = [
    "scaled_dot",
    "quadratic",
    "metric",
    "pooling",
    "identity",
    "local",
    "linear",
    "favor",
    "nystrom",
    "fourier",
    "token_mlp",
]
RESIDUALS_7 = ["none", "add", "scaled", "rezero", "layerscale", "denseformer", "attnres"]


def png_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as image:
        return image.size


@pytest.mark.parametrize(
    "mixers",
    [MIXERS_11, pytest.param(MIXERS_11 + [f"m{i}" for i in range(5)], marks=pytest.mark.slow)],
)
@pytest.mark.slow  # figure layout with eleven mixers (~10 s)
def test_figures_with_many_series_wrap_into_rows_of_readable_panels(tmp_path, mixers):
    """One panel per mixer (val_curves), per residual (rank_vs_depth) or per residual of the
    compared mixers (val_bands): at most four panels to a row, so 11 or 16 panels are a grid
    a screen shows, not a strip 4840 px wide."""
    from fake_sweeps import make_wide_sweep

    sweep = make_wide_sweep(tmp_path / "sweep", mixers, RESIDUALS_7)
    out = tmp_path / "report"
    analysis.summarize(sweep, out, compare_axis="mixer", wandb_mode="disabled")
    for name, panels in (
        ("val_curves.png", len(mixers)),
        ("rank_vs_depth.png", 7),
        ("val_bands.png", 7),
    ):
        width, height = png_size(out / name)
        assert 1200 <= width <= 2000, (name, width)
        panel_rows = -(-panels // 4)
        assert height >= 300 * panel_rows, (name, height)  # each row a readable height
        assert height <= 450 * panel_rows + 600, (name, height)  # plus one legend below


def test_sixteen_series_have_distinct_colours_and_markers():
    from attnzoo.analysis.figures import series_style, series_styles

    styles = [series_style(i) for i in range(16)]
    assert len({s["color"] for s in styles}) == 16  # scaled_dot and token_mlp no longer both blue
    assert len({(s["color"], s["marker"]) for s in styles}) == 16
    # markers cycle on their own period: neighbours differ in both, and pairs stay unique further
    assert all(styles[i]["marker"] != styles[i + 1]["marker"] for i in range(15))
    assert len({tuple(series_style(i).values()) for i in range(100)}) == 100
    # a label keeps its style in every panel, in order of first appearance, and a later series
    # is drawn inside an earlier one: two identical curves both show
    styled = series_styles(["b", "a", "b"])
    assert list(styled) == ["b", "a"]
    for i, label in enumerate(styled):
        assert series_style(i).items() <= styled[label].items()
    assert styled["a"]["ms"] < styled["b"]["ms"] and styled["a"]["mfc"] == "none"


# ---- what did not complete is said loudly -----------------------------------------------------


def make_broken_seed_sweep(root: Path) -> Path:
    """scaled_dot: seeds 0, 1 completed, seed 2 still running; pooling: seeds 0, 1 failed and
    seed 2 refused before it wrote anything (no folder: the sweep's refused.jsonl says why)."""
    for job, (mixer, seed) in enumerate(
        [("scaled_dot", 0), ("scaled_dot", 1), ("scaled_dot", 2), ("pooling", 0), ("pooling", 1)]
    ):
        status = {2: "running", 3: "failed", 4: "failed"}.get(job, "completed")
        make_run(root / str(job), mixer, seed, 2.0 + job / 10, status=status)
    summary = json.loads((root / "3" / "summary.json").read_text())
    summary["error"] = "Traceback ...\nRuntimeError: CUDA out of memory"
    (root / "3" / "summary.json").write_text(json.dumps(summary))
    grid = ["mixer=scaled_dot,pooling", "train.lr=0.003", "train.seed=0,1,2", "model.mlp=True"]
    (root / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": grid}}}))
    refused = {
        "job": "mixer=pooling,train.seed=2",
        "error": "mixer.window must be odd",
        "overrides": ["mixer=pooling", "train.lr=0.003", "train.seed=2", "model.mlp=True"],
    }
    (root / "refused.jsonl").write_text(json.dumps(refused) + "\n")
    return root


def test_jobs_that_did_not_complete_are_named_and_no_configuration_is_silently_n0(
    tmp_path, monkeypatch, capsys
):
    sweep = make_broken_seed_sweep(tmp_path / "sweep")
    with pytest.warns(analysis.SweepWarning) as caught:
        loaded = analysis.load_sweep(sweep)
    (message,) = [str(w.message) for w in caught]  # one message, every job in it
    assert "4 of 6 job(s) did not complete" in message
    assert "2 (running: still running, or killed" in message
    assert "3 (failed: RuntimeError: CUDA out of memory)" in message
    assert "mixer=pooling,train.seed=2 (refused: refused before it wrote anything: " in message
    assert "No completed seed (n=0, no values) in: mixer=pooling" in message

    # the refused job (no folder) is counted in its configuration, not lost as unplaced
    assert loaded.orphans == []
    pool = {r["group"]: r for r in loaded.group_table()}["mixer=pooling"]
    assert (pool["n_seeds"], pool["n_jobs"]) == (0, 3)
    assert pool["note"].startswith("n=0: no completed seed with a final val_loss: ")
    for part in (
        "seed 0 failed (job 3: RuntimeError: CUDA out of memory)",
        "seed 1 failed (job 4",
        "seed 2 refused (job mixer=pooling,train.seed=2: refused before it wrote "
        "anything: mixer.window must be odd)",
    ):
        assert part in pool["note"]

    out = tmp_path / "report"
    monkeypatch.setattr(sys, "argv", ["summarize.py", str(sweep), "--out", str(out)])
    summarize.main()
    printed = capsys.readouterr().out
    assert "WARNING: 4 of 6 job(s) did not complete" in printed
    assert "n=0: no completed seed" in printed  # groups.md, as printed
    assert "n=0: no completed seed" in read_groups(out)["mixer=pooling"]["note"]
    assert "n=0: no completed seed" in (out / "groups.md").read_text()


def test_selection_names_the_values_it_left_out_and_warns_for_a_configuration_it_drops(tmp_path):
    sweep, job = tmp_path / "tune", 0
    for mixer in ("scaled_dot", "pooling"):
        for lr in (1e-3, 3e-3, 1e-2):
            for seed in (100, 101):
                # scaled_dot at 1e-2 failed on both seeds; pooling failed everywhere
                failed = mixer == "pooling" or lr == 1e-2
                make_run(
                    sweep / str(job),
                    mixer,
                    seed,
                    2.0 + lr * 10,
                    lr=lr,
                    status="failed" if failed else "completed",
                )
                job += 1
    with pytest.warns(analysis.SweepWarning) as caught:
        groups = analysis.load_sweep(sweep).groups
        chosen = analysis.select(groups, "train.lr", "val_loss")
    assert [c["axes"] for c in chosen] == [{"mixer": "scaled_dot"}]  # pooling: nothing to pick
    note = chosen[0]["note"]
    assert "train.lr=0.01 left out: no val_loss (seed 100 failed, seed 101 failed)" in note
    dropped = [str(w.message) for w in caught if "nothing selected" in str(w.message)]
    why = "left out: no val_loss (seed 100 failed, seed 101 failed)"
    values = "; ".join(f"train.lr={lr} {why}" for lr in ("0.001", "0.003", "0.01"))
    assert dropped == [
        f"mixer=pooling: nothing selected, no train.lr value has a completed seed: {values}"
    ]


# ---- which split a report compares on ----------------------------------------------------------


def add_test_numbers(folder: Path, test_loss: float) -> None:
    """What a run that read every final split records: test/loss and test/accuracy."""
    summary = json.loads((folder / "summary.json").read_text())
    summary["final"] |= {"test/loss": test_loss, "test/accuracy": 1 - test_loss / 3, "test/n": 500}
    (folder / "summary.json").write_text(json.dumps(summary))


def test_a_fresh_seed_report_compares_on_held_out_test_and_every_table_says_so(tmp_path):
    """val says pooling is worse, the held-out test says better: the fresh-seed report (every
    run has test numbers) compares on test by default, groups.md and comparisons.csv say which
    split; --metric val_loss gives val, a tuning summary (--select-by) stays on val."""
    sweep = tmp_path / "sweep"
    for job, (mixer, seed) in enumerate(
        [(m, s) for m in ("scaled_dot", "pooling") for s in range(3)]
    ):
        val = 2.0 + seed / 100 + (0.5 if mixer == "pooling" else 0.0)
        make_run(sweep / str(job), mixer, seed, val)
        add_test_numbers(sweep / str(job), 2.0 + seed / 100 - (0.5 if mixer == "pooling" else 0.0))

    analysis.summarize(sweep, tmp_path / "auto")
    (row,) = csv.DictReader((tmp_path / "auto" / "comparisons.csv").open())
    assert (row["on"], row["split"], row["verdict"]) == ("test_loss", "test", "better")
    md = (tmp_path / "auto" / "groups.md").read_text()
    assert "Loss and metric: final values on the held-out test split" in md
    assert "comparisons on `test_loss` (every completed job has held-out test numbers" in md
    assert "| group | n_seeds | test_loss | test_metric |" in md and "| 1.51 [" in md
    assert float(read_groups(tmp_path / "auto")["mixer=pooling"]["test_loss_mean"]) == 1.51

    analysis.summarize(sweep, tmp_path / "val", metric="val_loss")
    (row,) = csv.DictReader((tmp_path / "val" / "comparisons.csv").open())
    assert (row["on"], row["split"], row["verdict"]) == ("val_loss", "val", "worse")
    md = (tmp_path / "val" / "groups.md").read_text()
    assert "on the validation split" in md and "| group | n_seeds | val_loss | metric |" in md

    from attnzoo.analysis.report import choose_metric

    rows = analysis.load_sweep(sweep).rows  # a tuning summary (--select-by) stays on val
    on, why = choose_metric(rows, "auto", tuning=True)
    assert on == "val_loss" and "--metric test_loss compares on test" in why

    for job in range(6):  # runs that read val only: no test to compare on
        summary = json.loads((sweep / str(job) / "summary.json").read_text())
        summary["final"] = {k: v for k, v in summary["final"].items() if not k.startswith("test/")}
        (sweep / str(job) / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(ValueError, match="no completed job has held-out test numbers"):
        analysis.summarize(sweep, tmp_path / "none", metric="test_loss")
    rows = analysis.load_sweep(sweep).compare("mixer", on="val_loss")
    assert [r["split"] for r in rows] == ["val"]


def test_rank_vs_depth_is_logarithmic_only_where_the_residual_spans_decades():
    from attnzoo.analysis.figures import residual_scale

    assert residual_scale([1.0, 0.95, 0.9, 0.85]) == "linear"  # kept rank: readable ticks
    assert residual_scale([1.0, 2e-4, 1e-9]) == "log"  # a collapse
    assert residual_scale([1.0, 0.3, 0.0]) == "log"  # reached float64's floor
    assert residual_scale([]) == "linear"
