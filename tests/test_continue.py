"""A run folder is enough to continue its run: the `continue` line a stopped run prints, pasted as
it is, continues that run (default or not, a single run or a sweep's job) from the configuration
it recorded; continuing a completed run, or a refused continuation or sweep rerun, changes no
byte of the folder; a refusal removes every folder it made; a longer run needs train.extend."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from attnzoo.checkpoint import read_checkpoint
from attnzoo.tracking import read_metrics
from attnzoo.train import EXIT_CONFIG, compose, lr_factor, run
from attnzoo.train.trainer import EXIT_INTERRUPTED

TINY = [
    "model.dim=16",
    "model.depth=2",
    "model.heads=2",
    "train.batch_size=8",
    "train.warmup_steps=5",
    "train.log_every=5",
    "train.eval_every=10",
    "train.eval_batches=2",
    "train.ckpt_every=10",
    "train.probe_batch_size=4",
    "train.progress=false",
    "task.val_size=64",
    "task.test_size=64",
    "logger.mode=disabled",
]
# A run long enough to be stopped, short once continued: a budget of seconds, kept over a resume.
STOPPABLE = ["train.max_steps=1000000", "train.max_seconds=3", "train.log_every=1"]


@pytest.fixture(autouse=True)
def _wandb_env(tmp_path, monkeypatch):
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_SILENT", "true")


def _env(cwd: Path) -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "disabled", "WANDB_DIR": str(cwd / "wandb-home")}


def _cli(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnzoo.train", *args],
        capture_output=True,
        text=True,
        env=_env(cwd),
        cwd=cwd,
        timeout=timeout,
    )


def _shell(cwd: Path, line: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`line` as a user pastes it into a shell (with this interpreter as `python`)."""
    command = line.replace("python -m attnzoo.train", f"{sys.executable} -m attnzoo.train", 1)
    return subprocess.run(
        command, shell=True, capture_output=True, text=True, env=_env(cwd), cwd=cwd, timeout=timeout
    )


def _tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` (hidden ones too) and the SHA-256 of its bytes.

    A symbolic link counts by where it points: W&B links each run's `debug-core.log` to its
    service's own log, which that long-lived process goes on writing after the run has ended.
    """
    return {
        str(p.relative_to(folder)): (
            f"-> {os.readlink(p)}" if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest()
        )
        for p in sorted(folder.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def _summary(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


def _interrupt(cwd: Path, run_dir: Path, *args: str) -> str:
    """Start `python -m attnzoo.train *args`, Ctrl-C it once `run_dir` has trained a few steps;
    its stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnzoo.train", *args],
        env=_env(cwd),
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, err
    return err


def _continue_line(stderr: str, folder: Path) -> str:
    """The printed `continue` command for `folder`."""
    commands = [
        re.sub(r"^.*?(python -m attnzoo\.train --continue .*)$", r"\1", line).strip()
        for line in stderr.splitlines()
        if "python -m attnzoo.train --continue" in line
    ]
    mine = [c for c in commands if shlex.split(c)[-1] == str(folder.resolve())]
    assert mine, stderr
    return mine[-1]


# ---- the printed continue line continues the run -------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        # the defaults (but for the budget that makes it short); a non-default run is the one
        # whose line once failed, so it is the default tier's
        pytest.param([], marks=pytest.mark.slow),
        [*TINY, "mixer=pooling", "model.dim=24", "task=convex_hull"],  # a run of its own
    ],
    ids=["default", "non-default"],
)
def test_the_printed_continue_line_continues_the_run(tmp_path, overrides):
    run_dir = tmp_path / "runs" / "x"
    args = [*overrides, *STOPPABLE, "train.progress=false", "logger.mode=disabled"]
    err = _interrupt(tmp_path, run_dir, *args, f"hydra.run.dir={run_dir}")
    stopped = _summary(run_dir)
    assert stopped["status"] == "interrupted" and stopped["step"] > 0
    # the report names only files that exist: no rank figure before the extras drew one
    assert ("rank_decay.png" in err) == (run_dir / "rank_decay.png").exists()
    recorded = (run_dir / ".hydra" / "config.yaml").read_text()
    line = _continue_line(err, run_dir)
    out = _shell(tmp_path / "runs", line)  # pasted in another folder
    assert out.returncode == 0, out.stderr
    done = _summary(run_dir)
    assert done["status"] == "completed" and done["resumed_from"] == stopped["step"]
    config = read_checkpoint(run_dir / "checkpoints" / "last.pt")["config"]
    assert config["model"]["dim"] == (24 if overrides else 64)
    assert config["train"]["max_seconds"] == 3
    assert (run_dir / ".hydra" / "config.yaml").read_text().replace(
        "resume: true", "resume: false"
    ) == recorded  # the configuration it recorded, nothing else
    steps = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")]
    assert steps == sorted(set(steps)) and steps[-1] == done["step"]


@pytest.mark.slow  # two sweeps through the CLI; the single-run lines are checked in the default tier
def test_a_sweep_job_and_its_sweep_continue_from_their_printed_lines(tmp_path):
    sweep = tmp_path / "multirun" / "s"
    args = [*TINY, *STOPPABLE, "mixer=pooling,identity", "train.seed=0,1"]
    err = _interrupt(
        tmp_path, sweep / "mixer=pooling,train.seed=0", "-m", *args, f"hydra.sweep.dir={sweep}"
    )
    job = sweep / "mixer=pooling,train.seed=0"  # `=` and `,` in its name
    assert _summary(job)["status"] == "interrupted"
    job_line = _continue_line(err, job)
    sweep_line = _continue_line(err, sweep)
    assert job_line != sweep_line
    # the sweep's line continues every unfinished job: here the one the Ctrl-C stopped
    out = _shell(tmp_path, sweep_line)
    assert out.returncode == 0, out.stderr
    assert "1 unfinished" in out.stderr
    done = _summary(job)
    assert done["status"] == "completed" and done["resumed_from"] > 0
    assert "sweep:s" in done["wandb"]["tags"]  # still the sweep's job
    assert read_checkpoint(job / "checkpoints" / "last.pt")["config"]["mixer"]["name"] == "pooling"
    # the job's own line, now that it completed: nothing to do, nothing written
    before = _tree(sweep)
    again = _shell(tmp_path, job_line)
    assert again.returncode == 0, again.stderr
    assert "already completed" in again.stderr
    assert _tree(sweep) == before


# ---- continuing a completed run writes nothing ---------------------------------------------------


def test_continuing_a_completed_run_changes_no_byte(tmp_path, capsys):
    cfg = [*TINY, "train.max_steps=10", "logger.mode=offline"]
    first = run(compose(cfg), tmp_path / "r")
    assert first["status"] == "completed"
    before = _tree(tmp_path / "r")
    assert any("offline-run-" in f for f in before)
    capsys.readouterr()
    again = run(compose([*cfg, "train.resume=true"]), tmp_path / "r")
    assert again["status"] == "completed"
    assert "already completed" in capsys.readouterr().err
    assert _tree(tmp_path / "r") == before  # summary timings, metrics, no new W&B folder


@pytest.mark.slow  # three sweeps in subprocesses; a finished run's byte-identity stays
def test_a_finished_sweep_continued_or_refused_keeps_every_byte(tmp_path):
    sweep = ["-m", *TINY, "train.max_steps=5", "train.seed=0,1", "hydra.sweep.dir=D"]
    first = _cli(tmp_path, *sweep)
    assert first.returncode == 0, first.stderr
    before = _tree(tmp_path / "D")
    assert "multirun.yaml" in before and len(before) > 10
    refused = _cli(tmp_path, *sweep, "train.lr=0.05")  # every job refused
    assert refused.returncode == EXIT_CONFIG, refused.stderr
    assert _tree(tmp_path / "D") == before  # multirun.yaml included
    resumed = _cli(tmp_path, *sweep, "train.resume=true")  # every job already completed
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("already completed") == 2
    assert _tree(tmp_path / "D") == before
    changed = _cli(tmp_path, *sweep, "train.resume=true", "train.lr=0.05")
    assert changed.returncode == EXIT_CONFIG
    assert "train.lr: the run has 0.003, this command 0.05" in changed.stderr
    assert _tree(tmp_path / "D") == before
    whole = _cli(tmp_path, "--continue", "D")
    assert whole.returncode == 0, whole.stderr
    assert "0 unfinished" in whole.stderr
    assert _tree(tmp_path / "D") == before


# ---- a refusal leaves no folder ------------------------------------------------------------------


def test_a_refusal_removes_the_folders_it_made_and_nothing_else(tmp_path):
    outside = tmp_path / "elsewhere"  # not under the folder the command runs in
    (tmp_path / "cwd").mkdir()
    (outside / "kept").mkdir(parents=True)
    out = _cli(tmp_path / "cwd", "train.lr=-1", f"hydra.run.dir={outside}/kept/x/y")
    assert out.returncode == EXIT_CONFIG and "train.lr" in out.stderr
    assert sorted(p.name for p in outside.rglob("*")) == ["kept"]
    out = _cli(
        tmp_path / "cwd",
        "-m",
        "train.lr=-1",
        "mixer=pooling,identity",
        f"hydra.sweep.dir={outside}/s/t",
    )
    assert out.returncode == EXIT_CONFIG and "train.lr" in out.stderr
    assert sorted(p.name for p in outside.rglob("*")) == ["kept"]
    assert list((tmp_path / "cwd").iterdir()) == []


# ---- a longer run: train.extend ------------------------------------------------------------------


def test_a_longer_run_needs_extend_and_then_decays_on_from_where_it_stopped(tmp_path):
    cfg = [*TINY, "train.max_steps=20", "train.log_every=1"]
    run(compose(cfg), tmp_path)
    before = _tree(tmp_path)
    with pytest.raises(ValueError, match="train.max_steps: the run has 20, this command 30") as err:
        run(
            compose([*TINY, "train.max_steps=30", "train.log_every=1", "train.resume=true"]),
            tmp_path,
        )
    assert "train.extend=true" in str(err.value)
    assert _tree(tmp_path) == before
    with pytest.raises(ValueError, match="allowed: >= 20"):
        run(
            compose(
                [
                    *cfg[:-2],
                    "train.max_steps=15",
                    "train.log_every=1",
                    "train.resume=true",
                    "train.extend=true",
                ]
            ),
            tmp_path,
        )
    assert _tree(tmp_path) == before
    longer = [
        *TINY,
        "train.max_steps=30",
        "train.log_every=1",
        "train.resume=true",
        "train.extend=true",
    ]
    summary = run(compose(longer), tmp_path)
    assert summary["status"] == "completed" and summary["step"] == 30
    lrs = {r["step"]: r["train/lr"] for r in read_metrics(tmp_path / "metrics.jsonl") if r["step"]}
    floor = 3e-3 * 0.1
    assert lrs[20] == pytest.approx(floor)  # the 20-step run ended at its floor
    assert all(lrs[s] == pytest.approx(floor) for s in range(21, 31))  # no jump back up
    # stopped half way, a run extended from 10 to 30 steps decays from step 10's rate to the floor
    half = tmp_path / "half"
    run(compose([*TINY, "train.max_steps=10", "train.log_every=1"]), half)
    run(
        compose(
            [
                *TINY,
                "train.max_steps=30",
                "train.log_every=1",
                "train.resume=true",
                "train.extend=true",
            ]
        ),
        half,
    )
    lrs = {r["step"]: r["train/lr"] for r in read_metrics(half / "metrics.jsonl") if r["step"]}
    start = lr_factor(10, 5, 10, 0.1)
    for step in range(11, 31):
        expected = lr_factor(step, 5, 30, 0.1, decay_from=(10, start))
        assert lrs[step] == pytest.approx(3e-3 * expected)
    assert all(
        a >= b for a, b in zip(list(lrs.values())[9:], list(lrs.values())[10:], strict=False)
    )
    assert lrs[30] == pytest.approx(floor)


def test_a_refused_continuation_names_each_key_that_differs(tmp_path):
    run(compose([*TINY, "train.max_steps=10"]), tmp_path)
    with pytest.raises(ValueError) as err:
        run(
            compose(
                [*TINY, "train.max_steps=10", "model.dim=32", "mixer=pooling", "train.resume=true"]
            ),
            tmp_path,
        )
    message = str(err.value)
    assert "model.dim: the run has 16, this command 32" in message
    assert "mixer.name: the run has 'scaled_dot', this command 'pooling'" in message
    assert "{" not in message  # keys, not the whole model or mixer node


def test_a_run_stopped_before_its_first_checkpoint_is_continued_only_as_recorded(tmp_path):
    cfg = [*TINY, "train.max_steps=10"]
    run(compose(cfg), tmp_path)
    shutil.rmtree(tmp_path / "checkpoints")  # as a run killed before its first checkpoint
    before = _tree(tmp_path)
    with pytest.raises(ValueError, match="train.lr: the run has 0.003, this command 0.5"):
        run(compose([*cfg, "train.lr=0.5", "train.resume=true"]), tmp_path)
    assert _tree(tmp_path) == before
    with pytest.warns(UserWarning, match="no checkpoint; starting fresh"):
        again = run(compose([*cfg, "train.resume=true"]), tmp_path)
    assert again["status"] == "completed" and again["step"] == 10


def test_a_continuation_that_restates_a_preset_keeps_where_the_run_logs_and_reads_data():
    """A preset on the command line may set any key: the command's configuration is trained
    (and checked against the run's), but the keys that only say where and how the run logs,
    checkpoints and reads its data stay the run's unless the command names them."""
    from attnzoo.train.resume import continued_config, named_keys

    run_cfg = compose(["experiment=san_sort", "data_dir=/data/here", "train.device=cpu"])
    recorded = OmegaConf.create(OmegaConf.to_yaml(run_cfg))  # as read from .hydra/config.yaml
    overrides = ["experiment=san_sort", "logger.mode=disabled", "train.resume=true"]
    cfg = compose(overrides)
    named, preset = named_keys(overrides, {"experiment": "san_sort", "mixer": "x"}, cfg)
    assert preset and named == ["logger.mode", "train.resume"]
    out = continued_config(cfg, recorded, named, preset)
    assert out.data_dir == "/data/here" and out.train.device.value == "cpu"
    assert out.logger.mode.value == "disabled" and out.train.resume is True
    assert _plain(out.model) == _plain(recorded.model) and _plain(out.mixer) == _plain(
        recorded.mixer
    )
    # without a preset: the run's recorded configuration, the named keys the command's
    plain = compose(["train.resume=true", "train.lr=0.5"])
    named, preset = named_keys(["train.resume=true", "train.lr=0.5"], {"mixer": "x"}, plain)
    out = continued_config(plain, recorded, named, preset)
    assert not preset and out.train.lr == 0.5 and _plain(out.model) == _plain(recorded.model)
    assert out.data_dir == "/data/here"


def _plain(node):
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
