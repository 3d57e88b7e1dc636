"""scripts/bench_kernels.py and attnzoo.kernels.bench without a GPU: the parts each family
declares in kernels/<family>/bench.py are found and ordered, the comparisons it times compute the
ops it compares them with, its verdicts and path rows read the ratios the right way round, its
FLOP figures are the families' formulas, and a part stops at its time limit.

conftest sets TRITON_INTERPRET=1, so the validation runs the Triton kernels in the interpreter.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location(
        "bench_kernels", ROOT / "scripts/bench_kernels.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    from attnzoo.kernels import bench

    return bench


@pytest.mark.slow  # every formulation in the interpreter; bench cases have their own checks
def test_dry_run_proves_every_formulation_equal_to_its_triton_op(script, tmp_path, capsys):
    """Every comparison (each op against its SDPA / avg_pool1d formulation, causal and
    bidirectional) agrees in outputs and gradients with the Triton kernels, and nothing is timed."""
    assert script.main(["--dry-run", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "timings need a GPU" in printed
    saved = json.loads((tmp_path / "bench_kernels.json").read_text())
    checks = {(c["part"], c["mode"], c["formulation"]): c for c in saved["validation"]}
    assert set(checks) == {
        ("scaled_dot", "bidirectional", "sdpa"),
        ("scaled_dot", "causal", "sdpa"),
        ("metric", "bidirectional", "sdpa(p@M,p,p)"),
        ("metric", "causal", "sdpa(p@M,p,p)"),
        ("quadratic", "bidirectional", "sdpa(x@U,x,v)"),
        ("quadratic", "causal", "sdpa(x@U,x,v)"),
        ("pool", "bidirectional", "avg_pool1d - x"),
        ("linear", "bidirectional", "torch path"),
        ("linear", "causal", "torch path"),
        ("linear", "causal", "cumsum/einsum"),
        ("local", "bidirectional", "sdpa(band)"),
        ("local", "causal", "sdpa(band)"),
        # against a float64 truth: every candidate, the attnzoo op included; gated is causal only
        ("gated", "causal", "attnzoo"),
        ("gated", "causal", "torch path"),
        ("gated_key", "causal", "attnzoo"),
        ("gated_key", "causal", "torch path"),
        # the delta rule: its chunked PyTorch path against the recurrence (fla-core: a skip here)
        ("delta", "causal", "attnzoo"),
        ("delta_gated", "causal", "attnzoo"),
        ("sigmoid", "bidirectional", "attnzoo"),
        ("sigmoid", "bidirectional", "torch path"),
        ("sigmoid", "causal", "attnzoo"),
        ("sigmoid", "causal", "torch path"),
        # the key bias (the Forgetting Transformer's decay), causal only; fla-core: a skip here
        ("forgetting", "causal", "attnzoo"),
        ("forgetting", "causal", "torch path"),
    }
    for key, c in checks.items():  # the delta rule has no kernel: its row ran the PyTorch path
        assert c["impl"] == ("torch" if key[0] in ("delta", "delta_gated") else "triton"), key
        assert c["ok"] and c["err_out"] < 1e-5 and c["err_grad"] < 1e-5, (key, c)
        recurrences = ("gated", "gated_key", "delta", "delta_gated")
        truth = "float64 recurrence" if key[0] in recurrences else "attnzoo"
        truth = "float64 reference" if key[0] == "sigmoid" else truth
        truth = "float64 FoX formula" if key[0] == "forgetting" else truth
        assert c["against"] == truth, key
    assert saved["results"] == [] and saved["verdicts"] == []
    md = (tmp_path / "bench_kernels.md").read_text()
    assert "| pool | bidirectional | avg_pool1d - x | triton |" in md
    assert "| gated | causal | torch path | triton |" in md and "| float64 recurrence |" in md


def test_a_formulation_that_differs_from_the_op_fails_validation(script, monkeypatch, tmp_path):
    """avg_pool1d counting the zero padding at the sequence ends is not pool_mix: caught, exit 1."""
    from attnzoo.kernels.pooling import bench as pooling

    def counts_padding(x, window):
        return torch.nn.functional.avg_pool1d(x.mT, window, 1, window // 2).mT - x

    monkeypatch.setattr(pooling, "avg_pool_mix", counts_padding)
    assert script.main(["--dry-run", "--only", "pool", "--out", str(tmp_path)]) == 1
    (check,) = json.loads((tmp_path / "bench_kernels.json").read_text())["validation"]
    assert not check["ok"] and check["err_out"] > 1e-2


def _r(bench, part, shape, cand, ms, mode="fwd+bwd", host=10.0, rate=None):
    return bench.Result(part, shape, cand, mode, ms, host, rate)


def test_verdicts_compare_in_the_right_direction(bench):
    R = bench.Result
    results = [
        # scaled_dot, N = 4096: faster than flash when causal, slower when bidirectional
        _r(bench, "scaled_dot", "N4096-causal", "attnzoo", 0.5, rate=200.0),
        _r(bench, "scaled_dot", "N4096-causal", "sdpa flash", 0.6),
        _r(bench, "scaled_dot", "N4096-causal", "sdpa cudnn", 0.4),
        _r(bench, "scaled_dot", "N4096-bidirectional", "attnzoo", 2.0, rate=100.0),
        _r(bench, "scaled_dot", "N4096-bidirectional", "sdpa flash", 1.0),
        # training shape: 1.1x flash's time; host 60 vs 50 us forward, 200 vs 100 fwd+bwd
        _r(bench, "scaled_dot", "train", "attnzoo", 0.275, host=200.0),
        _r(bench, "scaled_dot", "train", "sdpa flash", 0.25, host=100.0),
        _r(bench, "scaled_dot", "train", "attnzoo", 0.1, mode="fwd", host=60.0),
        _r(bench, "scaled_dot", "train", "sdpa flash", 0.1, mode="fwd", host=50.0),
        # metric: the best SDPA formulation is cuDNN's; flash unavailable
        _r(bench, "metric", "N4096-causal", "attnzoo", 1.0),
        _r(bench, "metric", "N4096-causal", "sdpa(p@M,p,p) cudnn", 0.8),
        _r(bench, "metric", "N4096-causal", "sdpa(p@M,p,p) efficient", 1.5),
        R("metric", "N4096-causal", "sdpa(p@M,p,p) flash", "fwd+bwd", note="unavailable"),
        # quadratic, causal: faster than its formulation, 60% of scaled_dot's TFLOP/s
        _r(bench, "quadratic", "N4096-causal", "attnzoo", 10.0, rate=120.0),
        _r(bench, "quadratic", "N4096-causal", "sdpa(x@U,x,v) efficient", 12.0),
        # pool: faster at one shape, slower at the other: the worst decides
        _r(bench, "pool", "N4096-pool", "attnzoo", 0.010),
        _r(bench, "pool", "N4096-pool", "avg_pool1d - x", 0.030),
        _r(bench, "pool", "train-pool", "attnzoo", 0.020),
        _r(bench, "pool", "train-pool", "avg_pool1d - x", 0.018),
    ]
    got = {v.target: v for v in bench.verdicts(results)}
    v = got["scaled_dot fwd+bwd vs flash SDPA, N4096-causal"]
    assert v.verdict == "met" and v.measured.startswith("1.20×") and "cuDNN 0.80×" in v.measured
    v = got["scaled_dot fwd+bwd vs flash SDPA, N4096-bidirectional"]
    assert v.verdict == "MISSED" and v.measured.startswith("0.50×")
    v = got["scaled_dot fwd+bwd at the training shape"]
    assert v.verdict == "met" and v.measured.startswith("1.10×")
    v = got["metric fwd+bwd vs best sdpa(p@M,p,p), N4096-causal"]
    assert v.verdict == "MISSED" and v.measured.startswith("0.80×") and "cudnn" in v.measured
    assert got["metric fwd+bwd vs best sdpa(p@M,p,p), N4096-bidirectional"].verdict == (
        "not measured"
    )
    v = got["quadratic fwd+bwd vs sdpa(x@U,x,v), N4096-causal"]
    assert v.verdict == "met" and v.measured.startswith("1.20×")
    v = got["quadratic TFLOP/s vs scaled_dot's, N4096-causal"]
    assert v.verdict == "met" and v.measured == "60%"
    v = got["pool_mix fwd+bwd vs avg_pool1d - x, every pool shape"]
    assert v.verdict == "MISSED" and v.measured.startswith("0.90×") and "train-pool" in v.measured
    assert got["host time per fwd call at the training shape, vs SDPA"].verdict == "met"
    v = got["host time per fwd+bwd call at the training shape, vs SDPA"]
    assert v.verdict == "MISSED" and v.measured.startswith("2.00×")


def test_a_part_stops_at_its_time_limit(bench):
    start = time.perf_counter()
    with (
        pytest.raises(bench.PartTimeout, match="part slow stopped at its time limit of 0.2 s"),
        bench.time_limit(0.2, "part slow"),
    ):
        while time.perf_counter() - start < 10:
            time.sleep(0.01)
    assert time.perf_counter() - start < 2
    with bench.time_limit(0.2, "part quick"):  # finishing in time leaves no alarm behind
        pass
    time.sleep(0.3)


def test_cost_model_reads_fewer_bytes_for_metric_and_a_copy_for_pool(bench):
    s = bench.Shape("N4096", 2, 8, 4096, 64, False)
    metric, scaled = bench.cost("metric", s), bench.cost("scaled_dot", s)
    # metric reads one tensor where scaled-dot reads three
    assert metric["fwd_bytes"] < 0.6 * scaled["fwd_bytes"]
    assert metric["fwd_flop"] > scaled["fwd_flop"]  # plus q = p M
    pool = bench.Shape("pool", 2, 1, 4096, 512, False)
    assert bench.cost("pool", pool)["fwd_bytes"] == 2 * 2 * 2 * 4096 * 512  # bf16 in + out
    causal = bench.Shape("N4096", 2, 8, 4096, 64, True)
    assert bench.cost("scaled_dot", causal)["fwd_flop"] == scaled["fwd_flop"] / 2


def _flops_before(op, b, h, n, d, causal):
    """The benchmark's FLOP formulas as they were written inline in scripts/bench_kernels.py
    before the attention family's bench.py held them: the figures it prints must not move."""
    bh, frac, width = b * h, 0.5 if causal else 1.0, h * d
    if op == "scaled_dot":
        attn = 2 * bh * n * n * (d + d) * frac
        return attn, 2.5 * attn
    if op == "quadratic":
        proj, attn = 2 * bh * n * width * width, 2 * bh * n * n * (width + d) * frac
    else:  # metric
        proj, attn = 2 * bh * n * d * d, 2 * bh * n * n * (d + d) * frac
    return proj + attn, 2.5 * attn + 2 * proj


@pytest.mark.parametrize("op", ["scaled_dot", "metric", "quadratic"])
@pytest.mark.parametrize(
    "shape",
    [
        (64, 6, 256, 64, True),
        (2, 8, 4096, 64, False),
        (2, 8, 8192, 64, True),
        (1, 2, 37, 16, False),
        (3, 5, 1000, 128, True),
    ],
)
def test_benchmark_flops_are_the_families_formula_and_unchanged(bench, op, shape):
    from attnzoo.kernels.attention.bench import op_flops

    b, h, n, d, causal = shape
    fwd, bwd = _flops_before(op, b, h, n, d, causal)
    c = bench.cost(op, bench.Shape("s", b, h, n, d, causal))
    assert (c["fwd_flop"], c["bwd_flop"]) == (fwd, bwd)  # to the bit
    assert op_flops(op, b, h, n, d, causal) == fwd
    assert op_flops(op, b, h, n, d, causal, backward=True) == bwd


def test_attention_flops_follow_the_documented_convention():
    """2 FLOPs per multiply-add of q kᵀ and of the weights times v; causal half; the backward
    2.5x with the scores recomputed (a flash kernel), 2x without (the model's work)."""
    from attnzoo.kernels.attention.bench import attention_flops, op_flops

    b, h, n, dk, dv = 2, 3, 10, 4, 6
    forward = 2 * b * h * n * n * dk + 2 * b * h * n * n * dv
    assert attention_flops(b, h, n, dk, False, dv=dv) == forward
    assert attention_flops(b, h, n, dk, True, dv=dv) == forward / 2
    assert attention_flops(b, h, n, dk, False, True, dv=dv) == 2.5 * forward
    assert attention_flops(b, h, n, dk, False, True, dv=dv, recompute=False) == 2 * forward
    assert op_flops("metric", 1, 1, n, dk, False, True, recompute=False) == 2 * op_flops(
        "metric", 1, 1, n, dk, False
    )
    with pytest.raises(ValueError, match="no FLOP formula for op 'pool'"):
        op_flops("pool", b, h, n, dk, False)


def test_shapes_include_the_training_shape_and_a_large_pool(bench):
    shapes = bench.attention_shapes([1024, 4096], ["causal", "bidirectional"], 2, 8, 64, True)
    assert [s.name for s in shapes] == [
        "train",
        "N1024-causal",
        "N1024-bidirectional",
        "N4096-causal",
        "N4096-bidirectional",
    ]
    train = shapes[0]
    assert (train.batch, train.heads, train.n, train.head_dim, train.causal) == (
        64,
        6,
        256,
        64,
        True,
    )
    from attnzoo.kernels.pooling.bench import pool_shapes

    pools = pool_shapes(shapes, large=True)
    assert bench.part("pool").shapes_for(shapes, True) == pools
    assert [(p.name, p.batch, p.n, p.head_dim) for p in pools] == [
        ("train-pool", 64, 256, 384),
        ("N1024-pool", 2, 1024, 512),
        ("N4096-pool", 2, 4096, 512),
        ("large-pool", 8, 8192, 1024),
    ]


@pytest.mark.parametrize(
    "args", [["--window", "4"], ["--head-dim", "8"], ["--reps", "0"], ["--only", "nope"]]
)
def test_bad_options_exit_with_a_usage_error(script, args, capsys):
    with pytest.raises(SystemExit) as exc:
        script.main(["--dry-run", *args])
    assert exc.value.code == 2
    assert args[0].lstrip("-").split("-")[0] in capsys.readouterr().err


def test_time_part_runs_every_candidate_and_notes_refused_backends(bench):
    """The timing loop on CPU with a stand-in timer (the real one needs CUDA events): every
    candidate's forward and forward+backward closures run, rates follow the cost model, and a
    backend that refuses the tensors (cuDNN on CPU) becomes a note instead of an error."""
    calls = []

    def timer(fn):
        fn()
        calls.append(fn)
        return {"device_ms": 2.0, "host_us": 5.0}

    results = []
    shape = bench.Shape("tiny", 1, 2, 24, 16, True)
    bench.time_part("scaled_dot", [shape], "triton", 3, timer, results.append, "cpu", torch.float32)
    by = {(r.candidate, r.mode): r for r in results}
    flop = bench.cost("scaled_dot", shape)
    assert by[("attnzoo", "fwd")].rate == pytest.approx(flop["fwd_flop"] / 2.0 / 1e9)
    both = flop["fwd_flop"] + flop["bwd_flop"]
    assert by[("attnzoo", "fwd+bwd")].rate == pytest.approx(both / 2.0 / 1e9)
    cudnn = by[("sdpa cudnn", "fwd+bwd")]
    assert cudnn.device_ms is None and cudnn.note.startswith("unavailable: RuntimeError")
    timed = {r.candidate for r in results if r.device_ms is not None}
    assert "attnzoo" in timed and len(calls) == 2 * len(timed)

    pool = bench.Shape("pool", 2, 1, 20, 24, False)
    results.clear()
    bench.time_part("pool", [pool], "triton", 3, timer, results.append, "cpu", torch.float32)
    modes = {(r.candidate, r.mode) for r in results}
    assert modes == {
        ("attnzoo", "fwd"),
        ("attnzoo", "fwd+bwd"),
        ("avg_pool1d - x", "fwd"),
        ("avg_pool1d - x", "fwd+bwd"),
        ("copy", "fwd"),  # the bandwidth reference: forward only
    }
    copy = next(r for r in results if r.candidate == "copy")
    assert copy.rate == pytest.approx(2 * 4 * 2 * 20 * 24 / 2.0 / 1e6)  # fp32 in + out, GB/s


def test_host_bench_stubs_every_launch_and_times_every_op(monkeypatch, capsys):
    """scripts/bench_host.py replaces each Triton launch by a stub that still evaluates the grid:
    every op's forward launches one kernel and its backward the rest (delta, dk/dv, dq for
    attention), so a launcher renamed or added without the stub raises, not time nothing."""
    spec = importlib.util.spec_from_file_location("bench_host", ROOT / "scripts/bench_host.py")
    host = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(host)
    for module, names in host.LAUNCHES.items():
        for name in names:  # restored after the test: the stubs replace module attributes
            monkeypatch.setattr(module, name, getattr(module, name))
    interpreted = host.triton.runtime.interpreter.InterpretedFunction
    monkeypatch.setattr(interpreted, "run", interpreted.run)
    rows = host.main(["--reps", "1", "--calls", "2"])
    launches = {(r["op"], r["part"]): r["launches"] for r in rows}
    assert launches == {
        **{(op, "forward"): 1 for op in ("scaled_dot", "quadratic", "metric", "pool_mix")},
        **{(op, "forward, no_grad"): 1 for op in ("scaled_dot", "quadratic", "metric", "pool_mix")},
        **{(op, "forward+backward"): 4 for op in ("scaled_dot", "quadratic", "metric")},
        ("pool_mix", "forward+backward"): 2,
    }
    assert all(r["best_us"] > 0 for r in rows)
    assert "| scaled_dot | forward | 1 |" in capsys.readouterr().out
    from attnzoo.kernels import attention  # a kernel outside LAUNCHES: the test helper's

    with pytest.raises(RuntimeError, match="_keep_mask_kernel was launched for real"):
        attention.dropout_keep_mask(torch.zeros(1, dtype=torch.int64), 1, 1, 8, 0.5)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_steps_share_the_budget_and_pass_on_what_they_leave(bench, monkeypatch, tmp_path):
    """With --budget each step (every part's validation, then every part's timing) gets its share
    of the time left among the steps still to run: a step that finishes early leaves its time to
    the later ones, one that runs to its limit does not eat theirs, and a step that finds the
    budget spent is not run and says so."""
    from attnzoo.kernels.bench import timing

    runner = importlib.import_module("attnzoo.kernels.bench.run")  # the module, not run()

    clock = FakeClock()
    monkeypatch.setattr(runner, "Budget", lambda *a: timing.Budget(*a, clock=clock))
    limits: dict[str, float] = {}
    spend: dict[str, float] = {}
    overrun: set[str] = set()  # steps the alarm cannot stop (stuck in a C call)

    @contextlib.contextmanager
    def time_limit(seconds, what):
        limits[what] = seconds
        yield
        wanted = spend.get(what, 0.0)
        clock.now += wanted if what in overrun else min(wanted, seconds)

    monkeypatch.setattr(runner, "time_limit", time_limit)
    monkeypatch.setattr(runner, "validate", lambda *a: [])
    monkeypatch.setattr(runner, "time_part", lambda *a: None)
    shares = bench.step_shares(("scaled_dot", "pool"))
    total = sum(shares.values())

    def check(budget: float) -> None:
        limits.clear()
        opts = bench.Options(parts=("scaled_dot", "pool"), smoke=True, budget=budget, out=tmp_path)
        assert runner.run(opts) == 0

    # every step finishes at once: the last one gets all that is left
    check(total)
    assert limits["validation of scaled_dot"] == pytest.approx(shares["validate scaled_dot"])
    assert limits["part pool"] == pytest.approx(total)
    # scaled_dot's timing runs to its limit: pool's timing gets the rest, not a fixed quarter
    spend.update({"part scaled_dot": 1e9})
    check(total)
    timed = shares["scaled_dot"] + shares["pool"]
    assert limits["part scaled_dot"] == pytest.approx(total * shares["scaled_dot"] / timed)
    assert limits["part pool"] == pytest.approx(total - limits["part scaled_dot"])
    # a validation overruns its limit past the deadline: the timing steps are not run
    spend.clear()
    spend["validation of pool"] = 1e9
    overrun.add("validation of pool")
    check(total)
    assert set(limits) == {"validation of scaled_dot", "validation of pool"}
    notes = json.loads((tmp_path / "bench_kernels.json").read_text())["notes"]
    assert f"scaled_dot: not run, the budget of {total:g} s was spent" in notes
    assert f"pool: not run, the budget of {total:g} s was spent" in notes


def _stand_in_timer(fn):
    fn()
    return {"device_ms": 2.0, "host_us": 5.0}


def test_linear_rows_name_why_a_comparison_is_skipped(bench, monkeypatch):
    """linear's comparisons on CPU: the PyTorch path and, causal, the cumsum formulation are
    timed; flash-linear-attention is a row that says why it was not (absent here; present but
    without a GPU under --smoke), and the bidirectional rows say the comparisons are causal only."""
    monkeypatch.setitem(sys.modules, "fla", None)  # as if fla-core were not installed
    monkeypatch.setitem(sys.modules, "fla.ops", None)
    monkeypatch.setitem(sys.modules, "fla.ops.linear_attn", None)
    results = []
    shapes = [bench.Shape(f"N40-{m}", 1, 2, 40, 16, m == "causal") for m in ("causal", "bidir")]
    bench.time_part(
        "linear",
        shapes,
        "triton",
        3,
        _stand_in_timer,
        results.append,
        "cpu",
        torch.float32,
        ("math",),
    )
    by = {(r.shape, r.candidate, r.mode): r for r in results}
    timed = {k for k, r in by.items() if r.device_ms is not None}
    for shape in ("N40-causal", "N40-bidir"):
        for cand in ("attnzoo", "torch path"):
            assert {(shape, cand, "fwd"), (shape, cand, "fwd+bwd")} <= timed
    assert ("N40-causal", "cumsum/einsum", "fwd+bwd") in timed
    fla = by[("N40-causal", "fla chunk_linear_attn", "fwd+bwd")]
    assert fla.device_ms is None and fla.note.startswith("skipped: fla-core is not importable")
    assert "causal only" in by[("N40-bidir", "fla chunk_linear_attn", "fwd+bwd")].note
    assert "causal only" in by[("N40-bidir", "cumsum/einsum", "fwd+bwd")].note

    # fla-core importable, but --smoke has no GPU for its kernels: still a skip, saying so
    fake = types.ModuleType("fla.ops.linear_attn")
    fake.chunk_linear_attn = lambda q, k, v, scale=None, normalize=True: pytest.fail("called")
    monkeypatch.setitem(sys.modules, "fla.ops.linear_attn", fake)
    (cand,) = [
        c
        for c in bench.cases.candidates("linear", shapes[0], "triton", 3, ("math",))
        if c.name == "fla chunk_linear_attn"
    ]
    assert cand.skip == "flash-linear-attention's kernels need a GPU"


def test_fla_is_called_in_its_own_layout_and_matches_the_op(bench, monkeypatch):
    """Where fla-core is importable (and a GPU runs it), its chunk_linear_attn gets the
    (B, N, H, F) tensors as they are, scale 1 and normalisation on, and its output is compared in
    the op's (B, H, N, dv) layout: a stand-in with fla's documented semantics agrees with the op."""
    seen = {}

    def chunk_linear_attn(
        q,
        k,
        v,
        scale=None,
        initial_state=None,
        output_final_state=False,
        normalize=True,
        head_first=True,
    ):
        seen.update(shape=tuple(q.shape), scale=scale, normalize=normalize, head_first=head_first)
        s = torch.einsum("bnhf,bnhv->bnhfv", k, v).cumsum(1)
        o = torch.einsum("bnhf,bnhfv->bnhv", q * scale, s)
        z = (q * scale * k.cumsum(1)).sum(-1, keepdim=True)
        return o / (z + 1e-10), None

    fake = types.ModuleType("fla.ops.linear_attn")
    fake.chunk_linear_attn = chunk_linear_attn
    monkeypatch.setitem(sys.modules, "fla.ops.linear_attn", fake)
    from attnzoo.kernels.linear import bench as linear

    run, why = linear.fla_linear()
    assert why == ""
    s = bench.Shape("tiny", 2, 3, 37, 16, True, elt=4)
    q, k, v = bench.cases.make_inputs("linear", s, "cpu", torch.float32)
    got = run(q, k, v)
    assert seen == {"shape": (2, 37, 3, 16), "scale": 1.0, "normalize": True, "head_first": False}
    want = linear.linear_in_torch_layout(q, k, v, True)
    assert got.shape == want.shape == (2, 3, 37, 16)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_linear_and_local_verdicts_and_path_rows(bench):
    """The verdicts read linear's and local's ratios the right way round; the path rows compare
    the kernel with the path impl="auto" runs instead (never the cumsum formulation or fla-core,
    however fast), and local's rows inform the windowed op's AUTO_TRITON."""
    R = bench.Result
    shape = "N4096-causal"
    results = [
        _r(bench, "linear", shape, "attnzoo", 1.0),
        _r(bench, "linear", shape, "torch path", 3.0),
        _r(bench, "linear", shape, "cumsum/einsum", 0.5),  # faster, but not what auto runs
        R("linear", shape, "fla chunk_linear_attn", "fwd+bwd", note="skipped: fla-core is gone"),
        _r(bench, "local", shape, "attnzoo", 2.0),
        _r(bench, "local", shape, "sdpa(band) efficient", 3.0),
        _r(bench, "local", shape, "sdpa(band) cudnn", 1.0),
        R("local", shape, "sdpa(band) flash", "fwd+bwd", note="unavailable: RuntimeError"),
    ]
    got = {v.target: v for v in bench.verdicts(results)}
    v = got["linear fwd+bwd vs its PyTorch path, N4096-causal"]
    assert v.verdict == "met" and v.measured.startswith("3.00×")
    v = got["linear fwd+bwd vs the cumsum/einsum formulation, N4096-causal"]
    assert v.verdict == "MISSED" and v.measured.startswith("0.50×")
    v = got["linear fwd+bwd vs flash-linear-attention, N4096-causal"]
    assert v.verdict == "not measured" and "fla-core is gone" in v.measured
    v = got["local fwd+bwd vs best sdpa(band), N4096-causal"]
    assert v.verdict == "MISSED" and v.measured.startswith("0.50×") and "cudnn" in v.measured
    assert got["linear fwd+bwd vs its PyTorch path, N4096-bidirectional"].verdict == (
        "not measured"
    )

    rows = {r["part"]: r for r in bench.path_rows(results)}
    assert set(rows) == {"linear", "local"}
    assert rows["linear"]["op"] == "linear_attention"
    assert rows["linear"]["torch_path"] == "torch path" and rows["linear"]["won"] == "triton"
    assert rows["linear"]["ratio"] == pytest.approx(3.0)
    local = rows["local"]
    assert local["op"] == "scaled_dot_attention" and local["torch_path"] == "sdpa(band) cudnn"
    assert local["ratio"] == pytest.approx(0.5) and local["won"] == "torch"
    assert (local["shape"], local["mode"], local["triton_ms"]) == (shape, "fwd+bwd", 2.0)
    auto = {a["op"]: a for a in bench.auto_rows(list(rows.values()))}
    assert auto["linear_attention"]["follows"] is True
    assert auto["linear_attention"]["file"] == "kernels/linear/ops.py"
    assert auto["scaled_dot_attention"]["follows"] is False
    assert auto["scaled_dot_attention"]["file"] == "kernels/attention/ops.py"


def test_every_part_names_a_public_op_a_share_and_its_family(bench):
    """The parts, found in the families' bench.py, come in the report's order; each names an op
    that attnzoo.kernels exports, its family, a share of a budget, and how AUTO_TRITON reads
    now (the delta rule, without a kernel, none); the gated parts measure one op."""
    import attnzoo.kernels as kernels

    assert bench.part_names() == (
        "scaled_dot",
        "metric",
        "quadratic",
        "pool",
        "linear",
        "local",
        "gated",
        "gated_key",
        "sigmoid",
        "forgetting",
        "delta",
        "delta_gated",
    )
    root = Path(kernels.__path__[0])
    for p in bench.parts():
        assert p.op in kernels.__all__ and p.share_s > 0, p.name
        assert (root / p.family / "ops.py").is_file() and (root / p.family / "bench.py").is_file()
        has_kernel = p.auto_triton is not None
        assert has_kernel == (p.op != "delta_rule"), p.name
        assert not has_kernel or p.auto_triton() is False  # PyTorch everywhere today
    assert bench.part("gated").op == bench.part("gated_key").op == "gated_linear_attention"
    assert bench.part("local").op == "scaled_dot_attention"
    with pytest.raises(ValueError, match=r"unknown part 'nope'; known: \('scaled_dot'"):
        bench.part("nope")


def test_a_new_family_with_a_bench_module_joins_the_benchmark(bench, monkeypatch, tmp_path):
    """A package under attnzoo.kernels with a bench.py is found with no change to kernels/bench:
    its part takes its place by `order`, shares the budget and is validated."""
    import attnzoo.kernels as kernels
    from attnzoo.kernels.bench import cases

    family = tmp_path / "zzfamily"
    family.mkdir()
    (family / "__init__.py").write_text("")
    (family / "bench.py").write_text(
        "from attnzoo.kernels.bench.cases import Candidate, Part, randn_leaf, seeded\n"
        "def inputs(s, device, dtype, seed=0):\n"
        "    return (randn_leaf(seeded(seed), device, dtype, s.batch, s.n, s.head_dim),)\n"
        "def candidates(s, impl, window, backends=(), device='cuda'):\n"
        "    return [Candidate('attnzoo', lambda x: 2 * x), Candidate('x + x', lambda x: x + x)]\n"
        "PARTS = [Part('double', order=45, op='double', share_s=1, inputs=inputs,\n"
        "              candidates=candidates, auto_triton=lambda: False, modes=(False,))]\n"
    )
    monkeypatch.setattr(kernels, "__path__", [*kernels.__path__, str(tmp_path)])
    cases.parts.cache_clear()
    try:
        names = bench.part_names()
        assert names.index("double") == names.index("pool") + 1
        assert bench.part("double").family == "zzfamily"
        assert bench.step_shares(["double"]) == {"validate double": 3, "double": 1}
        (check,) = bench.validate(["double"], "cpu", "torch", 3, 1e-6)
        assert check.ok and check.formulation == "x + x" and check.mode == "bidirectional"
    finally:
        monkeypatch.undo()
        cases.parts.cache_clear()
        sys.modules.pop("attnzoo.kernels.zzfamily.bench", None)
        sys.modules.pop("attnzoo.kernels.zzfamily", None)
    assert "double" not in bench.part_names()


def test_sigmoid_costs_scaled_dots_flops_and_the_gated_parts_have_no_cost(bench):
    """sigmoid_attention runs the scaled-dot products with σ in softmax's place: the same FLOPs,
    and no lse written; the FLOP model has no formula for the gated recurrence, so its parts
    have no cost (their rows no rate) and are timed at the causal shapes only."""
    from attnzoo.kernels.bench import cases

    s = bench.Shape("N4096", 2, 8, 4096, 64, True)
    sig, sd = bench.cost("sigmoid", s), bench.cost("scaled_dot", s)
    assert (sig["fwd_flop"], sig["bwd_flop"]) == (sd["fwd_flop"], sd["bwd_flop"])
    assert sig["bwd_flop"] == 2.5 * sig["fwd_flop"]
    assert sd["fwd_bytes"] - sig["fwd_bytes"] == 4 * 2 * 8 * 4096  # the fp32 lse
    assert bench.cost("gated", s) is None and bench.cost("gated_key", s) is None
    with pytest.raises(ValueError, match=r"unknown part 'nope'; known: \('scaled_dot'"):
        bench.cost("nope", s)
    shapes = bench.attention_shapes([64], ["causal", "bidirectional"], 1, 2, 16, True)
    assert [x.name for x in cases.part_shapes("gated_key", shapes)] == ["train", "N64-causal"]
    assert cases.part_shapes("sigmoid", shapes) == shapes
    with pytest.raises(ValueError, match="part 'gated' is causal only, got .*'N64-bidirectional'"):
        cases.candidates("gated", shapes[2], "torch", 3)


@pytest.mark.slow  # the benchmark's validation in the interpreter (~9 s)
def test_a_candidate_that_departs_from_the_float64_truth_fails_validation(
    script, monkeypatch, tmp_path
):
    """The gated parts check every candidate against the float64 recurrence, not against each
    other: a PyTorch path that reads the log decay doubled is caught (exit 1) while the kernel
    still agrees."""
    from attnzoo.kernels.gated import bench as gated

    real = gated.gated_in_torch_layout

    def doubled_decay(q, k, v, g, scale, impl="torch"):
        return real(q, k, v, 2 * g if impl == "torch" else g, scale, impl)

    monkeypatch.setattr(gated, "gated_in_torch_layout", doubled_decay)
    assert script.main(["--dry-run", "--only", "gated", "--out", str(tmp_path)]) == 1
    saved = json.loads((tmp_path / "bench_kernels.json").read_text())["validation"]
    checks = {c["formulation"]: c for c in saved}
    assert set(checks) == {"attnzoo", "torch path"}
    assert checks["attnzoo"]["ok"] and checks["attnzoo"]["against"] == "float64 recurrence"
    assert not checks["torch path"]["ok"] and checks["torch path"]["err_out"] > 1e-2


FLA_GATED = {"gated": ("simple_gla", "chunk_simple_gla"), "gated_key": ("gla", "chunk_gla")}


def _without_fla(monkeypatch):
    """As if fla-core were not installed."""
    for name in ("fla", "fla.ops", *(f"fla.ops.{m}" for m, _ in FLA_GATED.values())):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.slow  # times every gated and sigmoid candidate in the interpreter
def test_smoke_times_the_gated_and_sigmoid_parts_into_path_rows(
    script, monkeypatch, tmp_path, capsys
):
    """--smoke on CPU (the kernels in the interpreter): gated (a log decay per head), gated_key
    (per key dimension) and sigmoid time the attnzoo op and its PyTorch path, fwd and fwd+bwd,
    the gated parts at the causal shapes only; fla-core's rows say why they were skipped (absent
    here); the path rows are gated_linear_attention's, one per decay form, and
    sigmoid_attention's, each against the PyTorch path, and the report says per op which
    AUTO_TRITON would follow and where it is."""
    _without_fla(monkeypatch)
    args = [
        "--smoke",
        "--only",
        "gated",
        "gated_key",
        "sigmoid",
        "--n",
        "32",
        "--batch",
        "1",
        "--heads",
        "2",
        "--head-dim",
        "16",
        "--no-train-shape",
        "--reps",
        "1",
        "--out",
        str(tmp_path),
    ]
    assert script.main(args) == 0
    saved = json.loads((tmp_path / "bench_kernels.json").read_text())
    by = {(r["part"], r["shape"], r["candidate"], r["mode"]): r for r in saved["results"]}
    for part in ("gated", "gated_key", "sigmoid"):
        for cand in ("attnzoo", "torch path"):
            for mode in ("fwd", "fwd+bwd"):
                assert by[(part, "N32-causal", cand, mode)]["device_ms"] > 0, (part, cand)
    assert by[("sigmoid", "N32-bidirectional", "attnzoo", "fwd+bwd")]["device_ms"] > 0
    assert not [k for k in by if k[0].startswith("gated") and k[1] != "N32-causal"]
    for part, name in (("gated", "fla chunk_simple_gla"), ("gated_key", "fla chunk_gla")):
        row = by[(part, "N32-causal", name, "fwd+bwd")]
        assert row["device_ms"] is None
        assert row["note"].startswith("skipped: fla-core is not importable"), row
    assert by[("sigmoid", "N32-causal", "attnzoo", "fwd")]["rate"] > 0  # the cost model's
    assert by[("gated", "N32-causal", "attnzoo", "fwd")]["rate"] is None  # none for gated
    rows = saved["paths"]
    assert sorted((r["part"], r["shape"], r["mode"]) for r in rows) == sorted(
        [(p, "N32-causal", mode) for p in ("gated", "gated_key") for mode in ("fwd", "fwd+bwd")]
        + [
            ("sigmoid", s, mode)
            for s in ("N32-causal", "N32-bidirectional")
            for mode in ("fwd", "fwd+bwd")
        ]
    )
    assert all(r["torch_path"] == "torch path" and r["won"] in ("triton", "torch") for r in rows)
    for r in rows:
        assert r["ratio"] == pytest.approx(r["torch_ms"] / r["triton_ms"])
        assert r["won"] == ("triton" if r["ratio"] > 1 else "torch")
    auto = {a["op"]: a for a in saved["auto"]}
    assert set(auto) == {"gated_linear_attention", "sigmoid_attention"}
    assert auto["gated_linear_attention"]["parts"] == ["gated", "gated_key"]
    assert auto["gated_linear_attention"]["measured"] == 4
    assert auto["sigmoid_attention"]["file"] == "kernels/attention/ops.py"
    assert all(a["auto_triton"] is False for a in auto.values())
    printed = capsys.readouterr().out
    assert "| gated_key | N32-causal | fla chunk_gla | fwd+bwd |" in printed
    assert "| gated_linear_attention | gated | N32-causal | fwd+bwd |" in printed
    md = (tmp_path / "bench_kernels.md").read_text()
    assert '## Which path won (impl="auto")' in md and "| kernels/gated/ops.py |" in md


def _fla_semantics(q, k, v, g, scale):
    """flash-linear-attention's documented gated recurrence on (B, T, H, ·) tensors: g (B, T, H)
    one log decay per head, or (B, T, H, K) one per key dimension -> o (B, T, H, V)."""
    b, t, h, kd = q.shape
    gk = g[..., None].expand(b, t, h, kd) if g.dim() == 3 else g
    state = q.new_zeros(b, h, kd, v.shape[-1])
    outs = []
    for i in range(t):
        state = gk[:, i, :, :, None].exp() * state + k[:, i, :, :, None] * v[:, i, :, None, :]
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, i], state))
    return torch.stack(outs, dim=1)


@pytest.mark.parametrize("part", ["gated", "gated_key"])
def test_fla_gated_is_called_in_its_layout_and_skipped_without_a_gpu(bench, monkeypatch, part):
    """Where fla-core is importable, chunk_simple_gla (gated) and chunk_gla (gated_key) get the
    (B, N, H, ·) tensors as they are, g (B, N, H) or (B, N, H, K), the op's scale 1/sqrt(K) and
    head_first=False where a release has that switch, and their output compared in the op's
    (B, H, N, V) layout agrees with the op: checked with stand-ins of fla's documented
    semantics. On CPU (or --smoke) its rows are skips that say a GPU is needed."""
    from attnzoo.kernels.bench import cases

    module, name = FLA_GATED[part]
    seen = {}

    def chunk(
        q, k, v, g, scale=None, initial_state=None, output_final_state=False, head_first=True
    ):
        seen.update(q=tuple(q.shape), g=tuple(g.shape), scale=scale, head_first=head_first)
        return _fla_semantics(q, k, v, g, scale), None

    fake = types.ModuleType(f"fla.ops.{module}")
    setattr(fake, name, chunk)
    monkeypatch.setitem(sys.modules, f"fla.ops.{module}", fake)
    s = bench.Shape("tiny", 2, 3, 37, 16, True, elt=4)
    cands = {c.name: c for c in cases.candidates(part, s, "torch", 3)}  # on a GPU
    fla = cands[f"fla {name}"]
    assert not fla.skip
    inputs = cases.make_inputs(part, s, "cpu", torch.float32)
    got = fla.run(*inputs)
    g_shape = (2, 37, 3, 16) if part == "gated_key" else (2, 37, 3)
    assert seen == {"q": (2, 37, 3, 16), "g": g_shape, "scale": 0.25, "head_first": False}
    want = cands["torch path"].run(*inputs)
    assert got.shape == want.shape == (2, 3, 37, 16)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for device, backends in (("cpu", bench.BACKENDS), ("cuda", ("math",))):  # CPU, --smoke
        (row,) = [
            c
            for c in cases.candidates(part, s, "torch", 3, backends, device)
            if c.name == f"fla {name}"
        ]
        assert row.skip == "flash-linear-attention's kernels need a GPU"


def test_gated_and_sigmoid_verdicts_and_path_rows(bench):
    """The gated and sigmoid verdicts read the ratios the right way round; the path rows
    compare the kernel with its PyTorch path (never fla-core, however fast), and AUTO_TRITON
    follows True for gated_linear_attention only where the kernel won for both decay forms."""
    results = [
        _r(bench, "gated", "train", "attnzoo", 1.0),
        _r(bench, "gated", "train", "torch path", 4.0),
        _r(bench, "gated", "train", "fla chunk_simple_gla", 0.2),  # faster, not what auto runs
        _r(bench, "gated_key", "train", "attnzoo", 2.0),
        _r(bench, "gated_key", "train", "torch path", 3.0),
        _r(bench, "gated_key", "train", "fla chunk_gla", 0.5),
        _r(bench, "sigmoid", "N4096-causal", "attnzoo", 2.0),
        _r(bench, "sigmoid", "N4096-causal", "torch path", 5.0),
        _r(bench, "sigmoid", "N4096-bidirectional", "attnzoo", 4.0),
        _r(bench, "sigmoid", "N4096-bidirectional", "torch path", 3.0),
    ]
    got = {v.target: v for v in bench.verdicts(results)}
    v = got["gated fwd+bwd vs its PyTorch path (log decay per head), train"]
    assert v.verdict == "met" and v.measured.startswith("4.00×")
    v = got["gated_key fwd+bwd vs its PyTorch path (log decay per key dimension), train"]
    assert v.verdict == "met" and v.measured.startswith("1.50×")
    v = got["sigmoid fwd+bwd vs its PyTorch path, N4096-causal"]
    assert v.verdict == "met" and v.measured.startswith("2.50×")
    v = got["sigmoid fwd+bwd vs its PyTorch path, N4096-bidirectional"]
    assert v.verdict == "MISSED" and v.measured.startswith("0.75×")

    rows = bench.path_rows(results)
    gated = {r["part"]: r for r in rows if r["op"] == "gated_linear_attention"}
    assert gated["gated"]["ratio"] == pytest.approx(4.0) and gated["gated"]["won"] == "triton"
    assert gated["gated_key"]["ratio"] == pytest.approx(1.5)
    assert (
        gated["gated_key"]["torch_path"] == "torch path" and gated["gated_key"]["torch_ms"] == 3.0
    )
    sig = {r["shape"]: r for r in rows if r["op"] == "sigmoid_attention"}
    assert sig["N4096-causal"]["ratio"] == pytest.approx(2.5)
    assert sig["N4096-bidirectional"]["won"] == "torch"
    auto = {a["op"]: a for a in bench.auto_rows(rows)}
    assert auto["gated_linear_attention"]["follows"] is True  # won for both decay forms
    assert (auto["sigmoid_attention"]["follows"], auto["sigmoid_attention"]["triton_won"]) == (
        False,
        1,
    )
    slower = [{**r, "triton_ms": 10.0} if r["part"] == "gated_key" else r for r in rows]
    slower = [{**r, "won": "torch"} if r["part"] == "gated_key" else r for r in slower]
    assert bench.auto_rows(slower)[0]["follows"] is False  # one form lost: keep PyTorch
