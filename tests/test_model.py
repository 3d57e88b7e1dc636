"""Mixers, the MetaFormer block and the model: what a researcher relies on when ablating."""

import re

import pytest
import torch

from attnzoo import MIXERS, Block, Model, ModelConfig, build_mixer
from attnzoo.mixers import can_run, mixer_options

D, H = 32, 4
DK = D // H


def sized(name: str, n: int = 32) -> dict:
    """The `max_len` a Model gives a mixer that takes one (token_mlp), for one built alone; and
    `causal=True` for a mixer that is causal only."""
    causal_only = {} if can_run(MIXERS[name], causal=False) else {"causal": True}
    return ({"max_len": n} if "max_len" in mixer_options(name) else {}) | causal_only


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(
    "name,options,expected",
    [
        ("scaled_dot", {}, 4 * D * D),
        ("quadratic", {}, H * D * D + 2 * D * D),
        ("metric", {"metric_param": "sym"}, 2 * D * D + H * DK * (DK + 1) // 2),
        ("metric", {"metric_param": "psd"}, 2 * D * D + H * DK * (DK + 1) // 2),
        ("metric", {"metric_param": "diag"}, 2 * D * D + H * DK),
        ("metric", {"metric_param": "identity"}, 2 * D * D),
        ("pooling", {}, 0),
        ("identity", {}, 0),
    ],
)
def test_parameter_counts_follow_the_architecture_table(name, options, expected):
    assert n_params(build_mixer(name, dim=D, heads=H, **options)) == expected


@pytest.mark.parametrize("param", ["sym", "psd", "diag", "identity"])
def test_metric_tensor_is_symmetric_and_psd_when_asked(param):
    mixer = build_mixer("metric", dim=D, heads=H, metric_param=param)
    m = mixer.metric()
    assert m.shape == (H, DK, DK)
    torch.testing.assert_close(m, m.transpose(1, 2))
    if param == "psd":
        assert torch.linalg.eigvalsh(m).min() >= -1e-6


def test_metric_mixer_equals_attention_with_q_pm_k_v_p():
    mixer = build_mixer("metric", dim=D, heads=H)
    x = torch.randn(2, 7, D)
    p = mixer.p(x).reshape(2, 7, H, DK).transpose(1, 2)
    probs = ((p @ mixer.metric()) @ p.transpose(-1, -2) / DK**0.5).softmax(-1)
    expected = mixer.proj((probs @ p).transpose(1, 2).reshape(2, 7, D))
    torch.testing.assert_close(mixer(x), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(MIXERS))
def test_causal_mixers_never_look_ahead(name):
    if not getattr(MIXERS[name], "supports_causal", True):
        pytest.skip(f"{name} cannot be causal (supports_causal = False)")
    mixer = build_mixer(name, dim=D, heads=H, **sized(name) | {"causal": True})
    x = torch.randn(2, 12, D)
    t = 5
    changed = x.clone()
    changed[:, t + 1 :] = torch.randn_like(changed[:, t + 1 :])
    torch.testing.assert_close(mixer(x)[:, : t + 1], mixer(changed)[:, : t + 1])


@pytest.mark.parametrize("name", sorted(MIXERS))
def test_padding_tokens_never_change_real_outputs(name):
    mixer = build_mixer(name, dim=D, heads=H, **sized(name))
    x = torch.randn(2, 10, D)
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[0, 6:] = True
    mask[1, 3:] = True
    changed = torch.where(mask[..., None], torch.randn_like(x) * 100, x)
    real = ~mask
    torch.testing.assert_close(mixer(x, mask)[real], mixer(changed, mask)[real])


def test_pure_block_is_exactly_its_mixer():
    mixer = build_mixer("scaled_dot", dim=D, heads=H)
    block = Block(D, mixer, residual="none", mlp=False, norm="none")
    x = torch.randn(2, 9, D)
    assert torch.equal(block(x), mixer(x))
    assert n_params(block) == n_params(mixer)


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_block_switches_follow_the_equations(norm_position):
    torch.manual_seed(0)
    mixer = build_mixer("identity", dim=D)
    x = torch.randn(2, 5, D)
    for skip in (True, False):
        block = Block(
            D,
            mixer,
            residual="add" if skip else "none",
            mlp=True,
            norm="layernorm",
            norm_position=norm_position,
        )
        n1, n2, mlp = block.norm1, block.norm2, block.mlp
        if norm_position == "pre":
            h = x + n1(x) if skip else n1(x)
            y = h + mlp(n2(h)) if skip else mlp(n2(h))
        else:
            h = n1(x + x) if skip else n1(x)
            y = n2(h + mlp(h)) if skip else n2(mlp(h))
        torch.testing.assert_close(block(x), y)


def test_layer_scale_starts_branches_small():
    block = Block(D, build_mixer("identity", dim=D), residual="layerscale", residual_alpha=1e-6)
    x = torch.randn(2, 5, D)
    torch.testing.assert_close(block(x), x, rtol=0, atol=1e-4)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "none"])
@pytest.mark.parametrize(
    "head,out_shape", [("lm", (3, 8, 11)), ("token", (3, 8, 11)), ("classify", (3, 11))]
)
def test_model_heads_and_hidden_states(norm, head, out_shape):
    cfg = ModelConfig(dim=D, depth=3, heads=H, norm=norm, pos_emb="sinusoidal")
    model = Model(cfg, out_features=11, max_len=16, vocab_size=20, head=head)
    tokens = torch.randint(0, 20, (3, 8))
    logits, hidden = model(tokens, return_hidden=True)
    assert logits.shape == out_shape
    assert len(hidden) == cfg.depth + 1 and all(h.shape == (3, 8, D) for h in hidden)


def test_classification_pools_only_real_tokens():
    model = Model(
        ModelConfig(dim=D, depth=2, heads=H),
        out_features=2,
        max_len=8,
        vocab_size=20,
        head="classify",
    )
    tokens = torch.randint(0, 20, (1, 8))
    mask = torch.tensor([[False] * 5 + [True] * 3])
    changed = tokens.clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % 20
    torch.testing.assert_close(model(tokens, mask), model(changed, mask))
    torch.testing.assert_close(model(tokens, mask), model(tokens[:, :5]))


def test_shared_blocks_make_a_recurrent_model():
    model = Model(
        ModelConfig(dim=D, depth=5, heads=H, share_blocks=True),
        out_features=3,
        max_len=8,
        in_features=2,
        head="token",
    )
    assert len({id(b) for b in model.blocks}) == 1
    assert model(torch.randn(2, 8, 2)).shape == (2, 8, 3)


@pytest.mark.parametrize(
    "build,match",
    [
        (
            lambda: build_mixer("softmax", dim=D),
            r"unknown mixer 'softmax'; registered mixers: " + re.escape(str(sorted(MIXERS))),
        ),
        (
            lambda: build_mixer("scaled_dot", dim=30, heads=4),
            r"dim=30 must be divisible by heads=4",
        ),
        (
            lambda: build_mixer("pooling", dim=D, window=4),
            "pooling window must be a positive odd int, got 4",
        ),
        (
            lambda: build_mixer("metric", dim=D, heads=H, metric_param="full"),
            r"metric_param='full' is not one of \('sym', 'psd', 'diag', 'identity'\)",
        ),
        (
            lambda: build_mixer("pooling", dim=D, pool_size=3),
            r"mixer 'pooling' has no option\(s\) \['pool_size'\]; its options are \['attn_dropout', 'window'\]",
        ),
        (
            lambda: Block(D, build_mixer("identity", dim=D), norm="batchnorm"),
            r"norm='batchnorm' is not one of",
        ),
        (
            lambda: Block(D, build_mixer("identity", dim=D), norm_position="middle"),
            r"norm_position='middle' is not one of",
        ),
        (
            lambda: build_mixer("scaled_dot", dim=D, heads=H)(torch.randn(4, D)),
            r"mixer input must have shape \(batch, tokens, 32\)",
        ),
        (
            lambda: Model(ModelConfig(dim=D, heads=H), 2, max_len=4, vocab_size=9)(
                torch.zeros(1, 5, dtype=torch.long)
            ),
            "longer than max_len=4",
        ),
    ],
)
def test_bad_configuration_raises_value_error_naming_it(build, match):
    with pytest.raises(ValueError, match=match):
        build()


@pytest.mark.parametrize("name", sorted(MIXERS))
def test_mixers_run_on_meta_tensors_so_forward_never_syncs(name):
    mixer = build_mixer(name, dim=D, heads=H, **sized(name)).to("meta")
    x = torch.empty(2, 16, D, device="meta")
    mask = torch.empty(2, 16, dtype=torch.bool, device="meta")
    assert mixer(x, mask).shape == x.shape
