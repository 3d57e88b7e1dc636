"""scripts/soak.py at its smallest: jobs killed at random (SIGKILL and SIGTERM) and resumed all
finish with every training step logged exactly once. A kill every ~4 s (not faster): a job killed
more often than it takes to start rarely gets to train, and the run took minutes instead of ~20 s."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[1] / "scripts" / "soak.py"


@pytest.mark.slow
def test_soak_kills_and_resumes_until_every_job_is_complete(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, str(SOAK), "--jobs", "2", "--steps", "60", "--kill-every", "4"]
        + ["--seed", "1", "--out", str(tmp_path / "soak")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    rows = [
        line.split("|")[1:-1]
        for line in out.stdout.splitlines()
        if line.startswith(("| 0-", "| 1-"))
    ]
    assert len(rows) == 2
    for _, _, _, _, _, missing, dup, status in rows:
        assert status.strip() == "completed"
        assert int(missing) == 0 and int(dup) == 0
    kills = sum(int(r[1]) + int(r[2]) for r in rows)
    resumes = sum(int(r[3]) for r in rows)
    assert kills >= 1 and resumes >= 1, "the soak killed nothing: it tested nothing"
    assert "every job complete" in out.stdout


def test_soak_rejects_bad_arguments() -> None:
    out = subprocess.run(
        [sys.executable, str(SOAK), "--jobs", "0"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2 and "--jobs must be >= 1, got 0" in out.stderr
