"""attnzoo.flops against a count by hand and against torch.utils.flop_counter on the real model."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from attnzoo.flops import (
    flops_formula,
    forward_flops_per_token,
    mixer_flops_per_token,
    mlp_flops_per_token,
    train_flops_per_token,
)
from attnzoo.mixers import MIXERS, can_run
from attnzoo.model import Model, ModelConfig

D, H, N, DEPTH, VOCAB = 16, 2, 8, 2, 10  # dk = 8
RECURRENT = ("retention", "gla", "mamba2", "deltanet")  # on the gated op or the delta rule


def test_mixers_by_hand():
    # scaled_dot: qkv 2*16*48 = 1536, proj 2*16*16 = 512, scores 2*8*8 per head x 2 heads = 256,
    # weights.v the same 256
    assert mixer_flops_per_token("scaled_dot", D, H, N) == 1536 + 512 + 256 + 256
    # quadratic: v + proj 1024, x U per head 2*16*16*2 = 1024, scores (xU).x 2*16*8*2 = 512,
    # weights.v 2*8*8*2 = 256
    assert mixer_flops_per_token("quadratic", D, H, N) == 1024 + 1024 + 512 + 256
    # metric: p + proj 1024, p M per head 2*8*8*2 = 256, scores 256, weights.p 256
    assert mixer_flops_per_token("metric", D, H, N) == 1024 + 256 + 256 + 256
    assert mixer_flops_per_token("pooling", D, H, N) == 0
    assert mixer_flops_per_token("identity", D, H, N) == 0
    assert mlp_flops_per_token(D, 4.0) == 2 * 16 * 64 * 2
    assert mlp_flops_per_token(D, 4.0, mlp=False) == 0
    # causal: each query meets (N + 1) / 2 keys on average, 4.5 of 8
    causal = mixer_flops_per_token("scaled_dot", D, H, N, causal=True)
    assert causal == 1536 + 512 + 512 * 4.5 / 8
    total = forward_flops_per_token("scaled_dot", D, DEPTH, H, N, head_out=VOCAB)
    assert total == DEPTH * (2560 + 4096) + 2 * D * VOCAB
    assert train_flops_per_token("scaled_dot", D, DEPTH, H, N) == 3 * DEPTH * (2560 + 4096)
    with pytest.raises(ValueError, match="no FLOP formula"):
        mixer_flops_per_token("mamba", D, H, N)


def counted(model: Model, inputs: torch.Tensor, backward: bool) -> int:
    with FlopCounterMode(display=False) as counter:
        out = model(inputs)
        if backward:
            out.sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("mixer", sorted(MIXERS))
@pytest.mark.parametrize("mlp", [True, False])
def test_formula_matches_flop_counter_on_the_model(mixer, mlp):
    """PyTorch's count of the model's matmuls (impl=torch, the path FlopCounterMode can see):
    forward, and forward + backward = 3 x forward. The token embedding is a lookup, not counted
    by either; the head is a matmul, counted by both."""
    if flops_formula(mixer) is None:
        pytest.skip(f"{mixer} has no flops_per_token")
    if mixer in RECURRENT:
        pytest.skip("its torch path is the chunked scan: see test_recurrent_formula_...")
    if not can_run(MIXERS[mixer], causal=False):
        pytest.skip(
            "causal only: its reference masks a dense N x N score matrix, which the formula's "
            "causal key count leaves out (test_causal_reference_computes_the_dense_amount)"
        )
    torch.manual_seed(0)
    cfg = ModelConfig(dim=D, depth=DEPTH, heads=H, mixer=mixer, mlp=mlp, impl="torch")
    model = Model(cfg, out_features=VOCAB, max_len=N, vocab_size=VOCAB, head="token")
    batch = 3
    inputs = torch.randint(0, VOCAB, (batch, N))
    tokens = batch * N
    per_token = forward_flops_per_token(mixer, D, DEPTH, H, N, mlp=mlp, head_out=VOCAB)
    assert counted(model, inputs, backward=False) == pytest.approx(per_token * tokens)
    train = train_flops_per_token(mixer, D, DEPTH, H, N, mlp=mlp, head_out=VOCAB)
    assert counted(model, inputs, backward=True) == pytest.approx(train * tokens)


def test_causal_reference_computes_the_dense_amount():
    """The PyTorch reference masks a full N x N score matrix: FlopCounterMode sees the
    non-causal count, which the formula's causal figure undercuts by the masked half."""
    cfg = ModelConfig(dim=D, depth=DEPTH, heads=H, mixer="scaled_dot", causal=True, impl="torch")
    model = Model(cfg, out_features=VOCAB, max_len=N, vocab_size=VOCAB, head="lm")
    inputs = torch.randint(0, VOCAB, (2, N))
    dense = forward_flops_per_token("scaled_dot", D, DEPTH, H, N, causal=False, head_out=VOCAB)
    assert counted(model, inputs, backward=False) == pytest.approx(dense * 2 * N)
    causal = forward_flops_per_token("scaled_dot", D, DEPTH, H, N, causal=True, head_out=VOCAB)
    assert dense - causal == pytest.approx(DEPTH * 4 * D * (N - (N + 1) / 2))


def matmul_scan(q, k, v, log_decay, causal=True, scale=None, impl="auto", **_):
    """The recurrence S_t = diag(exp(log_decay_t)) S_{t−1} + k_t v_tᵀ, o_t = scale · S_tᵀ q_t as
    a loop whose two products are matmuls, so FlopCounterMode counts them; the decay is
    elementwise."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if log_decay.dim() == 3:
        log_decay = log_decay[..., None].expand_as(k)
    log_decay = log_decay.to(q.dtype)
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
    out = []
    for t in range(q.shape[2]):
        state = log_decay[:, :, t, :, None].exp() * state + k[:, :, t, :, None] @ v[:, :, t, None]
        out.append(scale * (q[:, :, t, None] @ state)[:, :, 0])
    return torch.stack(out, dim=2)


def matmul_delta(q, k, v, beta, log_decay=None, scale=None, impl="auto"):
    """The delta rule S_t = exp(g_t)(I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ, o_t = scale · S_tᵀ q_t
    as a loop whose three products (the prediction S̃ᵀk_t, the write, the read-out) are matmuls."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])
    out = []
    for t in range(q.shape[2]):
        if log_decay is not None:
            state = log_decay[:, :, t, None, None].exp() * state
        error = v[:, :, t, None] - k[:, :, t, None] @ state
        state = state + beta[:, :, t, None, None] * (k[:, :, t, :, None] @ error)
        out.append(scale * (q[:, :, t, None] @ state)[:, :, 0])
    return torch.stack(out, dim=2)


@pytest.mark.parametrize("gated", [False, True])
def test_gated_deltanet_formula_counts_its_decay_projection(gated, monkeypatch):
    from attnzoo import kernels
    from attnzoo.mixers import build_mixer

    monkeypatch.setattr(kernels, "delta_rule", matmul_delta)
    layer = build_mixer("deltanet", dim=D, heads=H, causal=True, impl="torch", gated=gated)
    with FlopCounterMode(display=False) as counter:
        layer(torch.randn(3, N, D))
    per_token = mixer_flops_per_token("deltanet", D, H, N, causal=True, gated=gated)
    assert counter.get_total_flops() == pytest.approx(per_token * 3 * N)


@pytest.mark.parametrize("mixer", RECURRENT)
@pytest.mark.parametrize("causal", [True, False])
def test_recurrent_formula_matches_flop_counter_on_the_recurrent_form(mixer, causal, monkeypatch):
    """The formula is the recurrent form's cost: PyTorch counts the mixer's own projections and
    convolution, and the scan run as a loop of matmuls (the op's chunked torch path computes the
    same output by another route, so it is swapped out here); twice the scan when not causal."""
    from attnzoo import kernels
    from attnzoo.mixers import build_mixer

    monkeypatch.setattr(kernels, "gated_linear_attention", matmul_scan)
    monkeypatch.setattr(kernels, "delta_rule", matmul_delta)
    torch.manual_seed(0)
    layer = build_mixer(mixer, dim=D, heads=H, causal=causal, impl="torch")
    x = torch.randn(3, N, D)
    with FlopCounterMode(display=False) as counter:
        layer(x)
    per_token = mixer_flops_per_token(mixer, D, H, N, causal=causal)
    assert counter.get_total_flops() == pytest.approx(per_token * 3 * N)
