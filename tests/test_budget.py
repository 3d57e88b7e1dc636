"""A run given a FLOPs or wall-time budget instead of a step count: the step count a FLOPs budget
buys, the LR schedule over it, a wall-time budget on a fake clock that stops the run, resume
keeping the budget used so far, and the compute every run records."""

from __future__ import annotations

import math

import pytest

import attnzoo.train.budget as budget_module
from attnzoo.config import ConfigError
from attnzoo.flops import train_flops_per_token
from attnzoo.tasks.synthetic import Sort
from attnzoo.tracking import read_metrics
from attnzoo.train import TrainStep, compose, lr_factor, run

BATCH, SEQ = 4, 8
TINY = [
    "model.dim=16",
    "model.depth=2",
    "model.heads=2",
    f"train.batch_size={BATCH}",
    f"task.seq_len={SEQ}",
    "train.max_steps=1000",
    "train.warmup_steps=2",
    "train.log_every=5",
    "train.eval_every=10",
    "train.eval_batches=1",
    "train.eval_batch_size=512",  # the final evaluation in a few batches
    "train.ckpt_every=10",
    "train.probe_batch_size=2",
    "train.progress=false",
    "logger.mode=disabled",
    "logger.media_budget=0",
]


def per_step(mixer: str) -> float:
    per_token = train_flops_per_token(mixer, dim=16, depth=2, heads=2, seq_len=SEQ)
    return per_token * BATCH * SEQ


def test_flops_budget_trains_the_steps_it_buys_and_schedules_over_them(tmp_path):
    budget = 17.5 * per_step("scaled_dot")
    summary = run(compose([*TINY, f"train.max_flops={budget!r}"]), tmp_path / "sd")
    assert summary["status"] == "completed" and summary["step"] == 17  # not max_steps=1000
    compute = summary["compute"]
    assert compute["tokens"] == 17 * BATCH * SEQ
    assert (
        compute["flops"] == pytest.approx(17 * per_step("scaled_dot"))
        and compute["flops"] <= budget
    )
    assert compute["planned_by"] == "flops" and compute["steps_planned"] == 17
    records = read_metrics(tmp_path / "sd" / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 5, 10, 15, 17]
    assert [r["compute/tokens"] for r in records] == [s * BATCH * SEQ for s in (0, 5, 10, 15, 17)]
    lr = compose(TINY).train.lr
    # the cosine ends at the floor at the step the budget buys, not at train.max_steps
    assert records[-1]["train/lr"] == pytest.approx(lr * 0.1)
    assert records[1]["train/lr"] == pytest.approx(lr * lr_factor(5, 2, 17, 0.1))
    # a mixer cheaper per step gets more steps for the same FLOPs
    pooled = run(compose([*TINY, "mixer=pooling", f"train.max_flops={budget!r}"]), tmp_path / "p")
    assert pooled["step"] == math.floor(budget / per_step("pooling")) > 17


def test_a_flops_budget_that_cannot_be_counted_or_buys_no_step_is_a_config_error(tmp_path):
    no_flops = ["mixer=identity", "model.mlp=false", "train.max_flops=1e12"]
    with pytest.raises(ConfigError, match="train.max_flops=1e\\+12: mixer=identity"):
        run(compose([*TINY, *no_flops]), tmp_path / "a")
    with pytest.raises(ConfigError, match="buys no step"):
        run(compose([*TINY, "train.max_flops=10"]), tmp_path / "b")
    with pytest.raises(ConfigError, match="train.max_seconds"):
        run(compose([*TINY, "train.max_seconds=0"]), tmp_path / "c")


@pytest.fixture
def fake_clock(monkeypatch):
    """The budget's clock advances only in training steps, by `seconds(step)` per step."""
    clock = {"now": 0.0, "seconds": lambda step: 1.0}
    original = TrainStep.__call__

    def timed(self, batch, step):
        clock["now"] += clock["seconds"](step)
        return original(self, batch, step)

    monkeypatch.setattr(TrainStep, "__call__", timed)
    monkeypatch.setattr(budget_module, "clock", lambda: clock["now"])
    return clock


@pytest.mark.slow  # a clock-bound run; the FLOP budget's schedule stays
def test_wall_time_budget_estimates_its_schedule_then_the_clock_stops_the_run(tmp_path, fake_clock):
    steady = run(compose([*TINY, "train.max_seconds=25"]), tmp_path / "steady")
    # 1 s a step, measured from the step-5 log line to the step-15 one: 25 steps, LR to the floor
    assert steady["step"] == 25 and steady["compute"]["steps_planned"] == 25
    assert steady["compute"]["planned_by"] == "seconds"
    assert steady["compute"]["train_s"] == pytest.approx(25.0)
    lr = compose(TINY).train.lr
    assert read_metrics(tmp_path / "steady" / "metrics.jsonl")[-1]["train/lr"] == pytest.approx(
        lr * 0.1
    )
    # steps that slow down after the estimate: the clock ends the run before the 25 steps
    fake_clock["seconds"] = lambda step: 1.0 if step <= 15 else 2.0
    slowed = run(compose([*TINY, "train.max_seconds=25"]), tmp_path / "slowed")
    assert slowed["status"] == "completed" and slowed["step"] == 20
    assert slowed["compute"]["stopped_by"] == "seconds" and slowed["compute"]["train_s"] == 25.0
    steps = [r["step"] for r in read_metrics(tmp_path / "slowed" / "metrics.jsonl")]
    assert steps[-1] == 20 and "val/loss" in read_metrics(tmp_path / "slowed" / "metrics.jsonl")[-1]


class _Crash(RuntimeError):
    pass


def test_resume_keeps_the_seconds_used_and_the_estimated_schedule(
    tmp_path, monkeypatch, fake_clock
):
    original, calls = Sort.batch, {"train": 0}

    def batch(self, split, batch_size, generator):
        if split == "train":
            calls["train"] += 1
            if calls["train"] == 23:  # after the step-15 estimate and the step-20 checkpoint
                raise _Crash("simulated crash")
        return original(self, split, batch_size, generator)

    with monkeypatch.context() as m:
        m.setattr(Sort, "batch", batch)
        with pytest.raises(_Crash):
            run(compose([*TINY, "train.max_seconds=25"]), tmp_path / "cut")
    # from the step-20 checkpoint (20 s used), steps now take 2 s: 21, 22, 23 reach 26 s
    fake_clock["seconds"] = lambda step: 2.0
    resumed = run(compose([*TINY, "train.max_seconds=25", "train.resume=true"]), tmp_path / "cut")
    assert resumed["resumed_from"] == 20 and resumed["step"] == 23
    compute = resumed["compute"]
    assert compute["train_s"] == pytest.approx(26.0) and compute["stopped_by"] == "seconds"
    assert compute["steps_planned"] == 25 and compute["planned_by"] == "seconds"
    assert compute["tokens"] == 23 * BATCH * SEQ
    steps = [r["step"] for r in read_metrics(tmp_path / "cut" / "metrics.jsonl")]
    assert steps == [0, 5, 10, 15, 20, 23]


def test_every_run_records_its_compute(tmp_path):
    summary = run(compose([*TINY, "train.max_steps=6"]), tmp_path)
    compute = summary["compute"]
    assert compute["tokens"] == 6 * BATCH * SEQ and compute["planned_by"] == "steps"
    assert compute["flops"] == pytest.approx(6 * per_step("scaled_dot"))
    assert 0 < compute["train_s"] <= compute["wall_s"] and summary["params"] > 0
    last = read_metrics(tmp_path / "metrics.jsonl")[-1]
    assert last["compute/tokens"] == compute["tokens"] and last["compute/flops"] == compute["flops"]
