"""How impl="auto" chooses on CUDA, checked on CPU: the measured table (buckets, fallbacks,
malformed tables), the table writer, benchmark mode with an injected timer and its cache file,
and the choice under torch.compile.

A CUDA tensor is stood in for by an object with the metadata the choice reads; the GPU itself
(name, capability, versions) by `Tuner.device_of`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from attnzoo import kernels

dispatch, ops = kernels.dispatch, kernels.ops

H100 = dispatch.Device("NVIDIA H100 80GB HBM3", "9.0", "2.11.0+cu130", "3.6.0")
H200 = dispatch.Device("NVIDIA H200", "9.0", "2.11.0+cu130", "3.6.0")
A100 = dispatch.Device("NVIDIA A100-SXM4-80GB", "8.0", "2.11.0+cu130", "3.6.0")


def entry(**fields) -> dict:
    base = {
        "op": "scaled_dot_attention",
        "dtype": "bfloat16",
        "causal": True,
        "dim": 64,
        "grad": True,
        "n_min": 1,
        "n_max": 512,
        "impl": "torch",
        "measured_n": 256,
        "triton_ms": 1.2,
        "torch_ms": 0.3,
    }
    return {**base, **fields}


def write_table(folder: Path, name: str, entries: list[dict], **top) -> Path:
    """A table file named for a capability ("9.0") or a card ("NVIDIA-H200")."""
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"schema": 1, "capability": name, "entries": entries, **top}))
    return path


class FakeTimer:
    """Milliseconds per candidate: the n-th call of `timer` returns times[n % 2] (triton, torch)."""

    def __init__(self, triton_ms: float, torch_ms: float) -> None:
        self.times, self.calls = (triton_ms, torch_ms), 0

    def __call__(self, fn) -> float:
        fn()
        self.calls += 1
        return self.times[(self.calls - 1) % 2]


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    """An H100 for device 0, an A100 for device 1 and an H200 for device 2, tables read from
    tmp_path/tables, the tuning cache in tmp_path/cache, and fresh memoised choices."""
    tables = tmp_path / "tables"
    tables.mkdir()
    tuner = dispatch.Tuner(device_of=lambda index: {1: A100, 2: H200}.get(index, H100))
    monkeypatch.setattr(dispatch, "TABLE_DIR", tables)
    monkeypatch.setattr(dispatch, "TUNER", tuner)
    monkeypatch.setenv("ATTNZOO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(kernels, "benchmark_mode", False)
    dispatch.clear()
    yield tables
    dispatch.clear()


class CudaLike:
    """What the implementation choice reads of a tensor, for a CUDA tensor on a CPU-only machine."""

    is_cuda = True

    def __init__(self, dtype=torch.bfloat16, index: int = 0, requires_grad: bool = True) -> None:
        self.dtype, self.requires_grad = dtype, requires_grad
        self.device = torch.device("cuda", index)


def use_triton(impl="auto", t=None, op="scaled_dot_attention", causal=True, dim=64, n=256):
    t = CudaLike() if t is None else t
    return ops._use_triton(impl, op, "q", (t,), causal, dim, n, lambda: (1, 1, n, dim, dim))


# ------------------------------------------------------------------------------------ the table


def test_sequence_lengths_bucket_to_the_next_power_of_two():
    assert [dispatch.n_bucket(n) for n in (0, 1, 2, 3, 256, 257, 1000, 4096)] == [
        1,
        1,
        2,
        4,
        256,
        512,
        1024,
        4096,
    ]


def test_auto_on_cuda_follows_the_table_per_key_and_bucket(gpu):
    write_table(
        gpu,
        "9.0",
        [
            entry(n_min=1, n_max=512, impl="torch"),
            entry(n_min=1024, n_max=2048, impl="triton", measured_n=1024),
            entry(n_min=1024, n_max=2048, impl="torch", causal=False, measured_n=1024),
            entry(op="pool_mix", dim=512, causal=False, n_min=1, n_max=16384, impl="triton"),
        ],
    )
    assert not use_triton(n=256)  # measured slower at the training shape
    assert not use_triton(n=300)  # bucket 512: still the n = 256 entry
    assert use_triton(n=513)  # bucket 1024
    assert use_triton(n=2048)
    assert not use_triton(n=2049)  # bucket 4096: no entry, so PyTorch
    assert not use_triton(n=1024, causal=False)  # its own verdict
    assert not use_triton(n=1024, dim=128)  # another head dim: not measured
    assert not use_triton(n=1024, t=CudaLike(torch.float16))  # another dtype: not measured
    assert not use_triton(n=1024, t=CudaLike(requires_grad=False))  # forward only: not measured
    with torch.no_grad():  # autograd records nothing: the forward-only verdict (none here)
        assert not use_triton(n=1024)
    assert use_triton(op="pool_mix", causal=False, dim=512, n=5000)
    assert not use_triton(op="metric_attention", n=1024)
    assert not use_triton(n=1024, t=CudaLike(index=1))  # an A100: no table for 8.0
    assert not use_triton(n=1024, t=CudaLike(torch.float64))  # no fp64 kernels
    assert not ops._use_triton(
        "auto", "scaled_dot_attention", "q", (torch.zeros(1),), True, 64, 1024, tuple
    )
    assert use_triton("triton", n=256) and not use_triton("torch", n=1024)  # forcing still works


def test_no_table_for_the_gpu_means_pytorch_everywhere(gpu):
    for op in dispatch.OPS:
        for causal in (False, True):
            assert not use_triton(op=op, causal=causal, n=4096)


def test_a_cards_own_table_comes_before_its_capabilitys(gpu):
    """An H100 and an H200 are both sm 9.0 but not the same card: each reads the table named for
    it, and a card without one reads its capability's."""
    write_table(gpu, "9.0", [entry(impl="torch"), entry(op="pool_mix", dim=512, impl="triton")])
    assert dispatch.table_file(H100.name) == "NVIDIA-H100-80GB-HBM3.json"
    h100 = dispatch.TABLE_DIR / dispatch.table_file(H100.name)
    h100.write_text(
        json.dumps(
            {
                "schema": 1,
                "capability": "9.0",
                "device": H100.name,
                "entries": [entry(impl="triton")],
            }
        )
    )
    assert use_triton(n=256)  # the H100's own table
    assert not use_triton(op="pool_mix", dim=512, n=256)  # not in it: PyTorch, no mixing
    assert not use_triton(n=256, t=CudaLike(index=2))  # the H200: the capability's table
    assert use_triton(op="pool_mix", dim=512, n=256, t=CudaLike(index=2))
    assert not use_triton(n=256, t=CudaLike(index=1))  # the A100 (8.0): no table at all
    assert dispatch.table_paths(H200.name, "9.0") == (gpu / "NVIDIA-H200.json", gpu / "9.0.json")


def test_the_committed_tables_are_well_formed():
    """Each is named for its card (what gpu_check writes) or for its capability."""
    for path in sorted(dispatch.TABLE_DIR.glob("*.json")):
        entries = dispatch.load_table(path)
        table = json.loads(path.read_text())
        names = {dispatch.table_file(table["device"]), f"{table['capability']}.json"}
        assert path.name in names, path
        assert entries, path


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "cannot be read"),
        (json.dumps({"schema": 2, "entries": []}), 'needs an object with "schema": 1'),
        (json.dumps({"schema": 1, "entries": {}}), '"entries" must be a list'),
        (json.dumps({"schema": 1, "entries": [entry(op="softmax")]}), "entry 0: op 'softmax'"),
        (json.dumps({"schema": 1, "entries": [entry(impl="cuda")]}), "entry 0: impl 'cuda'"),
        (json.dumps({"schema": 1, "entries": [entry(dim="64")]}), "field 'dim' must be int"),
        (json.dumps({"schema": 1, "entries": [entry(causal=1)]}), "field 'causal' must be bool"),
        (json.dumps({"schema": 1, "entries": [{"op": "pool_mix"}]}), "missing field 'dtype'"),
        (json.dumps({"schema": 1, "entries": [entry(n_min=600)]}), "n_min <= n_max"),
        (json.dumps({"schema": 1, "entries": [entry(torch_ms=0)]}), "torch_ms must be a positive"),
        (
            json.dumps({"schema": 1, "entries": [entry(), entry(n_min=512, n_max=1024)]}),
            "entry 1 .* overlaps 1..512",
        ),
    ],
)
def test_a_malformed_table_gets_an_error_naming_the_file(gpu, content, message):
    path = gpu / "9.0.json"
    path.write_text(content)
    with pytest.raises(dispatch.DispatchTableError, match=message) as err:
        use_triton(n=256)
    assert str(path) in str(err.value)


def test_make_table_turns_measurements_into_bucket_ranges():
    rows = [
        {
            "op": "scaled_dot_attention",
            "dtype": "bfloat16",
            "causal": True,
            "dim": 64,
            "grad": True,
            "n": n,
            "triton_ms": tri,
            "torch_ms": tor,
            "torch_path": "sdpa flash",
        }
        for n, tri, tor in ((256, 1.3, 0.25), (1024, 1.0, 1.1), (4096, 2.0, 1.0), (8192, 7.0, 3.4))
    ]
    rows.append({**rows[0], "n": 300, "triton_ms": None})  # a failed measurement: no entry
    table = dispatch.make_table(rows, {"capability": "9.0", "device": "H100"})
    got = [(e["n_min"], e["n_max"], e["impl"], e["measured_n"]) for e in table["entries"]]
    assert got == [
        (1, 512, "torch", 256),
        (1024, 2048, "triton", 1024),  # 2048 lies between 1024 and 4096: the lower one's
        (4096, 4096, "torch", 4096),
        (8192, 16384, "torch", 8192),  # one bucket beyond the longest measured
    ]
    assert table["entries"][1]["ratio"] == 1.1
    assert table["capability"] == "9.0" and table["schema"] == 1


def test_a_written_table_reads_back_and_decides(gpu):
    rows = [
        {
            "op": "metric_attention",
            "dtype": "bfloat16",
            "causal": False,
            "dim": 64,
            "grad": False,
            "n": 4096,
            "triton_ms": 0.5,
            "torch_ms": 0.8,
            "torch_path": "sdpa cudnn",
        }
    ]
    table = dispatch.make_table(rows, {"capability": "9.0"})
    (gpu / "9.0.json").write_text(json.dumps(table))
    t = CudaLike(requires_grad=False)
    assert use_triton(op="metric_attention", causal=False, n=3000, t=t)
    assert not use_triton(op="metric_attention", causal=False, n=3000)  # with grad: no entry


# ------------------------------------------------------------------------------------ benchmark mode


def key(n: int = 256, grad: bool = True) -> dispatch.Key:
    return dispatch.Key("scaled_dot_attention", "bfloat16", True, 64, n, grad)


def test_benchmark_mode_times_once_keeps_the_faster_and_caches_it_on_disk(gpu, caplog, tmp_path):
    timer = FakeTimer(triton_ms=0.4, torch_ms=0.6)
    tuner = dispatch.Tuner(timer=timer, device_of=lambda index: H100)
    made = []
    candidates = lambda: made.append(1) or (lambda: None, lambda: None)
    with caplog.at_level(logging.INFO, logger="attnzoo.kernels.dispatch"):
        assert tuner.decide(key(), 0, candidates) == "triton"
        assert tuner.decide(key(), 0, candidates) == "triton"
    assert timer.calls == 2 and len(made) == 1  # timed once: both candidates, then remembered
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and "-> triton (triton 0.400 ms, torch 0.600 ms)" in logged[0]
    assert "NVIDIA H100" in logged[0] and "n<=256" in logged[0]

    path = dispatch.tune_cache_path(H100)
    assert path.parent == tmp_path / "cache" / "tune"
    assert path.name == "NVIDIA-H100-80GB-HBM3-sm90-torch2.11.0+cu130-triton3.6.0.json"
    saved = json.loads(path.read_text())
    assert saved["device"]["name"] == H100.name
    assert saved["decisions"] == [
        {
            "key": {
                "op": "scaled_dot_attention",
                "dtype": "bfloat16",
                "causal": True,
                "dim": 64,
                "n": 256,
                "grad": True,
            },
            "impl": "triton",
            "triton_ms": 0.4,
            "torch_ms": 0.6,
        }
    ]

    # a new process on the same card and software reads the decision instead of timing
    again = dispatch.Tuner(timer=FakeTimer(9.0, 0.1), device_of=lambda index: H100)
    assert again.decide(key(), 0, candidates) == "triton" and again.timer.calls == 0
    # other torch or triton versions, or another GPU, time again
    newer = dispatch.Device(H100.name, "9.0", "2.13.0+cu130", "3.6.0")
    other = dispatch.Tuner(timer=FakeTimer(9.0, 0.1), device_of=lambda index: newer)
    assert other.decide(key(), 0, candidates) == "torch" and other.timer.calls == 2
    assert dispatch.tune_cache_path(newer) != path
    # a new key on the first tuner: timed, and added to the same file
    tuner.timer = FakeTimer(triton_ms=0.6, torch_ms=0.4)
    assert tuner.decide(key(n=1024, grad=False), 0, candidates) == "torch"
    assert len(json.loads(path.read_text())["decisions"]) == 2


def test_an_unreadable_tuning_cache_is_ignored_with_a_warning(gpu, caplog):
    path = dispatch.tune_cache_path(H100)
    path.parent.mkdir(parents=True)
    path.write_text("{broken")
    tuner = dispatch.Tuner(timer=FakeTimer(0.1, 0.2), device_of=lambda index: H100)
    with caplog.at_level(logging.WARNING, logger="attnzoo.kernels.dispatch"):
        assert tuner.decide(key(), 0, lambda: (lambda: None, lambda: None)) == "triton"
    assert "ignoring the unreadable tuning cache" in caplog.text
    assert json.loads(path.read_text())["decisions"][0]["impl"] == "triton"  # rewritten


def test_tune_and_benchmark_mode_win_over_the_table(gpu, monkeypatch):
    write_table(gpu, "9.0", [entry(impl="torch")])
    dispatch.TUNER.timer = FakeTimer(triton_ms=0.1, torch_ms=0.3)
    shapes = []
    monkeypatch.setitem(
        dispatch.CANDIDATES,
        "scaled_dot_attention",
        lambda dtype, causal, shape, window, device, grad: (
            shapes.append((shape, grad)) or (lambda: None, lambda: None)
        ),
    )
    assert not use_triton("auto", n=256)  # the table
    assert use_triton("tune", n=256)  # timed: the kernel was faster here
    assert shapes == [((1, 1, 256, 64, 64), True)]
    monkeypatch.setattr(kernels, "benchmark_mode", True)
    dispatch.clear()
    assert use_triton("auto", n=256)  # the decision, remembered: not timed again
    assert len(shapes) == 1 and dispatch.TUNER.timer.calls == 2
    assert not use_triton("torch", n=256)  # an explicit impl is never overridden


def test_windowed_calls_take_pytorch_unless_a_windowed_entry_says_otherwise(gpu, monkeypatch):
    """A sliding window has a key of its own: an entry measured without one does not choose the
    kernel for windowed calls, and benchmark mode does not time them (no windowed candidates)."""
    write_table(gpu, "9.0", [entry(impl="triton")])
    timed = []
    monkeypatch.setitem(dispatch.CANDIDATES, "scaled_dot_attention", lambda *a: timed.append(a))
    windowed = lambda impl: ops._use_triton(
        impl,
        "scaled_dot_attention",
        "q",
        (CudaLike(),),
        True,
        64,
        256,
        lambda: (1, 1, 256, 64, 64),
        windowed=True,
    )
    assert use_triton("auto")
    assert not windowed("auto") and not windowed("tune") and not timed
    write_table(gpu, "9.0", [entry(impl="torch"), entry(impl="triton", windowed=True)])
    dispatch.clear()
    assert windowed("auto") and not use_triton("auto")
    assert "windowed" in str(
        dispatch.Key("scaled_dot_attention", "bfloat16", True, 64, 256, True, windowed=True)
    )


def test_a_windowed_field_that_is_not_a_bool_is_refused(gpu):
    path = write_table(gpu, "9.0", [entry(windowed="yes")])
    with pytest.raises(dispatch.DispatchTableError, match="windowed"):
        dispatch.load_table(path)


@pytest.mark.parametrize("grad", [True, False], ids=["fwd+bwd", "fwd"])
@pytest.mark.parametrize("op", dispatch.OPS)
def test_what_benchmark_mode_times_computes_the_same_on_both_paths(op, grad):
    """The two timed calls (Triton kernel in the interpreter, and the PyTorch path impl="auto"
    takes otherwise) give the same output, or the same gradients of every input."""
    shape = {
        "scaled_dot_attention": (2, 2, 16, 16, 16),
        "quadratic_attention": (2, 2, 16, 32, 16),
        "metric_attention": (2, 2, 16, 16),
        "sigmoid_attention": (2, 2, 16, 24, 16),
        "pool_mix": (2, 16, 24),
        "linear_attention": (2, 2, 16, 16, 16),
        "gated_linear_attention": (2, 2, 21, 16, 16),
    }[op]
    make = dispatch.CANDIDATES[op]
    ours, theirs = make(torch.float32, True, shape, 3, torch.device("cpu"), grad)
    got, want = ours(), theirs()
    got, want = (got, want) if grad else ((got,), (want,))
    leaves = {
        "scaled_dot_attention": 3,
        "quadratic_attention": 3,
        "metric_attention": 2,
        "sigmoid_attention": 3,
        "linear_attention": 3,
        "gated_linear_attention": 3,
    }
    assert len(got) == len(want) == (leaves.get(op, 1) if grad else 1)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_impl_tune_on_cpu_is_auto():
    q = torch.randn(1, 2, 9, 8)
    torch.testing.assert_close(
        kernels.scaled_dot_attention(q, q, q, True, impl="tune"),
        kernels.scaled_dot_attention(q, q, q, True, impl="auto"),
    )
    with pytest.raises(ValueError, match="'tuned' is not one of"):
        kernels.scaled_dot_attention(q, q, q, impl="tuned")


# ------------------------------------------------------------------------------------ compile


def test_the_choice_is_a_constant_for_torch_compile(gpu):
    """torch.compile calls `choose` while tracing and bakes its answer into the graph, with a
    symbolic sequence length bucketed to an int first (no graph break under fullgraph)."""
    marked = lambda: None
    torch.compiler.assume_constant_result(marked)
    assert vars(marked) == {"_dynamo_marked_constant": True}  # what dispatch sets by hand
    assert dispatch.choose._dynamo_marked_constant is True

    write_table(gpu, "9.0", [entry(impl="triton", n_min=1, n_max=64)])

    def f(x: torch.Tensor) -> torch.Tensor:
        n = dispatch.n_bucket(x.shape[1])
        if dispatch.choose("scaled_dot_attention", torch.bfloat16, True, 64, n, True, 0, False):
            return x * 2
        return x + 1

    static = torch.compile(f, backend="eager", fullgraph=True, dynamic=False)
    assert static(torch.full((2, 40), 3.0))[0, 0] == 6
    compiled = torch.compile(f, backend="eager", fullgraph=True, dynamic=True)
    assert compiled(torch.full((2, 40), 3.0))[0, 0] == 6  # bucket 64: the table says triton
    assert compiled(torch.full((2, 50), 3.0))[0, 0] == 6  # same bucket
    assert compiled(torch.full((2, 100), 3.0))[0, 0] == 4  # bucket 128: no entry, PyTorch
    torch._dynamo.reset()


def test_the_gpu_docs_and_results_agree_with_the_committed_tables():
    """Each committed table has the gpu_check report of its card in results/gpu/ and its GPU in
    docs/gpu.md; with none, the docs say "not yet measured" and results/gpu/ holds no report."""
    root = Path(__file__).resolve().parents[1]
    docs = (root / "docs" / "gpu.md").read_text()
    tables = sorted(dispatch.TABLE_DIR.glob("*.json"))
    reports = [json.loads(p.read_text()) for p in (root / "results" / "gpu").glob("*.json")]
    reports = [r for r in reports if not r.get("dry_run")]
    measured = {(r.get("dispatch_table") or {}).get("device") for r in reports}
    for path in tables:
        table = json.loads(path.read_text())
        assert table["device"] in measured, f"{path.name} has no gpu_check report in results/gpu/"
        assert f"sm {table['capability']}" in docs and table["device"] in docs, path.name
    if not tables:
        assert "not yet measured" in docs and not reports


def test_benchmark_mode_is_read_without_a_graph_break(monkeypatch):
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if dispatch.benchmark_mode() else x

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    monkeypatch.setattr(kernels, "benchmark_mode", True)
    assert compiled(torch.ones(3))[0] == 2
    torch._dynamo.reset()


def test_a_table_from_the_benchmark_chooses_for_windowed_and_linear_calls(gpu):
    """The benchmark's local rows (windowed) and linear rows become entries of their own keys:
    a windowed call follows the windowed entry and a plain call of the same shape the plain one,
    and linear_attention follows its own; without an entry each takes PyTorch."""
    row = {"dtype": "bfloat16", "causal": True, "dim": 64, "grad": True, "n": 256}
    rows = [
        {**row, "op": "scaled_dot_attention", "triton_ms": 2.0, "torch_ms": 1.0},
        {**row, "op": "scaled_dot_attention", "triton_ms": 1.0, "torch_ms": 2.0, "windowed": True},
        {**row, "op": "linear_attention", "triton_ms": 1.0, "torch_ms": 3.0},
    ]
    table = dispatch.make_table(rows, {"capability": "9.0"})
    write_table(gpu, "9.0", table["entries"])
    assert len(dispatch.load_table(gpu / "9.0.json")) == 3  # no overlap between the two keys
    t = CudaLike()
    args = ("q", (t,), True, 64, 256, lambda: (1, 1, 256, 64, 64))
    assert not ops._use_triton("auto", "scaled_dot_attention", *args)
    assert ops._use_triton("auto", "scaled_dot_attention", *args, windowed=True)
    assert ops._use_triton("auto", "linear_attention", *args)
    assert not ops._use_triton("auto", "linear_attention", "q", (t,), False, 64, 256, tuple)
