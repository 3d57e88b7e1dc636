"""attnzoo.hf_probe: interventions on real architectures compute what the docstring says, leave the
model as it was, and agree with attnzoo's own blocks built without skip, MLP or norm."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from einops import rearrange

from attnzoo import Model, ModelConfig, rank_profile
from attnzoo.hf_probe import (
    ADAPTERS,
    VARIANTS,
    Adapter,
    _parts,
    hidden_states,
    intervene,
    layers_of,
    rank_decay,
)
from attnzoo.rank import MEASURES, attention_entropy

transformers = pytest.importorskip("transformers", reason="the [hf] extra is not installed")

TINY = {  # 4 layers, width 32, 4 heads: a few milliseconds a forward
    "bert": dict(
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=128,
        max_position_embeddings=32,
    ),
    "albert": dict(
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=128,
        max_position_embeddings=32,
    ),
    "xlnet": dict(d_model=32, n_layer=4, n_head=4, d_inner=64, vocab_size=128),
    "gpt2": dict(
        n_embd=32,
        n_layer=4,
        n_head=4,
        vocab_size=128,
        n_positions=32,
        bos_token_id=0,
        eos_token_id=0,
    ),
    "vit": dict(
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=16,
        patch_size=4,
    ),
}
# Where each layer's attention and MLP read their input: the attention of a post-norm layer reads
# x, of a pre-norm layer N1(x); the MLP reads h (post-norm) or N2(h) (pre-norm).
ATTN_IN = {"bert": "attention.self", "albert": "attention", "xlnet": "rel_attn"}
ATTN_IN |= {"gpt2": "attn", "vit": "attention"}
MLP_IN = {"bert": "intermediate", "albert": "ffn", "xlnet": "ff", "gpt2": "mlp"}
MLP_IN["vit"] = "mlp" if int(transformers.__version__.split(".")[0]) >= 5 else "intermediate"


@pytest.fixture(scope="module", params=list(TINY))
def hf(request):
    """(name, tiny randomly initialised model, inputs for it)."""
    name = request.param
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(name, **TINY[name])
    model = transformers.AutoModel.from_config(config, attn_implementation="eager")
    if name == "vit":
        inputs = {"pixel_values": torch.randn(2, 3, 16, 16)}
    else:
        inputs = {"input_ids": torch.randint(0, 128, (2, 12))}
    return name, model, inputs


def _hooks(model):
    """Every forward (pre-)hook on the model, by module (transformers installs some of its own)."""
    return {
        name: (list(m._forward_hooks), list(m._forward_pre_hooks))
        for name, m in model.named_modules()
    }


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def test_full_is_the_models_own_forward(hf):
    name, model, inputs = hf
    model.eval()
    with torch.no_grad():
        own = model(**inputs, output_hidden_states=True).hidden_states
    probed = hidden_states(model, inputs, "full")
    assert len(probed) == 5
    if name == "xlnet":  # XLNet's own hidden states are (tokens, batch, dim) permuted back
        own = [h.contiguous() for h in own]
    if name == "gpt2":  # GPT-2 reports its last hidden state after the final ln_f
        own, probed = own[:-1], probed[:-1]
    for h_own, h_probed in zip(own, probed, strict=True):
        assert torch.equal(h_own, h_probed)


def test_probing_leaves_the_model_as_it_was(hf):
    name, model, inputs = hf
    model.train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.eval()
    with torch.no_grad():
        before = model(**inputs).last_hidden_state
    hooks = _hooks(model)
    model.train()
    for variant in VARIANTS:
        rank_decay(model, inputs, variant, norms=variant != "pure_attention")
    rank_decay(model, inputs, "no_skip", dtype=torch.float64)  # probes a float64 copy
    assert model.training  # the training flag is restored
    assert next(model.parameters()).dtype == torch.float32
    assert _hooks(model) == hooks
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(**inputs).last_hidden_state, before)


def test_hooks_are_removed_when_the_forward_fails(hf):
    name, model, inputs = hf
    hooks = _hooks(model)
    bad = {k: v[..., :1, :1] if k == "pixel_values" else v.float() for k, v in inputs.items()}
    with pytest.raises(Exception):  # noqa: B017 - whatever the model raises on a bad input
        rank_decay(model, bad, "pure_attention")
    assert _hooks(model) == hooks


@pytest.mark.parametrize("norms", [True, False])
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_computes_the_documented_layer(hf, variant, norms):
    """Record each layer call's input, branch outputs and the inputs of its attention and MLP
    with hooks of our own, then rebuild the layer's output by the docstring's formula from them;
    the probed output must equal it bit for bit."""
    name, model, inputs = hf
    adapter = ADAPTERS[name]
    no_skip = variant in ("no_skip", "pure_attention")
    no_mlp = variant in ("no_mlp", "pure_attention")
    calls: list[dict] = []
    model.eval()
    with torch.no_grad(), intervene(model, variant, norms) as trace:
        handles = []
        for layer in layers_of(model, adapter):
            parts = _parts(layer, adapter)

            def on(key, where="out"):
                if where == "in":
                    return lambda m, args: calls[-1].__setitem__(key, args[0])
                return lambda m, args, out: calls[-1].__setitem__(key, _first(out))

            handles += [
                layer.register_forward_pre_hook(lambda m, args: calls.append({"x": args[0]})),
                layer.register_forward_hook(on("y")),
                parts.attn_branch.register_forward_hook(on("a")),
                parts.mlp_branch.register_forward_hook(on("m")),
                layer.get_submodule(ATTN_IN[name]).register_forward_pre_hook(on("attn_in", "in")),
                layer.get_submodule(MLP_IN[name]).register_forward_pre_hook(on("mlp_in", "in")),
            ]
        try:
            model(**inputs)
        finally:
            for h in handles:
                h.remove()
    assert len(calls) == 4 and len(trace.hidden) == 5
    with torch.no_grad():
        for i, (layer, c) in enumerate(zip(layers_of(model, adapter) * 4, calls, strict=False)):
            parts = _parts(layer, adapter)
            n1 = parts.attn_norm if norms else (lambda t: t)
            n2 = parts.mlp_norm if norms else (lambda t: t)
            x, a, m = c["x"], c["a"], c["m"]
            if adapter.norm == "post":
                assert torch.equal(c["attn_in"], x)
                h = n1(a if no_skip else x + a)
                if not no_mlp:
                    assert torch.equal(c["mlp_in"], h)
                y = h if no_mlp else n2(m if no_skip else h + m)
            else:
                assert torch.equal(c["attn_in"], n1(x))
                h = a if no_skip else x + a
                if not no_mlp:
                    assert torch.equal(c["mlp_in"], n2(h))
                y = h if no_mlp else (m if no_skip else h + m)
            assert torch.equal(c["y"], y), f"layer {i}"
            as_bnd = (lambda t: rearrange(t, "n b d -> b n d")) if adapter.seq_first else None
            assert torch.equal(trace.hidden[i + 1], as_bnd(y) if as_bnd else y)
            assert torch.equal(trace.hidden[i], as_bnd(x) if as_bnd else x)


def test_pure_attention_without_norms_is_the_attention_alone_in_bert():
    """The SAN layer, checked against BERT's attention modules called by hand."""
    torch.manual_seed(0)
    config = transformers.BertConfig(**TINY["bert"])
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    ids = torch.randint(0, 128, (2, 12))
    states = hidden_states(model, {"input_ids": ids}, "pure_attention", norms=False)
    with torch.no_grad():
        for layer, x, y in zip(model.encoder.layer, states[:-1], states[1:], strict=True):
            context = layer.attention.self(x)[0]
            assert torch.allclose(y, layer.attention.output.dense(context), atol=1e-6, rtol=0)


@pytest.mark.parametrize("position", ["pre", "post"])
def test_interventions_match_attnzoo_blocks_built_without_the_parts(position):
    """An attnzoo model with skip, MLP and LayerNorm, probed as each variant, gives the same
    residuals (exactly) as the model built without those parts and holding the same weights."""
    cfg = ModelConfig(dim=16, depth=3, heads=2, norm="layernorm", norm_position=position)
    torch.manual_seed(0)
    full = Model(cfg, out_features=2, max_len=8, vocab_size=32).eval()
    tokens = torch.randint(0, 32, (3, 8))
    adapter = "attnzoo" if position == "pre" else "attnzoo_post"
    built_as = {  # (variant, norms) -> (skip, mlp, norm)
        ("full", True): (True, True, "layernorm"),
        ("no_skip", True): (False, True, "layernorm"),
        ("no_mlp", True): (True, False, "layernorm"),
        ("pure_attention", True): (False, False, "layernorm"),
        ("pure_attention", False): (False, False, "none"),
        ("no_skip", False): (False, True, "none"),
    }
    for (variant, norms), (skip, mlp, norm) in built_as.items():
        built = Model(
            dataclasses.replace(cfg, residual="add" if skip else "none", mlp=mlp, norm=norm),
            out_features=2,
            max_len=8,
            vocab_size=32,
        )
        missing, _ = built.load_state_dict(full.state_dict(), strict=False)
        assert not missing
        expected = rank_profile(built, tokens).mean
        got = rank_decay(full, tokens, variant, norms, adapter=adapter).mean
        assert got == expected, (variant, norms)


def test_pure_attention_collapses_while_the_full_model_keeps_its_rank():
    torch.manual_seed(0)
    config = transformers.BertConfig(**TINY["bert"])
    model = transformers.BertModel(config, add_pooling_layer=False)
    inputs = {"input_ids": torch.randint(0, 128, (4, 16))}
    full = rank_decay(model, inputs, "full", dtype=torch.float64).mean
    pure = rank_decay(model, inputs, "pure_attention", dtype=torch.float64).mean
    assert min(full) > 0.5
    assert pure[-1] < 1e-12 < full[-1]  # float64 follows it far below float32's floor


def test_a_model_without_an_adapter_is_an_error_that_says_how_to_add_one():
    model = Model(ModelConfig(dim=16, depth=2, heads=2), out_features=2, max_len=8, vocab_size=32)
    with pytest.raises(
        ValueError, match=r"no adapter for Model.*supported: .*bert.*register_adapter"
    ):
        rank_decay(model, torch.randint(0, 32, (2, 8)))
    with pytest.raises(ValueError, match="unknown adapter 'nope'"):
        rank_decay(model, torch.randint(0, 32, (2, 8)), adapter="nope")


def test_a_wrong_adapter_is_an_error_naming_the_missing_module_and_leaves_no_hooks():
    model = Model(ModelConfig(dim=16, depth=2, heads=2), out_features=2, max_len=8, vocab_size=32)
    wrong = Adapter(
        name="wrong",
        layer="Block",
        norm="pre",
        attn_branch="drop1",
        attn_norm="norm1",
        mlp_branch="mlp.nope",
        mlp_norm="norm2",
    )
    with pytest.raises(ValueError, match=r"Block has no module 'mlp.nope' \(mlp_branch\)"):
        rank_decay(model, torch.randint(0, 32, (2, 8)), adapter=wrong)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    absent = dataclasses.replace(wrong, layer="NoSuchLayer")
    with pytest.raises(ValueError, match="layers of class 'NoSuchLayer'"):
        rank_decay(model, torch.randint(0, 32, (2, 8)), adapter=absent)
    with pytest.raises(ValueError, match=r"variant='skipless' is not one of \('full'"):
        rank_decay(model, torch.randint(0, 32, (2, 8)), "skipless", adapter="attnzoo")


def test_the_readme_adapter_for_roberta_works(monkeypatch):
    """The README's example of adding an architecture, on a tiny RoBERTa."""
    import attnzoo.hf_probe as probe

    monkeypatch.setattr(probe, "ADAPTERS", dict(ADAPTERS))
    probe.register_adapter(
        Adapter(
            name="roberta",
            layer="RobertaLayer",
            norm="post",
            attn_branch="attention.output.dropout",
            attn_norm="attention.output.LayerNorm",
            mlp_branch="output.dropout",
            mlp_norm="output.LayerNorm",
            model_types=("roberta",),
        )
    )
    torch.manual_seed(0)
    config = transformers.RobertaConfig(**TINY["bert"], pad_token_id=1)
    model = transformers.RobertaModel(config, add_pooling_layer=False).eval()
    inputs = {"input_ids": torch.randint(2, 128, (2, 12))}
    with torch.no_grad():
        own = model(**inputs, output_hidden_states=True).hidden_states
    assert all(torch.equal(a, b) for a, b in zip(own, hidden_states(model, inputs), strict=True))
    assert rank_decay(model, inputs, "pure_attention", dtype=torch.float64).mean[-1] < 1e-12


def test_padded_tokens_are_left_out_of_the_measure():
    """A padded batch, masked for the model and for the measure, gives each sequence the
    residuals it has alone."""
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(**TINY["bert"]), add_pooling_layer=False)
    ids = torch.randint(2, 128, (2, 12))
    ids[1, 8:] = 0  # the second sequence is 8 tokens long
    attention_mask = (ids != 0).long()
    padded = rank_decay(
        model,
        {"input_ids": ids, "attention_mask": attention_mask},
        "no_mlp",
        dtype=torch.float64,
        key_padding_mask=attention_mask == 0,
    )
    alone = [
        rank_decay(model, {"input_ids": ids[i : i + 1, :n]}, "no_mlp", dtype=torch.float64).mean
        for i, n in ((0, 12), (1, 8))
    ]
    expected = torch.tensor(alone, dtype=torch.float64).mean(0).tolist()
    assert padded.mean == pytest.approx(expected, rel=1e-9)


def test_every_measure_leaves_padded_tokens_out():
    """Every measure of a padded, masked batch is the mean of each sequence's own, the attention
    entropy included (padding queries left out, rows over the real keys)."""
    torch.manual_seed(0)
    config = transformers.BertConfig(**TINY["bert"], attn_implementation="eager")
    model = transformers.BertModel(config, add_pooling_layer=False)
    ids = torch.randint(2, 128, (2, 12))
    ids[1, 7:] = 0
    attention_mask = (ids != 0).long()
    padded = rank_decay(
        model,
        {"input_ids": ids, "attention_mask": attention_mask},
        "pure_attention",
        dtype=torch.float64,
        key_padding_mask=attention_mask == 0,
    )
    alone = [
        rank_decay(model, {"input_ids": ids[i : i + 1, :n]}, "pure_attention", dtype=torch.float64)
        for i, n in ((0, 12), (1, 7))
    ]
    assert list(padded.measures) == list(MEASURES)
    for name, values in padded.measures.items():
        expected = torch.tensor([a.measures[name] for a in alone], dtype=torch.float64)
        expected = expected.mean(0).tolist()
        assert values == pytest.approx(expected, rel=1e-9, nan_ok=True), name


def test_attention_entropy_is_that_of_the_models_own_attention_weights(hf):
    name, model, inputs = hf
    model.eval()
    with torch.no_grad():
        own = model(**inputs, output_attentions=True).attentions
    profile = rank_decay(model, inputs, "full")
    entropy = profile.measures["attention_entropy"]
    assert math.isnan(entropy[0])  # the embedding: no attention produced it
    expected = [attention_entropy(a).mean().item() for a in own]
    assert entropy[1:] == pytest.approx(expected, rel=1e-6)
    n = inputs["pixel_values"].shape[-1] ** 2 // 16 + 1 if name == "vit" else 12
    assert all(0 < e <= math.log(n) + 1e-6 for e in entropy[1:])
    pure = rank_decay(model, inputs, "pure_attention", dtype=torch.float64).measures
    # pure attention collapses: the last state's tokens are one vector
    if name != "gpt2":  # causal: the first token attends only to itself
        assert pure["effective_rank"][-1] == pytest.approx(1.0, abs=1e-3)
        assert pure["token_similarity"][-1] == pytest.approx(1.0, abs=1e-6)
    only = rank_decay(model, inputs, measures=["stable_rank"])
    assert list(only.measures) == ["relative_residual", "stable_rank"]


def test_attnzoo_models_report_attention_entropy_through_the_probe_too():
    cfg = ModelConfig(dim=16, depth=3, heads=2, norm="layernorm")
    torch.manual_seed(0)
    model = Model(cfg, out_features=2, max_len=8, vocab_size=32)
    tokens = torch.randint(0, 32, (3, 8))
    probed = rank_decay(model, tokens, "full", adapter="attnzoo")
    own = rank_profile(model, tokens, measures=None)
    for name in MEASURES:
        assert probed.measures[name] == pytest.approx(own.measures[name], rel=1e-9, nan_ok=True)
    assert not any(math.isnan(e) for e in probed.measures["attention_entropy"][1:])


def test_a_stack_that_returns_no_attention_weights_reports_entropy_as_na():
    """Any stack of declared layers is probed; where the forward gives no attention weights,
    attention entropy is n/a (NaN) and every other measure is there."""
    from attnzoo.mixers import build_mixer
    from attnzoo.model import Block

    torch.manual_seed(0)
    stack = torch.nn.Sequential(
        *(Block(16, build_mixer("scaled_dot", dim=16, heads=2)) for _ in range(2))
    )
    profile = rank_decay(stack, torch.randn(2, 8, 16), "pure_attention", adapter="attnzoo")
    assert all(math.isnan(e) for e in profile.measures["attention_entropy"])
    for name in MEASURES:
        if name != "attention_entropy":
            assert len(profile.measures[name]) == 3 and not any(
                map(math.isnan, profile.measures[name])
            )
