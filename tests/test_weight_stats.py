"""The statistics of attention weights (attnzoo.rank.WEIGHT_STATS) on weights with known answers,
and what a model's profile and the trainer's record say for mixers with and without weights."""

import math

import pytest
import torch

from attnzoo.analysis.controls import planted_sink, sink_control_readings
from attnzoo.model import Model, ModelConfig
from attnzoo.rank import (
    attention_row_sum,
    first_token_excess,
    first_token_excess_bh,
    first_token_excess_max,
    rank_profile,
    sink_share,
)
from attnzoo.tasks import Batch
from attnzoo.train.rank_probe import rank_record

STATS = ("row_sum", "sink_share", "first_token_excess", "first_token_excess_max")


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


def planted(n: int, first: float, heads: int = 2, causal: bool = True) -> torch.Tensor:
    """Each row gives `first` of its weight to the first token and spreads the rest evenly over
    every key it sees (the first token included): (1, heads, n, n)."""
    w = torch.ones(n, n, dtype=torch.float64)
    w = w.tril() if causal else w
    w = (1 - first) * w / w.sum(-1, keepdim=True)
    w[:, 0] += first
    return w[None, None].expand(1, heads, n, n).clone()


@pytest.mark.parametrize("n", [2, 9, 64, 257])
@pytest.mark.parametrize("causal", [True, False])
def test_first_token_excess_reads_the_share_planted_above_uniform_at_every_length(n, causal):
    """A row that gives a fraction f to the first token on top of uniform weights over its keys
    has share f + (1 - f)/n_i, so (share - 1/n_i) / (1 - 1/n_i) = f exactly: uniform weights read
    0 at any length (where the 0.3 threshold on the raw weight calls uniform causal attention
    over 9 tokens a sink), half the weight reads 0.5, all of it 1."""
    for f in (0.0, 0.5, 1.0):
        w = planted(n, f, causal=causal)
        assert first_token_excess(w).item() == pytest.approx(f, abs=1e-12)
        assert first_token_excess_max(w).item() == pytest.approx(f, abs=1e-12)
    assert sink_share(planted(9, 0.0)).item() == 1.0  # the threshold's false positive
    # scale-free: weights that are not distributions (a sigmoid, a sink taking mass) read alike
    assert first_token_excess(0.25 * planted(n, 0.5, causal=causal)).item() == pytest.approx(0.5)


def test_first_token_excess_is_negative_for_a_head_that_avoids_the_first_token():
    """Every row on its own token (causal): the first token's share is 0 in rows 1..n-1, each
    reading -1/(n_i - 1) = -1/i, so the head's mean is -H_{n-1}/(n-1) (H the harmonic number)."""
    n = 12
    w = torch.eye(n, dtype=torch.float64)[None, None]
    # the eye alone hides the causal mask; a second head with uniform causal weights shows it
    both = torch.cat([w, planted(n, 0.0, heads=1)], dim=1)
    excess = first_token_excess_bh(both)[0]
    harmonic = sum(1 / i for i in range(1, n))
    assert excess[0].item() == pytest.approx(-harmonic / (n - 1), abs=1e-12)
    assert excess[1].item() == pytest.approx(0.0, abs=1e-12)
    assert first_token_excess_max(both).item() == pytest.approx(0.0, abs=1e-12)


def test_first_token_excess_leaves_out_padding_and_one_key_rows():
    """Padding keys are not seen and padding queries not averaged: a padded sequence of 6 real
    tokens reads as the unpadded one; a batch element whose rows see one key reads NaN."""
    n, real = 10, 6
    w = planted(n, 0.0).expand(2, 2, n, n).clone()
    w[0, :, :, 0] += 0.3  # batch 0: more weight on the first token in every row
    mask = torch.zeros(2, n, dtype=torch.bool)
    mask[:, real:] = True
    torch.testing.assert_close(
        first_token_excess(w, mask), first_token_excess(w[:, :, :real, :real])
    )
    only_first = torch.zeros(1, 2, 4, 4, dtype=torch.float64)
    only_first[..., 0] = 1.0
    pad_all_but_one = torch.tensor([[False, True, True, True]])
    assert math.isnan(first_token_excess(only_first, pad_all_but_one).item())


def test_first_token_excess_reads_a_sliding_window_over_the_rows_that_see_the_first_token():
    """Uniform weights over a causal window of 4 keys read 0 (rows beyond the window do not
    see the first token and are left out, not read as avoiding it); a window whose rows in
    reach give the first token half their weight reads 0.5."""
    n, window = 16, 4
    idx = torch.arange(n)
    band = ((idx[:, None] - idx[None]) >= 0) & ((idx[:, None] - idx[None]) < window)
    w = band.double() / band.sum(-1, keepdim=True)
    assert first_token_excess(w[None, None]).item() == pytest.approx(0.0, abs=1e-12)
    half = w.clone()
    half[:window] *= 0.5
    half[:window, 0] += 0.5
    assert first_token_excess(half[None, None]).item() == pytest.approx(0.5, abs=1e-12)
    nowhere = torch.zeros(1, 2, 4, 4, dtype=torch.float64)  # no weight anywhere: n/a
    assert math.isnan(first_token_excess(nowhere).item())
    assert math.isnan(first_token_excess_max(nowhere).item())


def test_a_planted_sink_reads_as_one_and_its_absence_as_zero_through_the_trainer_record():
    """Calibration as the studies read it (rank_record, the logged keys): with the BOS token the
    block's every query puts nearly all its weight on it (excess near 1, Gu et al.'s share 1);
    without it the same weights have no first token to prefer (excess near 0)."""
    readings = sink_control_readings()
    positive, negative = readings.values()
    assert positive["first_token_excess"] > 0.99 and positive["first_token_excess_max"] > 0.99
    assert positive["sink_share"] == 1.0
    assert abs(negative["first_token_excess_max"]) < 0.05
    # the record is the trainer's: the same numbers as the model's profile, read directly
    model, inputs = planted_sink(bos=True)
    profile = rank_profile(model, inputs, measures=["attention_entropy"])
    assert profile.weights["first_token_excess"][1] == pytest.approx(positive["first_token_excess"])


def test_the_controls_read_alike_over_draws_where_the_thresholded_share_does_not():
    """Eight draws of the controls' tokens (and their value weights): the planted sink reads
    above 0.99 in every draw and its negative within ±0.05, the first token being exchangeable
    with the keys before each row (expected excess 0). The negative's sharp, content-driven
    weights put more than 0.3 of some rows' mean on their first token in some heads, so the
    thresholded share reads a sink in some draws: a threshold's false positive."""
    shares = []
    for seed in range(8):
        for bos in (True, False):
            model, inputs = planted_sink(bos, seed=seed)
            weights = rank_profile(model, inputs, measures=["attention_entropy"]).weights
            if bos:
                assert weights["first_token_excess_max"][1] > 0.99
            else:
                assert abs(weights["first_token_excess"][1]) < 0.05
                assert abs(weights["first_token_excess_max"][1]) < 0.05
                shares.append(weights["sink_share"][1])
    assert max(shares) > 0


def test_first_token_excess_of_a_random_model_is_near_zero():
    """The negative control: at random init scaled-dot's weights are close to uniform over the
    keys each row sees, and the excess is small in every head."""
    torch.manual_seed(1)
    cfg = ModelConfig(dim=32, depth=2, heads=4, mixer="scaled_dot", causal=True, impl="torch")
    model = Model(cfg, out_features=5, max_len=64, vocab_size=50, head="token")
    profile = rank_profile(model, torch.randint(0, 50, (8, 64)), measures=["attention_entropy"])
    assert all(abs(v) < 0.05 for v in profile.weights["first_token_excess_max"][1:])


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
    assert keys == {f"attention/{s}/layer_{k}" for s in STATS for k in (1, 2)}
    assert math.isnan(profile.weights["row_sum"][0])  # the embedding: no weights
    sums = profile.weights["row_sum"][1:]
    assert all(abs(s - 1) < 1e-6 for s in sums) == row_sum_is_one
