"""The rank-collapse measure and the paper's central result at init."""

import pytest
import torch

from attnzoo import Model, ModelConfig, composite_norm, rank_profile, relative_residual


def test_composite_norm_is_sqrt_of_l1_times_linf():
    a = torch.tensor([[1.0, -2.0, 0.0], [3.0, 0.0, -1.0]])
    # max column abs-sum = 4 (column 0), max row abs-sum = 4 (row 1)
    assert composite_norm(a).item() == pytest.approx(4.0)
    assert composite_norm(torch.stack([a, 2 * a])).tolist() == pytest.approx([4.0, 8.0])


def test_relative_residual_is_zero_for_rank_one_and_scale_free():
    row = torch.randn(1, 1, 6)
    assert relative_residual(row.expand(1, 5, 6)).item() == pytest.approx(0.0, abs=1e-7)
    h = torch.randn(3, 5, 6)
    torch.testing.assert_close(relative_residual(h), relative_residual(7.0 * h))
    expected = composite_norm(h - h.mean(1, keepdim=True)) / composite_norm(h)
    torch.testing.assert_close(relative_residual(h), expected)


def test_relative_residual_ignores_padding():
    h = torch.randn(2, 6, 4)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[:, 4:] = True
    garbage = h.clone()
    garbage[:, 4:] = 1e3
    torch.testing.assert_close(relative_residual(garbage, mask), relative_residual(h[:, :4]))


def pure_model(mixer: str, skip: bool, depth: int = 6) -> Model:
    cfg = ModelConfig(dim=64, depth=depth, heads=4, mixer=mixer, skip=skip, mlp=False, norm="none")
    return Model(cfg, out_features=10, max_len=32, vocab_size=50)


@pytest.mark.parametrize("mixer", ["scaled_dot", "quadratic", "metric"])
def test_pure_attention_collapses_and_skip_connections_prevent_it(mixer):
    tokens = torch.randint(0, 50, (8, 32))
    pure = rank_profile(pure_model(mixer, skip=False), tokens)
    assert len(pure.mean) == 7
    assert pure.mean[0] > 0.5
    assert pure.mean[-1] < 1e-4
    with_skip = rank_profile(pure_model(mixer, skip=True), tokens)
    assert min(with_skip.mean) > 0.3


def test_float64_probe_sees_past_float32_floor():
    tokens = torch.randint(0, 50, (4, 32))
    model = pure_model("scaled_dot", skip=False)
    f32 = rank_profile(model, tokens)
    f64 = rank_profile(model, tokens, dtype=torch.float64)
    assert f32.mean[-1] > 1e-8  # float32 stops near its rounding floor
    assert f64.mean[-1] < 1e-12  # float64 keeps falling doubly exponentially
    assert next(model.parameters()).dtype == torch.float32  # the probe used a copy


@pytest.mark.parametrize("mixer", ["pooling", "identity"])
def test_pooling_and_identity_keep_rank_without_skip(mixer):
    """Recorded in the README's mixer table: neither collapses. Identity leaves the embedding's
    residual untouched; pooling (mean minus the token) is a high-pass filter that removes the
    shared component, so its output stays far from rank one."""
    tokens = torch.randint(0, 50, (8, 32))
    profile = rank_profile(pure_model(mixer, skip=False), tokens)
    if mixer == "identity":
        assert profile.mean == pytest.approx([profile.mean[0]] * 7, rel=1e-6)
    assert min(profile.mean) > 0.5


def test_rank_profile_leaves_training_mode_alone():
    model = pure_model("identity", skip=True)
    model.train()
    rank_profile(model, torch.randint(0, 50, (2, 8)))
    assert model.training
