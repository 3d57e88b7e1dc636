"""The `cuda` tier for the ops: compiled Triton kernels on a GPU against float64 references.

    TRITON_INTERPRET=0 python -m pytest -m cuda

Forward and backward of every op (scaled-dot attention with a sink, and sigmoid attention, too)
in fp32, bf16 and fp16 (bf16 is what the interpreter cannot check), causal and padding masks,
attention dropout against the reference given the kernels' mask; and every mixer × impl training 20 steps under bf16 autocast, eager and compiled. Each
half-precision result must be within a small multiple of the error that the PyTorch reference
itself makes in the same dtype: the kernels may not be less accurate than the formula they replace.
"""

from __future__ import annotations

import math

import pytest
import torch
from attnzoo.kernels import attention
from attnzoo.kernels.attention import naive

from attnzoo import Model, ModelConfig, kernels
from attnzoo.mixers import MIXERS as REGISTRY

pytestmark = pytest.mark.cuda

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MIXERS = tuple(sorted(REGISTRY))


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def make_inputs(op: str, dtype: torch.dtype, n: int, d: int = 64, b: int = 2, h: int = 4):
    g = torch.Generator(device="cuda").manual_seed(0)
    rand = lambda *s: torch.randn(*s, device="cuda", generator=g, dtype=torch.float64)
    if op in ("scaled_dot", "sigmoid"):
        tensors = [rand(b, h, n, d), rand(b, h, n, d), rand(b, h, n, d)]
    elif op == "sink":  # scaled-dot attention with a sink per head, one heavier than most scores
        tensors = [rand(b, h, n, d), rand(b, h, n, d), rand(b, h, n, d), 2 * rand(h)]
    elif op == "quadratic":
        tensors = [rand(b, n, 2 * d), rand(h, 2 * d, 2 * d) / (2 * d) ** 0.5, rand(b, h, n, d)]
    elif op == "metric":
        c = rand(h, d, d) / d**0.5
        tensors = [rand(b, h, n, d), (c + c.transpose(1, 2)) / 2]
    else:
        tensors = [rand(b, n, d)]
    return [t.to(dtype).requires_grad_() for t in tensors]


def padding(b: int, n: int) -> torch.Tensor:
    mask = torch.zeros(b, n, dtype=torch.bool, device="cuda")
    mask[1, (2 * n) // 3 :] = True
    return mask


def call(op: str, impl: str, tensors, causal: bool, mask, dropout_p: float = 0.0):
    if op == "pool":
        return kernels.pool_mix(*tensors, 3, causal, mask, impl=impl)
    if op == "sink":
        q, k, v, sink = tensors
        return kernels.scaled_dot_attention(q, k, v, causal, mask, None, dropout_p, impl, sink=sink)
    if op == "sigmoid":  # the mixer's default bias, −log N
        return kernels.sigmoid_attention(
            *tensors, causal, mask, bias=-math.log(tensors[0].shape[2]), impl=impl
        )
    fn = getattr(kernels, f"{op}_attention")
    return fn(*tensors, causal, mask, None, dropout_p, impl=impl)


def out_and_grads(op, impl, tensors, causal, mask):
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    out = call(op, impl, leaves, causal, mask)
    cot = torch.randn(out.shape, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    grads = torch.autograd.grad(out, leaves, cot.to(out.dtype))
    return [out, *grads]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "causal,masked", [(False, False), (True, False), (False, True), (True, True)]
)
@pytest.mark.parametrize("n", [37, 1000])
@pytest.mark.parametrize("op", ["scaled_dot", "quadratic", "metric", "pool", "sink", "sigmoid"])
def test_kernels_match_the_float64_reference(op, n, causal, masked, dtype) -> None:
    tensors = make_inputs(op, dtype, n)
    mask = padding(2, n) if masked else None
    exact = out_and_grads(op, "torch", [t.double() for t in tensors], causal, mask)
    got = out_and_grads(op, "triton", tensors, causal, mask)
    same_dtype_ref = out_and_grads(op, "torch", tensors, causal, mask)
    for i, (g, r, e) in enumerate(zip(got, same_dtype_ref, exact, strict=True)):
        assert g.dtype == dtype and torch.isfinite(g).all(), i
        bound = 1e-5 if dtype == torch.float32 else 3 * rel_err(r, e) + 1e-3
        assert rel_err(g, e) <= bound, (i, rel_err(g, e), rel_err(r, e))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["scaled_dot", "quadratic", "metric"])
def test_dropout_matches_the_reference_given_the_kernels_mask(op, dtype) -> None:
    b, h, n, p = 2, 4, 300, 0.2
    tensors = make_inputs(op, dtype, n, b=b, h=h)
    mask = padding(b, n)
    seed = torch.tensor([4321], device="cuda")
    keep = attention.dropout_keep_mask(seed, b, h, n, p)
    name = f"{op}_attention"
    if op == "metric":
        out, _ = torch.ops.attnzoo.metric_attention(*tensors, mask, True, 0.125, p, seed)
    elif op == "quadratic":
        out = torch.ops.attnzoo.quadratic_attention(*tensors, mask, True, 0.125, p, seed)
    else:
        out, _ = torch.ops.attnzoo.scaled_dot_attention(*tensors, mask, True, 0.125, p, seed)
    exact_in = [t.detach().double().requires_grad_() for t in tensors]
    exact = getattr(naive, name)(*exact_in, True, mask, 0.125, p, keep)
    cot = torch.randn_like(exact)
    grads = torch.autograd.grad(out, tensors, cot.to(out.dtype))
    exact_grads = torch.autograd.grad(exact, exact_in, cot)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert rel_err(out, exact) <= tol
    for g, e in zip(grads, exact_grads, strict=True):
        assert rel_err(g, e) <= tol


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("impl", ["auto", "torch", "triton"])
@pytest.mark.parametrize("mixer", MIXERS)
def test_every_mixer_trains_20_steps_under_bf16_autocast(mixer, impl, compiled) -> None:
    torch.manual_seed(0)
    options = {"attn_dropout": 0.1} if hasattr(REGISTRY[mixer], "attention_probs") else {}
    causal = getattr(REGISTRY[mixer], "supports_causal", True)  # a language model where it can
    cfg = ModelConfig(
        dim=128, depth=2, heads=4, mixer=mixer, causal=causal, impl=impl, mixer_options=options
    )
    model = Model(cfg, out_features=64, max_len=128, vocab_size=64, head="lm").cuda()
    step_model = torch.compile(model, fullgraph=True) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=True)
    tokens = torch.randint(0, 64, (8, 128), device="cuda")
    tokens[:, 1::2] = tokens[:, ::2]  # learnable: every odd token repeats the one before
    losses = []
    for _ in range(20):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = step_model(tokens)
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().reshape(-1, 64), tokens[:, 1:].reshape(-1)
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    losses = torch.stack(losses).cpu()
    assert torch.isfinite(losses).all()
    assert losses[-5:].mean() < 0.9 * losses[:5].mean()
