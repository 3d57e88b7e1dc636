"""gated_linear_attention, every impl, against the float64 recurrence.

The truth is the recurrence S_t = diag(exp(g_t)) S_{t−1} + k_t v_tᵀ, o_t = scale · S_tᵀ q_t run
one token at a time in float64 (`naive.recurrent`), and its autograd for every input gradient
(log_decay's and initial_state's included). The loop itself is held to a closed form written
here (the decay between every pair of tokens from global cumulative sums, the whole N × N × K
tensor), and log_decay = 0 to causal un-normalised linear attention, tril(q kᵀ) v, also written
here. The Triton kernels run in Triton's interpreter (tests/conftest.py), which has no bf16
arithmetic: the Triton path is checked in fp32 and fp16 there, the PyTorch path in bf16 too.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import attnzoo.kernels as ops
import pytest
import torch
from attnzoo.kernels import _checks
from attnzoo.kernels.gated import naive

pytest.importorskip("triton")

from attnzoo.kernels.gated import launch  # noqa: E402

TOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "POISON_OUTPUTS", True)


def inputs(b, h, n, kd, dv, per_key, decay="random", dtype=torch.float32, state=False):
    """q, k, v, log_decay, initial_state. `decay`: "random" (log α in about [−1.5, 0), a
    different one per token), "strong" (log α = −5 everywhere) or "none" (log α = 0)."""
    q = torch.randn(b, h, n, kd).to(dtype)
    k = torch.randn(b, h, n, kd).to(dtype)
    v = torch.randn(b, h, n, dv).to(dtype)
    shape = (b, h, n, kd) if per_key else (b, h, n)
    if decay == "random":
        log_decay = -torch.nn.functional.softplus(torch.randn(shape) - 1)
    else:
        log_decay = torch.full(shape, -5.0 if decay == "strong" else 0.0)
    s0 = torch.randn(b, h, kd, dv) if state else None
    return q, k, v, log_decay, s0


def assert_close(got, want, tol, scale) -> None:
    """‖got − want‖ ≤ tol (‖want‖ + ‖scale‖ / 10)."""
    assert torch.isfinite(got).all(), "non-finite (unwritten or overflowed) elements"
    err = (got.double() - want.double()).norm().item()
    bound = tol * (want.double().norm().item() + scale.double().norm().item() / 10)
    assert err <= bound, f"error {err:.3g} above {bound:.3g} (‖want‖ = {want.norm():.3g})"


def _leaves(tensors):
    return [None if t is None else t.detach().clone().requires_grad_(True) for t in tensors]


def _grads(outputs, leaves, upstream):
    used = [t for t in leaves if t is not None]
    got = iter(torch.autograd.grad(outputs, used, upstream, materialize_grads=True))
    return [None if t is None else next(got) for t in leaves]


def truth(q, k, v, log_decay, s0, g_out, g_state):
    """Output, final state and every input gradient of the float64 recurrence."""
    leaves = _leaves([t.double() if t is not None else None for t in (q, k, v, log_decay, s0)])
    scale = 1 / math.sqrt(q.shape[-1])
    out, state = naive.recurrent(*leaves[:4], scale, leaves[4])
    grads = _grads((out, state), leaves, (g_out.double(), g_state.double()))
    return out.detach(), state.detach(), grads


def run(impl, q, k, v, log_decay, s0, g_out, g_state, **kwargs):
    leaves = _leaves((q, k, v, log_decay, s0))
    out, state = ops.gated_linear_attention(
        *leaves[:4], initial_state=leaves[4], output_final_state=True, impl=impl, **kwargs
    )
    grads = _grads((out, state), leaves, (g_out, g_state))
    return out.detach(), state.detach(), grads


def check(impl, q, k, v, log_decay, s0=None, dtype=torch.float32, decay_tol=None, **kwargs):
    """Output, final state and every gradient against the truth, relative error tol (TOL[dtype]);
    `decay_tol` loosens it for the log decay's gradient alone (see the strong-decay test)."""
    b, h, n, kd = q.shape
    g_out = torch.randn(b, h, n, v.shape[-1]).to(dtype)
    g_state = torch.randn(b, h, kd, v.shape[-1])
    out, state, grads = run(impl, q, k, v, log_decay, s0, g_out, g_state, **kwargs)
    want, want_state, want_grads = truth(q, k, v, log_decay, s0, g_out, g_state)
    assert out.dtype == dtype and state.dtype == (
        torch.float64 if dtype == torch.float64 else torch.float32
    )
    tol = TOL[dtype]
    assert_close(out, want, tol, v)
    assert_close(state, want_state, tol, want_state)
    for name, got, ref, x in zip(
        ("q", "k", "v", "log_decay", "initial_state"),
        grads,
        want_grads,
        (q, k, v, log_decay, s0),
        strict=True,
    ):
        if x is None:
            continue
        assert got.shape == x.shape and got.dtype == x.dtype, name
        assert_close(got, ref, decay_tol or tol if name == "log_decay" else tol, ref)
    return out, grads


# ---------------------------------------------------------------------------------------------
# The truth itself
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("per_key", [False, True])
def test_the_recurrence_is_the_closed_form(per_key):
    """o_t = scale Σ_{s ≤ t} Σ_k q_tk k_sk exp(Σ_{s < u ≤ t} g_uk) v_s
    + scale Σ_k q_tk exp(Σ_{u ≤ t} g_uk) (S_{−1} ...)_k, from global cumulative sums."""
    q, k, v, log_decay, s0 = (t.double() for t in inputs(2, 2, 23, 6, 5, per_key, state=True))
    g = log_decay if per_key else log_decay[..., None].expand(-1, -1, -1, 6)
    cum = g.cumsum(dim=2)  # (B, H, N, K): Σ_{u ≤ t} g_u
    rel = cum[:, :, :, None, :] - cum[:, :, None, :, :]  # [t, s]: Σ_{s < u ≤ t} g_u
    causal = torch.ones(23, 23, dtype=torch.bool).tril()[..., None]
    decay = torch.where(causal, rel, float("-inf")).exp()
    scores = torch.einsum("bhtk,bhsk,bhtsk->bhts", q, k, decay)
    scale = 0.3
    want = scale * (scores @ v + torch.einsum("bhtk,bhkv->bhtv", q * cum.exp(), s0))
    want_state = torch.einsum("bhsk,bhsv->bhkv", k * (cum[:, :, -1:] - cum).exp(), v)
    want_state = want_state + cum[:, :, -1, :, None].exp() * s0
    out, state = naive.recurrent(q, k, v, log_decay, scale, s0)
    assert_close(out, want, 1e-12, v)
    assert_close(state, want_state, 1e-12, want_state)


# ---------------------------------------------------------------------------------------------
# Every impl against the recurrence
# ---------------------------------------------------------------------------------------------

IMPLS = ["torch", "triton"]
# the default tier reads the general case (a decay per key); the per-token one is in the slow tier
PER_TOKEN_SLOW = pytest.param(False, marks=pytest.mark.slow)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("per_key", [False, True], ids=["per-token", "per-key"])
@pytest.mark.parametrize("n", [1, 37, pytest.param(100, marks=pytest.mark.slow)])
@pytest.mark.sample(3)
def test_fp32_matches_the_recurrence(impl, per_key, n):
    """One token, an odd length inside a chunk, and several chunks (of 32 and of 16); every
    input gradient, log_decay's and the initial state's included, and the final state's."""
    q, k, v, log_decay, s0 = inputs(2, 2, n, 16, 24, per_key, state=True)
    check(impl, q, k, v, log_decay, s0)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("per_key", [PER_TOKEN_SLOW, True], ids=["per-token", "per-key"])
@pytest.mark.slow  # 200 tokens in the interpreter (~15 s)
def test_strong_decay_over_a_long_sequence_stays_exact(impl, per_key):
    """log α = −5 over 200 tokens: the cumulative log decay reaches −1000 (exp of it, or of its
    negative, is far outside fp32); every factor the chunks form is relative to a chunk start.

    The kernels' log-decay gradient is a reverse cumulative sum over the whole sequence of
    q ⊙ dq − k ⊙ dk, terms of order one that cancel down to the decayed pairs (order e^−5 here):
    fp32 rounding of that sum leaves ~1e-4 of the gradient's norm (the PyTorch path, autograd
    through the chunks, stays at 1e-5)."""
    q, k, v, log_decay, _ = inputs(1, 2, 200, 16, 16, per_key, decay="strong")
    check(impl, q, k, v, log_decay, decay_tol=3e-4 if impl == "triton" else None)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("per_key", [PER_TOKEN_SLOW, True], ids=["per-token", "per-key"])
def test_no_decay_is_causal_linear_attention(impl, per_key):
    """log α = 0: o = scale · tril(q kᵀ) v, causal linear attention without a normaliser."""
    q, k, v, log_decay, _ = inputs(1, 2, 77, 16, 8, per_key, decay="none")
    out = ops.gated_linear_attention(q, k, v, log_decay, impl=impl)
    want = (q.double() @ k.double().mT).tril() @ v.double() / 4
    assert_close(out, want, 1e-5, v)
    check(impl, q, k, v, log_decay)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_matches_the_recurrence(impl, dtype):
    if impl == "triton" and dtype == torch.bfloat16:
        pytest.skip("the interpreter has no bf16 arithmetic")
    q, k, v, log_decay, s0 = inputs(2, 2, 40, 32, 16, True, dtype=dtype, state=True)
    check(impl, q, k, v, log_decay, s0, dtype=dtype)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("used", ["out", pytest.param("final_state", marks=pytest.mark.slow)])
def test_gradients_when_one_output_is_unused(impl, used):
    """Autograd hands the backward nothing for an unused output (the final state, usually)."""
    q, k, v, log_decay, s0 = inputs(1, 2, 40, 16, 8, True, state=True)
    results = []
    for run_impl in (impl, "torch"):
        leaves = _leaves((q, k, v, log_decay, s0))
        out, state = ops.gated_linear_attention(
            *leaves[:4], initial_state=leaves[4], output_final_state=True, impl=run_impl
        )
        loss = (out if used == "out" else state).square().sum()
        results.append(torch.autograd.grad(loss, leaves, materialize_grads=True))
    for got, want in zip(*results, strict=True):
        assert_close(got, want, 1e-5, want)


@pytest.mark.parametrize(
    "view",
    [
        lambda t: t.transpose(1, 2).contiguous().transpose(1, 2),  # (B, N, H, ·) storage
        lambda t: t[..., ::2, 1:-1],  # strided tokens, offset and narrowed features
        lambda t: t[:1].expand(2, *t.shape[1:]),  # batch stride 0
    ],
    ids=["bnhk-storage", "sliced", "expanded"],
)
@pytest.mark.slow  # the interpreter over strided inputs (~10 s each)
def test_strided_inputs_match_the_recurrence(view):
    q, k, v, log_decay, _ = inputs(2, 2, 74, 18, 18, True)
    q, k, v, log_decay = (view(t) for t in (q, k, v, log_decay))
    assert not q.is_contiguous()
    check("triton", q, k, v, log_decay, torch.randn(*q.shape[:2], q.shape[-1], v.shape[-1]))


@pytest.mark.parametrize(
    ("kd", "dv"), [(5, 3), (64, 24), pytest.param(128, 128, marks=pytest.mark.slow)]
)
def test_widths_that_are_and_are_not_powers_of_two(kd, dv):
    q, k, v, log_decay, s0 = inputs(1, 1, 20, kd, dv, True, state=True)
    check("triton", q, k, v, log_decay, s0)


@pytest.mark.parametrize(
    "dtype", [torch.float32, pytest.param(torch.float16, marks=pytest.mark.slow)]
)
@pytest.mark.slow  # the tiled launch in the interpreter (~20 s)
def test_value_tiles_give_the_whole_state(monkeypatch, dtype):
    """V = 40 in tiles of 16 columns: three V tiles, the last one ragged. o, the final state, dv
    and d h0 come per tile; dq, dk and the log decay's gradient are sums of the tiles' parts."""
    monkeypatch.setattr(launch, "value_tile", lambda dtype, bk, bv: 16)
    grids = []
    grid = launch._grid
    monkeypatch.setattr(launch, "_grid", lambda *a: grids.append(grid(*a)) or grids[-1])
    q, k, v, log_decay, s0 = inputs(2, 2, 37, 24, 40, True, dtype=dtype, state=True)
    check("triton", q, k, v, log_decay, s0, dtype=dtype)
    assert grids == [(4, 3)] * 2  # the forward's and the backward's


@pytest.mark.parametrize(
    "dtype", [torch.float32, pytest.param(torch.float16, marks=pytest.mark.slow)]
)
@pytest.mark.slow  # the tiled launch in the interpreter (~20 s)
def test_key_tiles_give_the_whole_sums_over_k(monkeypatch, dtype):
    """K = 40 (padded to 64) read 16 columns at a time: four key tiles, the third ragged and the
    fourth wholly past K. The intra-chunk block and the state's products with the chunk's
    queries and keys are sums over the tiles; the state and dS go through memory between."""
    monkeypatch.setattr(launch, "key_tile", lambda bk: 16)
    q, k, v, log_decay, s0 = inputs(2, 2, 37, 40, 24, True, dtype=dtype, state=True)
    check("triton", q, k, v, log_decay, s0, dtype=dtype)


@pytest.mark.parametrize("chunk", [1, 7, 64])
@pytest.mark.parametrize("per_key", [False, True], ids=["per-token", "per-key"])
def test_the_chunk_changes_nothing_but_rounding(chunk, per_key):
    q, k, v, log_decay, s0 = inputs(2, 2, 50, 8, 8, per_key, state=True)
    one, s_one = naive.chunked(q, k, v, log_decay, 0.5, s0, chunk=128)
    got, s_got = naive.chunked(q, k, v, log_decay, 0.5, s0, chunk=chunk)
    assert_close(got, one, 1e-5, v)
    assert_close(s_got, s_one, 1e-5, s_one)


def test_a_state_carries_a_sequence_across_calls():
    """Two calls chained through the final and initial states give the one call on the whole."""
    q, k, v, log_decay, s0 = inputs(1, 2, 45, 8, 8, True, state=True)
    whole, s_whole = ops.gated_linear_attention(
        q, k, v, log_decay, initial_state=s0, output_final_state=True
    )
    first, s_mid = ops.gated_linear_attention(
        q[:, :, :20],
        k[:, :, :20],
        v[:, :, :20],
        log_decay[:, :, :20],
        initial_state=s0,
        output_final_state=True,
    )
    second, s_end = ops.gated_linear_attention(
        q[:, :, 20:],
        k[:, :, 20:],
        v[:, :, 20:],
        log_decay[:, :, 20:],
        initial_state=s_mid,
        output_final_state=True,
    )
    assert_close(torch.cat([first, second], dim=2), whole, 1e-5, v)
    assert_close(s_end, s_whole, 1e-5, s_whole)


def test_auto_takes_pytorch_on_cpu():
    import attnzoo.kernels

    q, k, v, log_decay, _ = inputs(1, 2, 30, 16, 8, False)
    want, _ = naive.chunked(q, k, v, log_decay, 0.25)
    assert torch.equal(attnzoo.kernels.gated_linear_attention(q, k, v, log_decay), want)


def test_fp64_stays_fp64_and_is_never_cast_by_autocast():
    q, k, v, log_decay, s0 = (t.double() for t in inputs(1, 2, 9, 4, 4, True, state=True))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, state = ops.gated_linear_attention(
            q, k, v, log_decay, initial_state=s0, output_final_state=True, impl="torch"
        )
    assert out.dtype == state.dtype == torch.float64


@pytest.mark.parametrize("impl", ["torch", "auto"])
def test_autocast_runs_q_k_v_in_the_autocast_dtype(impl):
    """fp32 q, k, v and log decay under bf16 autocast: the output is bf16, computed from the
    bf16-rounded q, k, v with the fp32 decay."""
    q, k, v, log_decay, _ = inputs(2, 2, 21, 16, 8, True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = ops.gated_linear_attention(q, k, v, log_decay, impl=impl)
    assert out.dtype == torch.bfloat16
    bf = lambda t: t.to(torch.bfloat16).double()
    want, _ = naive.recurrent(bf(q), bf(k), bf(v), log_decay.double(), 0.25)
    assert_close(out, want, 2e-2, v)


def test_empty_inputs_give_empty_outputs_and_the_initial_state():
    q, k, v, log_decay, s0 = inputs(2, 2, 0, 4, 3, False, state=True)
    out, state = ops.gated_linear_attention(
        q, k, v, log_decay, initial_state=s0, output_final_state=True
    )
    assert out.shape == v.shape and torch.equal(state, s0)


def test_triton_refuses_widths_above_its_limit_and_names_the_fallback():
    q, k, v, log_decay, _ = inputs(1, 1, 5, 130, 8, False)
    with pytest.raises(ValueError, match="impl='torch'"):
        ops.gated_linear_attention(q, k, v, log_decay, impl="triton")


def test_triton_on_cpu_without_the_interpreter_says_what_it_needs(monkeypatch):
    monkeypatch.setattr(_checks, "INTERPRET", False)
    q, k, v, log_decay, _ = inputs(1, 1, 5, 4, 4, False)
    with pytest.raises(ValueError, match="need CUDA tensors; set TRITON_INTERPRET=1"):
        ops.gated_linear_attention(q, k, v, log_decay, impl="triton")
    ops.gated_linear_attention(q, k, v, log_decay, impl="auto")  # auto takes PyTorch


# ---------------------------------------------------------------------------------------------
# The operator: opcheck, eager path, autocast, torch.compile
# ---------------------------------------------------------------------------------------------


def _op_args(per_key: bool, state: bool):
    q, k, v, log_decay, s0 = inputs(2, 2, 19, 16, 8, per_key, state=state)
    leaves = [t.requires_grad_() for t in (q, k, v, log_decay)]
    return (*leaves, 0.25, None if s0 is None else s0.requires_grad_())


@pytest.mark.parametrize(
    ("per_key", "state"), [(True, True), pytest.param(False, False, marks=pytest.mark.slow)]
)
@pytest.mark.slow  # opcheck's every check in the interpreter (~20 s); autograd against the recurrence stays
def test_opcheck_passes(per_key, state):
    results = torch.library.opcheck(
        torch.ops.attnzoo.gated_linear_attention.default, _op_args(per_key, state)
    )
    assert set(results.values()) == {"SUCCESS"}, results


def test_the_public_op_computes_exactly_what_the_operator_computes():
    q, k, v, log_decay, scale, s0 = _op_args(True, True)
    out, state = torch.ops.attnzoo.gated_linear_attention(q, k, v, log_decay, scale, s0)
    public = ops.gated_linear_attention(
        q, k, v, log_decay, scale=scale, initial_state=s0, output_final_state=True, impl="triton"
    )
    assert torch.equal(public[0], out) and torch.equal(public[1], state)


def test_the_operators_autocast_rule_casts_q_k_v_and_keeps_the_decay_and_state():
    """The interpreter has no bf16: the Triton path under fp16 autocast."""
    q, k, v, log_decay, s0 = _op_args(True, True)[:4] + _op_args(True, True)[5:]
    with torch.autocast("cpu", dtype=torch.float16):
        out, state = torch.ops.attnzoo.gated_linear_attention(q, k, v, log_decay, 0.25, s0)
        public = ops.gated_linear_attention(q, k, v, log_decay, initial_state=s0, impl="triton")
    assert out.dtype == public.dtype == torch.float16 and state.dtype == torch.float32
    half = lambda t: t.detach().half().double()
    want, _ = naive.recurrent(
        half(q), half(k), half(v), log_decay.detach().double(), 0.25, s0.detach().double()
    )
    assert_close(out, want, 1e-2, v)
    assert torch.equal(out, public)


@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.sample(1)
def test_compiles_with_fullgraph(impl):
    """Dynamo traces a call (the Triton op as one opaque node) and its backward; outputs and
    gradients equal eager's."""
    torch._dynamo.reset()

    def loss(q, k, v, log_decay, s0):
        out, state = ops.gated_linear_attention(
            q, k, v, log_decay, initial_state=s0, output_final_state=True, impl=impl
        )
        return out.square().sum() + state.sum()

    q, k, v, log_decay, _, s0 = _op_args(True, True)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    leaves = (q, k, v, log_decay, s0)
    want = torch.autograd.grad(loss(*leaves), leaves)
    got = torch.autograd.grad(compiled(*leaves), leaves)
    for a, b in zip(got, want, strict=True):
        assert_close(a, b, 1e-5, b)


# ---------------------------------------------------------------------------------------------
# Bad arguments
# ---------------------------------------------------------------------------------------------


def _bad_calls():
    q, k, v, log_decay, s0 = inputs(2, 2, 5, 4, 3, True, state=True)
    return (
        {  # id: (what the error must say, keyword arguments replacing good ones)
            "q-int": ("q", dict(q=q.to(torch.int32))),
            "k-shape": ("k", dict(k=k[..., :3])),
            "v-tokens": ("v", dict(v=v[:, :, :4])),
            "v-dtype": ("v", dict(v=v.double())),
            "decay-shape": ("log_decay", dict(log_decay=log_decay[..., :3])),
            "decay-int": ("log_decay", dict(log_decay=log_decay.to(torch.int32))),
            "decay-device": ("log_decay", dict(log_decay=log_decay.to("meta"))),
            "state-shape": ("initial_state", dict(initial_state=s0[..., :2])),
            "state-list": ("initial_state", dict(initial_state=[0.0])),
            "causal-false": ("causal=False.*causal=True only", dict(causal=False)),
            "causal-int": ("causal", dict(causal=1)),
            "scale-nan": ("scale", dict(scale=float("nan"))),
            "final-state": ("output_final_state", dict(output_final_state=1)),
            "impl": ("impl", dict(impl="cuda")),
        },
        dict(q=q, k=k, v=v, log_decay=log_decay, initial_state=s0),
    )


@pytest.mark.parametrize("impl", ["torch", "auto", "triton"])
@pytest.mark.parametrize("case", list(_bad_calls()[0]))
def test_bad_arguments_raise_value_errors_naming_them(case, impl):
    calls, good = _bad_calls()
    match, bad = calls[case]
    with pytest.raises(ValueError, match=match):
        ops.gated_linear_attention(**{"impl": impl, **good, **bad})


@pytest.mark.slow
def test_the_compile_report_compiles_each_kernel_for_sm80_and_sm90(tmp_path):
    """Every kernel at every width and dtype the launcher can pick, through
    scripts/kernel_report.py (no GPU): it compiles, within the register file, with wgmma on
    sm_90 in half precision from width 64 on, and without spills (triton 3.9; docs/kernels.md)."""
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, str(root / "scripts" / "kernel_report.py"), "--only", "gated."]
    done = subprocess.run(
        [*cmd, "--json", str(tmp_path / "rows.json")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads((tmp_path / "rows.json").read_text())
    names = ("gated.gla_fwd", "gated.gla_bwd_dq", "gated.gla_bwd_dk", "gated.gla_bwd_dv")
    configs = {(r["kernel"], r["config"], r["cc"]) for r in rows}
    assert {(k, cc) for k, _, cc in configs} == {(k, cc) for k in names for cc in (80, 90)}
    assert len(configs) == len(rows) == 2 * 4 * 3 * 4  # targets × kernels × dtypes × widths
    assert all(not r["error"] and 0 < r["registers"] <= 255 for r in rows)
    assert [r for r in rows if r["spills"]] == []
    wide_half = [
        r
        for r in rows
        if r["cc"] == 90
        and not r["config"].startswith("fp32")
        and ("K=V=64 " in r["config"] or "K=V=128 " in r["config"])
    ]
    assert len(wide_half) == 16 and all(r["wgmma"] for r in wide_half)
