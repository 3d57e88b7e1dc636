"""Sigmoid attention against its formula written as a float64 loop over query-key pairs, and the
sigmoid mixer's weights, bias and refusals."""

import math

import pytest
import torch
from attnzoo.kernels.attention import launch
from attnzoo.kernels.attention import naive as reference

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
    with pytest.raises(ValueError, match="bias must be a finite real number"):
        kernels.sigmoid_attention(q, q, q, bias=float("nan"))
    with pytest.raises(ValueError, match="bias must be a finite real number"):
        kernels.sigmoid_attention(q, q, q, bias=float("inf"), impl="triton")
    with pytest.raises(ValueError, match=r"'tritn' is not one of"):
        kernels.sigmoid_attention(q, q, q, impl="tritn")
    with pytest.raises(ValueError, match="q has dtype torch.float64; the Triton kernels take"):
        kernels.sigmoid_attention(q.double(), q.double(), q.double(), impl="triton")
    with pytest.raises(ValueError, match="sigmoid attention has no sink, no dropout"):
        launch._Problem(q, q, q, None, False, None, 0.5, 0.1, torch.tensor([1]), sigmoid=0.0)
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


# ---------------------------------------------------------------------------------------------
# The Triton kernels (interpreter) against the float64 reference checked above
# ---------------------------------------------------------------------------------------------

TOL = {torch.float32: 2e-5, torch.float16: 1e-2}


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    assert torch.isfinite(got).all(), "NaN/inf: an element never written?"
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


# (n, dk, dv, causal, mask, bias, dtype): n = 37 spans two ragged 32-token interpreter tiles;
# widths that are not powers of two, and q/k wider than v (the forward's chunk loop).
# "empty": item 1 all padding, and item 0's key 0 padding (causal: its query 0 sees nothing).
SIGMOID_CASES = [
    (37, 24, 20, False, "empty", -math.log(37), torch.float32),
    (37, 24, 24, True, "empty", 0.0, torch.float32),
    (37, 40, 16, True, "pad", -1.0, torch.float32),
    (37, 24, 24, True, "empty", -math.log(37), torch.float16),
    (64, 16, 16, False, "none", 0.5, torch.float16),  # whole tiles: the unmasked loops only
]


@pytest.mark.parametrize(
    "case", SIGMOID_CASES, ids=lambda c: "-".join(map(str, c[:5])) + f"-{c[6]}"
)
def test_the_kernels_match_the_reference_forward_and_backward(case, monkeypatch):
    """impl="triton": the output and dq, dk, dv against the float64 reference; masked pairs add
    nothing (scores made large, so a σ that leaked through would show), and a query that sees
    no key gets 0 and no dq."""
    monkeypatch.setattr(launch, "POISON_OUTPUTS", True)
    n, dk, dv, causal, kind, bias, dtype = case
    b, h = 2, 3
    torch.manual_seed(5)
    leaves64 = [torch.randn(b, h, n, dk, dtype=torch.float64) * 2 for _ in range(2)]
    leaves64 = [*leaves64, torch.randn(b, h, n, dv, dtype=torch.float64)]
    leaves64 = [t.requires_grad_() for t in leaves64]
    leaves = [t.detach().to(dtype).requires_grad_() for t in leaves64]
    mask = None
    if kind != "none":
        mask = torch.zeros(b, n, dtype=torch.bool)
        mask[1, n - 9 :] = True
        if kind == "empty":
            mask[0, 0] = True
            mask[1, :] = True
    scale = dk**-0.5
    out = kernels.sigmoid_attention(*leaves, causal, mask, scale, bias, impl="triton")
    want = reference.sigmoid_attention(*leaves64, causal, mask, scale, bias)
    assert out.dtype == dtype and rel_err(out, want) <= TOL[dtype]
    d_out = torch.randn(want.shape, dtype=torch.float64)
    grads = torch.autograd.grad(out, leaves, d_out.to(dtype))
    for i, (g, w) in enumerate(zip(grads, torch.autograd.grad(want, leaves64, d_out), strict=True)):
        assert g.dtype == dtype and rel_err(g, w) <= TOL[dtype], f"gradient of input {i}"
    if kind == "empty":
        seen = reference.allowed_keys(n, causal, mask, torch.device("cpu")).any(-1)[:, 0]
        empty_bn = ~seen.expand(b, n)
        assert empty_bn.any()
        assert (out.detach().transpose(1, 2)[empty_bn] == 0).all()
        assert (grads[0].transpose(1, 2)[empty_bn] == 0).all()


def test_auto_takes_the_reference_on_cpu():
    """On CPU impl="auto" runs the PyTorch reference (here, the same bits)."""
    q, k, v = (torch.randn(2, 2, 9, DK) for _ in range(3))
    want = reference.sigmoid_attention(q, k, v, True, None, DK**-0.5, -1.0)
    assert torch.equal(kernels.sigmoid_attention(q, k, v, True, bias=-1.0, impl="auto"), want)


def test_the_mixer_runs_the_kernels_with_impl_triton():
    """The sigmoid mixer on impl="triton" gives the outputs and gradients of impl="torch"."""
    torch.manual_seed(6)
    x = torch.randn(2, 21, 12)
    mask = torch.zeros(2, 21, dtype=torch.bool)
    mask[1, 15:] = True
    outs, grads = [], []
    for impl in ("torch", "triton"):
        torch.manual_seed(7)
        mixer = build_mixer("sigmoid", dim=12, heads=3, causal=True, impl=impl)
        out = mixer(x, mask)
        outs.append(out)
        grads.append(torch.autograd.grad(out.square().sum(), list(mixer.parameters())))
    assert rel_err(outs[1], outs[0]) <= 1e-5
    for g, w in zip(grads[1], grads[0], strict=True):
        assert rel_err(g, w) <= 1e-5
