"""The trainer on a GPU, the `cuda` tier (skipped without CUDA): every mixer trains through
`attnzoo.train` under bf16 autocast, eager and compiled, with the fused AdamW and non-finite
checks on the device. Kill-and-resume on a GPU is in tests/test_hard_kill.py."""

from __future__ import annotations

import math

import pytest
import torch

from attnzoo.checkpoint import read_checkpoint
from attnzoo.mixers import MIXERS
from attnzoo.tracking import read_metrics
from attnzoo.train import compose, run

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SHORT = [
    "model.dim=64",
    "model.depth=2",
    "model.heads=4",
    "train.batch_size=32",
    "train.max_steps=20",
    "train.warmup_steps=2",
    "train.log_every=5",
    "train.eval_every=10",
    "train.eval_batches=2",
    "train.ckpt_every=10",
    "train.probe_batch_size=4",
    "train.progress=false",
    "logger.mode=disabled",
]


@pytest.fixture(autouse=True)
def _wandb_env(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_SILENT", "true")


def train_20_steps(
    tmp_path, mixer: str, compiled: bool, device: str = "cuda", impl: str = "auto"
) -> None:
    """20 steps of the sorting task; on CUDA the trainer runs under bf16 autocast."""
    overrides = [*SHORT, f"mixer={mixer}", f"train.device={device}", f"impl={impl}"]
    summary = run(compose([*overrides, f"train.compile={str(compiled).lower()}"]), tmp_path)
    assert summary["status"] == "completed" and summary["step"] == 20, summary["error"]
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 5, 10, 15, 20]
    for r in records[1:]:
        assert math.isfinite(r["train/loss"]) and math.isfinite(r["train/grad_norm"])
    evals = [r for r in records if "val/loss" in r]
    assert evals[-1]["val/loss"] < evals[0]["val/loss"]  # it learned something
    state = read_checkpoint(tmp_path / "checkpoints" / "last.pt")["model"]
    assert not any(k.startswith("_orig_mod.") for k in state)  # eager keys, compiled or not
    assert all(bool(torch.isfinite(w).all()) for w in state.values())


@pytest.mark.parametrize("impl", ["auto", "triton"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("mixer", sorted(MIXERS))
def test_every_mixer_trains_on_cuda_under_bf16_autocast(tmp_path, mixer, compiled, impl):
    train_20_steps(tmp_path, mixer, compiled, impl=impl)
