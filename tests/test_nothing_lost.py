"""A finished run is never rewritten, and a stopped one keeps its work: a refused rerun (single run
or sweep) leaves the folder it refused byte for byte as it was and makes none of its own; Ctrl-C
and SIGTERM, in training or in an evaluation, stop within seconds with a checkpoint of the last
completed step, and the resumed run ends with the numbers of one never stopped."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnzoo.checkpoint import read_checkpoint
from attnzoo.tasks.synthetic import Sort
from attnzoo.tracking import read_metrics
from attnzoo.train import EXIT_CONFIG, EXIT_PREEMPTED, compose, run
from attnzoo.train.step import TrainStep
from attnzoo.train.trainer import EXIT_INTERRUPTED

TINY = [
    "model.dim=16",
    "model.depth=2",
    "model.heads=2",
    "train.batch_size=8",
    "train.max_steps=30",
    "train.warmup_steps=5",
    "train.log_every=5",
    "train.eval_every=10",
    "train.eval_batches=3",
    "train.ckpt_every=10",
    "train.probe_batch_size=4",
    "train.progress=false",
    "logger.mode=disabled",
]


@pytest.fixture(autouse=True)
def _wandb_env(tmp_path, monkeypatch):
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_SILENT", "true")


def _tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` (hidden ones too) and the SHA-256 of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _cli(cwd: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_DIR": str(cwd / "wandb-home")}
    return subprocess.run(
        [sys.executable, "-m", "attnzoo.train", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


# ---- refusals write nothing ---------------------------------------------------------------------


@pytest.mark.slow  # the refused sweep of tests/test_continue.py checks the same in the default tier
def test_a_refused_rerun_leaves_the_finished_run_byte_identical(tmp_path):
    short = ["task=sort", "train.max_steps=10", "train.progress=false", "hydra.run.dir=runs/a"]
    done = _cli(tmp_path, *short)
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "runs" / "a"
    before = _tree(folder)
    assert ".hydra/config.yaml" in before and "checkpoints/last.pt" in before
    for refused in (
        ["mixer=metric", "train.lr=0.1"],  # another run into a folder that holds a checkpoint
        ["train.lr=-1"],  # a value attnzoo refuses
        ["model.dpeth=6"],  # a key Hydra cannot compose
        ["model.dim=32", "train.resume=true"],  # a resume of a different model
    ):
        out = _cli(tmp_path, *short, *refused)
        assert out.returncode == EXIT_CONFIG, (refused, out.stderr)
        assert "Traceback" not in out.stderr
        assert _tree(folder) == before, refused
    json_summary = json.loads((folder / "summary.json").read_text())
    assert json_summary["status"] == "completed" and json_summary["step"] == 10


def test_a_refused_run_leaves_no_folder_of_its_own(tmp_path):
    out = _cli(tmp_path, "train.lr=-1")  # the default folder: outputs/<date>/<time>
    assert out.returncode == EXIT_CONFIG, out.stderr
    assert "train.lr" in out.stderr
    assert not (tmp_path / "outputs").exists()
    # and from Python: a folder the call was to make is not made
    with pytest.raises(ValueError, match="train.lr"):
        run(compose([*TINY, "train.lr=-1"]), tmp_path / "py-run")
    assert not (tmp_path / "py-run").exists()


@pytest.mark.slow  # two sweeps and a third refused: the single-run test covers the mechanism
def test_a_rerun_sweep_leaves_its_finished_jobs_byte_identical(tmp_path):
    sweep = ["-m", *TINY, "train.max_steps=5", "mixer=scaled_dot,pooling", "hydra.sweep.dir=sw"]
    first = _cli(tmp_path, *sweep, timeout=300)
    assert first.returncode == 0, first.stderr
    jobs = sorted(p for p in (tmp_path / "sw").iterdir() if p.is_dir())
    assert len(jobs) == 2 and all((j / "checkpoints" / "last.pt").exists() for j in jobs)
    before = {j.name: _tree(j) for j in jobs}
    again = _cli(tmp_path, *sweep, timeout=300)  # the same sweep into the same folder
    assert again.returncode == EXIT_CONFIG, again.stderr
    assert "already holds a checkpoint" in again.stderr
    assert {j.name: _tree(j) for j in jobs} == before
    bad = _cli(tmp_path, *sweep, "train.lr=-1", timeout=300)  # a bad value, same folders
    assert bad.returncode == EXIT_CONFIG, bad.stderr
    assert {j.name: _tree(j) for j in jobs} == before
    assert sorted(p.name for p in (tmp_path / "sw").iterdir() if p.is_dir()) == [
        j.name for j in jobs
    ]  # and no folder of the refused jobs' own


# ---- stops keep the work -----------------------------------------------------------------------


def _signal_when(monkeypatch, sig: int, *, train_step: int, where: str) -> None:
    """Send `sig` to this process from inside the evaluation that follows training step
    `train_step` (`where`: "val", the sampled evaluation; "final", the whole-split one), after
    its first batch: a stop that lands mid-evaluation."""
    armed = {"on": False}
    original_call, original_batch = TrainStep.__call__, Sort.batch
    original_whole = Sort.whole_split

    def call(self, batch, step):
        if step == train_step:
            armed["on"] = True
        return original_call(self, batch, step)

    def batch(self, split, batch_size, generator):
        out = original_batch(self, split, batch_size, generator)
        if split == "val" and where == "val" and armed["on"]:
            armed["on"] = False
            os.kill(os.getpid(), sig)
        return out

    def whole_split(self, split, batch_size):
        for i, b in enumerate(original_whole(self, split, batch_size)):
            if i == 1 and where == "final" and armed["on"]:
                armed["on"] = False
                os.kill(os.getpid(), sig)
            yield b

    monkeypatch.setattr(TrainStep, "__call__", call)
    monkeypatch.setattr(Sort, "batch", batch)
    monkeypatch.setattr(Sort, "whole_split", whole_split)


def _no_clock(record: dict) -> dict:
    """A record without the clock's readings (speed, seconds)."""
    clock = lambda k: k.startswith("perf/") or k in ("compute/wall_s", "compute/train_s")
    return {k: v for k, v in record.items() if not clock(k)}


def _numbers(path: Path) -> list[dict]:
    return [_no_clock(r) for r in read_metrics(path)]


@pytest.mark.parametrize(
    "sig,status,train_step,where",
    [
        (signal.SIGINT, "interrupted", 20, "val"),  # Ctrl-C in the evaluation of step 20
        (signal.SIGTERM, "preempted", 30, "val"),  # SIGTERM in the last step's evaluation
        (signal.SIGINT, "interrupted", 30, "final"),  # Ctrl-C in the whole-split evaluation
    ],
)
def test_a_stop_during_evaluation_checkpoints_and_resumes_exactly(
    tmp_path, monkeypatch, sig, status, train_step, where
):
    final_splits = ["task.val_size=64", "task.test_size=64", "train.eval_batch_size=8"]
    cfg = [*TINY, "model.dropout=0.1", *final_splits]
    whole = run(compose(cfg), tmp_path / "whole")
    before = signal.getsignal(signal.SIGINT)  # ignored where the tests run in the background
    with monkeypatch.context() as m:
        _signal_when(m, sig, train_step=train_step, where=where)
        stopped = run(compose(cfg), tmp_path / "cut")
    assert stopped["status"] == status, stopped
    assert signal.Signals(sig).name in stopped[f"{status}_by"]
    assert stopped["step"] == train_step
    assert read_checkpoint(tmp_path / "cut" / "checkpoints" / "last.pt")["step"] == train_step
    assert signal.getsignal(signal.SIGINT) == before  # the handlers the run found, restored
    resumed = run(compose([*cfg, "train.resume=true"]), tmp_path / "cut")
    assert resumed["status"] == "completed" and resumed["resumed_from"] == train_step
    # every line, every number (training, sampled validation, rank, whole-split final) equal
    assert _numbers(tmp_path / "cut" / "metrics.jsonl") == _numbers(
        tmp_path / "whole" / "metrics.jsonl"
    )
    assert _no_clock(resumed["final"]) == _no_clock(whole["final"])


def _start(tmp_path: Path, run_dir: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_DIR": str(tmp_path / "wandb-home")}
    return subprocess.Popen(
        [sys.executable, "-m", "attnzoo.train", *TINY, *args, f"hydra.run.dir={run_dir}"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(predicate, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"not reached (exit {proc.poll()}): {proc.stderr.read()[-2000:]}")


def _summary(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


def test_ctrl_c_in_training_stops_within_seconds_and_says_interrupted(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start(tmp_path, run_dir, "train.max_steps=1000000", "train.log_every=1")
    metrics = run_dir / "metrics.jsonl"
    _wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 5, proc)
    assert _summary(run_dir)["status"] == "running"  # alive, and says so
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 5
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    summary = _summary(run_dir)
    assert summary["status"] == "interrupted" and "SIGINT" in summary["interrupted_by"]
    state = read_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert state["step"] == summary["step"] == read_metrics(metrics)[-1]["step"] > 0


@pytest.mark.slow  # two subprocesses; the in-process test covers stopping mid-evaluation
def test_sigterm_in_a_long_evaluation_stops_within_seconds(tmp_path):
    """The evaluation at step 0 would take minutes (100,000 batches): the signal ends it at the
    next batch and leaves the step-0 checkpoint a continued run starts from."""
    run_dir = tmp_path / "run"
    proc = _start(tmp_path, run_dir, "train.eval_batches=100000")
    _wait_for(lambda: _summary(run_dir).get("status") == "running", proc)
    time.sleep(1.0)  # inside the evaluation
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 5
    assert proc.returncode == EXIT_PREEMPTED, err
    summary = _summary(run_dir)
    assert summary["status"] == "preempted" and "validation" in summary["preempted_by"]
    assert read_checkpoint(run_dir / "checkpoints" / "last.pt")["step"] == 0


def test_a_run_killed_outright_is_recognisable_as_running(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start(tmp_path, run_dir, "train.max_steps=1000000", "train.log_every=1")
    ckpt = run_dir / "checkpoints" / "last.pt"
    _wait_for(lambda: ckpt.exists() and _summary(run_dir).get("step", 0) > 0, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    summary = _summary(run_dir)
    assert summary["status"] == "running"  # what a sweep summary reads as "running, or killed"
    kept = {read_checkpoint(p)["step"] for p in ckpt.parent.glob("*.pt")}  # last, prev
    assert summary["step"] in kept and summary["step"] > 0  # a step a resume can start from


@pytest.mark.slow  # a sweep in a subprocess
def test_ctrl_c_stops_a_sweep_not_just_its_job(tmp_path):
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_DIR": str(tmp_path / "wandb-home")}
    args = [*TINY, "train.max_steps=1000000", "mixer=scaled_dot,pooling", "hydra.sweep.dir=sw"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnzoo.train", "-m", *args],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = tmp_path / "sw" / "mixer=scaled_dot"
    _wait_for(lambda: _summary(first).get("status") == "running", proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "--continue" in err
    assert _summary(first)["status"] == "interrupted"
    assert not (tmp_path / "sw" / "mixer=pooling").exists()  # the sweep stopped there
