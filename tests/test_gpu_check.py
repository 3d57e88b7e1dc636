"""scripts/gpu_check.py (attnzoo.bench.gpu_check) on CPU: `--dry-run` runs every stage at tiny
sizes and writes the report, its JSON twin and the log archive, the report saying per op and
shape which path won and the `AUTO_TRITON` value that would follow; the stages share one budget
and the report is on disk after each stage, so a check killed mid-stage keeps what came before;
without a GPU and without `--dry-run` it refuses at once."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

from attnzoo.bench import gpu_check as checker
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


@pytest.mark.slow  # a real multi-process run (~15-30 s): the slow tier
def test_dry_run_exercises_every_stage_and_writes_the_report(tmp_path):
    out = tmp_path / "report"
    # 60 s is enough on an idle two-core machine (15-30 s), but beside the other pytest worker
    # and with the CUDA build of torch (slower to import) the default job has been stopped at
    # step 0 by its 14 s share: the budget is an upper bound, so give the stages room
    budget = 180
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--budget", str(budget), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert time.monotonic() - start < budget + 30  # the budget, and the start-up around it
    (md,) = out.glob("*-cpu-dry-run.md")
    report = json.loads(md.with_suffix(".json").read_text())
    stages = {s["name"]: s for s in report["stages"]}
    assert list(stages) == [  # most valuable first
        "env",
        "bench-kernels",
        "cuda-tests",
        "bench-train",
        "default-job",
    ]
    assert all(s["status"] == "ok" for s in stages.values()), stages
    assert sum(s["seconds"] for s in stages.values()) <= budget and report["budget_s"] == budget
    assert report["dry_run"] and report["env"]["torch"] == torch.__version__
    assert report["env"]["triton"] and report["env"]["gpu"] == "cpu"
    # the curated part of the cuda tier was collected (and skipped on CPU), test by test
    assert len(report["tests"]) == len(checker.CUDA_TESTS)
    assert {t["outcome"] for t in report["tests"]} == {"SKIPPED"}
    # the kernel benchmark says per op and shape which path won, and what AUTO_TRITON follows
    rows = report["bench_kernels"]["paths"]
    assert {(r["op"], r["part"], r["mode"]) for r in rows} >= {
        ("scaled_dot_attention", "scaled_dot", "fwd+bwd"),
        ("scaled_dot_attention", "scaled_dot", "fwd"),
        ("scaled_dot_attention", "local", "fwd+bwd"),
        ("pool_mix", "pool", "fwd+bwd"),
        ("linear_attention", "linear", "fwd+bwd"),
    }
    assert all(r["won"] in ("triton", "torch") and r["ratio"] > 0 for r in rows)
    auto = {a["op"]: a for a in report["bench_kernels"]["auto"]}
    assert set(auto) == {"scaled_dot_attention", "pool_mix", "linear_attention"}
    assert auto["pool_mix"]["file"] == "kernels/pooling/ops.py"
    # every mixer and the plain GPT trained; the default job completed
    trained = {r["mixer"] for r in report["bench_train"] if r["status"] == "ok"}
    assert trained == {*causal_mixers(), "gpt"}  # the bench's tasks are causal
    assert report["default_job"]["status"] == "completed" and report["default_job"]["step"] == 4
    # the verdict table: one row per path timing, one per op, one per benchmark target
    verdicts = report["verdicts"]
    assert sum(v["verdict"].endswith(" won") for v in verdicts) == len(rows)
    per_op = [v for v in verdicts if v["what"].startswith("impl=auto ")]
    assert len(per_op) == len(auto)
    assert all(v["verdict"].startswith(("keep ", "flip to ")) for v in per_op)
    assert any(v["what"].startswith("pool_mix fwd+bwd vs avg_pool1d") for v in verdicts)
    printed = done.stdout.rstrip().splitlines()
    assert printed[-1].startswith("| host time per fwd+bwd call")
    text = md.read_text()
    assert "**Dry run**" in text and "## Verdicts" in text and "| default-job | ok |" in text
    # what can come back from a lent machine: at most 8 files, 16 MiB each, two folders deep
    files = [p for p in out.rglob("*") if p.is_file()]
    assert sorted(str(p.relative_to(out)) for p in files) == sorted(
        [
            md.name,
            md.with_suffix(".json").name,
            f"{md.stem}-logs.tar.gz",
        ]
    )
    assert all(p.stat().st_size < 16 * 2**20 for p in files)
    with tarfile.open(out / f"{md.stem}-logs.tar.gz") as tar:
        names = tar.getnames()
    assert f"{md.stem}-logs/logs/default-job.log" in names
    assert f"{md.stem}-logs/default_job/summary.json" in names
    assert not [n for n in names if n.endswith(".pt")]  # no checkpoint
    assert not list(tmp_path.glob("gpu_check-*"))  # the working folder is gone


@pytest.mark.slow  # a real multi-process run, killed after its first stages (~5-10 s)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_check_killed_mid_stage_keeps_the_stages_before_it(tmp_path, sig):
    out = tmp_path / "report"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the report says the kernel benchmark runs
            report = next(out.glob("*-cpu-dry-run.json"), None)
            stages = (
                {s["name"]: s for s in json.loads(report.read_text())["stages"]} if report else {}
            )
            if stages.get("bench-kernels", {}).get("status") == "running":
                break
            assert proc.poll() is None, "the check ended before its second stage was seen"
            time.sleep(0.05)
        else:
            pytest.fail("the report never showed bench-kernels running")
        time.sleep(1.0)  # well into the stage's subprocess
        proc.send_signal(sig)
        code = proc.wait(timeout=30)
    finally:
        proc.kill()
    report = json.loads(next(out.glob("*-cpu-dry-run.json")).read_text())
    stages = {s["name"]: s for s in report["stages"]}
    assert stages["env"]["status"] == "ok" and report["env"]["gpu"] == "cpu"
    assert stages["env"]["summary"].startswith("cpu")
    later = ("cuda-tests", "bench-train", "default-job")
    assert [stages[n]["status"] for n in later] == ["not reached"] * 3
    md = next(out.glob("*-cpu-dry-run.md")).read_text()
    with tarfile.open(next(out.glob("*-logs.tar.gz"))) as tar:
        assert any(n.endswith("/logs/env.log") for n in tar.getnames())
    if sig == signal.SIGKILL:  # no last word: the report says the stage was running
        assert code == -signal.SIGKILL and stages["bench-kernels"]["status"] == "running"
        assert "| bench-kernels | running |" in md
    else:  # the check cut the stage, stopped its subprocess and wrote the report
        assert code == 128 + signal.SIGTERM
        assert stages["bench-kernels"]["status"] == "cut"
        assert "SIGTERM" in stages["bench-kernels"]["error"]
        assert not list(tmp_path.glob("gpu_check-*"))  # the working folder is gone
    if sys.platform == "linux":  # the stage's subprocess died with the check
        time.sleep(0.5)
        alive = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if str(tmp_path).encode() in cmdline.read_bytes():
                    alive.append(cmdline.read_bytes().replace(b"\0", b" ")[:200])
            except OSError:
                pass
        assert not alive


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


# ------------------------------------------------------------------------------------ the budget


class FakeTime:
    """gpu_check's clock, advanced by the fake stages instead of by waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    strftime, gmtime = staticmethod(time.strftime), staticmethod(time.gmtime)


@pytest.fixture
def fake_stages(monkeypatch, tmp_path):
    """run_check with stages that spend `spend[name]` seconds of a fake clock, at most their
    limit (as the subprocess timeout stops them) unless named in `overrun`, and record their
    limits."""
    clock = FakeTime()
    monkeypatch.setattr(checker, "time", clock)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    seen: dict[str, float] = {}
    plan: dict = {}

    def run_stage(check, stage, env, data):
        seen[stage.name] = stage.limit_s
        if stage.name == "env":
            check.env = {"gpu": "NVIDIA H100 80GB HBM3", "capability": "9.0"}
        wanted = plan["spend"].get(stage.name, 0.0)
        overrun = stage.name in plan["overrun"]
        clock.now += wanted if overrun else min(wanted, stage.limit_s)
        stage.status = "ok" if wanted < stage.limit_s else "timeout"

    monkeypatch.setattr(checker, "run_stage", run_stage)

    def check(budget: float, spend: dict[str, float], overrun=()) -> tuple[int, dict, dict, float]:
        plan.update(spend=spend, overrun=overrun)
        seen.clear()
        start = clock.now
        out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
        code = checker.run_check(tmp_path, out, False, tmp_path, budget)
        (report,) = out.glob("*-NVIDIA-H100-80GB-HBM3.json")
        stages = {s["name"]: s for s in json.loads(report.read_text())["stages"]}
        return code, dict(seen), stages, clock.now - start

    return check


def test_the_stages_share_the_budget_in_order_and_pass_on_what_they_leave(fake_stages):
    budget = checker.BUDGET
    assert budget == 330  # what fits 6 minutes of an H100 with the installation (docs/gpu.md)
    # every stage runs out of time: each gets its share, the whole ends inside the budget
    code, limits, stages, took = fake_stages(budget, dict.fromkeys(checker.SHARES, 1e9))
    assert took <= budget and list(limits) == list(checker.SHARES)
    usable = budget - checker.RESERVE_S
    for name, share in checker.SHARES.items():
        assert limits[name] == pytest.approx(usable * share / budget)
    assert code == 1 and {s["status"] for s in stages.values()} == {"timeout"}
    # stages that finish at once leave their time to the later ones: the last gets the rest
    code, limits, stages, took = fake_stages(budget, {})
    assert code == 0 and limits["default-job"] == pytest.approx(usable)
    assert limits["env"] == pytest.approx(usable * checker.SHARES["env"] / budget)
    # on a slower machine every stage spends its time and the budget still holds
    code, limits, stages, took = fake_stages(60, dict.fromkeys(checker.SHARES, 30))
    assert took <= 60 and stages["default-job"]["status"] == "timeout"


def test_stages_the_budget_does_not_reach_are_marked_not_run(fake_stages):
    # a stage the timeout cannot stop (stuck in a C call) overruns past the deadline
    code, limits, stages, took = fake_stages(100, {"bench-kernels": 200}, ["bench-kernels"])
    assert list(limits) == ["env", "bench-kernels"]
    assert code == 1
    for name in ("cuda-tests", "bench-train", "default-job"):
        assert stages[name]["status"] == "not run"
        assert "budget of 100 s was spent" in stages[name]["error"]


def test_sigterm_cuts_the_stage_running_and_keeps_the_ones_before(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))

    def run_stage(check, stage, env, data):
        if stage.name == "env":
            check.env = {"gpu": "NVIDIA H200", "capability": "9.0"}
            stage.status, stage.summary = "ok", "NVIDIA H200"
        else:  # the kernel benchmark: stopped while it runs
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            pytest.fail("SIGTERM did not stop the stage")

    monkeypatch.setattr(checker, "run_stage", run_stage)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "out"
    code = checker.run_check(tmp_path, out, False, tmp_path)
    assert code == 128 + signal.SIGTERM
    (report,) = out.glob("*-NVIDIA-H200.json")
    stages = {s["name"]: s for s in json.loads(report.read_text())["stages"]}
    assert stages["env"]["status"] == "ok" and stages["env"]["summary"] == "NVIDIA H200"
    assert stages["bench-kernels"]["status"] == "cut"
    assert stages["bench-kernels"]["error"] == "the check was stopped by SIGTERM"
    assert {stages[n]["status"] for n in list(checker.SHARES)[2:]} == {"not reached"}
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is undone


def _reports(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir())


def test_a_report_is_on_disk_while_env_runs_and_is_renamed_once_the_gpu_is_named(
    monkeypatch, tmp_path
):
    """A GPU check killed during its env stage (before anything named the card) still leaves a
    report saying env was running; once env names the GPU the report carries its name and the
    provisional one is gone (the folder stays within what comes back from a lent machine)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    out = tmp_path / "out"
    seen_during_env: dict = {}

    def run_stage(check, stage, env, data):
        if stage.name == "env":
            (report,) = out.glob("*-unnamed-gpu.json")  # what a kill now would leave
            seen_during_env.update(json.loads(report.read_text()))
            check.env = {"gpu": "NVIDIA H100 80GB HBM3", "capability": "9.0"}
        stage.status = "ok"

    monkeypatch.setattr(checker, "run_stage", run_stage)
    assert checker.run_check(tmp_path, out, False, tmp_path, 60) == 0
    stages = {s["name"]: s["status"] for s in seen_during_env["stages"]}
    assert stages["env"] == "running" and stages["bench-kernels"] == "not reached"
    day = time.strftime("%Y-%m-%d", time.gmtime())
    stem = f"{day}-NVIDIA-H100-80GB-HBM3"
    assert _reports(out) == [f"{stem}-logs.tar.gz", f"{stem}.json", f"{stem}.md"]


def test_a_gpu_env_did_not_name_is_named_by_the_kernel_benchmark(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    out = tmp_path / "out"

    def run_stage(check, stage, env, data):
        if stage.name == "env":
            stage.status, stage.error = "timeout", "stopped at 14 s"
            return
        if stage.name == "bench-kernels":
            (report,) = out.glob("*.json")
            assert report.name.endswith("-unnamed-gpu.json")
            check.bench = {"meta": {"device": "NVIDIA H200"}}
        stage.status = "ok"

    monkeypatch.setattr(checker, "run_stage", run_stage)
    assert checker.run_check(tmp_path, out, False, tmp_path, 60) == 1
    names = _reports(out)
    assert len(names) == 3 and all("-NVIDIA-H200" in n for n in names), names


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dry-run", "--budget", "0"], "--budget must be a positive number of seconds, got 0.0"),
        (["--dry-run", "--budget", "-5"], "got -5.0"),
        (["--dry-run", "--setup-s", "-1"], "--setup-s must be seconds >= 0, got -1.0"),
        (["--only", "tests"], "invalid choice: 'tests'"),
    ],
)
def test_bad_options_are_refused_with_the_value_and_exit_2(gpu_check, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        gpu_check.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


# ------------------------------------------------------------------------------------ gpu_setup.sh


def test_gpu_setup_hands_gpu_check_the_budget_the_installation_leaves(gpu_check, tmp_path):
    """gpu_setup.sh, with a stand-in python that records the gpu_check command it is given:
    --total less the installation (and 10 s) is the budget, --out the report folder; no option
    names a dispatch table any more."""
    record = tmp_path / "argv"
    fake = tmp_path / "python"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'case "$1" in *gpu_check.py) shift; printf "%s\\n" "$@" > {record} ;; esac\n'
    )
    fake.chmod(0o755)

    def setup(*options: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(ROOT / "scripts" / "gpu_setup.sh"), "--wheels", str(tmp_path), *options],
            env={**os.environ, "PYTHON": str(fake), "TMPDIR": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = setup()
    assert done.returncode == 0, done.stderr
    args = gpu_check.parser().parse_args(record.read_text().splitlines())
    assert 0 < args.budget <= 350 and args.setup_s >= 0  # --total 360, less the installation
    done = setup("--out", str(tmp_path / "o"), "--total", "100")
    assert done.returncode == 0, done.stderr
    args = gpu_check.parser().parse_args(record.read_text().splitlines())
    assert args.out == tmp_path / "o" and args.budget <= 90
    assert not hasattr(args, "table_dir")
    refused = setup("--tables", str(tmp_path / "t"))
    assert refused.returncode == 2 and "unknown option --tables" in refused.stderr


def test_the_docs_name_where_auto_is_chosen_and_no_dispatch_table():
    """docs/gpu.md sends a reader to AUTO_TRITON in the family's ops.py, which holds it for
    every op with a kernel, and names no dispatch table, benchmark mode or impl="tune"."""
    import attnzoo.kernels as kernels
    from attnzoo.kernels.bench import parts

    docs = (ROOT / "docs" / "gpu.md").read_text()
    assert "AUTO_TRITON" in docs and "kernels/<family>/ops.py" in docs
    for banned in (
        "dispatch_tables",
        "dispatch table",
        "benchmark mode",
        'impl="tune"',
        "impl=tune",
    ):
        assert banned not in docs.lower(), banned
    for p in parts():
        if p.auto_triton is not None:
            ops = Path(kernels.__path__[0]) / p.family / "ops.py"
            assert "AUTO_TRITON" in ops.read_text(), ops


def test_bad_total_for_gpu_setup_is_refused(tmp_path):
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_setup.sh"), "--total", "six"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--total must be whole seconds, got 'six'" in done.stderr


@pytest.mark.slow  # a pytest collection in a subprocess
def test_the_curated_cuda_tests_exist_in_the_cuda_tier():
    """Every test the check names is one the cuda tier collects (a renamed test fails here, on
    CPU, not on a lent GPU), and every op and kernel family is in it."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "cuda",
            "-p",
            "no:cacheprovider",
            *(f"tests/{t}" for t in checker.CUDA_TESTS),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    collected = [ln.removeprefix("tests/") for ln in done.stdout.splitlines() if "::" in ln]
    assert sorted(collected) == sorted(checker.CUDA_TESTS)
    kernel_tests = " ".join(t for t in collected if "float64_reference" in t)
    for op in ("scaled_dot", "quadratic", "metric", "pool"):  # forward and backward each
        assert f"[{op}-" in kernel_tests
    trained = " ".join(t for t in collected if "trains" in t)
    assert "[linear-triton" in trained and "[local-triton" in trained  # linear, windowed
