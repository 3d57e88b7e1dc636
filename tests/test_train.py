"""The training loop: the files a run leaves, resume = uninterrupted, checkpoints that survive
corruption, non-finite numbers, pre-emption by signal, and the W&B offline run."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnzoo.checkpoint import CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint
from attnzoo.tasks.synthetic import Sort
from attnzoo.tracking import read_metrics
from attnzoo.train import EXIT_PREEMPTED, compose, lr_factor, run

TINY = [
    "model.dim=16",
    "model.depth=2",
    "model.heads=2",
    "train.batch_size=8",
    "train.max_steps=30",
    "train.warmup_steps=5",
    "train.log_every=5",
    "train.eval_every=10",
    "train.eval_batches=1",
    "train.eval_batch_size=512",  # the final evaluation in a few batches
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


def tiny(*overrides: str):
    return compose([*TINY, *overrides])


def test_run_leaves_every_file_with_the_contract_keys(tmp_path):
    summary = run(tiny(), tmp_path)
    assert summary["status"] == "completed" and summary["step"] == 30
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    for key in ("status", "step", "steps_per_s", "params", "final", "error"):
        assert key in on_disk
    assert on_disk["error"] is None and on_disk["steps_per_s"] > 0
    assert on_disk["params"] == sum(
        p.numel() for p in read_checkpoint(tmp_path / "checkpoints" / "last.pt")["model"].values()
    )
    assert (tmp_path / ".hydra" / "config.yaml").exists()
    assert (tmp_path / "rank_decay.png").stat().st_size > 1000
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 5, 10, 15, 20, 25, 30]
    evals = [r for r in records if "val/loss" in r]
    assert [r["step"] for r in evals] == [0, 10, 20, 30]
    for r in evals:
        assert {"val/accuracy", "rank/layer_0", "rank/layer_1", "rank/layer_2", "rank/last"} <= set(
            r
        )
        assert r["rank/last"] == r["rank/layer_2"] and 0 < r["rank/last"] < 2
    for r in records[1:]:
        assert {"train/loss", "train/lr", "perf/tokens_per_s"} <= set(r)
    assert records[-1]["train/loss"] < records[1]["train/loss"]
    # summary.json's final val/test numbers are the whole-split evaluation on the last line of
    # metrics.jsonl, not the last sampled one; the other final keys are the latest logged
    final, last = on_disk["final"], records[-1]
    for key in ("val/loss", "val/accuracy", "test/loss", "test/accuracy"):
        assert final[key] == last[f"final/{key}"]
    assert final["val/n"] == final["test/n"] == 4096 and final["rank/last"] == last["rank/last"]
    assert not any(k.startswith("final/") for r in records[:-1] for k in r)
    state = read_checkpoint(tmp_path / "checkpoints" / "last.pt")
    assert state["step"] == 30
    assert {"model", "optimizer", "scheduler", "rng", "config"} <= set(state)
    assert {"torch", "python", "train_generator"} <= set(state["rng"])
    assert read_checkpoint(tmp_path / "checkpoints" / "prev.pt")["step"] == 20


def test_schedule_warms_up_then_decays_to_the_floor():
    f = [lr_factor(s, 10, 110, 0.1) for s in range(111)]
    assert f[0] < f[5] < f[9] <= 1.0 and f[10] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(f[10:], f[11:], strict=False))
    assert f[110] == pytest.approx(0.1)


class _Crash(RuntimeError):
    pass


def _crash_at_train_batch(monkeypatch, n: int) -> None:
    """Make the n-th training batch raise, as if the process died there."""
    original, calls = Sort.batch, {"train": 0}

    def batch(self, split, batch_size, generator):
        if split == "train":
            calls["train"] += 1
            if calls["train"] == n:
                raise _Crash(f"simulated crash at training batch {n}")
        return original(self, split, batch_size, generator)

    monkeypatch.setattr(Sort, "batch", batch)


def _losses(path: Path) -> dict[int, float]:
    return {r["step"]: r["train/loss"] for r in read_metrics(path) if "train/loss" in r}


def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path, monkeypatch):
    whole = run(tiny("model.dropout=0.1"), tmp_path / "whole")
    with monkeypatch.context() as m:
        _crash_at_train_batch(m, 27)  # after the step-20 checkpoint and the step-25 log line
        with pytest.raises(_Crash):
            run(tiny("model.dropout=0.1"), tmp_path / "cut")
    crashed = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert crashed["status"] == "failed" and "simulated crash" in crashed["error"]
    assert max(_losses(tmp_path / "cut" / "metrics.jsonl")) == 25
    # without resume=true the run refuses to overwrite a run that has a checkpoint
    with pytest.raises(ValueError, match="train.resume=true"):
        run(tiny("model.dropout=0.1"), tmp_path / "cut")
    resumed = run(tiny("model.dropout=0.1", "train.resume=true"), tmp_path / "cut")
    assert resumed["status"] == "completed" and resumed["resumed_from"] == 20
    steps = [r["step"] for r in read_metrics(tmp_path / "cut" / "metrics.jsonl")]
    assert steps == sorted(set(steps)) == [0, 5, 10, 15, 20, 25, 30]  # none lost or duplicated
    assert _losses(tmp_path / "cut" / "metrics.jsonl") == _losses(
        tmp_path / "whole" / "metrics.jsonl"
    )
    assert resumed["final"]["val/loss"] == whole["final"]["val/loss"]


def test_resume_refuses_a_different_model(tmp_path):
    run(tiny(), tmp_path)
    with pytest.raises(ValueError, match="model") as refused:
        run(tiny("model.dim=32", "train.resume=true", "train.max_steps=40"), tmp_path)
    assert "model.dim: the run has 16, this command 32" in str(refused.value)
    kept = json.loads((tmp_path / "summary.json").read_text())
    assert kept["status"] == "completed" and kept["step"] == 30  # the finished run's record
    assert read_checkpoint(tmp_path / "checkpoints" / "last.pt")["step"] == 30  # untouched


def test_corrupt_or_truncated_checkpoint_falls_back_to_the_previous(tmp_path):
    run(tiny(), tmp_path)
    last = tmp_path / "checkpoints" / "last.pt"
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 0xFF
    last.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt"):
        read_checkpoint(last)
    with pytest.warns(UserWarning, match="corrupt.*previous good checkpoint"):
        state, path = load_checkpoint(tmp_path / "checkpoints")
    assert path.name == "prev.pt" and state["step"] == 20
    with pytest.warns(UserWarning, match="previous good checkpoint"):
        resumed = run(
            tiny("train.resume=true", "train.max_steps=40", "train.extend=true"), tmp_path
        )
    assert resumed["resumed_from"] == 20 and resumed["status"] == "completed"
    steps = [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")]
    assert steps == sorted(set(steps)) and steps[-1] == 40
    # a truncated last.pt (killed mid-write by something other than our atomic rename)
    last.write_bytes(last.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="truncated"):
        read_checkpoint(last)
    (tmp_path / "checkpoints" / "prev.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        load_checkpoint(tmp_path / "checkpoints")


def test_save_keeps_the_previous_good_checkpoint(tmp_path):
    (tmp_path / ".last.pt.tmp-999999").write_bytes(b"half a checkpoint from a killed process")
    for step in (1, 2, 3):
        save_checkpoint({"step": step, "w": torch.full((3,), float(step))}, tmp_path)
    assert read_checkpoint(tmp_path / "last.pt")["step"] == 3
    assert read_checkpoint(tmp_path / "prev.pt")["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt", "prev.pt"]  # no temp left
    # plain torch.load still opens it (the integrity trailer sits after the zip)
    assert torch.load(tmp_path / "last.pt", weights_only=False)["step"] == 3


def _poison(monkeypatch, at_call: int, where: str) -> None:
    """Make the `at_call`-th training loss (or its gradient) NaN."""
    original, calls = Sort.loss, {"n": 0}

    def loss(self, logits, batch):
        value = original(self, logits, batch)
        if logits.requires_grad:
            calls["n"] += 1
            if calls["n"] == at_call:
                if where == "loss":
                    return value * float("nan")
                logits.register_hook(lambda g: g * float("nan"))
        return value

    monkeypatch.setattr(Sort, "loss", loss)


@pytest.mark.parametrize("where,what", [("loss", "loss"), ("grad", "gradient norm")])
def test_nonfinite_stops_naming_the_step_and_keeps_the_checkpoint(
    tmp_path, monkeypatch, where, what
):
    _poison(monkeypatch, 15, where)
    summary = run(tiny(), tmp_path)
    assert summary["status"] == "diverged" and summary["step"] == 14
    assert f"non-finite {what}" in summary["error"] and "at step 15" in summary["error"]
    assert "last.pt" in summary["error"]
    assert read_checkpoint(tmp_path / "checkpoints" / "last.pt")["step"] == 10
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "diverged"
    for r in read_metrics(tmp_path / "metrics.jsonl"):
        assert r["step"] <= 14


def test_nonfinite_skip_drops_the_step_and_goes_on(tmp_path, monkeypatch):
    _poison(monkeypatch, 15, "loss")
    summary = run(tiny("train.on_nonfinite=skip"), tmp_path)
    assert summary["status"] == "completed" and summary["step"] == 30
    assert summary["skipped_steps"] == 1
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert all(isinstance(r.get("train/loss", 0.0), float) for r in records)  # no NaN logged
    assert records[-1]["train/skipped_steps"] == 1


def _env(tmp_path: Path) -> dict[str, str]:
    home = str(tmp_path / "wandb-home")
    return {**os.environ, "WANDB_DIR": home, "WANDB_CACHE_DIR": home, "WANDB_CONFIG_DIR": home}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
@pytest.mark.slow  # a subprocess; tests/test_nothing_lost.py stops runs by SIGINT and SIGTERM by default
def test_signal_checkpoints_at_the_step_boundary_and_exits(tmp_path, sig):
    run_dir = tmp_path / "run"
    args = [*TINY, "train.max_steps=1000000", "train.ckpt_every=1000000", "train.log_every=1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnzoo.train", *args, f"hydra.run.dir={run_dir}"],
        env=_env(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 5:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1]
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 10
    assert proc.returncode == EXIT_PREEMPTED, err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "preempted" and signal.Signals(sig).name in summary["preempted_by"]
    state = read_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert state["step"] == summary["step"] > 0
    assert read_metrics(metrics)[-1]["step"] == summary["step"]
    if sig != signal.SIGTERM:
        return  # the resume below is the same for both signals; run it once
    # and the run goes on from there
    stop = summary["step"] + 3
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnzoo.train",
            *args,
            f"train.max_steps={stop}",
            "train.extend=true",
            "train.resume=true",
            f"hydra.run.dir={run_dir}",
        ],
        env=_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    steps = [r["step"] for r in read_metrics(metrics)]
    assert steps == list(range(stop + 1))


def _wandb_history(run_dir: Path) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_dir / "wandb")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if out.returncode != 0 and "No such command" in out.stderr:
        pytest.skip("this wandb has no `leet inspect` to read an offline run with")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return [r["history"]["item"] for r in rows if r.get("type") == "history"]


def test_wandb_offline_run_holds_the_same_numbers_as_metrics_jsonl(tmp_path):
    overrides = ("logger.mode=offline", "logger.project=attnzoo-test", "logger.media_budget=1")
    summary = run(tiny(*overrides), tmp_path)
    assert summary["status"] == "completed"
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and summary["wandb"]["id"] in runs[0].name
    by_step = {}
    for item in _wandb_history(tmp_path):
        by_step.setdefault(item["_step"], {}).update(item)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert sorted(by_step) == [r["step"] for r in records]
    for r in records:
        logged = by_step[r["step"]]
        for key, value in r.items():
            assert logged[key] == pytest.approx(value), key
        scalars = {
            k
            for k, v in logged.items()
            if not k.startswith("_") and isinstance(v, (int, float)) and "." not in k
        }
        assert scalars == set(r), r["step"]
        if "rank/last" in r:  # the rank media go with every evaluation (media_budget=1)
            assert any(k.startswith("rank/table") for k in logged)
            assert any(k.startswith("rank/vs_depth") for k in logged)
            for m in ("effective_rank", "stable_rank", "token_similarity", "attention_entropy"):
                assert any(k.startswith(f"rank/{m}/vs_depth") for k in logged), m
            assert any(k.startswith("rank/plot") for k in logged)
            assert any(k.startswith("attention/maps") for k in logged)


def test_wandb_that_cannot_start_is_a_warning_not_a_failed_run(tmp_path, monkeypatch):
    import wandb

    def broken_init(*args, **kwargs):
        raise wandb.errors.CommError("no network")

    monkeypatch.setattr(wandb, "init", broken_init)
    with pytest.warns(UserWarning, match="W&B failed in wandb.init"):
        summary = run(tiny("logger.mode=online"), tmp_path)
    assert summary["status"] == "completed" and summary["wandb"]["mode"] == "disabled"
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")][-1] == 30


def test_online_wandb_without_network_falls_back_to_an_offline_run(tmp_path, monkeypatch):
    import wandb

    real_init = wandb.init

    def init(*args, **kwargs):
        if kwargs.get("mode") == "online":
            raise wandb.errors.UsageError("No API key configured")
        return real_init(*args, **kwargs)

    monkeypatch.setattr(wandb, "init", init)
    with pytest.warns(UserWarning, match="offline run"):
        summary = run(tiny("logger.mode=online"), tmp_path)
    assert summary["status"] == "completed" and summary["wandb"]["mode"] == "offline"
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 1


def test_wandb_raising_inside_log_leaves_metrics_complete(tmp_path, monkeypatch):
    import wandb

    class FlakyRun:
        id, dir, summary, finished = "flaky", str(tmp_path), {}, []

        def __init__(self):
            self.calls = 0

        def log(self, data, step):
            self.calls += 1
            if self.calls == 3:
                raise OSError("disk full")

        def finish(self, exit_code=0):
            self.finished.append(exit_code)

    flaky = FlakyRun()
    monkeypatch.setattr(wandb, "init", lambda *a, **k: flaky)
    with pytest.warns(UserWarning, match="W&B failed in log .*disk full"):
        summary = run(tiny("logger.mode=offline"), tmp_path)
    assert summary["status"] == "completed" and flaky.calls == 3  # no W&B calls after failing
    assert flaky.finished == [1]  # finish() still ran
    steps = [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")]
    assert steps == [0, 5, 10, 15, 20, 25, 30]


def test_preemption_hands_the_signal_on_to_a_previous_handler(tmp_path, monkeypatch):
    """Under submitit, SIGUSR2's handler requeues the job: it must run after our checkpoint."""
    seen = []

    def submitit_like(signum, frame):
        seen.append((signum, read_checkpoint(tmp_path / "checkpoints" / "last.pt")["step"]))

    previous = signal.signal(signal.SIGUSR2, submitit_like)
    original, calls = Sort.batch, {"n": 0}

    def batch(self, split, batch_size, generator):
        if split == "train":
            calls["n"] += 1
            if calls["n"] == 13:
                os.kill(os.getpid(), signal.SIGUSR2)
        return original(self, split, batch_size, generator)

    monkeypatch.setattr(Sort, "batch", batch)
    try:
        summary = run(tiny(), tmp_path)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert summary["status"] == "preempted" and summary["step"] == 13
    assert seen == [(signal.SIGUSR2, 13)]
    assert signal.getsignal(signal.SIGTERM) is not None  # our handlers were taken down again
    # submitit requeues the job with the same arguments (no train.resume=true): it continues
    monkeypatch.setattr(Sort, "batch", original)
    again = run(tiny(), tmp_path)
    assert again["status"] == "completed" and again["resumed_from"] == 13
    steps = [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")]
    assert steps == sorted(set(steps)) and steps[-1] == 30


def test_a_requeued_slurm_job_resumes_by_itself(tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        _crash_at_train_batch(m, 15)
        with pytest.raises(_Crash):
            run(tiny(), tmp_path)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    summary = run(tiny(), tmp_path)  # same overrides, no train.resume=true
    assert summary["status"] == "completed" and summary["resumed_from"] == 10


@pytest.mark.slow  # a three-job multirun in a subprocess (~14 s)
def test_multirun_goes_on_after_a_failing_job_and_groups_wandb_runs_by_configuration(tmp_path):
    sweep = tmp_path / "my-sweep"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnzoo.train",
            "-m",
            *TINY,
            "train.max_steps=10",
            "logger.mode=offline",
            "mixer=pooling",
            "mixer.window=2,3",
            f"hydra.sweep.dir={sweep}",
        ],
        env={**_env(tmp_path), "WANDB_SILENT": "true"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 2  # the sweep reports the refused job ...
    assert "mixer.window=2" in out.stderr
    # job folders are named by the job's overrides; the refused job wrote nothing
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == ["mixer.window=3"], jobs
    refused = json.loads((sweep / "refused.jsonl").read_text())
    assert "mixer.window=2" in refused["overrides"] and "window" in refused["error"]
    done = json.loads((sweep / jobs[0] / "summary.json").read_text())
    assert done["status"] == "completed"  # ... and still ran the next one
    rows = subprocess.run(
        [
            sys.executable,
            "-m",
            "wandb",
            "leet",
            "inspect",
            "--json",
            str(sweep / jobs[0] / "wandb"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.splitlines()
    info = next(json.loads(r)["run"] for r in rows if '"type":"run"' in r)
    # the group is the configuration (its seeds' runs together), the sweep a tag
    assert info["run_group"] == done["config_group"] and info["job_type"] == "pooling"
    # readable: the swept value is in the group's name, the seed in the run's
    assert info["run_group"].startswith("sort-pooling-window_3-")
    assert "sweep:my-sweep" in done["wandb"]["tags"] and "train.seed=0" in info["display_name"]


def test_language_model_samples_are_printed_and_logged_at_every_eval_with_budget_1(
    tmp_path, monkeypatch, capsys
):
    def sample_text(self, model, generator):
        assert not model.training  # sampled in eval mode
        return "to be or not " + str(int(torch.randint(0, 9, (1,), generator=generator)))

    monkeypatch.setattr(Sort, "sample_text", sample_text)
    run(tiny("logger.media_budget=1"), tmp_path)
    samples = [
        r["val/sample_text"] for r in read_metrics(tmp_path / "metrics.jsonl") if "val/loss" in r
    ]
    assert len(samples) == 4 and len(set(samples)) == 1  # same generator seed at every eval
    assert samples[0].startswith("to be or not")
    assert capsys.readouterr().err.count(f"sample: {samples[0]}") == 4


def test_metrics_file_drops_steps_after_the_checkpoint_and_a_torn_last_line(tmp_path):
    from attnzoo.tracking import MetricsFile

    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "train/loss": 1.0 / (s + 1)}) for s in (0, 5, 10)]
    path.write_text("\n".join(lines) + '\n{"step": 15, "train/lo')  # killed mid-write
    m = MetricsFile(path, truncate_after_step=10)
    m.write({"step": 15, "train/loss": float("nan")})
    m.close()
    records = read_metrics(path)
    assert [r["step"] for r in records] == [0, 5, 10, 15]
    assert records[-1]["train/loss"] is None  # JSON has no NaN: null, and the file stays JSON
    MetricsFile(path, truncate_after_step=5).close()
    assert [r["step"] for r in read_metrics(path)] == [0, 5]


@pytest.fixture
def checks_on_device(monkeypatch):
    """The CUDA code path on CPU: non-finite steps masked on the device by the fused AdamW's
    found_inf, and read by the host only at log, evaluation and checkpoint steps."""
    monkeypatch.setattr("attnzoo.train.step.checks_on_device", lambda device: True)


@pytest.mark.parametrize("where", ["loss", "grad"])
def test_on_device_checks_skip_the_bad_step_and_keep_the_weights_finite(
    tmp_path, monkeypatch, capsys, checks_on_device, where
):
    _poison(monkeypatch, 13, where)
    summary = run(tiny("train.on_nonfinite=skip"), tmp_path)
    assert summary["status"] == "completed" and summary["skipped_steps"] == 1
    assert "at step 13; step skipped" in capsys.readouterr().err  # reported at the step-15 log
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r.get("train/skipped_steps") for r in records] == [None, None, None, 1, 1, 1, 1]
    assert all(isinstance(r.get("train/loss", 0.0), float) for r in records)
    weights = read_checkpoint(tmp_path / "checkpoints" / "last.pt")["model"].values()
    assert all(bool(torch.isfinite(w).all()) for w in weights)  # the NaN gradient never applied
    assert isinstance(summary["final"]["val/loss"], float)


def test_on_device_checks_stop_at_the_next_log_step_naming_the_bad_one(
    tmp_path, monkeypatch, checks_on_device
):
    _poison(monkeypatch, 13, "loss")
    summary = run(tiny(), tmp_path)
    assert summary["status"] == "diverged" and summary["step"] == 12
    assert "non-finite loss (nan) at step 13 (seen at step 15)" in summary["error"]
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 5, 10]
    assert read_checkpoint(tmp_path / "checkpoints" / "last.pt")["step"] == 10


def test_on_device_checks_train_like_host_checks(tmp_path, checks_on_device):
    """The fused AdamW of the CUDA path follows the same curve as the CPU's (to rounding)."""
    on_device = _losses_of(run(tiny(), tmp_path / "device"), tmp_path / "device")
    with pytest.MonkeyPatch.context() as m:
        m.setattr("attnzoo.train.step.checks_on_device", lambda device: False)
        on_host = _losses_of(run(tiny(), tmp_path / "host"), tmp_path / "host")
    assert on_device.keys() == on_host.keys()
    for step in on_host:
        assert on_device[step] == pytest.approx(on_host[step], rel=1e-4), step


def _losses_of(summary, run_dir):
    assert summary["status"] == "completed"
    return _losses(run_dir / "metrics.jsonl")


def test_threads_auto_follows_the_work_per_step():
    from attnzoo.train import AUTO_FLOP_PER_THREAD, threads_for

    assert threads_for(3, 10**9, 10**6, cores=2) == 3  # an int is taken as given
    assert threads_for("auto", 1000, 10, cores=16) == 1  # tiny work: one thread
    work = 6 * 800_000 * 768  # the Shakespeare preset
    assert threads_for("auto", 800_000, 768, cores=2) == min(2, int(work // AUTO_FLOP_PER_THREAD))
    assert threads_for("auto", 10**9, 10**6, cores=4) == 4  # never more than the cores


class _ProcStat:
    """A /proc/stat whose `cpu` line advances by the given (busy, idle) jiffies per read."""

    def __init__(self, cpus: int, busy: int, idle: int) -> None:
        self.cpus, self.busy, self.idle, self.reads = cpus, busy, idle, 0

    def read_text(self) -> str:
        n = self.reads
        self.reads += 1
        user, idle = 1000 + n * self.busy, 5000 + n * self.idle
        cpu_lines = [f"cpu{i} 0 0 0 0 0 0 0 0 0 0" for i in range(self.cpus)]
        return "\n".join([f"cpu  {user} 0 0 {idle} 0 0 0 0 0 0", *cpu_lines, "intr 1"])


def test_busy_cores_are_sampled_now_not_from_the_lagging_load_average(monkeypatch):
    from attnzoo.train import busy_cores

    # the load average would say two busy cores (a job that just ended): not read at all
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0, 2.0, 2.0))
    assert busy_cores(0.0, _ProcStat(cpus=2, busy=0, idle=200)) == 0  # idle machine
    assert busy_cores(0.0, _ProcStat(cpus=2, busy=100, idle=100)) == 1  # one core busy
    assert busy_cores(0.0, _ProcStat(cpus=2, busy=150, idle=50)) == 1  # 1.5 cores: one
    assert busy_cores(0.0, _ProcStat(cpus=2, busy=180, idle=20)) == 2  # 1.8: a core 75% busy counts
    assert busy_cores(0.0, _ProcStat(cpus=4, busy=60, idle=140)) == 1  # 1.2 cores: one
    assert busy_cores(0.0, _ProcStat(cpus=2, busy=0, idle=0)) == 0  # no time passed
    # no /proc/stat (or unreadable): the load average after all
    assert busy_cores(0.0, Path("/no/such/proc/stat")) == 2


def test_auto_threads_never_exceed_the_environments_limit(monkeypatch):
    # jobs started together by the parallel launcher all see an idle machine; joblib's workers
    # carry OMP_NUM_THREADS = cores // n_jobs, and auto must not give them more
    from attnzoo.train import system

    monkeypatch.setattr(system.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(system.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(system, "busy_cores", lambda: 0)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert system.available_cores() == 4
    for value, cores in (("1", 1), ("2", 2), ("8", 4), ("2,1", 2), ("", 4), ("0", 4), ("x", 4)):
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        assert system.available_cores() == cores, value


def test_threads_must_be_auto_or_a_positive_int(tmp_path):
    for bad in ("0", "many", "1.5"):
        with pytest.raises(ValueError, match="train.threads.*auto or a positive int"):
            run(tiny(f"train.threads={bad}"), tmp_path / bad)
        assert not (tmp_path / bad / "metrics.jsonl").exists()


# Slow tier: Inductor compiles the whole model (~30 s on 2 CPU cores). CI runs it on the newest
# torch (the slow tier) and on the oldest that pyproject.toml admits (.ci/run names it).
@pytest.mark.slow
def test_compiled_run_trains_and_checkpoints_eager_keys(tmp_path):
    """train.compile=true (torch.compile, impl=torch on CPU): same records as an eager run, close
    numbers, and a checkpoint an eager model loads (no `_orig_mod.` prefix)."""
    few = ("train.max_steps=10", "train.ckpt_every=5", "impl=torch")
    compiled = run(tiny(*few, "train.compile=true"), tmp_path / "compiled")
    assert run(tiny(*few), tmp_path / "eager")["status"] == "completed"
    assert compiled["status"] == "completed" and compiled["step"] == 10
    got = read_metrics(tmp_path / "compiled" / "metrics.jsonl")
    want = read_metrics(tmp_path / "eager" / "metrics.jsonl")
    assert [sorted(r) for r in got] == [sorted(r) for r in want]
    for g, w in zip(got, want, strict=True):
        if "train/loss" in w:
            assert g["train/loss"] == pytest.approx(w["train/loss"], rel=1e-3)
    state = read_checkpoint(tmp_path / "compiled" / "checkpoints" / "last.pt")["model"]
    assert not any(k.startswith("_orig_mod.") for k in state)
    assert set(state) == set(
        read_checkpoint(tmp_path / "eager" / "checkpoints" / "last.pt")["model"]
    )


def test_extras_stay_within_their_share_of_wall_time():
    from attnzoo.train import extras_due

    assert extras_due(0.0, 0.0, 0.5, 0.05, last=True)  # the last evaluation always has them
    assert extras_due(9.0, 9.0, 1.0, 1.0, last=False)  # budget 1: every evaluation
    assert not extras_due(0.0, 0.0, 150.0, 0.05, last=False)  # 2 x a 5 s guess > 5% of 150 s
    assert extras_due(0.0, 0.0, 250.0, 0.05, last=False)
    assert not extras_due(2.0, 2.0, 100.0, 0.05, last=False)  # 2 + 2 x 2 s > 5 s
    assert extras_due(2.0, 2.0, 200.0, 0.05, last=False)
    assert not extras_due(0.0, 0.0, 1e9, 0.0, last=False)  # budget 0: only at the last


def test_extras_budget_0_makes_them_only_at_the_last_evaluation(tmp_path, monkeypatch):
    monkeypatch.setattr(Sort, "sample_text", lambda self, model, generator: "sampled")
    summary = run(tiny("logger.media_budget=0"), tmp_path)
    evals = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "val/loss" in r]
    assert [r["step"] for r in evals] == [0, 10, 20, 30]  # the numbers at every evaluation
    assert [r.get("val/sample_text") for r in evals] == [None, None, None, "sampled"]
    assert (tmp_path / "rank_decay.png").stat().st_size > 1000
    t = summary["time"]
    assert t["evaluations"] == 4 and 0 < t["extras_s"] <= t["eval_s"] < t["total_s"]
    with pytest.raises(ValueError, match="logger.media_budget"):
        run(tiny("logger.media_budget=1.5"), tmp_path / "bad")


@pytest.mark.slow  # two runs; a guard against a rare regression of the resume path
def test_threads_auto_is_kept_on_resume(tmp_path, monkeypatch):
    """auto decides when a run starts (the machine's load may differ later) and a resumed run
    keeps that count, since the count can change how sums are rounded."""
    monkeypatch.setattr("attnzoo.train.trainer.threads_for", lambda *args: 2)
    first = run(tiny("train.max_steps=20"), tmp_path)
    assert first["threads"] == 2
    assert read_checkpoint(tmp_path / "checkpoints" / "last.pt")["threads"] == 2
    monkeypatch.setattr("attnzoo.train.trainer.threads_for", lambda *args: 1)
    resumed = run(tiny("train.max_steps=30", "train.resume=true", "train.extend=true"), tmp_path)
    assert resumed["resumed_from"] == 20 and resumed["threads"] == 2
    longer = ("train.max_steps=40", "train.resume=true", "train.extend=true")
    explicit = run(tiny(*longer, "train.threads=1"), tmp_path)
    assert explicit["threads"] == 1  # an explicit count is the user's choice


def test_a_run_long_for_this_cpu_says_so_before_its_first_step(tmp_path, monkeypatch, capsys):
    """The GPU recipe on a CPU: about 6 x 10.8M params x 16,384 tokens = 1.06 TFLOP a step, so
    5000 steps are hours at the measured ~5e10 FLOP/s per thread; the run says so up front."""
    from attnzoo.train import system

    hours = system.cpu_estimate(10_786_625, 64 * 256, 5000, 2) / 3600
    assert 10 < hours < 20
    monkeypatch.setattr("attnzoo.train.trainer.LONG_CPU_RUN_S", 0.0)  # any run is "long"
    run(tiny(), tmp_path)
    err = capsys.readouterr().err
    assert "warning: on this CPU" in err and "(30 steps)" in err and "Ctrl-C" in err
    assert err.index("warning: on this CPU") < err.index("completed at step 30")
