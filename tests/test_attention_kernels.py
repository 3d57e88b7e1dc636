"""The Triton attention kernels against the PyTorch references, in Triton's interpreter.

Forward and backward for scaled-dot, quadratic and metric attention: odd sequence lengths (one
to nine ragged 32-token tiles) and whole tiles (the loops that run without per-element masks), 1-4 heads, head dims 16/32/64 (and q/k widths wider than the
value width up to D = 600: the forward's chunk loop, the backward's one wide q/k tile up to 512
and its chunks beyond), causal on and off, padding masks including rows with no visible key at
all. Outputs are allocated full of NaN (launch.POISON_OUTPUTS), so an element the kernel
never writes fails the comparison. The cases are a covering set, not the cartesian product: the
interpreter runs each tile op in numpy and is slow.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import attnzoo.kernels as ops
import pytest
import torch
import triton
import triton.language as tl
from attnzoo.kernels import attention
from attnzoo.kernels._checks import TRITON_DTYPES
from attnzoo.kernels.attention import launch, tuning
from attnzoo.kernels.attention import naive as reference

from attnzoo import Model, ModelConfig

TOL = {torch.float32: 1e-4, torch.float16: 1e-2}


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "POISON_OUTPUTS", True)


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """‖got − want‖ / ‖want‖; the absolute error where want is exactly zero (e.g. dq with one
    key: the softmax of a single score is constant)."""
    got, want = got.detach().double(), want.detach().double()
    assert torch.isfinite(got).all(), "the kernel left NaN/inf (an element never written?)"
    norm = want.norm()
    return float((got - want).norm() / (norm if norm > 0 else 1.0))


@dataclass(frozen=True)
class Case:
    op: str
    n: int
    heads: int
    dk: int  # q/k width (D for quadratic)
    dv: int
    causal: bool
    mask: str  # "none", "pad" (ragged real lengths), "empty" (a row with no visible key)
    dtype: torch.dtype = torch.float32

    def __str__(self) -> str:
        dt = str(self.dtype).removeprefix("torch.")
        causal = "causal" if self.causal else "full"
        return (
            f"{self.op}-n{self.n}-h{self.heads}-dk{self.dk}-dv{self.dv}-{causal}-{self.mask}-{dt}"
        )


F16 = torch.float16
CASES = [
    Case("scaled_dot", 1, 1, 16, 16, False, "none"),
    Case("scaled_dot", 17, 2, 32, 32, True, "pad"),
    Case("scaled_dot", 100, 3, 64, 64, False, "empty"),
    Case("scaled_dot", 257, 1, 16, 16, True, "none"),
    Case("scaled_dot", 40, 2, 48, 16, True, "empty"),  # dk > dv: chunked scores
    Case("scaled_dot", 100, 2, 32, 32, True, "empty", F16),
    Case("scaled_dot", 17, 4, 16, 16, False, "pad", F16),
    Case("scaled_dot", 23, 2, 8, 8, True, "pad"),  # head dim 8, padded to 16
    Case("scaled_dot", 30, 1, 24, 24, False, "empty"),  # 24, padded to 32
    # whole 32-token tiles only: the unmasked loops alone (bidirectional), and causal tiles off
    # and on the diagonal with no ragged tile after them
    Case("scaled_dot", 64, 2, 32, 32, False, "none"),
    Case("scaled_dot", 96, 1, 16, 16, True, "none", F16),
    Case("metric", 64, 2, 32, 32, True, "pad"),
    Case("quadratic", 1, 1, 16, 16, True, "none"),
    Case("quadratic", 17, 2, 32, 16, False, "pad"),
    Case("quadratic", 257, 2, 32, 16, True, "pad", F16),
    Case("quadratic", 100, 1, 64, 64, True, "none"),
    Case("quadratic", 33, 4, 48, 16, True, "empty"),
    Case("quadratic", 17, 2, 160, 32, False, "empty"),  # D = 160: 5 chunks fwd, one 256 tile bwd
    Case("quadratic", 40, 2, 256, 32, True, "pad"),  # the backward's q/k tile 256 wide
    Case("quadratic", 37, 2, 512, 64, True, "pad"),  # ... and 512 wide, the widest one tile
    Case("quadratic", 21, 1, 512, 16, False, "empty", F16),
    Case("quadratic", 19, 1, 600, 128, True, "pad"),  # D > 512: the backward chunks too
    Case("quadratic", 60, 3, 48, 16, False, "pad", F16),
    Case("metric", 1, 1, 16, 16, True, "none"),
    Case("metric", 17, 3, 32, 32, False, "pad"),
    Case("metric", 100, 2, 64, 64, True, "empty"),
    Case("metric", 257, 1, 16, 16, False, "pad", F16),
    Case("metric", 40, 4, 16, 16, True, "empty", F16),
]


def make_mask(kind: str, b: int, n: int, causal: bool) -> torch.Tensor | None:
    if kind == "none":
        return None
    mask = torch.zeros(b, n, dtype=torch.bool)
    lengths = torch.randint(1, n + 1, (b,))
    lengths[0] = n
    mask |= torch.arange(n)[None, :] >= lengths[:, None]
    if kind == "empty":
        if causal:
            mask[0, 0] = True  # query 0 of item 0 sees only key 0, which is padding
        else:
            mask[1, :] = True  # every key of item 1 is padding
    return mask


def empty_rows(mask: torch.Tensor | None, n: int, causal: bool) -> torch.Tensor | None:
    """(B, N) bool: queries with no visible key."""
    if mask is None:
        return None
    allowed = (~mask)[:, None, :].expand(-1, n, -1)
    if causal:
        allowed = allowed & torch.ones(n, n, dtype=torch.bool).tril()
    return ~allowed.any(-1)


def make_inputs(case: Case, b: int = 2) -> tuple[list[torch.Tensor], float]:
    h, n, dk, dv, dt = case.heads, case.n, case.dk, case.dv, case.dtype
    if case.op == "scaled_dot":
        tensors = [torch.randn(b, h, n, dk), torch.randn(b, h, n, dk), torch.randn(b, h, n, dv)]
        scale = 1 / math.sqrt(dk)
    elif case.op == "quadratic":
        tensors = [torch.randn(b, n, dk), torch.randn(h, dk, dk) / 3, torch.randn(b, h, n, dv)]
        scale = 1 / math.sqrt(dk)
    else:
        c = torch.randn(h, dk, dk) / math.sqrt(dk)
        tensors = [torch.randn(b, h, n, dk), (c + c.transpose(1, 2)) / 2]
        scale = 1 / math.sqrt(dk)
    return [t.to(dt).requires_grad_() for t in tensors], scale


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.sample(8)
def test_forward_and_backward_match_reference(case: Case) -> None:
    inputs, scale = make_inputs(case)
    mask = make_mask(case.mask, 2, case.n, case.causal)
    kernel_fn = functools.partial(getattr(ops, f"{case.op}_attention"), impl="triton")
    ref_fn = getattr(reference, f"{case.op}_attention")

    out = kernel_fn(*inputs, case.causal, mask, scale)
    ref_inputs = [t.detach().clone().requires_grad_() for t in inputs]
    ref = ref_fn(*ref_inputs, case.causal, mask, scale)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    tol = TOL[case.dtype]
    assert rel_err(out, ref) <= tol

    empty = empty_rows(mask, case.n, case.causal)
    if empty is not None and case.mask == "empty":
        assert empty.any()
        assert (out.detach().transpose(1, 2)[empty] == 0).all(), "masked rows must be zeros"

    d_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, inputs, d_out)
    ref_grads = torch.autograd.grad(ref, ref_inputs, d_out)
    for i, (g, r) in enumerate(zip(grads, ref_grads, strict=True)):
        assert g.shape == r.shape and g.dtype == r.dtype
        assert rel_err(g, r) <= tol, f"gradient of input {i}"
    if empty is not None and case.mask == "empty" and case.op == "scaled_dot":
        # a query with no visible key gets no gradient (its output is a constant zero)
        assert (grads[0].detach().transpose(1, 2)[empty] == 0).all()


def test_ops_dispatch_to_the_kernels_and_accept_strided_views() -> None:
    """impl="triton" through the public ops, with q/k/v as views of one fused projection whose
    feature stride is not 1 (transposed), the way a user might pass them."""
    b, h, n, dk = 2, 2, 19, 16
    qkv = torch.randn(b, h, 3 * dk, n).transpose(-1, -2)  # feature stride n, not 1
    q, k, v = qkv.split(dk, dim=-1)
    assert q.stride(-1) != 1
    got = ops.scaled_dot_attention(q, k, v, causal=True, impl="triton")
    want = ops.scaled_dot_attention(q, k, v, causal=True, impl="torch")
    assert rel_err(got, want) <= 1e-4


def test_quadratic_reads_x_once_for_all_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel sees k = x through a zero head stride, never a per-head copy."""
    seen = []
    original = launch._Problem.__init__

    def spy(self, q, k, *args, **kwargs):
        seen.append(k)
        original(self, q, k, *args, **kwargs)

    monkeypatch.setattr(launch._Problem, "__init__", spy)
    x = torch.randn(2, 9, 16)
    ops.quadratic_attention(
        x, torch.randn(3, 16, 16), torch.randn(2, 3, 9, 16), False, None, 0.25, impl="triton"
    )
    assert seen[0].stride(1) == 0 and seen[0].data_ptr() == x.data_ptr()


def test_every_launch_uses_a_variant_the_aot_report_compiles() -> None:
    """The report compiles spec_cases(); whatever widths a user passes, the launchers land there
    (the flags are the launchers' own, from _Problem)."""
    compiled = set(attention.spec_cases())
    for dtype in TRITON_DTYPES:
        for d_v in range(1, attention.MAX_HEAD + 1):
            widths = [(d_v, True), (d_v, False), (3 * d_v + 5, False), (4 * d_v + 1, False)]
            widths += [(d, False) for d in (256, 512, 513, 1000)]
            for d_qk, metric in widths:
                p = torch.empty(1, 1, 1, d_qk, dtype=dtype)
                v = p if metric else torch.empty(1, 1, 1, d_v, dtype=dtype)
                m = torch.empty(1, d_qk, d_qk, dtype=dtype) if metric else None
                prob = launch._Problem(p, p, v, m, False, None, 0.25)
                fwd, bwd = prob.flags(), prob.backward_flags()
                variant = ("attn_fwd", dtype, fwd["HEAD"], fwd["HEAD"], metric, fwd["CHUNKED"])
                assert variant in compiled, (dtype, d_v, d_qk, metric)
                for kernel in ("attn_bwd_dkdv", "attn_bwd_dq"):
                    variant = (kernel, dtype, bwd["HEAD"], bwd["QK_HEAD"], metric, bwd["CHUNKED"])
                    assert variant in compiled, (kernel, dtype, d_v, d_qk, metric)


@pytest.mark.parametrize("d_qk,d_v", [(48, 16), (160, 32), (512, 64), (512, 16), (513, 64)])
def test_backward_computes_the_scores_once_per_tile_pair_up_to_512(d_qk: int, d_v: int) -> None:
    """Up to q/k width 512 each backward program holds the whole q/k width in one tile: no
    feature-chunk grid axis, so no program recomputes scores that another one computed. Wider,
    the backward falls back to HEAD-wide chunks."""
    prob = launch._Problem(
        torch.empty(1, 1, 1, d_qk),
        torch.empty(1, 1, 1, d_qk),
        torch.empty(1, 1, 1, d_v),
        None,
        False,
        None,
        0.25,
    )
    flags = prob.backward_flags()
    assert flags["HEAD"] == attention.head_width(d_v)
    if d_qk <= attention.MAX_QK_HEAD:
        assert prob.backward_chunks() == 1 and not flags["CHUNKED"]
        assert d_qk <= flags["QK_HEAD"] < 2 * d_qk
    else:
        assert flags["QK_HEAD"] == flags["HEAD"] and flags["CHUNKED"]
        assert prob.backward_chunks() == -(-d_qk // flags["HEAD"])


def test_gpu_autotuner_tries_exactly_the_table_configs() -> None:
    """On a GPU the autotuner holds every config of a kernel and the pruner keeps, per call, the
    ones of that variant's row: the same configs the AOT report compiles."""
    for kernel in attention.KERNELS:
        configs = tuning._as_triton_configs(kernel, interpret=False)
        prune = tuning._pruner(kernel, interpret=False)
        for name, dtype, head, qk_head, metric, chunked in attention.spec_cases():
            if name != kernel:
                continue
            extra = {} if kernel == "attn_fwd" else {"QK_HEAD": qk_head}
            kept = prune(
                configs,
                {"Q": torch.empty(0, dtype=dtype)},
                HEAD=head,
                METRIC=metric,
                CHUNKED=chunked,
                **extra,
            )
            got = [
                (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) for c in kept
            ]
            want = attention.block_configs(
                kernel, dtype, head, metric, chunked, interpret=False, qk_head=qk_head
            )
            assert sorted(got) == sorted(want), (kernel, dtype, head, qk_head, metric, chunked)


@pytest.mark.parametrize("op", ["scaled_dot", "quadratic", "metric"])
def test_results_do_not_depend_on_the_tile_shape(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU configs use unequal query and key tiles (e.g. 128×64, 16×32); the causal loop bounds
    and the ragged last tiles must not assume BLOCK_M == BLOCK_N."""
    tiles = {"_fwd": (64, 16), "_bwd_dkdv": (16, 32), "_bwd_dq": (32, 16)}
    for name, (bm, bn) in tiles.items():
        config = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=4, num_stages=1)
        monkeypatch.setattr(getattr(launch, name), "configs", [config])
    dk = {"scaled_dot": 32, "quadratic": 40, "metric": 16}[op]
    case = Case(op, 70, 2, dk, 16, True, "empty")
    test_forward_and_backward_match_reference(case)


@pytest.mark.parametrize("mode", ["sink", "sigmoid"])
def test_sink_and_sigmoid_do_not_depend_on_the_tile_shape(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sink's running-max start and the sigmoid weights under unequal query and key tiles
    (the GPU configs' shapes), causal, with a fully masked row: forward and every gradient
    against the float64 reference."""
    tiles = {"_fwd": (64, 16), "_bwd_dkdv": (16, 32), "_bwd_dq": (32, 16)}
    for name, (bm, bn) in tiles.items():
        config = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=4, num_stages=1)
        monkeypatch.setattr(getattr(launch, name), "configs", [config])
    b, h, n, d = 2, 2, 70, 24
    leaves = [torch.randn(b, h, n, d, dtype=torch.float64) for _ in range(3)]
    extra = [torch.tensor([0.5, -2.0], dtype=torch.float64)] if mode == "sink" else []
    leaves64 = [t.requires_grad_() for t in (*leaves, *extra)]
    leaves32 = [t.detach().float().requires_grad_() for t in leaves64]
    mask = make_mask("empty", b, n, True)
    if mode == "sink":
        run = lambda impl, q, k, v, sink: ops.scaled_dot_attention(
            q, k, v, True, mask, impl=impl, sink=sink
        )
    else:
        run = lambda impl, q, k, v: ops.sigmoid_attention(q, k, v, True, mask, bias=-2.0, impl=impl)
    out, want = run("triton", *leaves32), run("torch", *leaves64)
    assert rel_err(out, want) <= 2e-5
    d_out = torch.randn(want.shape, dtype=torch.float64)
    grads = torch.autograd.grad(out, leaves32, d_out.float())
    for i, (g, w) in enumerate(zip(grads, torch.autograd.grad(want, leaves64, d_out), strict=True)):
        assert rel_err(g, w) <= 2e-5, f"gradient of input {i}"


# ---------------------------------------------------------------------------------------------
# Bad input: a ValueError that names the argument, before any kernel runs
# ---------------------------------------------------------------------------------------------


def _qkv(n: int = 8, dk: int = 16, dv: int = 16, dtype: torch.dtype = torch.float32):
    return (
        torch.randn(1, 2, n, dk, dtype=dtype),
        torch.randn(1, 2, n, dk, dtype=dtype),
        torch.randn(1, 2, n, dv, dtype=dtype),
    )


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda q, k, v: (q, k[:, :1], v), "k must have the shape of q"),
        (lambda q, k, v: (q, k, v[..., :4, :]), r"v must have \(batch, heads, tokens\)"),
        (lambda q, k, v: (q, k.half(), v), "k has dtype torch.float16 but q has"),
        (lambda q, k, v: (q.double(), k.double(), v.double()), "q has dtype torch.float64"),
        (lambda q, k, v: (q, k, torch.randn(1, 2, 8, 160)), "head dim is 160"),
        (lambda q, k, v: (q[0], k, v), "q must have 4 dims"),
    ],
)
def test_the_public_op_rejects_bad_operands_for_the_kernels(change, match) -> None:
    q, k, v = change(*_qkv())
    with pytest.raises(ValueError, match=match):
        ops.scaled_dot_attention(q, k, v, impl="triton")


def test_metric_and_quadratic_check_their_arguments() -> None:
    p, m = torch.randn(1, 2, 8, 16), torch.randn(2, 16, 16)
    metric = functools.partial(ops.metric_attention, impl="triton")
    with pytest.raises(ValueError, match=r"m must have shape \(heads, dk, dk\)"):
        metric(p, m[..., :8])
    with pytest.raises(ValueError, match=r"dropout_p must be a float in \[0, 1\)"):
        metric(p, m, dropout_p=1.0)
    with pytest.raises(ValueError, match="scale must be a finite real number"):
        metric(p, m, scale=float("inf"))
    x, v = torch.randn(1, 8, 16), torch.randn(1, 2, 8, 8)
    with pytest.raises(ValueError, match="u must have shape"):
        ops.quadratic_attention(x, m[..., :12], v, impl="triton")
    x64, u64, v64 = x.double(), m[..., :16].double(), v.double()
    with pytest.raises(ValueError, match="x has dtype torch.float64; the Triton kernels take"):
        ops.quadratic_attention(x64, u64, v64, impl="triton")


def test_operator_backward_rejects_what_the_forward_did_not_save() -> None:
    q, k, v = _qkv()
    out, lse = torch.ops.attnzoo.scaled_dot_attention(q, k, v, None, False, 0.25, 0.0, None)
    backward = torch.ops.attnzoo.scaled_dot_attention_backward
    bad = {
        "d_out": (out[..., :8], out, lse),
        "out": (out, out.half(), lse),
        "lse": (out, out, lse.mT.contiguous().mT),  # the kernels index lse densely
    }
    for name, (d_out, o, s) in bad.items():
        with pytest.raises(ValueError, match=f"{name} must be a"):
            backward(d_out, q, k, v, o, s, None, False, 0.25, 0.0, None)


def test_launcher_rejects_a_feature_stride_other_than_one() -> None:
    q, k, v = _qkv()
    k_strided = torch.randn(1, 2, 16, 8).transpose(-1, -2)
    with pytest.raises(ValueError, match="k must have unit stride"):
        launch._Problem(q, k_strided, v, None, False, None, 0.25)


@pytest.mark.parametrize(
    "mask,match",
    [
        (torch.zeros(1, 8, dtype=torch.int64), "bool tensor"),
        (torch.zeros(1, 7, dtype=torch.bool), r"= \(1, 8\), got \(1, 7\)"),
    ],
)
def test_bad_masks_are_refused(mask, match) -> None:
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=match):
        ops.scaled_dot_attention(q, k, v, key_padding_mask=mask, impl="triton")


def test_metric_and_quadratic_reject_bad_shapes() -> None:
    p = torch.randn(1, 2, 8, 16)
    metric = functools.partial(ops.metric_attention, impl="triton")
    with pytest.raises(ValueError, match=r"m must have shape \(heads, dk, dk\) = \(2, 16, 16\)"):
        metric(p, torch.randn(2, 16, 8), False, None, 0.25)
    with pytest.raises(ValueError, match="metric attention takes"):
        metric(torch.randn(1, 1, 4, 144), torch.randn(1, 144, 144), False, None, 0.1)
    with pytest.raises(ValueError, match=r"u must have shape"):
        ops.quadratic_attention(
            torch.randn(1, 8, 16),
            torch.randn(2, 16, 12),
            torch.randn(1, 2, 8, 8),
            False,
            None,
            0.25,
            impl="triton",
        )
    with pytest.raises(ValueError, match="scale must be a finite real number"):
        metric(p, torch.randn(2, 16, 16), False, None, float("nan"))


# ---------------------------------------------------------------------------------------------
# The mixers on the kernels: a tiny model gives the same loss and gradients as on PyTorch
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mixer,causal", [("scaled_dot", True), ("quadratic", False), ("metric", True)]
)
@pytest.mark.slow  # a model trained in the interpreter; the ops' own checks stay
def test_tiny_model_on_triton_matches_torch_and_trains(mixer: str, causal: bool) -> None:
    def build(impl: str) -> Model:
        torch.manual_seed(1)
        cfg = ModelConfig(dim=32, depth=2, heads=2, mixer=mixer, causal=causal, impl=impl)
        return Model(cfg, out_features=11, max_len=24, vocab_size=11, head="lm")

    tokens = torch.randint(0, 11, (2, 21))
    mask = torch.zeros(2, 21, dtype=torch.bool)
    mask[1, 15:] = True
    models = {impl: build(impl) for impl in ("torch", "triton")}
    losses, grads = {}, {}
    for impl, model in models.items():
        logits = model(tokens, mask)
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, 11), tokens[:, 1:].reshape(-1)
        )
        loss.backward()
        losses[impl] = loss.item()
        grads[impl] = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert losses["triton"] == pytest.approx(losses["torch"], rel=1e-5)
    assert grads["triton"].keys() == grads["torch"].keys()
    for name, g in grads["triton"].items():
        assert rel_err(g, grads["torch"][name]) <= 1e-4, name

    model = models["triton"]
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    history = []
    for _ in range(4):
        opt.zero_grad()
        logits = model(tokens, mask)
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, 11), tokens[:, 1:].reshape(-1)
        )
        loss.backward()
        opt.step()
        history.append(loss.item())
    assert history[-1] < history[0]


@pytest.mark.parametrize("causal", [False, True])
def test_leading_padding_with_far_negative_scores(causal: bool) -> None:
    """Keys 0..39 are padding, so each query's first key tile has no visible key; the later
    tiles' scores all lie near -1000 (base e). The running max must stay -inf across the empty
    tile: a stand-in of 0 would make every later probability underflow and the row come out
    empty. Equal scores: the output is the mean of the visible values."""
    b, h, n, d = 1, 2, 70, 16
    q = torch.full((b, h, n, d), 2.0)
    k = torch.full((b, h, n, d), -2.0) + 1e-3 * torch.randn(b, h, n, d)
    v = torch.randn(b, h, n, d)
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[:, :40] = True
    scale = 16.0  # scores ≈ 2 · (-2) · d · 16 = -1024: exp2 of their distance to 0 underflows
    out = ops.scaled_dot_attention(q, k, v, causal, mask, scale, impl="triton")
    want = ops.scaled_dot_attention(
        q.double(), k.double(), v.double(), causal, mask, scale, impl="torch"
    )
    visible = ~empty_rows(mask, n, causal)[0]
    assert visible[40:].all() and visible[:40].all() != causal  # causal: queries < 40 see nothing
    assert rel_err(out[..., visible, :], want[..., visible, :]) <= 1e-4
    assert (out[..., ~visible, :] == 0).all()


def test_interpreter_refuses_bf16_attention_because_its_bf16_dot_is_wrong() -> None:
    """The interpreter's tl.dot on bf16 tiles returns garbage (checked here on one 16×16
    product, so that a Triton that fixes it fails this test and the refusal can go); the
    attention ops refuse bf16 there instead of answering wrongly. Pooling has no dot: bf16 runs."""

    @triton.jit
    def _dot(A, B, C):
        o = tl.arange(0, 16)
        tile = o[:, None] * 16 + o[None, :]
        tl.store(C + tile, tl.dot(tl.load(A + tile), tl.load(B + tile)))

    a, b = torch.randn(16, 16).bfloat16(), torch.randn(16, 16).bfloat16()
    c = torch.empty(16, 16)
    _dot[(1,)](a, b, c)
    assert rel_err(c, a.float() @ b.float()) > 1.0, "the interpreter's bf16 dot works now"
    q = torch.randn(1, 2, 8, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="no bfloat16 under TRITON_INTERPRET=1"):
        ops.scaled_dot_attention(q, q, q, impl="triton")
    x = torch.randn(1, 8, 16, dtype=torch.bfloat16)
    assert rel_err(ops.pool_mix(x, 3, impl="triton"), ops.pool_mix(x, 3, impl="torch")) < 1e-2
