"""Attention sinks: the ops against the sink's formula written as a float64 loop, and against the
construction it stands for ("softmax + 1": one extra all-zero key and value, which a prepended
all-zero token is for all three score forms); the mixers' `sink` option."""

import math

import pytest
import torch
import torch.nn.functional as F
from attnzoo.kernels import attention
from attnzoo.kernels.attention import launch
from attnzoo.kernels.attention import naive as reference

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
                seen = [
                    j
                    for j in range(k.shape[2])
                    if not (causal and j > i) and not (mask is not None and mask[b, j])
                ]
                e = {
                    j: math.exp(float(q[b, h, i] @ k[b, h, j]) / math.sqrt(q.shape[-1]))
                    for j in seen
                }
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
    with pytest.raises(ValueError, match=r"one logit per head, \(2,\), got \(3,\)"):
        kernels.scaled_dot_attention(q, q, q, sink=torch.zeros(3))
    with pytest.raises(ValueError, match=r"one logit per head, \(2,\), got \(2,\) torch.int64"):
        kernels.metric_attention(q, q[0], sink=torch.zeros(2, dtype=torch.long), impl="triton")
    with pytest.raises(ValueError, match=r"one logit per head, \(2,\), got \(1, 2\)"):
        kernels.scaled_dot_attention(q, q, q, sink=torch.zeros(1, 2), impl="triton")
    with pytest.raises(ValueError, match="sink must be one of"):
        build_mixer("scaled_dot", dim=8, heads=2, sink="first_token")


# ---------------------------------------------------------------------------------------------
# The Triton kernels with a sink (interpreter), against the float64 reference checked above
# ---------------------------------------------------------------------------------------------

TOL = {torch.float32: 2e-5, torch.float16: 1e-2}


@pytest.fixture
def poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "POISON_OUTPUTS", True)


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    assert torch.isfinite(got).all(), "NaN/inf: an element never written?"
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def masks(kind: str, b: int, n: int) -> torch.Tensor | None:
    """'none'; 'pad': ragged lengths; 'empty': item 1 all padding (no query of it sees a key)
    and item 0's key 0 padding (causal: query 0 of item 0 sees nothing)."""
    if kind == "none":
        return None
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[0, :1] = kind == "empty"
    mask[1, n - 9 :] = True
    mask[1, :] |= kind == "empty"
    return mask


def sink_inputs(op: str, b: int, h: int, n: int, d: int, dv: int):
    """The op's differentiable inputs (float64 leaves) and its scale."""
    if op == "scaled_dot":
        return [torch.randn(b, h, n, d), torch.randn(b, h, n, d), torch.randn(b, h, n, dv)], d**-0.5
    if op == "quadratic":
        return [torch.randn(b, n, d), torch.randn(h, d, d) / 3, torch.randn(b, h, n, dv)], d**-0.5
    c = torch.randn(h, d, d) / d**0.5
    return [torch.randn(b, h, n, d), (c + c.mT) / 2], d**-0.5


# (op, n, d, dv, causal, mask, dtype): n = 37 spans two ragged 32-token interpreter tiles; widths
# that are not powers of two (padded tiles), and q/k wider than v (the forward's chunk loop)
SINK_CASES = [
    ("scaled_dot", 37, 24, 24, False, "empty", torch.float32),
    ("scaled_dot", 37, 40, 20, True, "empty", torch.float32),
    ("scaled_dot", 37, 24, 24, True, "pad", torch.float16),
    ("quadratic", 37, 20, 12, True, "empty", torch.float32),
    ("metric", 37, 24, 24, False, "pad", torch.float32),
    ("metric", 37, 16, 16, True, "empty", torch.float16),
]


@pytest.mark.parametrize(
    "case", SINK_CASES, ids=lambda c: "-".join(map(str, c)).replace("torch.", "")
)
def test_the_kernels_take_a_sink_forward_and_backward(case, poison):
    """impl="triton" with a sink: the output and the gradients of every input and of the sink
    against the float64 reference; a query that sees no key gets 0 (and no dq); an lse of the
    sink alone for it."""
    op, n, d, dv, causal, kind, dtype = case
    b, h = 2, 3
    torch.manual_seed(3)
    leaves64, scale = sink_inputs(op, b, h, n, d, dv)
    sink64 = torch.tensor([-1.0, 0.5, 3.0])  # one sink heavier than most scores
    leaves64 = [t.double().requires_grad_() for t in (*leaves64, sink64)]
    leaves = [t.detach().to(dtype).requires_grad_() for t in leaves64[:-1]]
    leaves.append(leaves64[-1].detach().float().requires_grad_())  # the sink stays fp32
    mask = masks(kind, b, n)
    run = lambda impl, *t: getattr(kernels, f"{op}_attention")(
        *t[:-1], causal, mask, scale, impl=impl, sink=t[-1]
    )
    out, want = run("triton", *leaves), run("torch", *leaves64)
    assert out.dtype == dtype and rel_err(out, want) <= TOL[dtype]
    d_out = torch.randn(want.shape, dtype=torch.float64)
    grads = torch.autograd.grad(out, leaves, d_out.to(dtype))
    wants = torch.autograd.grad(want, leaves64, d_out)
    for i, (g, w) in enumerate(zip(grads, wants, strict=True)):
        assert g.dtype == leaves[i].dtype and rel_err(g, w) <= TOL[dtype], f"gradient of input {i}"
    if kind == "empty":
        seen = reference.allowed_keys(n, causal, mask, torch.device("cpu")).any(-1)[:, 0]  # (B, N)
        empty_bn = ~seen.expand(b, n)
        assert empty_bn.any()
        assert (out.detach().transpose(1, 2)[empty_bn] == 0).all()
        if op == "scaled_dot":
            assert (grads[0].transpose(1, 2)[empty_bn] == 0).all()
            args = [t.detach() for t in leaves]
            _, lse = torch.ops.attnzoo.scaled_dot_attention(
                *args[:3], mask, causal, scale, 0.0, None, None, args[3]
            )
            lse_bhn = lse.view(b, h, n).transpose(1, 2)[empty_bn]  # (rows, H)
            torch.testing.assert_close(lse_bhn, (args[3] * math.log2(math.e)).expand_as(lse_bhn))


def test_a_sink_with_dropout_and_a_window_on_the_kernels(poison):
    """dsink = −Σ p_sink · rowsum(dO ∘ O) holds with dropout (O includes the dropped weights) and
    with a sliding window: the kernels against the reference given the kernels' keep mask."""
    b, h, n, d, p = 2, 2, 37, 16, 0.25
    torch.manual_seed(4)
    leaves = [torch.randn(b, h, n, d, requires_grad=True) for _ in range(3)]
    sink = torch.tensor([0.0, 1.5], requires_grad=True)
    mask = masks("pad", b, n)
    seed = torch.tensor([77])
    keep = attention.dropout_keep_mask(seed, b, h, n, p)
    out, _ = torch.ops.attnzoo.scaled_dot_attention(
        *leaves, mask, False, 0.25, p, seed, [5, 3], sink
    )
    refs = [t.detach().double().requires_grad_() for t in (*leaves, sink)]
    want = reference.scaled_dot_attention(*refs[:3], False, mask, 0.25, p, keep, (5, 3), refs[3])
    assert rel_err(out, want) <= 1e-5
    d_out = torch.randn_like(out)
    for g, w in zip(
        torch.autograd.grad(out, (*leaves, sink), d_out),
        torch.autograd.grad(want, refs, d_out.double()),
        strict=True,
    ):
        assert rel_err(g, w) <= 1e-5


def test_a_sink_of_minus_infinity_is_no_sink_on_the_kernels(poison):
    """exp(−inf) = 0: the same output as without a sink, rows that see nothing included, and a
    zero (not NaN) gradient for the sink."""
    q, k, v = (torch.randn(2, 2, 21, 16) for _ in range(3))
    mask = masks("empty", 2, 21)
    sink = torch.full((2,), float("-inf"), requires_grad=True)
    out = kernels.scaled_dot_attention(q, k, v, True, mask, impl="triton", sink=sink)
    torch.testing.assert_close(
        out, kernels.scaled_dot_attention(q, k, v, True, mask, impl="triton")
    )
    (dsink,) = torch.autograd.grad(out.sum(), sink)
    assert torch.equal(dsink, torch.zeros(2))


@pytest.mark.parametrize("mixer", ["quadratic", "metric"])
@pytest.mark.slow  # Inductor; test_custom_ops compiles the mixers
def test_a_model_with_a_learned_sink_compiles_on_the_kernels(mixer):
    """torch.compile(fullgraph=True) over a model whose mixers pass a learned sink to the Triton
    ops (quadratic: the composite op hands it to the scaled-dot op): the loss and every
    gradient, the sinks' included, equal eager's."""
    torch._dynamo.reset()
    torch.manual_seed(2)
    cfg = ModelConfig(
        dim=D,
        depth=2,
        heads=H,
        mixer=mixer,
        causal=True,
        impl="triton",
        mixer_options={"sink": "learned"},
    )
    model = Model(cfg, out_features=5, max_len=N, vocab_size=11, head="lm")
    for block in model.blocks:  # away from init (0) so that the sink matters
        block.mixer.sink_logit.data.copy_(torch.tensor([-1.0, 0.5, 2.0]))
    tokens = torch.randint(0, 5, (B, N))

    def loss_and_grads(m):
        model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(tokens)[:, :-1].reshape(-1, 5), tokens[:, 1:].reshape(-1))
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    eager_loss, eager = loss_and_grads(model)
    loss, grads = loss_and_grads(torch.compile(model, fullgraph=True, backend="aot_eager"))
    assert loss.item() == pytest.approx(eager_loss.item(), rel=1e-5)
    assert any("sink_logit" in name for name in grads)
    for name, g in grads.items():
        assert rel_err(g, eager[name]) <= 1e-4, name


@pytest.mark.parametrize("mixer", ["scaled_dot", "quadratic", "metric", "local"])
@pytest.mark.parametrize("sink", ["learned", "zero_kv"])
def test_every_softmax_mixer_takes_a_sink_and_the_rows_give_it_mass(mixer, sink):
    torch.manual_seed(2)
    cfg = ModelConfig(
        dim=D,
        depth=2,
        heads=H,
        mixer=mixer,
        causal=True,
        impl="torch",
        mixer_options={"sink": sink},
    )
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
