"""The statistics of attention weights (attnzoo.rank.WEIGHT_STATS) on weights with known answers,
and what a model's profile and the trainer's record say for mixers with and without weights."""

import math

import pytest
import torch

from attnzoo.model import Model, ModelConfig
from attnzoo.rank import attention_row_sum, rank_profile, sink_share
from attnzoo.tasks import Batch
from attnzoo.train.rank_probe import rank_record


def uniform_causal(n: int, heads: int = 2) -> torch.Tensor:
    """Each query spreads its weight evenly over the keys it sees: (1, heads, n, n)."""
    w = torch.ones(n, n, dtype=torch.float64).tril()
    return (w / w.sum(-1, keepdim=True))[None, None].expand(1, heads, n, n)


def test_softmax_rows_sum_to_one_and_a_scaled_matrix_scales_its_sum():
    torch.manual_seed(0)
    probs = torch.randn(3, 4, 6, 6, dtype=torch.float64).softmax(-1)
    torch.testing.assert_close(attention_row_sum(probs), torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(attention_row_sum(0.25 * probs), torch.full((3,), 0.25).double())
    # padding: its keys are left out of each row, its queries out of the mean
    mask = torch.zeros(3, 6, dtype=torch.bool)
    mask[0, -2:] = True
    expected = probs[0, :, :4, :4].sum(-1).mean()
    assert attention_row_sum(probs, mask)[0].item() == pytest.approx(expected.item())


def test_sink_share_counts_heads_over_the_threshold_on_the_first_token():
    """Uniform causal attention puts a mean weight H_N / N on the first token (H_N the harmonic
    number): over 0.3 at N = 9, under it at N = 64; a head that sends half of every row to the
    first token is a sink head."""
    harmonic = lambda n: sum(1 / i for i in range(1, n + 1))
    assert harmonic(9) / 9 > 0.3 > harmonic(64) / 64
    assert sink_share(uniform_causal(9)).item() == 1.0
    assert sink_share(uniform_causal(64)).item() == 0.0
    w = uniform_causal(64, heads=4).clone()
    w[:, :2] = w[:, :2] * 0.5
    w[:, :2, :, 0] += 0.5  # heads 0 and 1: half of each row on the first token
    assert sink_share(w).item() == 0.5


@pytest.mark.parametrize(
    ("mixer", "row_sum_is_one"),
    [("scaled_dot", True), ("sigmoid", False), ("gla", False), ("pooling", None)],
)
def test_the_profile_and_the_trainer_record_log_them_for_every_mixer_with_weights(
    mixer, row_sum_is_one
):
    torch.manual_seed(0)
    cfg = ModelConfig(dim=16, depth=2, heads=4, mixer=mixer, causal=True, impl="torch")
    model = Model(cfg, out_features=5, max_len=9, vocab_size=11, head="token")
    inputs = torch.randint(0, 11, (3, 9))
    profile = rank_profile(model, inputs, measures=None)
    record = rank_record(
        model, Batch(inputs, torch.zeros(3, dtype=torch.long)), measures=["attention_entropy"]
    )
    keys = {k for k in record if k.startswith("attention/")}
    if row_sum_is_one is None:  # no weights: nothing logged, never a number for n/a
        assert profile.weights == {} and keys == set()
        return
    assert keys == {f"attention/{s}/layer_{k}" for s in ("row_sum", "sink_share") for k in (1, 2)}
    assert math.isnan(profile.weights["row_sum"][0])  # the embedding: no weights
    sums = profile.weights["row_sum"][1:]
    assert all(abs(s - 1) < 1e-6 for s in sums) == row_sum_is_one
