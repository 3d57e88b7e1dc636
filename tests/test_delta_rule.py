"""attnzoo.kernels.delta_rule against the delta rule written as a float64 loop (one token at a
time), and against what the rule is for: with β = 1 and orthonormal keys it stores the last value
written to each key, and reading a key returns it."""

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from attnzoo.kernels.delta import naive

from attnzoo import kernels

B, H, K, V = 2, 3, 8, 5


def inputs(n, beta=None, log_decay=None, dtype=torch.float64, seed=0):
    """q, k (unit keys, as DeltaNet's), v, beta (uniform in (0, 1) unless given) and log_decay
    (None, a number, or "random": uniform in (−2, 0))."""
    gen = torch.Generator().manual_seed(seed)
    draw = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    q, v = draw(B, H, n, K), draw(B, H, n, V)
    k = F.normalize(draw(B, H, n, K), dim=-1)
    b = torch.rand(B, H, n, generator=gen, dtype=torch.float64) if beta is None else None
    b = torch.full((B, H, n), float(beta), dtype=torch.float64) if beta is not None else b
    if log_decay == "random":
        g = -2 * torch.rand(B, H, n, generator=gen, dtype=torch.float64)
    elif log_decay is not None:
        g = torch.full((B, H, n), float(log_decay), dtype=torch.float64)
    else:
        g = None
    cast = lambda t: None if t is None else t.to(dtype).requires_grad_()
    return tuple(cast(t) for t in (q, k, v, b, g))


def truth(q, k, v, beta, g, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return naive.recurrent(q, k, v, beta, g, scale)[0]


CASES = [  # (N, beta, log_decay): odd lengths, several chunks of 64, β near 0 and 1, decays
    (1, None, None),
    (37, None, None),
    (150, None, None),
    (150, None, "random"),
    (70, 1e-3, None),
    (70, 0.999, None),
    (130, None, -5.0),
    (65, 0.5, 0.0),
]


@pytest.mark.parametrize(("n", "beta", "log_decay"), CASES)
def test_forward_and_every_gradient_match_the_float64_loop(n, beta, log_decay):
    ours_in = inputs(n, beta, log_decay)
    loop_in = inputs(n, beta, log_decay)
    out = kernels.delta_rule(*ours_in[:4], log_decay=ours_in[4], impl="torch")
    want = truth(*loop_in)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)
    cotangent = torch.randn_like(want)
    leaves = [t for t in ours_in if t is not None]
    got = torch.autograd.grad(out, leaves, cotangent)
    expected = torch.autograd.grad(want, [t for t in loop_in if t is not None], cotangent)
    for name, a, b in zip(["q", "k", "v", "beta", "log_decay"], got, expected, strict=False):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11, msg=f"d{name}")


def test_fp32_and_bf16_follow_the_dtype_policy():
    q, k, v, beta, g = inputs(100, log_decay="random")
    want = truth(q, k, v, beta, g).detach()
    fp32 = kernels.delta_rule(q.float(), k.float(), v.float(), beta.float(), g.float())
    assert fp32.dtype == torch.float32
    torch.testing.assert_close(fp32.double(), want, rtol=1e-4, atol=1e-5)
    bf16 = kernels.delta_rule(q.bfloat16(), k.bfloat16(), v.bfloat16(), beta, g)
    assert bf16.dtype == torch.bfloat16
    torch.testing.assert_close(bf16.double(), want, rtol=0.05, atol=0.05)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert kernels.delta_rule(q.float(), k.float(), v.float(), beta, g).dtype == torch.bfloat16


def test_with_beta_one_and_orthonormal_keys_it_stores_the_last_value_written_to_each_key():
    """Write v₁ to key e₁, v₂ to e₂, then v₃ to e₁ again: the state maps e₁ to v₃ (the delta
    rule overwrites; accumulation, as linear attention's, would give v₁ + v₃) and e₂ to v₂."""
    e = torch.eye(K, dtype=torch.float64)
    k = torch.stack([e[0], e[1], e[0], e[0], e[1]])[None, None]  # the last two tokens: reads
    vals = torch.randn(3, V, dtype=torch.float64)
    v = torch.cat([vals, torch.zeros(2, V, dtype=torch.float64)])[None, None]
    beta = torch.tensor([[[1.0, 1.0, 1.0, 0.0, 0.0]]], dtype=torch.float64)  # reads write nothing
    out = kernels.delta_rule(k, k, v, beta, scale=1.0)
    torch.testing.assert_close(out[0, 0, 3], vals[2])
    torch.testing.assert_close(out[0, 0, 4], vals[1])
    # a decay of log 0.5 per token halves what was stored by each later token
    g = torch.full((1, 1, 5), -0.5 * 0.6931471805599453, dtype=torch.float64)
    g[..., :3] = 0.0
    decayed = kernels.delta_rule(k, k, v, beta, log_decay=g, scale=1.0)
    torch.testing.assert_close(decayed[0, 0, 4], vals[1] * 0.5)


def test_the_chunk_size_does_not_change_the_answer():
    q, k, v, beta, g = (t.detach() for t in inputs(100, log_decay="random"))
    ref = naive.chunked(q, k, v, beta, g, 0.5, chunk=64)[0]
    for chunk in (1, 7, 100, 128):
        torch.testing.assert_close(naive.chunked(q, k, v, beta, g, 0.5, chunk=chunk)[0], ref)


def test_bad_arguments_are_refused_with_what_is_allowed():
    q, k, v, beta = (t.detach() for t in inputs(6)[:4])
    with pytest.raises(ValueError, match="no Triton kernel of the delta rule"):
        kernels.delta_rule(q, k, v, beta, impl="triton")
    with pytest.raises(ValueError, match=r"beta must have shape \(batch, heads, tokens\)"):
        kernels.delta_rule(q, k, v, beta[..., :-1])
    with pytest.raises(ValueError, match="log_decay must be a float tensor"):
        kernels.delta_rule(q, k, v, beta, log_decay=torch.zeros(B, H, 6, dtype=torch.long))
    if importlib.util.find_spec("fla") is None:
        with pytest.raises(ValueError, match="impl='fla' needs flash-linear-attention"):
            kernels.delta_rule(q, k, v, beta, impl="fla")
