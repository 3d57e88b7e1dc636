"""scripts/recall.py: the MQAR recall study's refusals (exit 2, nothing written) and, in the slow
tier, its whole pipeline at toy size."""

import csv
import json
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnzoo.analysis.convergence import still_moving
from attnzoo.engine.cell import selection_from_rows
from attnzoo.engine.report import tuning_lines
from attnzoo.studies import read_rows

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "recall.py"
COMMITTED = ROOT / "scripts" / "results" / "recall" / "screen"  # the default protocol's report
MIXERS = ["scaled_dot", "linear", "retention", "mamba2", "gla", "deltanet"]


def recall(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
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
        (["--widths", "30"], "--widths: [30] are not multiples of the model's 4 heads"),
        (["--widths", "0,64"], "--widths: [0] are not positive"),
        (["--depths", "-1"], "--depths: [-1] are not positive"),
        (["--lrs", "1e-3"], "needs ≥ 2 positive learning rates"),
        (["--mixers", "linear", "gla"], "--mixers must include the reference, scaled_dot"),
        (["--mixers", "scaled_dot", "nystrom"], "--mixers: nystrom unknown; allowed: scaled_dot"),
        (["--tune-seeds", "0,100", "--seeds", "0,1"], "share seed(s) 0"),
        (["--success", "0"], "--success 0.0: allowed: an accuracy in (0, 1]"),
        (["--success", "90"], "--success 90.0: allowed: an accuracy in (0, 1]"),
        (
            ["--widths", "256", "--success", "0.9", "--add-to", str(COMMITTED)],
            "its success is None, this run's 0.9",
        ),
        (["--widths", "64", "--add-to", str(COMMITTED)], "(width, depth) [(64, 2)] already in it"),
        (
            ["--widths", "256", "--seeds", "0,1,2,3", "--add-to", str(COMMITTED)],
            "its seeds is [0, 1, 2], this run's [0, 1, 2, 3]; allowed: the protocol",
        ),
        (["--widths", "256", "--lrs", "1e-3,1e-2", "--add-to", str(COMMITTED)], "its lrs is"),
        (
            ["--widths", "256", "--add-to", "no-such-report"],
            "--add-to no-such-report: not a report",
        ),
    ],
)
def test_bad_arguments_exit_2_naming_the_value_and_write_nothing(args, says, tmp_path, run_script):
    out = tmp_path / "out"
    code, _, err = run_script(SCRIPT, *args, "--out", str(out))
    assert code == 2 and says in err, err
    assert not out.exists()


def test_the_price_reads_each_committed_cells_seconds_and_scales_the_others(run_script):
    """--dry-run: a committed cell costs its runs' mean wall time (from its tables), a cell not
    measured the width-64, depth-2 figure scaled by width × depth; nothing runs or is written."""
    rows = [*read_rows(COMMITTED / "runs.csv"), *read_rows(COMMITTED / "tune_runs.csv")]
    cell = [float(r["wall_s"]) for r in rows if (r["width"], r["depth"]) == ("32", "2")]
    code, printed, err = run_script(SCRIPT, "--dry-run", "--widths", "32,1024", "--depths", "2")
    assert code == 0, err
    assert (
        f"Width 32, depth 2 tuning (measured): 36 jobs × ~{sum(cell) / len(cell):.0f} s" in printed
    )
    assert "Width 1024, depth 2 tuning (scaled): 36 jobs × ~2816 s" in printed  # 176 × 16
    assert "grid extensions add up to 24 runs more" in printed


def test_a_committed_tuning_is_rebuilt_from_its_runs_as_its_report_states_it():
    """The selection rebuilt from the committed tune_runs.csv (what --add-to reads) gives the
    committed report's learning-rate table line for line, in every cell: the width-64 cell's
    report was written from the run folders by the selection code, so this is a second path to
    the same numbers."""
    study = json.loads((COMMITTED / "recall.json").read_text())
    md = (COMMITTED / "recall.md").read_text().splitlines()
    tune = read_rows(COMMITTED / "tune_runs.csv")
    assert {(c["width"], c["depth"]) for c in study["cells"]} >= {(64, 2)}
    for cell in study["cells"]:
        where = (cell["width"], cell["depth"])
        rows = [r for r in tune if (int(r["width"]), int(r["depth"])) == where]
        selected = selection_from_rows(rows, cell["chosen_lr"], MIXERS)
        result = {
            "selected": selected,
            "extensions": cell["extensions"],
            "chosen": cell["chosen_lr"],
        }
        on = "whole-split val accuracy (max)"
        lines = tuning_lines(result, study["lrs"], study["tune_seeds"], on, 1)
        assert len([line for line in lines if line.startswith("| ")]) == 1 + len(MIXERS)
        assert [line for line in lines if line and line not in md] == []


def test_add_to_refuses_a_recall_json_without_its_fields(tmp_path, run_script):
    folder = tmp_path / "committed"
    shutil.copytree(COMMITTED, folder)
    (folder / "recall.json").write_text(json.dumps({"cells": [{"width": 64}]}))
    out = tmp_path / "out"
    code, _, err = run_script(SCRIPT, "--widths", "256", "--add-to", str(folder), "--out", str(out))
    assert code == 2 and "recall.json lacks its fields" in err, err
    assert not out.exists()


def test_add_to_refuses_a_report_whose_runs_do_not_give_its_choices(tmp_path, run_script):
    """A tuning table altered so that another learning rate wins: the committed choice no longer
    follows from the runs, and the report is not joined."""
    folder = tmp_path / "committed"
    shutil.copytree(COMMITTED, folder)
    rows = read_rows(folder / "tune_runs.csv")
    for r in rows:
        if r["mixer"] == "gla" and "train.lr=0.001" in r["overrides"]:
            r["final_metric"] = "0.9"
    with open(folder / "tune_runs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = tmp_path / "out"
    code, _, err = run_script(SCRIPT, "--widths", "256", "--add-to", str(folder), "--out", str(out))
    assert code == 2 and "tune_runs.csv does not give its choices" in err, err
    assert not out.exists()


# The slow tier's smoke: three of the six mixers (the reference, a recurrent one and the delta
# rule), run once for the module and read by both tests below.
SMOKE_MIXERS = ["scaled_dot", "mamba2", "deltanet"]
SMOKE = ["--smoke", "--mixers", *SMOKE_MIXERS, "--parallel", "2"]


@pytest.fixture(scope="module")
def smoke_study(tmp_path_factory) -> Path:
    """The smoke study at depth 2 (~27 toy runs), its report folder."""
    out = tmp_path_factory.mktemp("recall") / "depth2"
    proc = recall(*SMOKE, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_the_smoke_study_tunes_reruns_compares_and_resumes(smoke_study):
    out = smoke_study
    md = (out / "recall.md").read_text()
    assert "## Width 16, depth 2" in md and "**Smoke run**" in md
    assert "Equivalence margin, fixed before the runs: ±0.05 accuracy" in md
    runs = list(csv.DictReader((out / "runs.csv").open()))
    assert sorted({(r["mixer"], r["seed"]) for r in runs}) == sorted(
        (m, s) for m in SMOKE_MIXERS for s in ("0", "1")
    )
    assert {(r["width"], r["depth"]) for r in runs} == {("16", "2")}
    assert all(r["final_test_metric"] not in ("", None) for r in runs)  # test read at the end
    tune = list(csv.DictReader((out / "tune_runs.csv").open()))
    assert len(tune) >= 3 * 3 * 2 and all(r["final_test_metric"] == "" for r in tune)  # val only
    assert all(r["job"].startswith("dim16_depth2/tune") for r in tune)  # its folder under --out
    family = list(csv.DictReader((out / "comparisons.csv").open()))
    assert sorted(r["config"].split(" ")[0] for r in family) == sorted(SMOKE_MIXERS[1:])
    assert {r["correction"] for r in family} == {"holm"} and {r["tests"] for r in family} == {"6"}
    assert (out / "recall.png").stat().st_size > 10_000
    curves = read_rows(out / "curves.csv")  # every fresh run's sampled validation accuracy
    assert {(r["arm"], r["seed"]) for r in curves} == {(r["mixer"], r["seed"]) for r in runs}
    for mixer, seed in {(r["mixer"], r["seed"]) for r in runs}:
        steps = [int(r["step"]) for r in curves if (r["arm"], r["seed"]) == (mixer, seed)]
        assert len(steps) >= 2 and steps == sorted(set(steps))
    assert all(0.0 <= float(r["val_accuracy"]) <= 1.0 for r in curves)
    again = recall(*SMOKE, "--out", str(out))  # every sweep completed
    assert again.returncode == 0 and "-m attnzoo.train" not in again.stdout
    assert again.stdout.count("done already") >= 2


@pytest.mark.slow
def test_a_new_cell_joins_a_committed_report_in_one_family(smoke_study, tmp_path):
    """A depth-1 cell run with --add-to a depth-2 report: the new report holds both cells, the
    committed cell's table and per-seed values as committed, every comparison in one Holm family
    (12 hypotheses), its raw p-values as before; the header names the command that ran it."""
    first, second = smoke_study, tmp_path / "both"
    proc = recall(*SMOKE, "--depths", "1", "--add-to", str(first), "--out", str(second))
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (second / "recall.md").read_text()
    assert "## Width 16, depth 1" in md and "## Width 16, depth 2" in md
    assert "Width 16, depth 2: run by `python" in md
    before, after = (json.loads((f / "recall.json").read_text()) for f in (first, second))
    assert [c["depth"] for c in after["cells"]] == [1, 2]
    assert after["cells"][1]["groups"] == before["cells"][0]["groups"]
    assert after["earlier"][0]["cells"] == [[16, 2]]
    runs = read_rows(second / "runs.csv")
    assert {(r["depth"], r["mixer"]) for r in runs} == {(d, m) for d in "12" for m in SMOKE_MIXERS}
    assert [r for r in runs if r["depth"] == "2"] == read_rows(first / "runs.csv")
    curves = read_rows(second / "curves.csv")  # the committed cell's curves carried over
    assert [r for r in curves if r["depth"] == "2"] == read_rows(first / "curves.csv")
    assert {(r["depth"], r["arm"]) for r in curves} == {(d, m) for d in "12" for m in SMOKE_MIXERS}
    family = read_rows(second / "comparisons.csv")
    assert len(family) == 4 and {r["tests"] for r in family} == {"12"}
    old = {r["config"]: float(r["p"]) for r in read_rows(first / "comparisons.csv")}
    new = {r["config"]: float(r["p"]) for r in family if r["depth"] == "2"}
    assert new == pytest.approx(old, rel=1e-6)  # recomputed from the committed per-seed values


def test_success_compares_each_cells_success_rates_with_an_exact_test():
    """--success 0.9 on the committed cells: each mixer's seeds at ≥ 0.9 test accuracy against
    scaled-dot's by Boschloo's exact test, in one Holm family, and the protocol says so."""
    from attnzoo import engine
    from attnzoo.analysis.compare import correct
    from attnzoo.analysis.report import protocol_text
    from attnzoo.engine.compare import cell_numbers, groups_of
    from attnzoo.stats import rate_p

    spec = runpy.run_path(str(SCRIPT))["SPEC"]
    runs = [r | {"arm": r["mixer"]} for r in read_rows(COMMITTED / "runs.csv")]
    where = sorted({(int(r["width"]), int(r["depth"])) for r in runs})
    args = engine.parse(spec, ["--success", "0.9", "--widths", "64", "--depths", "2"])
    (cell,) = spec.cells(args)

    def compared(w: int, d: int) -> list[dict]:
        here = [r for r in runs if (int(r["width"]), int(r["depth"])) == (w, d)]
        return cell_numbers(cell, args, {}, groups_of(here, args.arms), [])["compared"]

    family = correct([r for w, d in where for r in compared(w, d)], "holm")
    assert len(family) == 5 * len(where)
    assert all(r["method"] == "Boschloo exact" and r["tests"] == len(family) for r in family)
    text = protocol_text(family, 0.95, None, "holm")
    assert "Boschloo's exact test" in text and f"{len(family)} hypotheses" in text
    # one by hand: DeltaNet against scaled-dot at width 64, depth 2, from the per-seed values
    here = [r for r in runs if (r["width"], r["depth"]) == ("64", "2")]
    hits = {
        m: sum(float(r["final_test_metric"]) >= 0.9 for r in here if r["mixer"] == m)
        for m in ("deltanet", "scaled_dot")
    }
    row = next(r for r in compared(64, 2) if r["value"] == "deltanet")
    assert row["p"] == pytest.approx(rate_p(hits["deltanet"], 3, hits["scaled_dot"], 3))


def test_the_report_names_the_fresh_seeds_still_moving_at_the_end_of_their_budget():
    """On the committed width-128 curves: every Mamba-2 seed and scaled-dot's seed 2 rose by 5
    points of accuracy or more over the last fifth of the 1000 steps (the results page's "still
    rising at step 1000"); a curve that rose early and then held is flattened."""
    from attnzoo import engine

    spec = runpy.run_path(str(SCRIPT))["SPEC"]
    args = engine.parse(spec, [])
    (meta,) = spec.cells(args)
    rows = read_rows(COMMITTED / "curves.csv")
    cell = {"cell": meta, "curves": [r for r in rows if r["width"] == "128"]}
    moving = {(m, s) for m, s, _ in still_moving(cell["curves"], 0.05)}
    assert moving == {("mamba2", 0), ("mamba2", 1), ("mamba2", 2), ("scaled_dot", 2)}
    assert "mamba2 seed(s) 0 (+0.08), 1 (+0.14), 2 (+0.14)" in engine.moving_line(cell, args)
    flat = [
        {"arm": "m", "seed": "0", "step": str(s), "val_accuracy": str(v)}
        for s, v in [(0, 0.1), (200, 0.9), (800, 0.97), (900, 0.98), (1000, 0.98)]
    ]
    assert still_moving(flat, 0.05) == []
    line = engine.moving_line({"cell": meta, "curves": flat}, args)
    assert line.startswith("Flattened: every fresh seed")


def pilot_record(folder: Path, **changes) -> Path:
    """A pilot.json of the CPU preset's protocol (as --pilot writes it), with `changes`."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "preset": "cpu",
        "mixers": ["scaled_dot", "linear", "retention", "mamba2", "gla", "deltanet"],
        "lrs": [1e-3, 3e-3, 1e-2],
        "override": [],
        "margin": 0.05,
        "smoke": False,
        "budget": 2400,
        "pilot_steps": 4000,
    } | changes
    (folder / "pilot.json").write_text(json.dumps(record))
    return folder


@pytest.mark.parametrize(
    "changes,says",
    [
        ({"budget": None}, "its curves had not flattened (pilot.md); no budget"),
        ({"lrs": [1e-3, 1e-2]}, "the pilot's lrs is [0.001, 0.01], this run's"),
        ({"margin": 0.1}, "the pilot's margin is 0.1, this run's 0.05"),
    ],
)
def test_a_budget_is_taken_only_from_a_pilot_of_this_protocol_that_found_one(
    changes, says, tmp_path, run_script
):
    pilot = pilot_record(tmp_path / "pilot", **changes)
    code, _, err = run_script(SCRIPT, "--budget-from", str(pilot), "--out", str(tmp_path / "o"))
    assert code == 2 and says in err, err
    assert not (tmp_path / "o").exists()
    code, _, err = run_script(SCRIPT, "--budget-from", str(tmp_path), "--dry-run")
    assert code == 2 and "no pilot.json there (run --pilot STEPS first)" in err
    code, _, err = run_script(SCRIPT, "--pilot", "0", "--dry-run")
    assert code == 2 and "--pilot 0: allowed: a positive number of steps" in err


def test_the_budget_of_a_pilot_sets_the_steps_and_the_price(tmp_path, run_script):
    """2,400 steps from the pilot against the preset's 1,000: each run costs 2.4 times the
    committed cell's mean, and the runs train that many steps."""

    pilot = pilot_record(tmp_path / "pilot")
    code, with_budget, err = run_script(SCRIPT, "--budget-from", str(pilot), "--dry-run")
    assert code == 0, err
    code, without, _ = run_script(SCRIPT, "--dry-run")
    per = lambda text: float(text.split("fresh seeds: 18 jobs × ~")[1].split(" s")[0])  # noqa: E731
    assert per(with_budget) == pytest.approx(2.4 * per(without), rel=0.01)
    assert "scaled to the budget" in with_budget
    from attnzoo import engine
    from attnzoo.engine.options import preset_overrides

    args = engine.parse(runpy.run_path(str(SCRIPT))["SPEC"], ["--smoke"])
    args.budget = 2400
    steps = [o for o in preset_overrides(args) if o.startswith("train.max_steps=")]
    assert steps == ["train.max_steps=2400"]  # the smoke's 3 steps and the preset's 1000 give way


@pytest.mark.slow  # ~20 s: 4 toy runs
def test_the_pilot_writes_every_curve_and_the_step_they_flatten_by(tmp_path):
    out = tmp_path / "pilot"
    mixers = ("--mixers", "scaled_dot", "deltanet")
    grid = ("--lrs", "1e-3,1e-2", "--parallel", "2", "--out", str(out))
    proc = recall("--pilot", "30", "--smoke", *mixers, *grid)
    assert proc.returncode == 0, proc.stderr[-3000:]
    curves = read_rows(out / "curves.csv")
    assert {(r["arm"], float(r["lr"])) for r in curves} == {
        (m, lr)
        for m in json.loads((out / "pilot.json").read_text())["mixers"]
        for lr in (1e-3, 1e-2)
    }
    assert {int(r["step"]) for r in curves} >= {0, 30}
    record = json.loads((out / "pilot.json").read_text())
    assert record["pilot_steps"] == 30 and len(record["flat_from"]) == 4
    assert "--pilot 30" in record["command"] and "cores available" in record["machine"]
    assert f"Command: `{record['command']}`" in (out / "pilot.md").read_text()
    # the budget is read off each mixer's best curve: the rate whose accuracy ends highest
    steps = {(f["arm"], f["lr"]): f["step"] for f in record["flat_from"]}
    ends = {
        (m, float(lr)): float(r["val_accuracy"])
        for r in curves
        for m, lr in [(r["arm"], r["lr"])]
        if int(r["step"]) == 30
    }
    for b in record["best"]:
        assert ends[(b["arm"], b["lr"])] == max(v for (m, _), v in ends.items() if m == b["arm"])
    flat = [steps[(b["arm"], b["lr"])] for b in record["best"]]
    assert len(flat) == 2 and record["budget"] == (None if None in flat else max(flat))
    assert ("Budget:" if record["budget"] is not None else "No budget:") in (
        out / "pilot.md"
    ).read_text()
    # a pilot sees validation data only: no run read its test split
    summaries = [json.loads(p.read_text()) for p in out.glob("*/*/summary.json")]
    assert len(summaries) == 4
    assert all(not any(k.startswith("test/") for k in s["final"]) for s in summaries)
