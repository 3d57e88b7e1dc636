"""scripts/summarize.py on a synthetic sweep folder with every kind of broken job."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import summarize  # noqa: E402


def make_job(folder: Path, mixer: str, skip: bool, steps: int, status: str | None, **extra):
    """A job folder laid out as attnzoo.train leaves it; rank halves each layer (skip) or
    falls 100x a layer (no skip), validation loss falls with the step."""
    (folder / ".hydra").mkdir(parents=True)
    cfg = {
        "mixer": {"name": mixer},
        "model": {"dim": 16, "depth": 3, "heads": 2, "skip": skip, "mlp": True, "norm": "none"},
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
    overrides = ["model.skip=true,false", "+x=1,2"]
    params = {"mixer": "scaled_dot,pooling,identity"}
    grid = {"hydra": {"overrides": {"task": overrides}, "sweeper": {"params": params}}}
    (root / "multirun.yaml").write_text(yaml.safe_dump(grid))
    return root


def test_summary_lists_every_job_with_its_status(sweep, tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/summarize.py"), str(sweep), "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
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
    assert (done["mixer"], done["skip"], done["mlp"], done["norm"], done["depth"]) == (
        "scaled_dot",
        "True",
        "True",
        "none",
        "3",
    )
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
    assert "did not complete" in proc.stdout


def test_summary_defaults_to_the_sweep_folder_and_plots_rank_profiles(sweep):
    jobs = summarize.find_jobs(sweep)
    profiles = {j.name: j.rank_profile() for j in jobs}
    assert profiles["1"] == pytest.approx([1.0, 0.01, 1e-4, 1e-6])
    assert profiles["4"] is None
    summarize.summarize(sweep)
    assert (sweep / "summary.csv").exists() and (sweep / "rank_vs_depth.png").stat().st_size > 0


def test_not_a_folder_is_an_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts/summarize.py"), str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "is not a folder" in proc.stderr
