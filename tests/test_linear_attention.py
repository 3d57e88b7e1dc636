"""linear_attention, every impl, against a step-by-step float64 recurrence written here.

The oracle walks the tokens one at a time, adding k_j v_jᵀ and k_j to a running state, as the
formula of Katharopoulos et al. (2020) reads; nothing of the family's naive.py is reused. The
Triton kernels run in Triton's interpreter (tests/conftest.py) with outputs allocated full of NaN
(linear.launch.POISON_OUTPUTS), so an element a kernel never writes fails the comparison.
Gradients of q, k and v are compared for a random upstream gradient. The interpreter has no bf16
arithmetic: the Triton path is checked in fp32 and fp16 here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

import attnzoo.kernels  # noqa: E402
import attnzoo.kernels as ops  # noqa: E402
from attnzoo.kernels.linear import launch  # noqa: E402
from attnzoo.kernels.linear import naive as reference  # noqa: E402

EPS = 1e-6
TOL = {torch.float32: 1e-5, torch.float16: 1e-2}


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "POISON_OUTPUTS", True)


def recurrent(q, k, v, causal, mask, eps=EPS):
    """y_i = q_iᵀ S_i / (q_iᵀ z_i + eps), in float64, one token at a time."""
    q, k, v = q.double(), k.double(), v.double()
    b, h, n, f = q.shape
    keep = torch.ones(b, n, dtype=torch.bool) if mask is None else ~mask
    keep_bh1 = keep[:, None, :, None].double()
    s = q.new_zeros(b, h, f, v.shape[-1])
    z = q.new_zeros(b, h, f)
    if not causal:
        for j in range(n):
            s = s + keep_bh1[:, :, j, :, None] * k[:, :, j, :, None] * v[:, :, j, None, :]
            z = z + keep_bh1[:, :, j] * k[:, :, j]
    outs = []
    for i in range(n):
        if causal:
            s = s + keep_bh1[:, :, i, :, None] * k[:, :, i, :, None] * v[:, :, i, None, :]
            z = z + keep_bh1[:, :, i] * k[:, :, i]
        num = torch.einsum("bhf,bhfv->bhv", q[:, :, i], s)
        den = torch.einsum("bhf,bhf->bh", q[:, :, i], z) + eps
        outs.append(num / den[..., None])
    return torch.stack(outs, dim=2) if outs else v.new_zeros(b, h, 0, v.shape[-1])


def padding(b: int, n: int) -> torch.Tensor:
    """Row 0 no padding, row 1 random holes, row 2 (if any) all padding."""
    mask = torch.rand(b, n) < 0.3
    mask[0] = False
    if b > 2:
        mask[2] = True
    return mask


def inputs(b, h, n, f, dv, dtype=torch.float32):
    """Non-negative features (what a feature map gives) and signed values."""
    q = torch.rand(b, h, n, f).to(dtype)
    k = torch.rand(b, h, n, f).to(dtype)
    v = torch.randn(b, h, n, dv).to(dtype)
    return q, k, v


def assert_close(got, want, tol, scale) -> None:
    """‖got − want‖ ≤ tol (‖want‖ + ‖scale‖ / 10): relative, with a floor for gradients that
    are ~0 in exact arithmetic (one token: dq ∝ eps), where fp32 rounding is all there is."""
    assert torch.isfinite(got).all(), "non-finite (unwritten or overflowed) elements"
    err = (got.double() - want.double()).norm().item()
    bound = tol * (want.double().norm().item() + scale.double().norm().item() / 10)
    assert err <= bound, f"error {err:.3g} above {bound:.3g} (‖want‖ = {want.norm():.3g})"


def run(impl, q, k, v, causal, mask, g):
    """Output and (dq, dk, dv) of the public op for upstream gradient g."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out = ops.linear_attention(*leaves, causal=causal, key_padding_mask=mask, impl=impl)
    grads = torch.autograd.grad(out, leaves, g)
    return out.detach(), grads


_ORACLES: dict = {}


def oracle(q, k, v, causal, mask, g):
    """The recurrence's output and input gradients, computed once per inputs (the impls of one
    parametrisation draw the same inputs: tests/conftest.py seeds every test alike)."""
    tensors = (q, k, v, g) if mask is None else (q, k, v, g, mask)
    key = (causal, *(tuple(t.shape) for t in tensors), *(t.double().sum().item() for t in tensors))
    if key not in _ORACLES:
        leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
        out = recurrent(*leaves, causal, mask)
        grads = torch.autograd.grad(
            out, leaves, g.double(), allow_unused=True, materialize_grads=True
        )
        _ORACLES[key] = out.detach(), grads
    return _ORACLES[key]


def check(impl, q, k, v, causal, mask, dtype=torch.float32):
    g = torch.randn(*q.shape[:3], v.shape[-1]).to(dtype)
    out, grads = run(impl, q, k, v, causal, mask, g)
    want, want_grads = oracle(q, k, v, causal, mask, g)
    assert out.dtype == dtype and all(d.dtype == dtype for d in grads)
    tol = TOL[dtype]
    assert_close(out, want, tol, v)
    for name, got, ref in zip("qkv", grads, want_grads, strict=True):
        assert got.shape == ref.shape, name
        assert_close(got, ref, tol, g)
    return out, grads


IMPLS = ["torch", "triton"]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 37, 65, 130])
def test_fp32_matches_the_recurrence_with_padding(impl, causal, n):
    """One to three chunks of 64, ragged; rows with no padding, holes, and all padding."""
    q, k, v = inputs(3, 1, n, 24, 16)
    check(impl, q, k, v, causal, padding(3, n))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("causal", "f", "dv"), [(True, 16, 64), (True, 5, 3), (False, 64, 24)])
def test_widths_that_are_and_are_not_powers_of_two(impl, causal, f, dv):
    q, k, v = inputs(2, 1, 65, f, dv)
    check(impl, q, k, v, causal, None)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("causal", [False, True])
def test_fp16_matches_the_recurrence(impl, causal):
    q, k, v = inputs(3, 2, 70, 32, 16, torch.float16)
    check(impl, q, k, v, causal, padding(3, 70), torch.float16)


@pytest.mark.parametrize("impl", IMPLS)
def test_fp16_with_leading_padding_stays_finite(impl):
    """Causal queries before the first real key have den = eps, and g / eps overflows fp16: their
    output and every gradient they reach must still be exact zeros, not inf·0 = NaN."""
    q, k, v = inputs(2, 1, 80, 16, 16, torch.float16)
    mask = torch.zeros(2, 80, dtype=torch.bool)
    mask[:, :70] = True  # the first chunk and part of the second see no key
    out, (dq, dk, dv) = check(impl, q, k, v, True, mask, torch.float16)
    assert (out[:, :, :70] == 0).all() and (dq[:, :, :70] == 0).all()
    assert (dk[:, :, :70] == 0).all() and (dv[:, :, :70] == 0).all()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("causal", [False, True])
def test_an_all_padding_sequence_gets_zeros_and_zero_gradients(impl, causal):
    q, k, v = inputs(1, 2, 40, 16, 16)
    mask = torch.ones(1, 40, dtype=torch.bool)
    out, grads = run(impl, q, k, v, causal, mask, torch.randn(1, 2, 40, 16))
    assert (out == 0).all()
    assert all((d == 0).all() for d in grads)


@pytest.mark.parametrize("impl", IMPLS)
def test_padding_masks_keys_and_a_padding_query_is_computed_like_any_other(impl):
    """A padding query's output is what the same query gets among the same real keys."""
    q, k, v = inputs(1, 1, 20, 16, 16)
    mask = torch.zeros(1, 20, dtype=torch.bool)
    mask[0, 15:] = True
    out = ops.linear_attention(q, k, v, key_padding_mask=mask, impl=impl)
    real = slice(0, 15)
    s = torch.einsum("nf,nv->fv", k[0, 0, real].double(), v[0, 0, real].double())
    z = k[0, 0, real].double().sum(0)
    want = (q[0, 0].double() @ s) / (q[0, 0].double() @ z + EPS)[:, None]
    assert_close(out[0, 0], want, 1e-5, want)


@pytest.mark.parametrize(
    "view",
    [
        lambda t: t.transpose(1, 2).contiguous().transpose(1, 2),  # (B, N, H, ·) storage
        lambda t: t[..., ::2, 1:-1],  # strided tokens, offset and narrowed features
        lambda t: t[:1].expand(2, -1, -1, -1),  # batch stride 0
    ],
    ids=["bnhf-storage", "sliced", "expanded"],
)
@pytest.mark.parametrize("causal", [False, True])
def test_strided_inputs_match_the_recurrence(view, causal):
    q, k, v = (view(t) for t in inputs(2, 2, 74, 18, 18))
    assert not q.is_contiguous()
    check("triton", q, k, v, causal, padding(*q.shape[:1], q.shape[2]))


def test_strided_upstream_gradient_matches():
    q, k, v = inputs(2, 2, 40, 16, 16)
    g = torch.randn(2, 40, 2, 16).transpose(1, 2)  # non-contiguous d_out
    got = run("triton", q, k, v, True, None, g)
    want = run("torch", q, k, v, True, None, g.contiguous())
    assert_close(got[0], want[0], 1e-5, v)
    for a, b in zip(got[1], want[1], strict=True):
        assert_close(a, b, 1e-5, g)


@pytest.mark.parametrize("chunk", [16, 32])
def test_smaller_chunks_fp32_runs_on_a_gpu_compute_the_same(chunk, monkeypatch):
    """The GPU configs run fp32 (and the widest half-precision states) in chunks of 16 or 32
    tokens; the interpreter's one config has 64. The same kernels with the smaller chunk, here
    crossing three to six chunk boundaries, match the recurrence too."""
    import triton
    from attnzoo.kernels.linear import _jit, tuning

    config = [triton.Config({"BT": chunk}, num_warps=8, num_stages=1)]
    for name, fn in [
        ("_fwd", _jit._linear_fwd_kernel),
        ("_bwd_dq", _jit._linear_bwd_dq_kernel),
        ("_bwd_dkdv", _jit._linear_bwd_dkdv_kernel),
    ]:
        monkeypatch.setattr(launch, name, tuning.autotuned(fn, config))
    q, k, v = inputs(3, 1, 90, 16, 24)
    check("triton", q, k, v, True, padding(3, 90))


def test_auto_takes_pytorch_on_cpu():
    q, k, v = inputs(1, 2, 30, 16, 8)
    want = reference.linear_attention(q, k, v, True, None, EPS)
    assert torch.equal(attnzoo.kernels.linear_attention(q, k, v, causal=True), want)


def test_chunked_causal_reference_equals_one_chunk():
    """The causal reference's chunk size changes nothing but rounding."""
    q, k, v = inputs(2, 2, 100, 16, 8)
    mask = padding(2, 100)
    one = reference.linear_attention(q, k, v, True, mask, EPS, chunk=128)
    for chunk in (1, 7, 64):
        assert_close(
            reference.linear_attention(q, k, v, True, mask, EPS, chunk=chunk), one, 1e-5, v
        )


def test_empty_inputs_give_empty_outputs():
    for shape in [(0, 2, 5, 4), (2, 2, 0, 4)]:
        q = torch.rand(shape, requires_grad=True)
        v = torch.randn(shape, requires_grad=True)
        out = ops.linear_attention(q, q, v, impl="triton")
        assert out.shape == v.shape
        out.sum().backward()
        assert q.grad.shape == q.shape and v.grad.shape == v.shape


# ---------------------------------------------------------------------------------------------
# Bad arguments
# ---------------------------------------------------------------------------------------------


def _bad_calls():
    q, k, v = inputs(2, 2, 5, 4, 3)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    return (
        {  # id: (the name the error must carry, keyword arguments replacing good ones)
            "q-int": ("q", dict(q=q.to(torch.int32))),
            "q-3d": ("q", dict(q=q[0])),
            "k-shape": ("k", dict(k=k[..., :3])),
            "k-dtype": ("k", dict(k=k.double())),
            "v-tokens": ("v", dict(v=v[:, :, :4])),
            "v-device": ("v", dict(v=v.to("meta"))),
            "mask-shape": ("key_padding_mask", dict(key_padding_mask=mask[:, :4])),
            "mask-dtype": ("key_padding_mask", dict(key_padding_mask=mask.float())),
            "eps-negative": ("eps", dict(eps=-1e-6)),
            "eps-nan": ("eps", dict(eps=float("nan"))),
            "eps-tensor": ("eps", dict(eps=torch.tensor(1e-6))),
            "causal-int": ("causal", dict(causal=1)),
            "impl": ("impl", dict(impl="cuda")),
        },
        dict(q=q, k=k, v=v, causal=False, key_padding_mask=mask, eps=EPS),
    )


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", list(_bad_calls()[0]))
def test_bad_arguments_raise_value_errors_naming_them(case, impl):
    calls, good = _bad_calls()
    name, bad = calls[case]
    kwargs = {"impl": impl, **good, **bad}
    with pytest.raises(ValueError, match=name):
        ops.linear_attention(**kwargs)


def test_triton_refuses_widths_above_its_limit_and_names_the_fallback():
    q, k, v = inputs(1, 1, 5, 130, 8)
    with pytest.raises(ValueError, match="impl='torch'"):
        ops.linear_attention(q, k, v, impl="triton")
    assert ops.linear_attention(q, k, v, impl="torch").shape == v.shape


def test_the_backward_operator_checks_what_the_forward_saved():
    q, k, v = inputs(1, 1, 5, 4, 4)
    out, den = torch.ops.attnzoo.linear_attention(q, k, v, None, False, EPS)
    with pytest.raises(ValueError, match="den"):
        torch.ops.attnzoo.linear_attention_backward(out, q, k, v, out, den[:, :3], None, False)


# ---------------------------------------------------------------------------------------------
# The operator: opcheck, eager path, autocast, torch.compile
# ---------------------------------------------------------------------------------------------


def _op_args(causal: bool, masked: bool):
    q, k, v = (t.requires_grad_() for t in inputs(2, 2, 19, 16, 8))
    return (q, k, v, padding(2, 19) if masked else None, causal, EPS)


@pytest.mark.parametrize(
    ("causal", "masked"), [pytest.param(False, False, marks=pytest.mark.slow), (True, True)]
)
def test_opcheck_passes(causal, masked):
    results = torch.library.opcheck(
        torch.ops.attnzoo.linear_attention.default, _op_args(causal, masked)
    )
    assert set(results.values()) == {"SUCCESS"}, results


def test_the_public_op_computes_exactly_what_the_operator_computes_and_den_gets_no_gradient():
    args = _op_args(True, True)
    out, den = torch.ops.attnzoo.linear_attention(*args)
    assert out.requires_grad and not den.requires_grad
    public = ops.linear_attention(*args[:3], True, args[3], EPS, impl="triton")
    assert torch.equal(public, out)


@pytest.mark.parametrize(("impl", "dtype"), [("torch", torch.bfloat16), ("triton", torch.float16)])
def test_autocast_gives_the_autocast_dtype(impl, dtype):
    """fp32 q and k from a feature map, v from a Linear in the autocast dtype: the op runs and
    returns in the autocast dtype (the interpreter has no bf16: Triton under fp16)."""
    q, k, v = inputs(2, 2, 21, 16, 8)
    with torch.autocast("cpu", dtype=dtype):
        out = ops.linear_attention(q, k, v.to(dtype), causal=True, impl=impl)
        if impl == "triton":  # the operator (Triton only) has the same autocast rule
            direct, _ = torch.ops.attnzoo.linear_attention(q, k, v, None, True, EPS)
            assert direct.dtype == dtype
    assert out.dtype == dtype
    want = recurrent(q.to(dtype), k.to(dtype), v.to(dtype), True, None)
    assert_close(out, want, 3e-2, v)


def test_fp64_is_never_cast_by_autocast():
    q, k, v = (t.double() for t in inputs(1, 2, 9, 4, 4))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert ops.linear_attention(q, k, v, impl="torch").dtype == torch.float64


@pytest.mark.parametrize("impl", [pytest.param("torch", marks=pytest.mark.slow), "triton"])
def test_compiles_with_fullgraph(impl):
    """Dynamo traces a call (the Triton op as one opaque node) and its backward; outputs and
    gradients equal eager's."""
    torch._dynamo.reset()

    def loss(q, k, v, mask):
        out = ops.linear_attention(q, k, v, causal=True, key_padding_mask=mask, impl=impl)
        return out.square().sum()

    q, k, v, mask, _, _ = _op_args(True, True)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    want = torch.autograd.grad(loss(q, k, v, mask), (q, k, v))
    got = torch.autograd.grad(compiled(q, k, v, mask), (q, k, v))
    for a, b in zip(got, want, strict=True):
        assert_close(a, b, 1e-5, b)


def test_flops_follow_the_documented_counts():
    from attnzoo.kernels import bench
    from attnzoo.kernels.linear.bench import linear_attention_flops

    b, h, n, f, dv, c = 2, 3, 256, 32, 16, 64
    state = 2 * b * h * n * f * dv
    blocks = b * h * n * c * (f + dv)
    assert linear_attention_flops(b, h, n, f, dv, False) == 2 * state
    assert linear_attention_flops(b, h, n, f, dv, True) == 2 * state + blocks
    assert linear_attention_flops(b, h, n, f, dv, True, True) == 5 * state + 3 * blocks
    assert linear_attention_flops(b, h, n, f, dv, True, True, recompute=False) == 4 * state
    flops = bench.cost("linear", bench.Shape("s", b, h, n, f, True))["fwd_flop"]
    assert flops == linear_attention_flops(b, h, n, f, f, True)


# ---------------------------------------------------------------------------------------------
# Slow tier: the whole grid of lengths x widths x masks x dtypes
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("n", [1, 37, 64, 65, 130, 200])
@pytest.mark.parametrize(("f", "dv"), [(16, 16), (24, 64), (64, 24), (128, 128), (3, 1)])
def test_full_grid_matches_the_recurrence(impl, dtype, causal, masked, n, f, dv):
    """Not F = 1: there q cancels from y_i = q S_i / (q z_i + eps) up to eps, and dq is the
    rounding of that cancellation in any precision (as for a single token, but everywhere)."""
    q, k, v = inputs(3, 1, n, f, dv, dtype)
    check(impl, q, k, v, causal, padding(3, n) if masked else None, dtype)


@pytest.mark.slow
def test_the_compile_report_compiles_each_kernel_for_sm80_and_sm90(tmp_path):
    """One config of each kernel, every switch on, through scripts/kernel_report.py (no GPU)."""
    root = Path(__file__).resolve().parents[1]
    only = "bf16 causal mask F=dv=64 BT=64 w4 s2"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, str(root / "scripts" / "kernel_report.py"), "--only", only]
    done = subprocess.run(
        [*cmd, "--json", str(tmp_path / "rows.json")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [
        r
        for r in json.loads((tmp_path / "rows.json").read_text())
        if r["kernel"].startswith("linear.")
    ]
    kernels = {(r["kernel"], r["cc"]) for r in rows}
    names = ("linear.linear_fwd", "linear.linear_bwd_dq", "linear.linear_bwd_dkdv")
    assert kernels == {(k, cc) for k in names for cc in (80, 90)}
    assert all(not r["error"] and 0 < r["registers"] <= 255 for r in rows)
