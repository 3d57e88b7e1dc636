"""attnzoo.engine, the tuned-study engine, on what every study gets from it alike: the options
and their refusals, the names of cells and margins, what a cell's runs are given, and the budget's
pilot on arms that carry options of their own."""

import csv
import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from attnzoo import engine
from attnzoo.engine.options import base_overrides, protocol
from attnzoo.engine.spec import title

ROOT = Path(__file__).resolve().parents[1]
SPECS = {
    name: runpy.run_path(str(ROOT / "scripts" / f"{name}.py"))["SPEC"]
    for name in ("mixer_ablation", "recall", "sinks")
}


def test_a_cell_is_named_by_its_columns():
    assert title({"task": "imdb"}) == "imdb"
    assert title({"width": 64, "depth": 2}) == "Width 64, depth 2"
    assert title({}) == ""


@pytest.mark.parametrize(
    "name,argv,says",
    [
        ("mixer_ablation", ["--margin-loss", "0"], "--margin-loss 0.0: the equivalence margin"),
        ("mixer_ablation", ["--margin-accuracy", "-1"], "--margin-accuracy -1.0: the equivalence"),
        ("sinks", ["--margin", "0"], "--margin 0.0: the equivalence margin"),
        ("sinks", ["--success", "0.9"], "unrecognized arguments: --success"),  # a loss study
        ("recall", ["--mixers", "deltanet"], "--mixers must include the reference, scaled_dot"),
        ("sinks", ["--arms", "none", "nowhere"], "--arms: nowhere unknown; allowed: none, learned"),
        ("recall", ["--pilot", "10", "--add-to", "x"], "--pilot runs alone"),
        ("recall", ["--success", "1.5"], "--success 1.5: allowed: an accuracy in (0, 1]"),
    ],
)
def test_every_study_refuses_the_same_bad_values_the_same_way(name, argv, says, capsys):
    with pytest.raises(SystemExit) as stop:
        engine.parse(SPECS[name], argv)
    assert stop.value.code == 2 and says in capsys.readouterr().err


def test_the_protocol_names_its_arms_and_margins_as_the_study_does():
    """What a committed report's header holds, and what --add-to and --budget-from compare."""
    mixers = protocol(engine.parse(SPECS["mixer_ablation"], []))
    assert mixers["margin_loss"] == 0.05 and mixers["margin_accuracy"] == 0.02
    assert "mixers" in mixers and "arms" not in mixers
    sinks = protocol(engine.parse(SPECS["sinks"], ["--arms", "none,learned", "--dry-run"]))
    assert sinks["margin"] == 0.05 and sinks["arms"] == ["none", "learned"]
    # the arms run in the spec's order, the reference first, however they were given
    recall = engine.parse(SPECS["recall"], ["--mixers", "deltanet", "scaled_dot"])
    assert recall.arms == ["scaled_dot", "deltanet"]


def test_a_cells_runs_get_the_preset_then_the_cell_then_the_run_options_then_the_user():
    args = engine.parse(SPECS["recall"], ["--widths", "32", "--override", "model.heads=2"])
    (cell,) = SPECS["recall"].cells(args)
    over = base_overrides(cell, args, None)
    assert over[0] == "task=mqar" and over[-1] == "model.heads=2"
    assert over.index("model.dim=32") < over.index("logger.mode=disabled")
    args.budget = 1300  # a pilot's budget replaces the preset's steps
    steps = [o for o in base_overrides(cell, args, None) if o.startswith("train.max_steps=")]
    assert steps == ["train.max_steps=1300"]


@pytest.mark.slow  # ~30 s: 4 toy runs
def test_the_pilot_runs_arms_with_options_in_their_own_folders(tmp_path):
    """The sink study's arms differ by options, not by mixer: the pilot sweeps each set of
    options apart and reads every curve back under its arm."""
    out = tmp_path / "pilot"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "sinks.py"),
            "--pilot",
            "6",
            "--smoke",
            "--arms",
            "none,learned",
            "--lrs",
            "1e-3,4e-3",
            "--parallel",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((out / "pilot.json").read_text())
    assert {b["arm"] for b in record["best"]} == {"none", "learned"}
    assert {(f["arm"], f["lr"]) for f in record["flat_from"]} == {
        (a, lr) for a in ("none", "learned") for lr in (1e-3, 4e-3)
    }
    learned = [json.loads(p.read_text()) for p in (out / "learned").glob("*/summary.json")]
    assert len(learned) == 2  # its own sweep: the option on both rates
    assert (out / "pilot.md").read_text().count("Budget:") + (out / "pilot.md").read_text().count(
        "No budget:"
    ) == 1


COMMITTED = [
    "mixer_ablation/mixer_ablation.json",
    "mixer_ablation/favor_rerun/mixer_ablation.json",  # --mixers favor: no reference, rejoined
    "recall/recall.json",
    "recall/screen/recall.json",
    "recall/pilot/pilot.json",
    "sinks/sinks.json",
]


@pytest.mark.parametrize("report", COMMITTED)
def test_every_committed_reports_command_is_still_a_command_of_its_study(report):
    """The command a committed report records parses today, with the same protocol: a reader
    can run it again (priced with --dry-run, so that no corpus or folder is needed)."""
    import shlex

    header = json.loads((ROOT / "scripts" / "results" / report).read_text())
    words = shlex.split(header["command"])
    script = Path(words[1]).stem
    args = engine.parse(SPECS[script], [*words[2:], "--dry-run"])
    mine = protocol(args)
    for key in ("preset", "lrs", "tune_seeds", "seeds", "success", "budget"):
        if key in header and not (key == "budget" and "pilot_steps" in header):  # its finding
            assert mine[key] == header[key], key


def example_spec() -> engine.Spec:
    """The study docs/contributing.md shows, as its code block defines it."""
    import re

    text = (ROOT / "docs" / "contributing.md").read_text()
    (block,) = re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)
    namespace = {"__name__": "example"}
    exec(compile(block, "docs/contributing.md", "exec"), namespace)
    return namespace["SPEC"]


def test_the_contributing_pages_example_study_is_a_study(capsys):
    """The spec docs/contributing.md shows prices and refuses a preset it does not have."""
    spec = example_spec()
    engine.study(engine.parse(spec, ["--dry-run", "--parallel", "2"]))
    printed = capsys.readouterr().out
    assert "tuning: 12 jobs × ~176 s" in printed and "fresh seeds: 6 jobs" in printed
    with pytest.raises(SystemExit) as stop:
        engine.parse(spec, ["--preset", "gpu"])
    assert stop.value.code == 2 and "--preset gpu: allowed: cpu" in capsys.readouterr().err
    assert engine.parse(spec, ["--success", "0.9", "--dry-run"]).success == 0.9


@pytest.mark.slow  # ~40 s: 12 toy runs
def test_the_example_study_runs_and_reports_with_no_code_of_its_own(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "gate"
    argv = [
        "--smoke",
        "--lrs",
        "1e-3,1e-2",
        "--success",
        "0.5",
        "--parallel",
        "2",
        "--out",
        str(out),
    ]
    engine.study(engine.parse(example_spec(), argv))
    md = (out / "gate_recall.md").read_text()
    assert "Against plain (success rate, test accuracy ≥ 0.5):" in md and "- gated vs plain" in md
    runs = list(csv.DictReader((out / "runs.csv").open()))
    assert sorted((r["arm"], r["seed"]) for r in runs) == [
        (a, s) for a in ("gated", "plain") for s in ("0", "1")
    ]
    assert {r["job"].split("/")[0] for r in runs} == {"final", "gated"}  # the option: its folder
    header = json.loads((out / "gate_recall.json").read_text())
    assert header["arm_text"] == {"gated": "an output gate per head"} and header["success"] == 0.5
