"""Sigmoid attention against its formula written as a float64 loop over query-key pairs, and the
sigmoid mixer's weights, bias and refusals."""

import math

import pytest
import torch

from attnzoo import build_mixer, kernels
from attnzoo.model import Model, ModelConfig
from attnzoo.rank import rank_profile

B, H, N, DK, DV = 2, 3, 7, 4, 5


def loop(q, k, v, causal, mask, scale, bias):
    """y_i = Σ_{j allowed} σ(scale · q_i·k_j + bias) v_j, one pair at a time."""
    out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=torch.float64)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            for i in range(q.shape[2]):
                for j in range(k.shape[2]):
                    if (causal and j > i) or (mask is not None and mask[b, j]):
                        continue
                    s = scale * float(q[b, h, i] @ k[b, h, j]) + bias
                    out[b, h, i] += v[b, h, j] / (1 + math.exp(-s))
    return out


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [0.0, -math.log(N)])
def test_matches_the_formula_and_its_gradients_in_float64(causal, bias):
    torch.manual_seed(0)
    q, k = (
        torch.randn(B, H, N, DK, dtype=torch.float64),
        torch.randn(B, H, N, DK, dtype=torch.float64),
    )
    v = torch.randn(B, H, N, DV, dtype=torch.float64)
    mask = torch.zeros(B, N, dtype=torch.bool)
    mask[1, -2:] = True
    out = kernels.sigmoid_attention(q, k, v, causal, mask, bias=bias)
    torch.testing.assert_close(out, loop(q, k, v, causal, mask, DK**-0.5, bias))
    # gradients: torch.autograd.gradcheck against finite differences of the op itself
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    assert torch.autograd.gradcheck(
        lambda a, b, c: kernels.sigmoid_attention(a, b, c, causal, mask, bias=bias), leaves
    )


def test_a_query_with_no_visible_key_gets_zero_and_rows_need_not_sum_to_one():
    q = torch.randn(1, 1, 4, DK, dtype=torch.float64)
    mask = torch.tensor([[True, False, False, False]])
    out = kernels.sigmoid_attention(q, q, torch.ones(1, 1, 4, 1, dtype=torch.float64), True, mask)
    assert out[0, 0, 0, 0] == 0  # causal + padding: the first query sees nothing
    sums = out[0, 0, 1:, 0]  # with v = 1 the output is the row's total weight
    assert (sums > 0).all() and not torch.allclose(sums, torch.ones(3, dtype=torch.float64))


def test_bad_arguments_are_refused_with_what_is_allowed():
    q = torch.randn(1, 1, 4, DK)
    with pytest.raises(ValueError, match="no Triton kernel in attnzoo yet"):
        kernels.sigmoid_attention(q, q, q, impl="triton")
    with pytest.raises(ValueError, match="bias must be a finite real number"):
        kernels.sigmoid_attention(q, q, q, bias=float("nan"))
    with pytest.raises(ValueError, match="bias must be a finite number or '-log_n'"):
        build_mixer("sigmoid", dim=8, heads=2, bias="log_n")


@pytest.mark.parametrize("causal", [False, True])
def test_the_mixer_is_its_weights_times_values_with_the_papers_bias(causal):
    torch.manual_seed(1)
    mixer = build_mixer("sigmoid", dim=12, heads=3, causal=causal, impl="torch").double()
    x = torch.randn(2, N, 12, dtype=torch.float64)
    weights = mixer.attention_probs(x)
    q, k, v = mixer._qkv(x)
    scores = q @ k.transpose(-1, -2) / math.sqrt(4) - math.log(N)  # bias −log N by default
    expected = torch.sigmoid(scores)
    if causal:
        expected = expected.tril()
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(mixer.attend(x), weights @ v)
    # the weights are not distributions: the entropy measure reads n/a for a model of them
    cfg = ModelConfig(dim=12, depth=2, heads=3, mixer="sigmoid", causal=causal, impl="torch")
    model = Model(cfg, out_features=5, max_len=N, vocab_size=11, head="token")
    profile = rank_profile(model, torch.randint(0, 11, (2, N)), measures=("attention_entropy",))
    assert all(math.isnan(v) for v in profile.measures["attention_entropy"])
