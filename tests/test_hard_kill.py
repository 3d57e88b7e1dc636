"""A training run killed with SIGKILL (no handler, no last checkpoint) and started again with
train.resume=true continues from its last checkpoint and ends with the same numbers, step for
step, as a run that was never interrupted; metrics.jsonl has every step exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnzoo.checkpoint import read_checkpoint
from attnzoo.tracking import read_metrics

ARGS = [
    "model.dim=16",
    "model.depth=2",
    "model.heads=2",
    "model.dropout=0.1",  # dropout makes the RNG state part of what a resume must restore
    "train.batch_size=8",
    "train.max_steps=400",
    "train.warmup_steps=5",
    "train.log_every=1",
    "train.eval_every=50",
    "train.eval_batches=1",
    "train.eval_batch_size=512",  # the final evaluation in a few batches
    "train.ckpt_every=20",
    "train.probe_batch_size=4",
    "train.progress=false",
    "logger.mode=disabled",
]


def _train(run_dir: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_DIR": str(run_dir.parent)}
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # cuBLAS under train.deterministic=true
    env.pop("TRITON_INTERPRET", None)
    return subprocess.Popen(
        [sys.executable, "-m", "attnzoo.train", *ARGS, *extra, f"hydra.run.dir={run_dir}"],
        env=env,
        cwd=run_dir.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]


def _curve(run_dir: Path) -> dict[int, float]:
    return {
        r["step"]: r["train/loss"]
        for r in read_metrics(run_dir / "metrics.jsonl")
        if "train/loss" in r
    }


@pytest.mark.slow  # a trainer killed in a subprocess; tests/test_nothing_lost.py keeps a kill -9
def test_kill_9_then_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    _kill_and_resume(tmp_path)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_kill_9_then_resume_on_cuda_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    """The same on a GPU (bf16 autocast, fused AdamW, checks on the device), with
    train.deterministic=true: without it, atomics in backward kernels (e.g. the embedding's)
    make two runs differ in the last bits, resumed or not."""
    _kill_and_resume(tmp_path, "train.device=cuda", "train.deterministic=true")


def _kill_and_resume(tmp_path: Path, *extra: str) -> None:
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    _finish(_train(whole, *extra))

    proc = _train(cut, *extra)
    metrics = cut / "metrics.jsonl"
    deadline = time.monotonic() + 240
    # wait until at least two checkpoints exist and training is between checkpoints
    while time.monotonic() < deadline and proc.poll() is None:
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        if len(lines) >= 55:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed; make it longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    killed_at = max(_curve(cut))
    checkpoint_step = read_checkpoint(cut / "checkpoints" / "last.pt")["step"]
    assert 0 < checkpoint_step <= killed_at < 400

    _finish(_train(cut, *extra, "train.resume=true"))
    steps = [r["step"] for r in read_metrics(metrics)]
    assert steps == sorted(set(steps)), "a step is logged twice or out of order"
    assert sorted(_curve(cut)) == list(range(1, 401)), "a step is missing"
    assert _curve(cut) == _curve(whole)
    # everything but the clock's readings (speed, and the seconds a wall-time budget counts)
    clock = lambda key: key.startswith("perf/") or key in ("compute/wall_s", "compute/train_s")
    last_cut, last_whole = read_metrics(metrics)[-1], read_metrics(whole / "metrics.jsonl")[-1]
    assert {k: v for k, v in last_cut.items() if not clock(k)} == {
        k: v for k, v in last_whole.items() if not clock(k)
    }
    assert last_cut.keys() == last_whole.keys()
