"""The pictures logged to W&B: attention maps read through the mixers' own ops, learned U / M,
and the rank-decay figure."""

import math

import pytest
import torch
from einops import rearrange

from attnzoo import Model, ModelConfig
from attnzoo.attention_maps import attention_maps, learned_matrices, maps_figure, matrices_figure
from attnzoo.tracking import rank_figure


def _model(mixer: str, share: bool = False, causal: bool = False) -> Model:
    cfg = ModelConfig(dim=16, depth=3, heads=2, mixer=mixer, share_blocks=share, causal=causal)
    return Model(cfg, out_features=5, max_len=7, vocab_size=11).eval()


@pytest.mark.parametrize("mixer", ["scaled_dot", "quadratic", "metric"])
def test_maps_are_probabilities_one_per_layer(mixer):
    model = _model(mixer)
    x = torch.randint(0, 11, (3, 7))
    maps = attention_maps(model, x)
    assert len(maps) == 3 and all(m.shape == (2, 7, 7) for m in maps)
    for m in maps:
        assert bool((m >= 0).all())
        torch.testing.assert_close(m.sum(-1), torch.ones(2, 7))


def test_scaled_dot_map_equals_softmax_of_scores():
    model = _model("scaled_dot")
    x = torch.randint(0, 11, (1, 7))
    (first, *_) = attention_maps(model, x)
    block = model.blocks[0]
    h_bnd = block.norm1(model.embed(x) + model.pos[:7])
    q, k, _ = rearrange(block.mixer.qkv(h_bnd), "b n (three h k) -> three b h n k", three=3, h=2)
    expected = (q @ k.transpose(-1, -2) / math.sqrt(8)).softmax(-1)[0]
    torch.testing.assert_close(first, expected.detach())


def test_causal_maps_never_look_ahead_and_shared_blocks_give_every_application():
    model = _model("metric", share=True, causal=True)
    maps = attention_maps(model, torch.randint(0, 11, (1, 7)))
    assert len(maps) == 3  # one block applied three times
    for m in maps:
        assert float(m.triu(diagonal=1).abs().max()) == 0.0


def test_no_maps_for_mixers_without_attention():
    assert attention_maps(_model("pooling"), torch.randint(0, 11, (1, 7))) == []
    assert learned_matrices(_model("scaled_dot")) == {}


def test_learned_matrices_and_figures():
    mats = learned_matrices(_model("metric"))
    assert list(mats) == ["layer_1/M", "layer_2/M", "layer_3/M"]
    for m in mats.values():
        torch.testing.assert_close(m, m.transpose(-1, -2))  # the metric is symmetric
    assert learned_matrices(_model("quadratic"))["layer_1/U"].shape == (2, 16, 16)
    assert len(learned_matrices(_model("quadratic", share=True))) == 1
    rank_fig = rank_figure([(0, [1.0, 0.1, 1e-3]), (10, [1.0, 0.5, 0.2])])
    assert rank_fig.axes[0].get_yscale() == "log" and len(rank_fig.axes[0].lines) == 2
    for fig in (
        matrices_figure(mats, 0),
        maps_figure(attention_maps(_model("metric"), torch.randint(0, 11, (1, 7))), 0),
    ):
        assert len(fig.axes) >= 1
