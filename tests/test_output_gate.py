"""The softmax mixers' output gate, `gate=none|headwise|elementwise` (Qiu et al. 2025, "Gated
Attention for Large Language Models", arXiv 2505.06708, position G1): each head's attention
output times σ(x W_g) before the output projection. Against the formula written in float64, a
known answer at either end of the sigmoid, `none` as the mixer was before the option, the
refusals, the gate's logged mean and FLOPs, and the gate under bf16 autocast and torch.compile.
"""

import math
import re
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from attnzoo import build_mixer
from attnzoo.flops import mixer_flops_per_token
from attnzoo.model import Model, ModelConfig
from attnzoo.rank import rank_profile

B, N, D, H = 2, 7, 12, 3
DK = D // H
GATES = ["headwise", "elementwise"]
SOFTMAX = ["scaled_dot", "quadratic", "metric", "local"]
# what each mixer holds without a gate: the state_dict keys it had before the option
KEYS = {
    "scaled_dot": {"qkv.weight", "proj.weight"},
    "local": {"qkv.weight", "proj.weight"},
    "sigmoid": {"qkv.weight", "proj.weight"},
    "quadratic": {"u", "value.weight", "proj.weight"},
    "metric": {"m_free", "p.weight", "proj.weight"},
}


def built(name: str, seed: int = 0, causal: bool = True, **options) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_mixer(name, dim=D, heads=H, causal=causal, impl="torch", **options)


def padding() -> torch.Tensor:
    mask = torch.zeros(B, N, dtype=torch.bool)
    mask[1, N - 2 :] = True  # the second sequence ends two tokens early
    return mask


def gated_scaled_dot(mixer, x, causal, mask, gate):
    """W_o concat_h(σ(x W_g)_h ⊙ softmax(q_h k_hᵀ / √dk) v_h) in float64, written out."""
    w_q, w_k, w_v = (w.double() for w in mixer.qkv.weight.detach().chunk(3, dim=0))
    heads = lambda t: t.unflatten(-1, (H, DK)).transpose(1, 2)  # (B, N, D) -> (B, H, N, dk)
    q, k, v = heads(x @ w_q.T), heads(x @ w_k.T), heads(x @ w_v.T)
    scores = q @ k.transpose(-1, -2) / math.sqrt(DK)
    hidden = torch.zeros(B, 1, N, N, dtype=torch.bool)
    if causal:
        hidden = hidden | torch.ones(N, N, dtype=torch.bool).triu(1)
    hidden = hidden | mask[:, None, None, :]
    out = scores.masked_fill(hidden, float("-inf")).softmax(-1) @ v  # (B, H, N, dk)
    g = torch.sigmoid(x @ mixer.gate_proj.weight.detach().double().T)
    g = g.transpose(1, 2)[..., None] if gate == "headwise" else heads(g)
    return (g * out).transpose(1, 2).flatten(2) @ mixer.proj.weight.detach().double().T


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("gate", GATES)
def test_scaled_dot_with_a_gate_is_the_formula_in_float64(gate, causal):
    mixer = built("scaled_dot", causal=causal, gate=gate).double()
    x = torch.randn(B, N, D, dtype=torch.float64)
    mask = padding()
    want = gated_scaled_dot(mixer, x, causal, mask, gate)
    torch.testing.assert_close(mixer(x, mask), want, rtol=1e-12, atol=1e-12)
    shape = (B, H, N) if gate == "headwise" else (B, H, N, DK)
    assert mixer.gate_values(x).shape == shape
    assert mixer.gate_proj.bias is None  # the authors' gate rows of q_proj have no bias


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("name", ["quadratic", "metric", "local", "sigmoid"])
def test_every_mixer_with_the_option_gates_its_heads_before_the_projection(name, gate):
    """The gated mixer is the ungated one (the same weights at a seed: W_g is made last) with
    each head's output times σ(x W_g); the heads' shares (the path decomposition) sum to it."""
    plain, mixer = built(name, seed=3), built(name, seed=3, gate=gate)
    x = torch.randn(B, N, D, dtype=torch.float64)
    plain.double(), mixer.double()
    g = mixer.gate_values(x)
    heads = plain.attend(x) * (g[..., None] if gate == "headwise" else g)
    want = heads.transpose(1, 2).flatten(2) @ plain.proj.weight.T
    torch.testing.assert_close(mixer(x), want, rtol=1e-12, atol=1e-12)
    shares = mixer.head_outputs(x, scores_from=x)
    torch.testing.assert_close(shares.sum(dim=1), mixer(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [*SOFTMAX, "sigmoid"])
def test_gate_none_is_the_mixer_as_it_was(name):
    """Default and `gate="none"`: the same parameters and state_dict keys as before the option,
    no gate values, the same FLOPs, and outputs equal, bit for bit, to the forward before the
    option (out(concat_h attend_h(x)))."""
    default, none = built(name, seed=1), built(name, seed=1, gate="none")
    assert set(default.state_dict()) == set(none.state_dict()) == KEYS[name]
    x, mask = torch.randn(B, N, D), padding()
    before = default.proj(default.attend(x, mask).transpose(1, 2).flatten(2))
    assert torch.equal(default(x, mask), before) and torch.equal(none(x, mask), before)
    assert none.gate_values(x) is None
    flops = mixer_flops_per_token(name, D, H, N, causal=True)
    assert mixer_flops_per_token(name, D, H, N, causal=True, gate="none") == flops


@pytest.mark.parametrize("gate", GATES)
def test_a_gate_held_open_is_no_gate_and_a_gate_held_shut_silences_the_heads(gate):
    """With positive inputs and W_g = +50 everywhere, x W_g ≥ 50 and σ = 1 to float64: the output
    is the ungated mixer's; with W_g = −50, σ ≈ 0 and so is the output (no projection bias)."""
    plain, mixer = built("scaled_dot", seed=2), built("scaled_dot", seed=2, gate=gate)
    plain.double(), mixer.double()
    x = torch.rand(B, N, D, dtype=torch.float64) + 0.1
    with torch.no_grad():
        mixer.gate_proj.weight.fill_(50.0)
        torch.testing.assert_close(mixer(x), plain(x), rtol=1e-12, atol=1e-12)
        mixer.gate_proj.weight.fill_(-50.0)
        assert mixer(x).abs().max() < 1e-20 < plain(x).abs().max()


@pytest.mark.parametrize("name", [*SOFTMAX, "sigmoid"])
def test_a_bad_gate_is_refused_naming_it_and_what_is_allowed(name):
    message = "gate must be one of ('none', 'headwise', 'elementwise'), got 'banana'"
    with pytest.raises(ValueError, match=re.escape(message)):
        built(name, gate="banana")


def test_the_trainer_exits_2_on_a_bad_gate_and_makes_no_run_folder(tmp_path, monkeypatch, capsys):
    from attnzoo.train.cli import main

    run_dir = tmp_path / "run"
    args = ["mixer=scaled_dot", "mixer.gate=banana", "logger.mode=disabled"]
    monkeypatch.setattr(sys, "argv", ["attnzoo.train", *args, f"hydra.run.dir={run_dir}"])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert "mixer.gate='banana'" in err and "'none', 'headwise', 'elementwise'" in err, err
    assert "Traceback" not in err and not run_dir.exists()


@pytest.mark.parametrize("gate", GATES)
def test_flops_count_the_gates_projection(gate):
    """2 D H (headwise) or 2 D² (elementwise) more per token, by the formula and by PyTorch's
    count of the mixer's matmuls."""
    width = H if gate == "headwise" else D
    for name in [*SOFTMAX, "sigmoid"]:
        extra = mixer_flops_per_token(name, D, H, N, True, gate=gate)
        assert extra - mixer_flops_per_token(name, D, H, N, True) == 2 * D * width, name
    plain, mixer = built("scaled_dot"), built("scaled_dot", gate=gate)
    x = torch.randn(B, N, D)
    counts = []
    for m in (plain, mixer):
        with FlopCounterMode(display=False) as counter:
            m(x)
        counts.append(counter.get_total_flops())
    assert counts[1] - counts[0] == 2 * D * width * B * N


def gated_model(gate: str, mixer: str = "scaled_dot") -> Model:
    torch.manual_seed(0)
    cfg = ModelConfig(
        dim=D,
        depth=2,
        heads=H,
        mixer=mixer,
        causal=True,
        impl="torch",
        mixer_options={"gate": gate},
    )
    return Model(cfg, out_features=5, max_len=N, vocab_size=11, head="lm")


@pytest.mark.parametrize("gate", GATES)
def test_the_rank_probe_logs_each_blocks_mean_gate_and_the_weights_stay_pre_gate(gate):
    """`attention/gate_mean/layer_<k>`: the mean of σ(x W_g) over heads, dimensions and real
    tokens of block k's mixer input; attention_probs stays the softmax before the gate (rows
    sum to 1)."""
    model = gated_model(gate)
    tokens, mask = torch.randint(0, 5, (B, N)), padding()
    inputs = []
    hooks = [
        b.mixer.register_forward_pre_hook(lambda m, args: inputs.append(args[0]))
        for b in model.blocks
    ]
    profile = rank_profile(model, tokens, mask, measures=["attention_entropy"])
    for h in hooks:
        h.remove()
    keep = ~mask
    for k, (block, x) in enumerate(zip(model.blocks, inputs, strict=True), start=1):
        g = torch.sigmoid(x.double() @ block.mixer.gate_proj.weight.double().T)  # (B, N, ·)
        want = (g.mean(-1) * keep).sum(-1) / keep.sum(-1)  # per sample over real tokens
        assert profile.weights["gate_mean"][k] == pytest.approx(want.mean().item(), rel=1e-6)
        assert (
            profile.log_dict()[f"attention/gate_mean/layer_{k}"] == profile.weights["gate_mean"][k]
        )
    assert math.isnan(profile.weights["gate_mean"][0])  # the embedding: no mixer
    assert profile.weights["row_sum"][1:] == pytest.approx([1.0, 1.0])
    plain = rank_profile(gated_model("none"), tokens, mask)
    assert "gate_mean" not in plain.weights


@pytest.mark.parametrize("gate", GATES)
def test_a_gated_model_trains_under_bf16_autocast(gate):
    model = gated_model(gate)
    tokens = torch.randint(0, 5, (B, N))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens)
    loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, 5), tokens[:, 1:].reshape(-1))
    loss.backward()
    assert torch.isfinite(loss)
    torch.testing.assert_close(logits.float(), model(tokens), rtol=0.05, atol=0.05)
    for block in model.blocks:
        grad = block.mixer.gate_proj.weight.grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


@pytest.mark.parametrize(
    "gate", ["elementwise", pytest.param("headwise", marks=pytest.mark.slow)]
)  # Dynamo's first trace in a process costs seconds: one gate in the default tier
def test_a_gated_mixer_compiles_whole(gate):
    """torch.compile(fullgraph=True): no graph break from the gate; output and gradients equal
    eager's. Dynamo's trace with the eager backend (the gate is built-in ops; the attention
    op's AOT autograd and Inductor are tests/test_custom_ops.py's)."""
    torch._dynamo.reset()
    mixer = built("scaled_dot", gate=gate)
    x, mask = torch.randn(B, N, D), padding()
    eager = mixer(x, mask)
    (eager_grad,) = torch.autograd.grad(eager.square().sum(), mixer.gate_proj.weight)
    compiled = torch.compile(mixer, fullgraph=True, backend="eager")(x, mask)
    (grad,) = torch.autograd.grad(compiled.square().sum(), mixer.gate_proj.weight)
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(grad, eager_grad)
