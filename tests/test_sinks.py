"""Attention sinks: the ops against the sink's formula written as a float64 loop, and against the
construction it stands for ("softmax + 1": one extra all-zero key and value, which a prepended
all-zero token is for all three score forms); the mixers' `sink` option."""

import math

import pytest
import torch
import torch.nn.functional as F

from attnzoo import build_mixer, kernels
from attnzoo.model import Model, ModelConfig
from attnzoo.rank import rank_profile

B, H, N, D = 2, 3, 6, 12
DK = D // H


def loop(q, k, v, causal, mask, sink):
    """p_ij = exp(s_ij) / (exp(sink_h) + Σ_j' exp(s_ij')) over the visible keys, s = q·k/√dk."""
    out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=torch.float64)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            for i in range(q.shape[2]):
                seen = [j for j in range(k.shape[2])
                        if not (causal and j > i) and not (mask is not None and mask[b, j])]  # fmt: skip
                e = {j: math.exp(float(q[b, h, i] @ k[b, h, j]) / math.sqrt(q.shape[-1]))
                     for j in seen}  # fmt: skip
                total = math.exp(float(sink[h])) + sum(e.values())
                for j in seen:
                    out[b, h, i] += e[j] / total * v[b, h, j]
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_the_sink_is_one_more_logit_in_the_denominator(causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, N, DK, dtype=torch.float64) for _ in range(3))
    sink = torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64)
    mask = torch.zeros(B, N, dtype=torch.bool)
    mask[1, -2:] = True
    out = kernels.scaled_dot_attention(q, k, v, causal, mask, sink=sink)
    torch.testing.assert_close(out, loop(q, k, v, causal, mask, sink))
    leaves = [t.clone().requires_grad_() for t in (q, k, v, sink)]
    assert torch.autograd.gradcheck(
        lambda a, b, c, s: kernels.scaled_dot_attention(a, b, c, causal, mask, sink=s), leaves
    )


def _prepend_zero(t: torch.Tensor, dim: int) -> torch.Tensor:
    shape = list(t.shape)
    shape[dim] = 1
    return torch.cat([t.new_zeros(shape), t], dim=dim)


@pytest.mark.parametrize("causal", [False, True])
def test_a_zero_sink_is_an_extra_all_zero_key_and_value_for_every_score_form(causal):
    """sink = 0 equals prepending an all-zero token: its key scores 0 with every query (q·0, x U 0,
    p M 0) and its value is 0; causal or not, every query sees it."""
    torch.manual_seed(1)
    zero = torch.zeros(H, dtype=torch.float64)
    q, k, v = (torch.randn(B, H, N, DK, dtype=torch.float64) for _ in range(3))
    with_sink = kernels.scaled_dot_attention(q, k, v, causal, sink=zero)
    extra = kernels.scaled_dot_attention(*(_prepend_zero(t, 2) for t in (q, k, v)), causal)
    torch.testing.assert_close(with_sink, extra[:, :, 1:])
    x, u = torch.randn(B, N, D, dtype=torch.float64), torch.randn(H, D, D, dtype=torch.float64)
    v = torch.randn(B, H, N, DK, dtype=torch.float64)
    with_sink = kernels.quadratic_attention(x, u, v, causal, sink=zero)
    extra = kernels.quadratic_attention(_prepend_zero(x, 1), u, _prepend_zero(v, 2), causal)
    torch.testing.assert_close(with_sink, extra[:, :, 1:])
    p, m = (
        torch.randn(B, H, N, DK, dtype=torch.float64),
        torch.randn(H, DK, DK, dtype=torch.float64),
    )
    with_sink = kernels.metric_attention(p, m, causal, sink=zero)
    extra = kernels.metric_attention(_prepend_zero(p, 2), m, causal)
    torch.testing.assert_close(with_sink, extra[:, :, 1:])


def test_bad_sinks_are_refused_with_what_is_allowed():
    q = torch.randn(1, 2, 4, 4)
    with pytest.raises(ValueError, match="Triton kernels take no attention sink yet"):
        kernels.scaled_dot_attention(q, q, q, sink=torch.zeros(2), impl="triton")
    with pytest.raises(ValueError, match=r"one logit per head, \(2,\), got \(3,\)"):
        kernels.scaled_dot_attention(q, q, q, sink=torch.zeros(3))
    with pytest.raises(ValueError, match="sink must be one of"):
        build_mixer("scaled_dot", dim=8, heads=2, sink="first_token")


@pytest.mark.parametrize("mixer", ["scaled_dot", "quadratic", "metric", "local"])
@pytest.mark.parametrize("sink", ["learned", "zero_kv"])
def test_every_softmax_mixer_takes_a_sink_and_the_rows_give_it_mass(mixer, sink):
    torch.manual_seed(2)
    cfg = ModelConfig(dim=D, depth=2, heads=H, mixer=mixer, causal=True, impl="torch",
                      mixer_options={"sink": sink})  # fmt: skip
    model = Model(cfg, out_features=5, max_len=N, vocab_size=11, head="lm")
    tokens = torch.randint(0, 5, (B, N))
    loss = F.cross_entropy(model(tokens)[:, :-1].reshape(-1, 5), tokens[:, 1:].reshape(-1))
    loss.backward()
    sinks = [b.mixer.sink_logit for b in model.blocks]
    if sink == "learned":  # a parameter that learns
        assert all(s.requires_grad and s.grad.abs().sum() > 0 for s in sinks)
    else:  # a fixed logit 0, not a parameter
        assert all(not s.requires_grad and (s == 0).all() for s in sinks)
    profile = rank_profile(model, tokens, measures=["attention_entropy"])
    assert all(math.isnan(e) for e in profile.measures["attention_entropy"])  # not distributions
    assert all(0 < r < 1 for r in profile.weights["row_sum"][1:])  # the sink takes the rest
