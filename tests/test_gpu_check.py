"""scripts/gpu_check.py (attnzoo.bench.gpu_check) on CPU: `--dry-run` runs every stage at tiny
sizes and writes the report, its JSON twin and a dispatch table that `impl="auto"` can read;
without a GPU and without `--dry-run` it refuses at once."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from attnzoo.kernels import dispatch

from attnzoo.mixers import causal_mixers

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # a real multi-process run (~10-20 s): the slow tier
def test_dry_run_exercises_every_stage_and_writes_the_report(tmp_path):
    out = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    (md,) = out.glob("*-cpu-dry-run.md")
    report = json.loads(md.with_suffix(".json").read_text())
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == [
        "env",
        "cuda-tests",
        "bench-kernels",
        "bench-train",
        "default-job",
        "dispatch-table",
    ]
    assert all(s["status"] == "ok" for s in stages.values()), stages
    assert report["dry_run"] and report["env"]["torch"] == torch.__version__
    assert report["env"]["triton"] and report["env"]["gpu"] == "cpu"
    # the cuda tier was collected (and skipped on CPU), test by test
    tests = {t["test"].split("::")[0] for t in report["tests"]}
    assert tests == {"test_cuda_ops.py", "test_cuda_train.py"}
    assert {t["outcome"] for t in report["tests"]} == {"SKIPPED"}
    # the kernel benchmark's timed keys became a readable dispatch table
    rows = report["bench_kernels"]["dispatch"]
    assert {(r["op"], r["grad"]) for r in rows} >= {
        ("scaled_dot_attention", True),
        ("scaled_dot_attention", False),
        ("pool_mix", True),
    }
    table = out / "dispatch" / "cpu.json"
    entries = dispatch.load_table(table)
    assert len(entries) == len(rows) and report["dispatch_table"]["path"] == str(table)
    assert not list(
        (ROOT / "kernels" / "dispatch_tables").glob("cpu.json")
    )  # never into the package
    # every mixer and the plain GPT trained; the default job completed
    trained = {r["mixer"] for r in report["bench_train"] if r["status"] == "ok"}
    assert trained == {*causal_mixers(), "gpt"}  # the bench's tasks are causal
    assert report["default_job"]["status"] == "completed" and report["default_job"]["step"] == 4
    # the verdict table: one row per table entry and per benchmark target, printed last
    verdicts = report["verdicts"]
    assert sum(v["verdict"] in ("triton", "torch") for v in verdicts) == len(entries)
    assert any(v["what"].startswith("pool_mix fwd+bwd vs avg_pool1d") for v in verdicts)
    printed = done.stdout.rstrip().splitlines()
    assert printed[-1].startswith("| host time per fwd+bwd call")
    text = md.read_text()
    assert "**Dry run**" in text and "## Verdicts" in text and "| default-job | ok |" in text
    assert (out / "logs" / "default-job.log").exists()


def test_without_a_gpu_it_refuses_at_once(gpu_check, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    start = time.perf_counter()
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    assert time.perf_counter() - start < 5
    assert "no CUDA GPU here" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_stage_that_hangs_is_stopped_and_reported(tmp_path):
    from attnzoo.bench import gpu_check

    start = time.perf_counter()
    code, output = gpu_check.run(
        [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
        1.0,
        tmp_path / "hang.log",
        {},
        tmp_path,
    )
    assert code is None and "started" in output
    assert time.perf_counter() - start < 10
    failing = "raise ValueError('bad table')"
    code, output = gpu_check.run(
        [sys.executable, "-c", failing], 30, tmp_path / "fail.log", {}, tmp_path
    )
    assert code == 1 and gpu_check.last_error(output) == "ValueError: bad table"
