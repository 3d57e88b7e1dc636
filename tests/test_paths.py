"""The path decomposition: per-head contributions and the sum over paths rebuild the network."""

import pytest
import torch

from attnzoo import MIXERS, Model, ModelConfig, build_mixer
from attnzoo.mixers import can_run, mixer_options
from attnzoo.paths import (
    all_paths,
    mean_path_length,
    num_paths,
    path_logits,
    path_shares,
    sample_paths,
)

D, H, N = 16, 4, 7


def sized(name: str, n: int = 32) -> dict:
    """The `max_len` a Model gives a mixer that takes one (token_mlp), for one built alone; and
    `causal=True` for a mixer that is causal only."""
    causal_only = {} if can_run(MIXERS[name], causal=False) else {"causal": True}
    return ({"max_len": n} if "max_len" in mixer_options(name) else {}) | causal_only


@pytest.mark.parametrize("name", sorted(MIXERS))
@pytest.mark.parametrize("causal", [False, True])
def test_single_head_contributions_sum_to_the_mixer_output(name, causal):
    if not hasattr(MIXERS[name], "head_outputs"):
        pytest.skip(f"{name} has no head_outputs (not linear in its input)")
    if not can_run(MIXERS[name], causal):
        pytest.skip(f"{name} cannot be built with causal={causal}")
    torch.manual_seed(0)
    options = {"impl": "torch", **sized(name), "causal": causal}
    mixer = build_mixer(name, dim=D, heads=H, **options).double()
    x_bnd = torch.randn(2, N, D, dtype=torch.float64)
    mask = torch.zeros(2, N, dtype=torch.bool)
    mask[1, -2:] = True
    heads_bhnd = mixer.head_outputs(x_bnd, mask)
    assert heads_bhnd.shape == (2, mixer.heads, N, D)
    # mixers with attention weights have H heads; those without are linear and one head
    assert mixer.heads == (H if hasattr(mixer, "attend") else 1)
    torch.testing.assert_close(heads_bhnd.sum(1), mixer(x_bnd, mask))


@pytest.mark.parametrize("name", ["scaled_dot", "quadratic", "metric"])
def test_scores_from_freezes_the_attention_and_values_stay_linear(name):
    torch.manual_seed(1)
    mixer = build_mixer(name, dim=D, heads=H, impl="torch").double()
    s_bnd, a_bnd, b_bnd = torch.randn(3, 2, N, D, dtype=torch.float64)
    out = lambda x: mixer.head_outputs(x, scores_from=s_bnd)
    torch.testing.assert_close(out(a_bnd + 2 * b_bnd), out(a_bnd) + 2 * out(b_bnd))
    # ... and with the scores taken from x itself, it is the mixer again
    torch.testing.assert_close(out(s_bnd).sum(1), mixer(s_bnd))


@pytest.mark.parametrize("name", sorted(MIXERS))
@pytest.mark.parametrize("head", ["token", "classify"])
def test_sum_over_all_paths_is_the_skip_attention_network(name, head):
    if not hasattr(MIXERS[name], "head_outputs"):
        pytest.skip(f"{name} has no head_outputs (not linear in its input)")
    torch.manual_seed(2)
    causal = not can_run(MIXERS[name], causal=False)  # bidirectional where the mixer can be
    cfg = ModelConfig(
        dim=D, depth=3, heads=2, mixer=name, mlp=False, norm="none", impl="torch", causal=causal
    )
    model = Model(cfg, out_features=5, max_len=N, vocab_size=11, head=head).double()
    with torch.no_grad():  # a non-zero position table, so paths see positions as they would
        model.pos.normal_()
    tokens = torch.randint(0, 11, (3, N))
    heads = model.blocks[0].mixer.heads
    paths = all_paths(3, heads)
    assert len(paths) == (1 + heads) ** 3
    torch.testing.assert_close(path_logits(model, tokens, paths), model(tokens))
    if heads > 1:  # a part of the paths is not the network
        assert not torch.allclose(path_logits(model, tokens, paths[:-1]), model(tokens))


def test_models_with_mlp_or_norm_are_refused():
    for options in ({"mlp": True, "norm": "none"}, {"mlp": False, "norm": "layernorm"}):
        model = Model(ModelConfig(dim=D, depth=2, heads=2, **options), 3, N, vocab_size=5)
        with pytest.raises(ValueError, match="model.mlp=false"):
            path_logits(model, torch.zeros(1, N, dtype=torch.long), [()])


def test_sampled_paths_have_length_k_and_enumerate_when_few():
    assert sample_paths(5, 3, 0, 10) == [()]
    assert sorted(sample_paths(3, 2, 1, 10)) == sorted(p for p in all_paths(3, 2) if len(p) == 1)
    assert num_paths(3, 2, 1) == 6
    many = sample_paths(8, 4, 3, 20, seed=3)
    assert len(many) == 20
    for path in many:
        layers = [layer for layer, _ in path]
        assert len(path) == 3 and layers == sorted(set(layers))
        assert all(0 <= h < 4 for _, h in path)
    assert many == sample_paths(8, 4, 3, 20, seed=3)
    with pytest.raises(ValueError, match="k=9"):
        sample_paths(8, 4, 9, 20)


def test_path_shares_are_the_binomial_counts():
    shares = path_shares(12, 12)
    assert sum(shares) == pytest.approx(1.0, rel=1e-12)
    assert shares[0] == pytest.approx(13.0**-12)
    assert shares[3] == pytest.approx(num_paths(12, 12, 3) / 13**12)
    assert max(range(13), key=shares.__getitem__) == 11  # most paths go through 11 of 12 layers
    assert mean_path_length(12, 12) == pytest.approx(sum(k * s for k, s in enumerate(shares)))
