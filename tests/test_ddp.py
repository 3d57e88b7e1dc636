"""`torchrun --nproc_per_node=2 -m attnzoo.train` on CPU (gloo): two ranks train one model, and
only rank 0 writes the run folder."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("attnzoo.train", reason="the trainer (attnzoo.train) is not installed")

from attnzoo.checkpoint import read_checkpoint  # noqa: E402

ARGS = [
    "model.dim=16",
    "model.depth=2",
    "model.heads=2",
    "train.max_steps=6",
    "train.eval_every=3",
    "train.log_every=3",
    "train.device=cpu",
    "logger.mode=disabled",
]


def train(tmp_path: Path, name: str, nproc: int) -> Path:
    run_dir = tmp_path / name
    launch = [sys.executable, "-m", "attnzoo.train"]
    if nproc > 1:
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        launch += [f"--nproc_per_node={nproc}", "-m", "attnzoo.train"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [*launch, *ARGS, f"hydra.run.dir={run_dir}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return run_dir


@pytest.mark.slow  # a real multi-process run (~10-20 s): the slow tier
def test_two_cpu_ranks_train_one_model_and_only_rank_0_writes(tmp_path):
    ddp = train(tmp_path, "ddp", 2)
    single = train(tmp_path, "single", 1)
    summary = json.loads((ddp / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["step"] == 6
    records = [json.loads(line) for line in (ddp / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 3, 6]  # one writer: each step logged once
    assert sorted(p.name for p in (ddp / "checkpoints").iterdir()) == ["last.pt"]
    # Same seed and init as the one-process run, but rank 1's batches entered the averaged
    # gradient: the step-0 evaluation agrees, the trained weights do not.
    single_records = [json.loads(x) for x in (single / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["val/loss"] == pytest.approx(single_records[0]["val/loss"], rel=1e-6)
    w_ddp = read_checkpoint(ddp / "checkpoints" / "last.pt")["model"]
    w_one = read_checkpoint(single / "checkpoints" / "last.pt")["model"]
    assert set(w_ddp) == set(w_one)  # saved without DDP's "module." prefix
    assert any(not torch.allclose(w_ddp[k], w_one[k]) for k in w_ddp)
