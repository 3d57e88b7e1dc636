"""Property-based tests of the Triton kernels (under TRITON_INTERPRET=1) against the references.

Hypothesis draws shapes, windows, padding masks (including sequences that are all padding and,
with causal attention, queries that see no key at all), dtypes (fp32 / fp16; the interpreter has
no bf16 arithmetic worth trusting) and memory layouts (transposed, sliced and expanded views). The
oracle is the PyTorch reference run in fp32 on the same values, forward and the vector-Jacobian
product for a random upstream gradient. Tensor values come from a torch generator seeded by a
drawn integer, so a failing example is reproduced exactly from hypothesis' report.

The attention properties run once `attnzoo.kernels.attention` exists. Wrong dtypes, devices and
shapes must give a ValueError through every public op with impl="triton", never a wrong answer.

Examples per test: ATTNZOO_HYPOTHESIS_EXAMPLES (default small, so the file runs in ~2 minutes).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable

import pytest
import torch

pytest.importorskip("hypothesis")
pytest.importorskip("triton")

import attnzoo.kernels as ops  # noqa: E402
from attnzoo.kernels.attention import naive as reference  # noqa: E402
from attnzoo.kernels.pooling import launch as pool_launch  # noqa: E402
from attnzoo.kernels.pooling import naive as pool_reference  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

EXAMPLES = int(os.environ.get("ATTNZOO_HYPOTHESIS_EXAMPLES", "6"))
KERNEL_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,  # the interpreter's first call of a kernel compiles it
    database=None,  # no .hypothesis/ folder left in the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
TOL = {torch.float32: 1e-4, torch.float16: 1e-2}
HAS_ATTENTION = importlib.util.find_spec("attnzoo.kernels.attention") is not None
needs_attention = pytest.mark.skipif(
    not HAS_ATTENTION, reason="attnzoo.kernels.attention (the attention kernels) is not there yet"
)


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fresh kernel outputs start as NaN, so an element a kernel never writes fails."""
    monkeypatch.setattr(pool_launch, "POISON_OUTPUTS", True)
    if HAS_ATTENTION:
        launch = importlib.import_module("attnzoo.kernels.attention.launch")
        monkeypatch.setattr(launch, "POISON_OUTPUTS", True)


# ------------------------------------------------------------------------------------ helpers


def assert_close(got: torch.Tensor, want: torch.Tensor, tol: float, what: str) -> None:
    """‖got − want‖ ≤ tol·‖want‖ + tol·0.1·sqrt(numel): the floor (a tenth of tol per element, for
    O(1) data) is for results whose exact value is zero, e.g. dq with a single visible key, where
    the kernel's answer is rounding noise around 0."""
    assert torch.isfinite(got).all(), f"{what}: non-finite elements (never written?)"
    got, want = got.detach().double(), want.detach().double()
    err = (got - want).norm().item()
    bound = tol * want.norm().item() + tol * 0.1 * want.numel() ** 0.5
    assert err <= bound, f"{what}: error {err:.3g} above {bound:.3g} (‖want‖ {want.norm():.3g})"


def laid_out(values: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values in another memory layout: a view that is not contiguous (or is)."""
    if layout == "contiguous":
        return values.contiguous()
    if layout == "transposed":  # features-major storage
        return values.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "sliced":  # every other row and column of a bigger buffer
        big = torch.zeros(*values.shape[:-2], 2 * values.shape[-2], values.shape[-1] + 3)
        big = big.to(values.dtype)
        big[..., ::2, 1 : 1 + values.shape[-1]] = values
        return big[..., ::2, 1 : 1 + values.shape[-1]]
    if layout == "expanded":  # batch stride 0: every sequence the same
        return values[:1].expand_as(values)
    if layout == "heads":  # (B, N, H, K) storage, as a projection makes
        return values.transpose(1, 2).contiguous().transpose(1, 2)
    raise AssertionError(layout)


def make_mask(gen: torch.Generator, kinds: list[str], n: int) -> torch.Tensor:
    """One row per sequence: 'keep' (no padding), 'tail' (padding after a random length),
    'holes' (random padding anywhere), 'all' (every token is padding). Every other draw is a
    strided view (every other column of a wider mask), which the kernels must read as such."""
    rows = []
    for kind in kinds:
        if kind == "keep":
            row = torch.zeros(n, dtype=torch.bool)
        elif kind == "all":
            row = torch.ones(n, dtype=torch.bool)
        elif kind == "tail":
            length = int(torch.randint(0, n + 1, (1,), generator=gen))
            row = torch.arange(n) >= length
        else:
            row = torch.rand(n, generator=gen) < 0.4
        rows.append(row)
    mask = torch.stack(rows)
    if torch.rand(1, generator=gen).item() < 0.5:
        wide = torch.ones(len(kinds), 2 * n, dtype=torch.bool)
        wide[:, ::2] = mask
        mask = wide[:, ::2]
    return mask


def vjp(
    fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor], cot: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = [t.detach().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    grads = torch.autograd.grad(out, leaves, cot.to(out.dtype))
    return out.detach(), list(grads)


def check_against_reference(
    kernel_fn: Callable[..., torch.Tensor],
    reference_fn: Callable[..., torch.Tensor],
    inputs: list[torch.Tensor],
    names: list[str],
    gen: torch.Generator,
    tol: float,
) -> None:
    """Kernel (inputs as given, any dtype/layout) vs reference (the same values in fp32)."""
    ref_inputs = [t.detach().float() for t in inputs]
    cot = torch.randn(reference_fn(*ref_inputs).shape, generator=gen)
    out, grads = vjp(kernel_fn, inputs, cot)
    ref, ref_grads = vjp(reference_fn, ref_inputs, cot)
    assert out.dtype == inputs[0].dtype and out.shape == ref.shape
    assert_close(out, ref, tol, "output")
    for name, g, rg in zip(names, grads, ref_grads, strict=True):
        assert g.shape == rg.shape, name
        assert_close(g, rg, tol, f"d{name}")


# ------------------------------------------------------------------------------------ pool_mix

layouts = st.sampled_from(["contiguous", "transposed", "sliced", "expanded"])
mask_kinds = st.sampled_from(["keep", "tail", "holes", "all"])
dtypes = st.sampled_from([torch.float32, torch.float16])


@st.composite
def pool_cases(draw: st.DrawFn) -> dict:
    causal = draw(st.booleans())
    window = draw(st.integers(1, 9)) if causal else 2 * draw(st.integers(0, 4)) + 1
    b = draw(st.integers(1, 3))
    return dict(
        b=b,
        n=draw(st.integers(1, 70)),
        d=draw(st.integers(1, 70)),
        window=window,
        causal=causal,
        masked=draw(st.booleans()),
        kinds=draw(st.lists(mask_kinds, min_size=b, max_size=b)),
        dtype=draw(dtypes),
        layout=draw(layouts),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


@KERNEL_SETTINGS
@given(case=pool_cases())
def test_pool_mix_matches_reference(case: dict) -> None:
    gen = torch.Generator().manual_seed(case["seed"])
    x = torch.randn(case["b"], case["n"], case["d"], generator=gen).to(case["dtype"])
    x = laid_out(x, case["layout"])
    mask = make_mask(gen, case["kinds"], case["n"]) if case["masked"] else None
    window, causal = case["window"], case["causal"]
    check_against_reference(
        lambda x: ops.pool_mix(x, window, causal, mask, impl="triton"),
        lambda x: pool_reference.pool_mix(x, window, causal, mask),
        [x],
        ["x"],
        gen,
        TOL[case["dtype"]] / 10 if case["dtype"] == torch.float32 else TOL[case["dtype"]],
    )
    if mask is not None:
        out = ops.pool_mix(x, window, causal, mask, impl="triton")
        assert (out[mask] == 0).all(), "padding positions must be exactly zero"


# ------------------------------------------------------------------------------------ attention

attention_layouts = st.sampled_from(["contiguous", "heads", "transposed", "sliced", "expanded"])


@st.composite
def attention_cases(draw: st.DrawFn, op: str) -> dict:
    b = draw(st.integers(1, 2))
    case = dict(
        op=op,
        b=b,
        h=draw(st.integers(1, 3)),
        n=draw(st.integers(1, 48)),
        causal=draw(st.booleans()),
        masked=draw(st.booleans()),
        kinds=draw(st.lists(mask_kinds, min_size=b, max_size=b)),
        dtype=draw(dtypes),
        layouts=draw(st.lists(attention_layouts, min_size=3, max_size=3)),
        seed=draw(st.integers(0, 2**31 - 1)),
    )
    if op == "quadratic":
        case["d"] = draw(st.sampled_from([16, 40, 72]))  # 72: wider than one feature chunk
    case["dk"] = draw(st.sampled_from([16, 24, 32, 64]))
    case["dv"] = draw(st.sampled_from([16, 32]))
    return case


def attention_inputs(case: dict, gen: torch.Generator) -> tuple[list[torch.Tensor], list[str]]:
    """Inputs of one op, scaled so that scores are O(1) (softmax neither flat nor one-hot)."""
    b, h, n, dk, dv = case["b"], case["h"], case["n"], case["dk"], case["dv"]
    if case["op"] == "scaled_dot":
        tensors = [
            torch.randn(b, h, n, dk, generator=gen),
            torch.randn(b, h, n, dk, generator=gen),
            torch.randn(b, h, n, dv, generator=gen),
        ]
        names = ["q", "k", "v"]
    elif case["op"] == "quadratic":
        d = case["d"]
        tensors = [
            torch.randn(b, n, d, generator=gen),
            torch.randn(h, d, d, generator=gen) / d**0.5,
            torch.randn(b, h, n, dv, generator=gen),
        ]
        names = ["x", "u", "v"]
    else:  # metric: any M, the op does not assume symmetry
        tensors = [
            torch.randn(b, h, n, dk, generator=gen),
            torch.randn(h, dk, dk, generator=gen) / dk**0.5,
        ]
        names = ["p", "m"]
    tensors = [t.to(case["dtype"]) for t in tensors]
    # batch-carrying tensors take the drawn layouts; u and m (no batch) only plain views
    laid = []
    for t, name, layout in zip(tensors, names, case["layouts"], strict=False):
        if t.dim() != 4 and layout in ("expanded", "heads"):
            layout = "transposed" if name in ("u", "m") else "sliced"
        laid.append(laid_out(t, layout))
    return laid, names


ATTENTION_OPS = {
    "scaled_dot": (ops.scaled_dot_attention, reference.scaled_dot_attention),
    "quadratic": (ops.quadratic_attention, reference.quadratic_attention),
    "metric": (ops.metric_attention, reference.metric_attention),
}


def _attention_property(case: dict) -> None:
    gen = torch.Generator().manual_seed(case["seed"])
    inputs, names = attention_inputs(case, gen)
    mask = make_mask(gen, case["kinds"], case["n"]) if case["masked"] else None
    causal = case["causal"]
    public, ref = ATTENTION_OPS[case["op"]]
    width = case["d"] if case["op"] == "quadratic" else case["dk"]
    scale = 1.0 / width**0.5  # the ops' default, passed explicitly to the reference
    check_against_reference(
        lambda *t: public(*t, causal=causal, key_padding_mask=mask, impl="triton"),
        lambda *t: ref(*t, causal, mask, scale),
        inputs,
        names,
        gen,
        TOL[case["dtype"]],
    )


@needs_attention
@KERNEL_SETTINGS
@given(case=attention_cases("scaled_dot"))
def test_scaled_dot_attention_matches_reference(case: dict) -> None:
    _attention_property(case)


@needs_attention
@KERNEL_SETTINGS
@given(case=attention_cases("quadratic"))
def test_quadratic_attention_matches_reference(case: dict) -> None:
    _attention_property(case)


@needs_attention
@KERNEL_SETTINGS
@given(case=attention_cases("metric"))
def test_metric_attention_matches_reference(case: dict) -> None:
    _attention_property(case)


@needs_attention
def test_attention_rows_with_no_visible_key_are_zero() -> None:
    """Causal attention where the first token is padding: query 0 sees no key; an all-padding
    sequence sees none anywhere. Those outputs and their gradients are exactly zero."""
    q, k, v = (torch.randn(2, 2, 9, 16, requires_grad=True) for _ in range(3))
    mask = torch.zeros(2, 9, dtype=torch.bool)
    mask[0, 0] = True
    mask[1] = True
    out = ops.scaled_dot_attention(q, k, v, causal=True, key_padding_mask=mask, impl="triton")
    assert (out[0, :, 0] == 0).all() and (out[1] == 0).all()
    out.sum().backward()
    assert (q.grad[0, :, 0] == 0).all() and (q.grad[1] == 0).all()
    assert (k.grad[1] == 0).all() and (v.grad[1] == 0).all()


# ------------------------------------------------------------------------------------ bad input


def valid_args(op: str) -> dict:
    b, h, n, d = 2, 2, 5, 16
    if op == "scaled_dot":
        return dict(q=torch.randn(b, h, n, d), k=torch.randn(b, h, n, d), v=torch.randn(b, h, n, d))
    if op == "quadratic":
        return dict(x=torch.randn(b, n, d), u=torch.randn(h, d, d), v=torch.randn(b, h, n, d))
    if op == "metric":
        return dict(p=torch.randn(b, h, n, d), m=torch.randn(h, d, d))
    return dict(x=torch.randn(b, n, d), window=3)


PUBLIC = {
    "scaled_dot": ops.scaled_dot_attention,
    "quadratic": ops.quadratic_attention,
    "metric": ops.metric_attention,
    "pool": ops.pool_mix,
}


PARAMETERS = ("u", "m")


def _tensor_names(op: str) -> list[str]:
    return [k for k, v in valid_args(op).items() if isinstance(v, torch.Tensor)]


def bad_cases() -> list:
    """(op, what, change to the valid kwargs, regex the message must match, needs a kernel)."""
    cases = []
    for op in PUBLIC:
        names = _tensor_names(op)
        first = names[0]
        for name in names:
            cases.append((op, f"{name} int", {name: lambda t: t.to(torch.int32)}, name, False))
            cases.append((op, f"{name} 1 dim less", {name: lambda t: t[0]}, name, False))
        for name in names[1:]:
            # Parameters (u, m) are cast to the activations' dtype (the ops' dtype policy);
            # activations that disagree are an error.
            if name not in PARAMETERS:
                cases.append((op, f"{name} fp16 vs fp32", {name: lambda t: t.half()}, name, False))
            cases.append((op, f"{name} on meta", {name: lambda t: t.to("meta")}, name, False))
        all_f64 = {name: (lambda t: t.double()) for name in names}
        cases.append((op, "float64", all_f64, "float64", False))
        all_meta = {name: (lambda t: t.to("meta")) for name in names}
        cases.append((op, "all on meta", all_meta, "meta", True))
        cases.append(
            (
                op,
                "mask shape",
                {"key_padding_mask": torch.zeros(2, 4, dtype=torch.bool)},
                "key_padding_mask",
                False,
            )
        )
        cases.append(
            (op, "mask dtype", {"key_padding_mask": torch.zeros(2, 5)}, "key_padding_mask", False)
        )
        cases.append(
            (
                op,
                "mask on meta",
                {"key_padding_mask": torch.zeros(2, 5, dtype=torch.bool, device="meta")},
                "key_padding_mask",
                False,
            )
        )
        if op in ("scaled_dot", "quadratic"):
            cases.append(
                (
                    op,
                    f"{first} fewer tokens",
                    {first: lambda t: t[..., :4, :]},
                    "shape|tokens",
                    False,
                )
            )
        if op == "metric":
            cases.append((op, "m narrower", {"m": lambda t: t[..., :8]}, "m must", False))
    for window, causal in [(0, True), (-1, True), (4, False), (2.0, True)]:
        cases.append(
            (
                "pool",
                f"window {window!r} causal={causal}",
                {"window": window, "causal": causal},
                "window",
                False,
            )
        )
    return cases


@pytest.mark.parametrize(
    ("op", "what", "change", "match", "needs_kernel"),
    bad_cases(),
    ids=[f"{c[0]}-{c[1]}" for c in bad_cases()],
)
def test_bad_input_raises_value_error(op, what, change, match, needs_kernel) -> None:
    if needs_kernel and op != "pool" and not HAS_ATTENTION:
        pytest.skip("the attention kernels' own device check needs attnzoo.kernels.attention")
    kwargs = valid_args(op)
    for key, value in change.items():
        kwargs[key] = value(kwargs[key]) if callable(value) else value
    with pytest.raises(ValueError, match=match):
        PUBLIC[op](**kwargs, impl="triton")
