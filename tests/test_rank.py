"""The rank-collapse measures and the paper's central result at init."""

import math

import numpy as np
import pytest
import torch

from attnzoo import MIXERS, Model, ModelConfig, composite_norm, rank_profile, relative_residual
from attnzoo.mixers import can_run
from attnzoo.rank import (
    MEASURES,
    WEIGHT_STATS,
    RankProfile,
    attention_entropy,
    effective_rank,
    measure,
    measure_samples,
    stable_rank,
    token_similarity,
)


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
    assert relative_residual(h).dtype == torch.float64  # measured in float64 whatever h is
    torch.testing.assert_close(relative_residual(h), expected.double(), rtol=1e-6, atol=0)


def test_relative_residual_of_a_vanished_state_is_nan_and_of_a_tiny_one_its_share():
    """A state underflowed to 0 has no direction: NaN, not "collapsed"; one of 1e-300 still
    has its own share."""
    h = torch.randn(2, 5, 6, dtype=torch.float64)
    h[0] = 0.0
    got = relative_residual(h)
    assert math.isnan(got[0].item()) and got[1].item() > 0.1
    torch.testing.assert_close(relative_residual(1e-300 * h[1:]), got[1:])


def test_relative_residual_ignores_padding():
    h = torch.randn(2, 6, 4)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[:, 4:] = True
    garbage = h.clone()
    garbage[:, 4:] = 1e3
    torch.testing.assert_close(relative_residual(garbage, mask), relative_residual(h[:, :4]))


def pure_model(mixer: str, skip: bool, depth: int = 6) -> Model:
    residual = "add" if skip else "none"
    cfg = ModelConfig(
        dim=64, depth=depth, heads=4, mixer=mixer, residual=residual, mlp=False, norm="none"
    )
    return Model(cfg, out_features=10, max_len=32, vocab_size=50)


@pytest.mark.parametrize(
    "mixer", [m for m in sorted(MIXERS) if hasattr(MIXERS[m], "attention_probs")]
)
def test_pure_attention_collapses_and_skip_connections_prevent_it(mixer):
    if not can_run(MIXERS[mixer], causal=False):
        pytest.skip(f"{mixer} is causal only: its attention does not reach every token")
    tokens = torch.randint(0, 50, (8, 32))
    model = pure_model(mixer, skip=False)
    probs = model.blocks[0].mixer.attention_probs(torch.randn(1, 32, 64))
    if not (probs > 0).all():
        pytest.skip(
            f"{mixer}'s attention does not reach every token: the collapse at this rate "
            "(Dong et al. 2021) needs every query to weigh every key"
        )
    pure = rank_profile(model, tokens)
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
    # float32 stops at its resolution: the tokens become bitwise equal (a residual of 0) after
    # one or two blocks, where float64 still resolves them
    first_zero = next(i for i, r in enumerate(f32.mean) if r < 1e-7)
    assert 0 < f64.mean[first_zero] < 1e-7
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


# ---- the later measures: hand-built cases and an independent numpy formula -------------------


def np_measures(h: np.ndarray, attn: np.ndarray | None = None) -> dict[str, float]:
    """Every measure of one sample (tokens × dim), written from the papers' formulas in numpy."""
    s = np.linalg.svd(h, compute_uv=False)
    p = s / s.sum()
    p = p[p > 0]
    res = h - h.mean(axis=0, keepdims=True)

    def comp(a):
        return math.sqrt(np.abs(a).sum(axis=0).max() * np.abs(a).sum(axis=1).max())

    u = h / np.linalg.norm(h, axis=1, keepdims=True)
    cos = u @ u.T
    n = len(h)
    out = {
        "relative_residual": comp(res) / comp(h),
        "effective_rank": math.exp(-(p * np.log(p)).sum()),
        "stable_rank": (np.linalg.norm(h, "fro") / np.linalg.norm(h, 2)) ** 2,
        "token_similarity": (cos.sum() - np.trace(cos)) / (n * (n - 1)),
    }
    if attn is not None:  # (heads, queries, keys)
        with np.errstate(divide="ignore", invalid="ignore"):
            ent = -np.where(attn > 0, attn * np.log(attn), 0.0).sum(axis=-1)  # (heads, queries)
        out["attention_entropy"] = ent.mean(axis=-1).mean()
    return out


def random_attention(b: int, h: int, n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.softmax(3 * torch.randn(b, h, n, n, generator=gen, dtype=torch.float64), dim=-1)


def test_measures_agree_with_an_independent_numpy_formula():
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(3, 7, 5, generator=gen)
    attn = random_attention(3, 2, 7, gen)
    got = measure_samples(h, attention_bhqk=attn)
    assert list(got) == list(MEASURES)
    for i in range(3):
        expected = np_measures(h[i].double().numpy(), attn[i].numpy())
        for name, value in expected.items():
            assert got[name][i].item() == pytest.approx(value, rel=1e-10), name
            assert got[name].dtype == torch.float64


def test_rank_one_input_is_complete_collapse_in_every_measure():
    row = torch.randn(2, 1, 6, dtype=torch.float64)
    scales = torch.linspace(0.5, 2.0, 5, dtype=torch.float64)[None, :, None]
    h = row * scales  # every token a positive multiple of one vector: rank one
    got = measure(h, ["effective_rank", "stable_rank", "token_similarity"])
    assert got == pytest.approx(
        {"effective_rank": 1.0, "stable_rank": 1.0, "token_similarity": 1.0}
    )
    same = row.expand(2, 5, 6)  # every token the same vector: no residual either
    assert measure(same, "relative_residual")["relative_residual"] == pytest.approx(0.0, abs=1e-15)


def test_orthogonal_tokens_of_equal_norm_have_full_rank_and_no_similarity():
    q, _ = torch.linalg.qr(torch.randn(8, 8, dtype=torch.float64))
    h = 3.0 * q[:5][None]  # 5 orthonormal rows, scaled: (1, 5, 8)
    got = measure(h, ["effective_rank", "stable_rank", "token_similarity"])
    assert got["effective_rank"] == pytest.approx(5.0, rel=1e-12)
    assert got["stable_rank"] == pytest.approx(5.0, rel=1e-12)
    assert got["token_similarity"] == pytest.approx(0.0, abs=1e-12)
    # singular values 2 and 1: p = (2/3, 1/3), stable rank (4 + 1) / 4
    h2 = torch.tensor([[[2.0, 0.0], [0.0, 1.0]]])
    assert effective_rank(h2).item() == pytest.approx(
        math.exp(-(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3))
    )
    assert stable_rank(h2).item() == pytest.approx(5 / 4)


def test_attention_entropy_of_uniform_and_one_hot_attention():
    n = 6
    uniform = torch.full((2, 3, n, n), 1.0 / n)
    torch.testing.assert_close(
        attention_entropy(uniform), torch.full((2, 3), math.log(n), dtype=torch.float64)
    )
    one_hot = torch.eye(n).expand(2, 3, n, n)
    torch.testing.assert_close(attention_entropy(one_hot), torch.zeros(2, 3, dtype=torch.float64))
    # one head uniform, one one-hot: the registry's figure is the mean over heads
    mixed = torch.stack([uniform[0, 0], one_hot[0, 0]])[None]
    got = measure(torch.randn(1, n, 4), "attention_entropy", attention_bhqk=mixed)
    assert got["attention_entropy"] == pytest.approx(math.log(n) / 2)


def test_attention_measures_are_nan_without_attention():
    got = measure(torch.randn(2, 5, 4))
    assert set(got) == set(MEASURES)
    assert math.isnan(got["attention_entropy"])
    assert not any(math.isnan(v) for k, v in got.items() if k != "attention_entropy")


def test_every_measure_leaves_padding_out():
    """A padded batch with garbage in its padding measures like each sequence alone."""
    gen = torch.Generator().manual_seed(1)
    n, lengths = 9, (9, 6, 4)
    h = torch.randn(3, n, 5, generator=gen, dtype=torch.float64)
    attn = random_attention(3, 2, n, gen)
    mask = torch.zeros(3, n, dtype=torch.bool)
    for i, length in enumerate(lengths):
        mask[i, length:] = True
    garbage, attn_garbage = h.clone(), attn.clone()
    garbage[mask] = 1e3
    for i, length in enumerate(lengths):  # padding keys get weight, padding queries anything
        attn_garbage[i, :, length:, :] = 1.0 / n
        attn_garbage[i, :, :, length:] += 0.5
    got = measure_samples(garbage, key_padding_mask=mask, attention_bhqk=attn_garbage)
    for i, length in enumerate(lengths):
        a = attn[i : i + 1, :, :length, :length]
        alone = measure_samples(h[i : i + 1, :length], attention_bhqk=a / a.sum(-1, keepdim=True))
        for name in MEASURES:
            assert got[name][i].item() == pytest.approx(alone[name].item(), rel=1e-10), name
    with pytest.raises(ValueError, match="key_padding_mask must have shape"):
        measure(h, key_padding_mask=mask[:, :4])


def test_token_similarity_of_a_single_token_is_nan_and_left_out_of_the_mean():
    h = torch.randn(2, 3, 4, dtype=torch.float64)
    mask = torch.tensor([[False, False, False], [False, True, True]])
    per = token_similarity(h, mask)
    assert math.isnan(per[1].item()) and not math.isnan(per[0].item())
    assert measure(h, "token_similarity", mask)["token_similarity"] == pytest.approx(per[0].item())


def test_unknown_measure_is_an_error_listing_them():
    with pytest.raises(ValueError, match="unknown measure 'rank'; measures: relative_residual"):
        measure(torch.randn(1, 3, 2), ["rank"])


def test_rank_profile_reports_every_measure_and_the_log_keys_for_the_trainer():
    tokens = torch.randint(0, 50, (4, 32))
    model = pure_model("scaled_dot", skip=False, depth=3)
    assert list(rank_profile(model, tokens).measures) == ["relative_residual"]  # the default
    profile = rank_profile(model, tokens, dtype=torch.float64, measures=None)
    assert list(profile.measures) == list(MEASURES)
    assert profile.measures["relative_residual"] == profile.mean
    assert all(len(v) == 4 for v in profile.measures.values())
    entropy = profile.measures["attention_entropy"]
    assert math.isnan(entropy[0])  # the embedding: no attention produced it
    assert all(0 < e <= math.log(32) + 1e-9 for e in entropy[1:])
    assert profile.measures["effective_rank"][-1] == pytest.approx(1.0, abs=1e-6)
    assert profile.measures["token_similarity"][-1] == pytest.approx(1.0, abs=1e-9)
    logged = profile.log_dict()
    assert "rank/attention_entropy/layer_0" not in logged  # n/a is left out of the log
    assert logged["rank/stable_rank/layer_3"] == profile.measures["stable_rank"][3]
    rank_keys = [k for k in logged if k.startswith("rank/")]
    assert len(rank_keys) == 5 * 4 - 1
    # and the weights' statistics, per block (softmax rows: sums of 1)
    assert [logged[f"attention/row_sum/layer_{k}"] for k in (1, 2, 3)] == pytest.approx([1.0] * 3)
    assert len(logged) == len(rank_keys) + len(WEIGHT_STATS) * 3
    pooled = rank_profile(pure_model("pooling", skip=False, depth=2), tokens, measures=None)
    assert all(math.isnan(e) for e in pooled.measures["attention_entropy"])
    only = rank_profile(pure_model("metric", skip=False, depth=2), tokens, measures=["stable_rank"])
    assert list(only.measures) == ["relative_residual", "stable_rank"]


def test_rank_profile_entropy_matches_the_attention_maps():
    """The entropy the profile reports is that of the probabilities attention_maps draws."""
    from attnzoo.attention_maps import attention_maps

    model = pure_model("quadratic", skip=False, depth=2)
    tokens = torch.randint(0, 50, (1, 32))
    profile = rank_profile(model, tokens, measures=["attention_entropy"])
    maps = attention_maps(model, tokens)
    expected = [attention_entropy(m[None]).mean().item() for m in maps]
    assert profile.measures["attention_entropy"][1:] == pytest.approx(expected, rel=1e-5)
    assert isinstance(RankProfile.from_states([torch.randn(1, 2, 3)]), RankProfile)


def test_rank_profile_leaves_padding_out_of_every_measure():
    """An attnzoo model on a padded, masked batch: every measure is the mean of each sequence's
    own (the attention entropy through the mixers' masked probabilities)."""
    torch.manual_seed(0)
    model = pure_model("metric", skip=True, depth=2)
    tokens = torch.randint(0, 50, (2, 10))
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[1, 6:] = True
    padded = rank_profile(model, tokens, mask, dtype=torch.float64, measures=None)
    alone = [
        rank_profile(model, tokens[i : i + 1, :n], dtype=torch.float64, measures=None)
        for i, n in ((0, 10), (1, 6))
    ]
    for name in MEASURES:
        expected = torch.tensor([a.measures[name] for a in alone], dtype=torch.float64).mean(0)
        assert padded.measures[name] == pytest.approx(expected.tolist(), rel=1e-9, nan_ok=True)


def test_the_relative_residual_can_exceed_one_up_to_its_bound():
    """docs/training.md: with the composite norm the relative residual is at most 2(1 − 1/N), and
    one token apart from N − 1 equal ones gives √2·(1 − 1/N), above 1 from N = 4 on."""
    from attnzoo.rank import relative_residual

    for n in (2, 4, 16):
        spike = torch.zeros(1, n, 3, dtype=torch.float64)
        spike[0, 0] = torch.tensor([1.0, 0.0, 0.0])
        want = math.sqrt(2) * (1 - 1 / n)
        assert relative_residual(spike).item() == pytest.approx(want, rel=1e-12)
    h = torch.randn(2000, 8, 5, dtype=torch.float64) ** 3  # heavy tails: far from the mean
    assert relative_residual(h).max().item() <= 2 * (1 - 1 / 8)
