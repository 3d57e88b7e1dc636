"""The split measurement of a pure stack's residual (attnzoo.analysis.split_residual) against the
plain float64 forward where both are above the floor, and against what is known below it."""

from __future__ import annotations

import math

import pytest
import torch

from attnzoo import Model, ModelConfig, rank_profile
from attnzoo.analysis.fits import FLOAT64_FLOOR, layers_above
from attnzoo.analysis.split_residual import SPLIT_FLOOR, split_residual_profile, supports_split

CONTROL = "attnzoo.analysis.controls.FrozenStochastic"


def _pure(mixer: str, seed: int, depth: int = 6, tokens: int = 12, **options) -> tuple:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        dim=16,
        depth=depth,
        heads=2,
        mixer=mixer,
        mixer_options=options,
        residual="none",
        mlp=False,
        norm="none",
    )
    model = Model(cfg, out_features=2, max_len=tokens, vocab_size=32)
    with torch.no_grad():  # inputs of std 1, the rate study's
        model.embed.weight.normal_()
        model.pos.normal_()
    return model, torch.randint(0, 32, (3, tokens))


# Plain float64 forms the residual by cancellation, so its relative error is about 1e-16 / r:
# at most 1e-8 where r > 1e-8. The split computation rounds differently but has no such loss,
# so the two agree to 1e-6 there; a wrong term in a rule is off by far more.
AGREE_ABOVE, RTOL = 1e-8, 1e-6


@pytest.mark.parametrize(
    "mixer, options",
    [
        ("scaled_dot", {}),
        ("quadratic", {}),
        ("metric", {}),
        ("metric", {"metric_param": "psd"}),
        ("local", {"window": 2}),
        ("linear", {}),
        ("linear", {"feature_map": "relu"}),
        ("favor", {}),
        ("nystrom", {"landmarks": 4}),  # N > landmarks: three kernels and the pseudo-inverse
        ("nystrom", {}),  # N ≤ landmarks: whatever the mixer computes for a short sequence
        (CONTROL, {}),
    ],
)
def test_the_split_measurement_agrees_with_plain_float64_above_the_floor(mixer, options):
    for seed in range(2):
        model, tokens = _pure(mixer, seed, **options)
        plain = rank_profile(model, tokens, dtype=torch.float64, measures=[]).mean
        split = split_residual_profile(model, tokens)
        both = [d for d, p in enumerate(plain) if p > AGREE_ABOVE]
        assert len(both) >= 3  # the embedding and at least two blocks are compared
        for d in both:
            assert split[d] == pytest.approx(plain[d], rel=RTOL), (mixer, seed, d)


def test_the_split_measurement_reads_the_cubic_rate_past_the_float64_floor():
    """Pure softmax attention: plain float64 has at most three blocks above its floor, the split
    measurement at least five, and below the floor each layer's log-decrement is three times the
    last one's (Dong et al.'s cubic rate, r_{l+1} ~ c·r_l³)."""
    for seed in range(3):
        model, tokens = _pure("scaled_dot", seed, depth=8)
        plain = rank_profile(model, tokens, dtype=torch.float64, measures=[]).mean
        split = split_residual_profile(model, tokens)
        assert layers_above(plain, FLOAT64_FLOOR) <= 3
        assert layers_above(split, SPLIT_FLOOR) >= 5
        logs = [math.log10(r) for r in split[3:6]]
        assert (logs[2] - logs[1]) / (logs[1] - logs[0]) == pytest.approx(3.0, rel=0.05)


def test_the_normaliser_eps_of_linear_attention_leaks_the_mean_in_proportion_to_eps():
    """With eps = 0 linear attention is exactly row-stochastic and decays at the cubic rate; with
    eps > 0 each row sums to c_i / (c_i + eps) and, once the residual is small, each layer
    multiplies it by a factor proportional to eps: a thousand times the eps, three decades less
    decrement per layer."""
    per_eps = {}
    for eps in (0.0, 1e-9, 1e-6):
        model, tokens = _pure("linear", 0, depth=8, eps=eps)
        per_eps[eps] = [math.log10(max(r, 1e-300)) for r in split_residual_profile(model, tokens)]
    exact = per_eps[0.0]
    assert (exact[4] - exact[3]) / (exact[3] - exact[2]) == pytest.approx(3.0, rel=0.1)
    for deep in (6, 7):
        step = {eps: logs[deep] - logs[deep - 1] for eps, logs in per_eps.items() if eps}
        assert step[1e-6] - step[1e-9] == pytest.approx(3.0, abs=0.1)


def test_the_split_measurement_refuses_what_it_has_no_rule_for():
    model, tokens = _pure("pooling", 0)
    assert not supports_split(model)
    with pytest.raises(ValueError, match="pure stack"):
        split_residual_profile(model, tokens)
    torch.manual_seed(0)
    cfg = ModelConfig(dim=16, depth=2, heads=2, mixer="scaled_dot", mlp=False, norm="none")
    assert not supports_split(Model(cfg, out_features=2, max_len=12, vocab_size=32))  # a skip


@pytest.mark.parametrize("sink", ["learned", "zero_kv"])
def test_a_softmax_with_a_sink_has_no_split_rule(sink):
    """Its rows sum to less than 1, which every rule assumes they do not: the study measures
    it by the plain forward."""
    cfg = ModelConfig(
        dim=16,
        depth=2,
        heads=2,
        mixer="scaled_dot",
        mixer_options={"sink": sink},
        residual="none",
        mlp=False,
        norm="none",
    )
    model = Model(cfg, out_features=2, max_len=8, vocab_size=11)
    assert not supports_split(model)
    with pytest.raises(ValueError, match="split rule"):
        split_residual_profile(model, torch.randint(0, 11, (2, 8)))


@pytest.mark.parametrize("gate", ["headwise", "elementwise"])
def test_a_gated_softmax_has_no_split_rule(gate):
    """The gate multiplies each head's output by σ(x W_g), which the scaled-dot rule would leave
    out: a gated pure stack is measured by the plain forward, and that forward is not the
    ungated one's (the split profile of the same weights without the gate differs)."""
    torch.manual_seed(0)
    options = {"gate": gate}
    cfg = ModelConfig(
        dim=16,
        depth=3,
        heads=2,
        mixer="scaled_dot",
        mixer_options=options,
        residual="none",
        mlp=False,
        norm="none",
    )
    model = Model(cfg, out_features=2, max_len=8, vocab_size=11).double()
    assert not supports_split(model)
    tokens = torch.randint(0, 11, (2, 8))
    gated = rank_profile(model, tokens, dtype=torch.float64).mean
    for block in model.blocks:  # the same weights, the gate switched off
        block.mixer.output_gate = "none"
    assert supports_split(model)
    plain = split_residual_profile(model, tokens)
    assert abs(math.log(gated[2]) - math.log(plain[2])) > 1.0
