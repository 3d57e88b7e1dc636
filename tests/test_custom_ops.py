"""The ops as PyTorch operators: opcheck, the dtype policy under autocast, torch.compile, and
attention-probability dropout.

The Triton implementation runs in Triton's interpreter here (tests/conftest.py). The interpreter
has no bf16 arithmetic, so the Triton path is checked under fp16 autocast on CPU and under bf16
only on a GPU (tests/test_cuda.py); the torch paths are checked under both.
"""

from __future__ import annotations

import functools

import attnzoo.kernels as ops
import pytest
import torch
from attnzoo.kernels import attention
from attnzoo.kernels.attention import launch
from attnzoo.kernels.attention import naive as reference

from attnzoo import Model, ModelConfig
from attnzoo.mixers import MIXERS as REGISTRY

MIXERS = tuple(sorted(REGISTRY))
ATTENTION = tuple(n for n in MIXERS if hasattr(REGISTRY[n], "attention_probs"))
# attention mixers that drop attention probabilities (linear attention forms none to drop)
DROPOUT = tuple(n for n in ATTENTION if getattr(REGISTRY[n], "drops_attention", True))
ATTENTION_OPS = ("scaled_dot", "quadratic", "metric")  # attnzoo.kernels.<op>_attention


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def padding(b: int, n: int) -> torch.Tensor:
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[1, n // 2 :] = True
    return mask


def op_inputs(
    name: str,
    dropout_p: float = 0.0,
    b: int = 2,
    h: int = 2,
    n: int = 19,
    d: int = 16,
    sink: bool = False,
):
    """Arguments of torch.ops.attnzoo.<name>, leaves requiring grad; `sink`: with a learned sink
    (one logit per head, the last argument) for the three softmax ops."""
    mask = padding(b, n)
    seed = torch.tensor([1234]) if dropout_p > 0 else None
    leaf = lambda *shape: torch.randn(*shape).requires_grad_()
    sinks = (leaf(h),) if sink else ()
    if name == "scaled_dot_attention":
        return (
            leaf(b, h, n, d),
            leaf(b, h, n, d),
            leaf(b, h, n, d),
            mask,
            True,
            0.25,
            dropout_p,
            seed,
            *((None, *sinks) if sink else ()),  # no window, then the sink
        )
    if name == "quadratic_attention":
        return (
            leaf(b, n, d),
            leaf(h, d, d) / 4,
            leaf(b, h, n, d),
            mask,
            False,
            0.25,
            dropout_p,
            seed,
            *sinks,
        )
    if name == "metric_attention":
        return (leaf(b, h, n, d), leaf(h, d, d) / 4, mask, True, 0.25, dropout_p, seed, *sinks)
    if name == "sigmoid_attention":
        return (leaf(b, h, n, d), leaf(b, h, n, d), leaf(b, h, n, d), mask, True, 0.25, -1.0)
    return (leaf(b, n, d), 3, False, mask)


# the custom ops this file checks: the attention family's and pool_mix (linear_attention's and
# gated_linear_attention's are checked in their own files)
OPS = (*attention.ops.AUTO_TRITON, "pool_mix")
# the ops that take dropout and a sink (a softmax over keys)
SOFTMAX_OPS = ("scaled_dot_attention", "quadratic_attention", "metric_attention")


# ---------------------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,dropout_p,sink",
    [(op, 0.0, False) for op in OPS]
    + [(op, 0.25, False) for op in SOFTMAX_OPS]
    + [(op, 0.0, True) for op in SOFTMAX_OPS],
)
@pytest.mark.sample(6)
def test_opcheck_passes_for_every_op(name: str, dropout_p: float, sink: bool) -> None:
    """Schema, fake implementation, autograd registration and AOT dispatch, as torch checks them
    (with a sink: its gradient too)."""
    op = getattr(torch.ops.attnzoo, name).default
    results = torch.library.opcheck(op, op_inputs(name, dropout_p, sink=sink))
    assert set(results.values()) == {"SUCCESS"}, results


@pytest.mark.parametrize("name", ["scaled_dot_attention", "metric_attention", "pool_mix"])
def test_the_statistic_output_gets_no_gradient_and_no_zero_filled_one(name) -> None:
    """lse and rcount are the backward's statistics, not outputs to differentiate: they do not
    require grad on either path, and the backward is not handed a zero-filled tensor for them
    (autograd's default: one allocation and one fill kernel per backward call)."""
    args = op_inputs(name, 0.0)
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    out, statistic = getattr(torch.ops.attnzoo, name)(*args)
    assert out.requires_grad and not statistic.requires_grad
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.autograd.grad(out, leaves, torch.ones_like(out))
    events = {event.name for event in prof.events()}
    assert not events & {"aten::zeros", "aten::zero_"}, sorted(events)


def test_the_public_ops_are_registered_in_the_attnzoo_namespace() -> None:
    for name in OPS:
        assert isinstance(getattr(torch.ops.attnzoo, name).default, torch._ops.OpOverload)


def test_the_autocast_rule_casts_direct_calls_of_the_op() -> None:
    """torch.ops.attnzoo.* under autocast: fp32 activations and parameters run in the autocast
    dtype, like a matmul; the mask and the seed are left alone."""
    x, u, v, mask, causal, scale, p, seed = op_inputs("quadratic_attention")
    with torch.autocast("cpu", dtype=torch.float16):
        out = torch.ops.attnzoo.quadratic_attention(x, u, v.half(), mask, causal, scale, p, seed)
    assert out.dtype == torch.float16
    want = reference.quadratic_attention(x.half(), u.half(), v.half(), causal, mask, scale)
    assert rel_err(out, want) <= 1e-2


def test_the_autocast_rule_leaves_the_sink_in_its_dtype() -> None:
    """A sink is a logit the kernels read in fp32: under autocast the activations are cast, the
    sink is not, and its gradient comes back in its own dtype."""
    q, k, v, mask, causal, scale, p, seed, window, sink = op_inputs(
        "scaled_dot_attention", sink=True
    )
    with torch.autocast("cpu", dtype=torch.float16):
        out, _ = torch.ops.attnzoo.scaled_dot_attention(
            q, k, v, mask, causal, scale, p, seed, window, sink
        )
    assert out.dtype == torch.float16
    (dsink,) = torch.autograd.grad(out.float().sum(), sink)
    assert dsink.dtype == torch.float32
    want = reference.scaled_dot_attention(
        q.half(), k.half(), v.half(), causal, mask, scale, sink=sink
    )
    assert rel_err(out, want) <= 1e-2


# ---------------------------------------------------------------------------------------------
# The dtype policy
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["auto", "torch", "triton"])
def test_quadratic_under_autocast_takes_fp32_x_and_bf16_v(impl: str) -> None:
    """What a block hands the quadratic mixer under autocast: x from LayerNorm (fp32), v from a
    Linear (the autocast dtype). It used to stop with a dtype mismatch."""
    dtype = torch.float16 if impl == "triton" else torch.bfloat16  # the interpreter lacks bf16
    x, u, v = torch.randn(2, 9, 16), torch.randn(2, 16, 16) / 4, torch.randn(2, 2, 9, 16)
    with torch.autocast("cpu", dtype=dtype):
        out = ops.quadratic_attention(x, u, v.to(dtype), impl=impl)
    assert out.dtype == dtype
    want = reference.quadratic_attention(x, u, v, False, None, 0.25)
    assert rel_err(out, want) <= 3e-2


def test_outside_autocast_parameters_follow_the_activations_and_activations_must_agree() -> None:
    p = torch.randn(1, 2, 7, 8, dtype=torch.float16)
    m = torch.eye(8, dtype=torch.float64).expand(2, 8, 8)  # a parameter: cast to p's dtype
    assert ops.metric_attention(p, m).dtype == torch.float16
    x, u = torch.randn(1, 7, 8), torch.randn(2, 8, 8)
    with pytest.raises(ValueError, match="v has dtype torch.float16 but x has torch.float32"):
        ops.quadratic_attention(x, u, torch.randn(1, 2, 7, 8, dtype=torch.float16))


def test_fp64_is_never_cast_by_autocast() -> None:
    q = torch.randn(1, 2, 5, 4, dtype=torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert ops.scaled_dot_attention(q, q, q).dtype == torch.float64


def _model(mixer: str, impl: str, attn_dropout: float = 0.0) -> Model:
    torch.manual_seed(1)
    options = {"attn_dropout": attn_dropout} if mixer in ATTENTION else {}
    causal = getattr(REGISTRY[mixer], "supports_causal", True)  # a language model where it can
    cfg = ModelConfig(
        dim=32, depth=2, heads=2, mixer=mixer, causal=causal, impl=impl, mixer_options=options
    )
    return Model(cfg, out_features=11, max_len=24, vocab_size=11, head="lm")


def _loss_and_grads(model: torch.nn.Module, tokens: torch.Tensor, dtype: torch.dtype | None):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
        logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, 11), tokens[:, 1:].reshape(-1)
    )
    loss.backward()
    params = getattr(model, "_orig_mod", model).named_parameters()  # compiled: the same params
    return loss.detach(), logits.dtype, {n: p.grad for n, p in params}


# Softpick's weights have a kink wherever a score crosses 0 (the ReLU above, |·| below), and at
# init the early causal rows are ratios of small numbers: half precision moves its gradients by
# 4.5–30% of fp32's (6 seeds; 1.1–5.4% with the mixer itself kept in fp32), softmax's by < 1%.
GRAD_TOLERANCE = {"softpick": 0.5}


@pytest.mark.parametrize("impl", ["auto", "torch", "triton"])
@pytest.mark.parametrize("mixer", MIXERS)
@pytest.mark.sample(16)
def test_every_mixer_trains_under_autocast(mixer: str, impl: str) -> None:
    """Forward and backward under autocast give the fp32 loss and gradients to half precision
    (gradients compared as one vector: some are ~0 in exact arithmetic, e.g. pooling's norm bias,
    which a mean minus the token cancels)."""
    dtype = torch.float16 if impl == "triton" else torch.bfloat16
    tokens = torch.randint(0, 11, (2, 21))
    model = _model(mixer, impl)
    loss32, _, grads32 = _loss_and_grads(model, tokens, None)
    loss, logits_dtype, grads = _loss_and_grads(model, tokens, dtype)
    assert logits_dtype == dtype
    assert torch.isfinite(loss) and abs(loss.item() - loss32.item()) <= 2e-2 * loss32.item()
    assert all(torch.isfinite(g).all() for g in grads.values() if g is not None)
    names = [n for n, g in grads.items() if g is not None]
    assert names == [n for n, g in grads32.items() if g is not None]
    flat = lambda gs: torch.cat([gs[n].float().flatten() for n in names])
    assert rel_err(flat(grads), flat(grads32)) <= GRAD_TOLERANCE.get(mixer, 0.05)


# ---------------------------------------------------------------------------------------------
# torch.compile
# ---------------------------------------------------------------------------------------------


# Slow tier: each case traces a whole model (~10 s); tests/test_gated_linear_attention.py compiles
# one in the default tier.
@pytest.mark.slow
@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize("mixer", MIXERS)
def test_every_mixer_compiles_with_fullgraph(mixer: str, impl: str) -> None:
    """Dynamo traces the whole model in one graph, with the Triton ops as opaque nodes (it once
    traced into the kernels and failed), under autocast and with attention dropout on; outputs
    and gradients equal eager's. aot_eager: the tracing and autograd of torch.compile without
    Inductor's slow C++ build; tests/test_custom_ops.py's Inductor test covers code generation."""
    torch._dynamo.reset()
    dtype = torch.float16 if impl == "triton" else torch.bfloat16
    tokens = torch.randint(0, 11, (2, 21))
    model = _model(mixer, impl, attn_dropout=0.1 if mixer in ATTENTION else 0.0)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    torch.manual_seed(5)
    eager_loss, _, eager_grads = _loss_and_grads(model, tokens, dtype)
    torch.manual_seed(5)
    loss, logits_dtype, grads = _loss_and_grads(compiled, tokens, dtype)
    assert logits_dtype == dtype
    assert loss.item() == pytest.approx(eager_loss.item(), rel=1e-3)
    for name, g in grads.items():
        if g is not None:
            assert rel_err(g, eager_grads[name]) <= 1e-2, name


# Slow tier: Inductor compiles a model through the Triton ops (~30 s on 2 CPU cores). CI runs it on
# the newest torch (the slow tier) and on the oldest that pyproject.toml admits (.ci/run names it).
@pytest.mark.slow
def test_inductor_compiles_a_model_on_the_triton_ops() -> None:
    """The default backend (Inductor, generating C++ on CPU) around the opaque Triton ops."""
    torch._dynamo.reset()
    tokens = torch.randint(0, 11, (2, 21))
    model = _model("metric", "triton")
    compiled = torch.compile(model, fullgraph=True)
    eager_loss, _, eager_grads = _loss_and_grads(model, tokens, None)
    loss, _, grads = _loss_and_grads(compiled, tokens, None)
    assert loss.item() == pytest.approx(eager_loss.item(), rel=1e-5)
    for name, g in grads.items():
        assert rel_err(g, eager_grads[name]) <= 1e-4, name


# ---------------------------------------------------------------------------------------------
# Attention dropout
# ---------------------------------------------------------------------------------------------


def _attention_call(op: str, impl: str, dropout_p: float, b: int, n: int = 12, d: int = 16):
    """A call of ops.<op> on inputs repeated over the batch, so every batch row is one draw."""
    torch.manual_seed(3)
    h = 1
    if op == "scaled_dot":
        args = [torch.randn(1, h, n, d).expand(b, -1, -1, -1) for _ in range(3)]
    elif op == "quadratic":
        args = [
            torch.randn(1, n, d).expand(b, -1, -1),
            torch.randn(h, d, d) / 4,
            torch.randn(1, h, n, d).expand(b, -1, -1, -1),
        ]
    else:
        args = [torch.randn(1, h, n, d).expand(b, -1, -1, -1), torch.randn(h, d, d) / 4]
    fn = getattr(ops, f"{op}_attention")
    return functools.partial(fn, *args, True, None, None, dropout_p=dropout_p, impl=impl)


@pytest.mark.parametrize("impl", ["auto", "torch", "triton"])
@pytest.mark.parametrize("op", ATTENTION_OPS)
@pytest.mark.sample(2)
def test_dropout_averages_to_the_output_without_dropout(op: str, impl: str) -> None:
    """Kept probabilities are scaled by 1/(1-p): the mean over many draws is the plain output
    within four standard errors, and a single draw is not."""
    draws = 256
    out = _attention_call(op, impl, 0.3, draws)()
    plain = _attention_call(op, impl, 0.0, 1)()[0]
    std_err = float(out.std(0).norm() / plain.norm()) / draws**0.5
    assert rel_err(out[0], plain) > 8 * std_err  # one draw differs
    assert rel_err(out.mean(0), plain) <= 4 * std_err


@pytest.mark.parametrize("op", ATTENTION_OPS)
def test_triton_dropout_matches_the_reference_given_its_mask_forward_and_backward(op: str) -> None:
    """The kernels draw the mask from the seed; with that mask (written out by
    `attention.dropout_keep_mask`) the reference gives the same output and gradients."""
    b, h, n, d, p = 2, 2, 37, 16, 0.2
    name = f"{op}_attention"
    args = op_inputs(name, p, b=b, h=h, n=n, d=d)
    seed = args[-1]
    keep = attention.dropout_keep_mask(seed, b, h, n, p)
    assert 0.7 < keep.float().mean().item() < 0.9  # about 1 - p kept
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    out = getattr(torch.ops.attnzoo, name)(*args)
    out = out[0] if isinstance(out, tuple) else out
    ref_leaves = [t.detach().clone().requires_grad_() for t in leaves]
    if op == "metric":
        (pp, m), mask, causal, scale = ref_leaves, args[2], args[3], args[4]
        ref = reference.metric_attention(pp, m, causal, mask, scale, p, keep)
    else:
        (a0, a1, a2), mask, causal, scale = ref_leaves, args[3], args[4], args[5]
        ref = getattr(reference, name)(a0, a1, a2, causal, mask, scale, p, keep)
    assert rel_err(out, ref) <= 1e-5
    cot = torch.randn_like(ref)
    for g, r in zip(
        torch.autograd.grad(out, leaves, cot),
        torch.autograd.grad(ref, ref_leaves, cot),
        strict=True,
    ):
        assert rel_err(g, r) <= 1e-4


def test_triton_dropout_is_reproducible_from_torch_manual_seed_and_fresh_per_call() -> None:
    call = _attention_call("scaled_dot", "triton", 0.5, 2)
    torch.manual_seed(7)
    first, second = call(), call()
    torch.manual_seed(7)
    again = call()
    assert torch.equal(first, again)
    assert not torch.equal(first, second)


def test_dropout_zero_compiles_the_kernel_without_dropout() -> None:
    q = torch.randn(1, 1, 4, 16)
    assert launch._Problem(q, q, q, None, False, None, 0.25).flags()["DROPOUT"] is False
    seed = torch.tensor([1])
    assert launch._Problem(q, q, q, None, False, None, 0.25, 0.1, seed).flags()["DROPOUT"]


@pytest.mark.parametrize("impl", ["auto", "triton"])
@pytest.mark.parametrize("mixer", DROPOUT)
def test_mixer_dropout_is_on_in_training_and_off_in_eval(mixer: str, impl: str) -> None:
    tokens = torch.randint(0, 11, (2, 21))
    model, plain = _model(mixer, impl, attn_dropout=0.5), _model(mixer, impl)
    model.eval()
    assert torch.equal(model(tokens), plain(tokens))
    model.train()
    assert not torch.allclose(model(tokens), model(tokens))


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda q: ops.scaled_dot_attention(q, q, q, dropout_p=1.0),
            r"dropout_p must be a float in \[0, 1\)",
        ),
        (
            lambda q: ops.metric_attention(q, q[0], dropout_p=-0.1),
            r"dropout_p must be a float in \[0, 1\)",
        ),
        (lambda q: ops.scaled_dot_attention(q, q, q, dropout_p="0.1"), "dropout_p must be a float"),
        (lambda q: _model("scaled_dot", "auto", attn_dropout=1.5), "attn_dropout must be a float"),
    ],
)
def test_bad_dropout_values_are_refused_with_their_range(call, match) -> None:
    with pytest.raises(ValueError, match=match):
        call(torch.randn(2, 2, 5, 5))
