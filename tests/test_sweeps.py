"""Multirun sweeps through the real launchers: a failed job does not stop the others, the sweep
summary shows it, and every job logs to the W&B group of its configuration, tagged with the sweep."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from wandb_files import run_record

pytest.importorskip("attnzoo.train", reason="the trainer (attnzoo.train) is not installed")

ROOT = Path(__file__).resolve().parents[1]
TINY = ["model.dim=16", "model.depth=2", "train.max_steps=6", "train.eval_every=3"]


def sweep(tmp_path: Path, launcher: str, *overrides: str) -> tuple[Path, list[dict]]:
    out = tmp_path / "multirun" / f"grid_{launcher}"
    env = {**os.environ, "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "attnzoo.train", "-m", f"hydra/launcher={launcher}"]
    cmd += [*TINY, "logger.mode=offline", f"hydra.sweep.dir={out}", *overrides]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.is_dir(), proc.stderr[-3000:]
    subprocess.run(
        [sys.executable, str(ROOT / "scripts/summarize.py"), str(out)], check=True, timeout=300
    )
    return out, list(csv.DictReader((out / "summary.csv").open()))


@pytest.mark.slow  # a real multi-process run (~10-20 s): the slow tier
def test_submitit_local_sweep_finishes_around_a_failed_job(tmp_path):
    # model.heads=3 does not divide model.dim=16: that job fails when it builds its model
    out, rows = sweep(tmp_path, "local", "model.heads=1,3,2")
    # the job whose model cannot be built is refused before it writes anything: no folder, and
    # the summary says so, with the reason
    assert [r["status"] for r in rows] == ["completed", "refused", "completed"]
    assert "heads" in rows[1]["note"] and "model.heads=3" in rows[1]["overrides"]
    assert not (out / "model.heads=3").exists()
    assert (out / ".submitit").is_dir()  # it did go through submitit
    assert [r["job"] for r in rows] == ["model.heads=1", "model.heads=3", "model.heads=2"]
    for job in (rows[0], rows[2]):
        assert (out / job["job"] / "checkpoints" / "last.pt").exists()
        assert float(job["final_val_loss"]) > 0
        record = run_record(out / job["job"])
        # one W&B group per configuration, the sweep as a tag, the mixer as the job type
        assert record.run_group.startswith("sort-scaled_dot-")
        assert f"sweep:{out.name}" in record.tags and record.job_type == "scaled_dot"
    assert "**refused**" in (out / "summary.md").read_text()


@pytest.mark.slow  # a real multi-process run (~10-20 s): the slow tier
def test_joblib_sweep_runs_every_mixer_in_parallel(tmp_path):
    out, rows = sweep(tmp_path, "parallel", "mixer=identity,pooling", "model.residual=none")
    assert [r["status"] for r in rows] == ["completed"] * 2
    assert [(r["mixer"], r["residual"]) for r in rows] == [
        ("identity", "none"),
        ("pooling", "none"),
    ]
    records = [run_record(out / r["job"]) for r in rows]
    assert [r.run_group.split("-")[:3] for r in records] == [
        ["sort", "identity", "residual_none"],
        ["sort", "pooling", "residual_none"],
    ]
    assert all(f"sweep:{out.name}" in r.tags for r in records)
    assert (out / "rank_vs_depth.png").stat().st_size > 0
