"""The recurrent mixers against their papers' recurrences, written out here token by token in
float64 from the mixer's weights; their hidden attention matrices; causality; parameters;
and a few training steps from the command line on a causal task (MQAR). bf16 autocast: with
the other mixers in tests/test_zoo_mixers.py."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from attnzoo import build_mixer
from attnzoo.model import Model, ModelConfig
from attnzoo.rank import rank_profile

D, H, N = 16, 4, 9
RECURRENT = ["retention", "gla", "mamba2", "deltanet"]


def built(name, causal, seed=0, **options):
    torch.manual_seed(seed)
    mixer = build_mixer(name, dim=D, heads=H, causal=causal, impl="torch", **options).double()
    with torch.no_grad():  # norms and gates away from their init, so that a slip shows
        for p in mixer.parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    return mixer


def both_directions(step_loop, x, causal):
    """The recurrence over the sequence, plus (not causal) over its reverse, flipped back."""
    out = step_loop(x)
    return out if causal else out + step_loop(x.flip(1)).flip(1)


def retention_reference(mixer, x, causal):
    """RetNet's recurrent form per head, S_n = γ S_{n−1} + k_nᵀ v_n, o_n = q_n S_n / √dk, with
    γ_h = 1 − 2^(−5−h); then GroupNorm (one group per head), swish gate, output projection."""
    dk = D // H
    w_q, w_k, w_v = mixer.qkv.weight.detach().chunk(3, dim=0)
    gamma = [1 - 2.0 ** (-5 - h) for h in range(H)]

    def loop(x):
        b, n, _ = x.shape
        out = torch.zeros(b, n, D, dtype=torch.float64)
        for h in range(H):
            cols = slice(h * dk, (h + 1) * dk)
            state = torch.zeros(b, dk, dk, dtype=torch.float64)
            for t in range(n):
                q, k, v = (x[:, t] @ w[cols].T for w in (w_q, w_k, w_v))
                state = gamma[h] * state + k[:, :, None] * v[:, None, :]
                out[:, t, cols] = torch.einsum("bk,bkv->bv", q, state) / math.sqrt(dk)
        return out

    o = both_directions(loop, x, causal)
    b, n, _ = x.shape
    normed = F.group_norm(
        o.reshape(b * n, D), H, mixer.norm.weight.detach(), mixer.norm.bias.detach(), eps=1e-5
    ).reshape(b, n, D)
    return (normed * F.silu(x @ mixer.gate.weight.detach().T)) @ mixer.proj.weight.detach().T


def gla_reference(mixer, x, causal):
    """GLA's recurrence per head, S_t = diag(α_t) S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ q_t / √dk, with
    α_t = σ(x_t W₁ W₂ + b)^(1/16); then RMSNorm per head, swish gate, output projection."""
    kd, dv = mixer.key_dim // H, D // H
    w_q, w_k = mixer.qk.weight.detach().chunk(2, dim=0)
    w_v = mixer.value.weight.detach()
    w_1, w_2, b_2 = (p.detach() for p in mixer.decay.parameters())

    def loop(x):
        b, n, _ = x.shape
        out = torch.zeros(b, n, D, dtype=torch.float64)
        alpha = torch.sigmoid(x @ w_1.T @ w_2.T + b_2) ** (1 / 16)
        for h in range(H):
            keys, vals = slice(h * kd, (h + 1) * kd), slice(h * dv, (h + 1) * dv)
            state = torch.zeros(b, kd, dv, dtype=torch.float64)
            for t in range(n):
                q, k, v = x[:, t] @ w_q[keys].T, x[:, t] @ w_k[keys].T, x[:, t] @ w_v[vals].T
                state = alpha[:, t, keys, None] * state + k[:, :, None] * v[:, None, :]
                out[:, t, vals] = torch.einsum("bk,bkv->bv", q, state) / math.sqrt(kd)
        return out

    o = both_directions(loop, x, causal).unflatten(-1, (H, dv))
    normed = o / (o.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * mixer.norm.weight.detach()
    gate = F.silu(x @ mixer.gate.weight.detach().T)
    return (normed.flatten(-2) * gate) @ mixer.proj.weight.detach().T


def mamba2_reference(mixer, x, causal):
    """SSD per head, h_t = exp(Δ_t A) h_{t−1} + Δ_t B_t x_tᵀ, y_t = C_tᵀ h_t + D x_t, with
    Δ = softplus(x W_Δ + dt_bias), A = −exp(A_log), x, B, C through a causal depthwise conv
    (written as a sum over the last taps) and SiLU; then RMSNorm(y ⊙ SiLU(z)), output projection."""
    e, s, p = mixer.inner, mixer.d_state, mixer.headdim
    w_conv, b_conv = mixer.conv.weight.detach()[:, 0], mixer.conv.bias.detach()
    taps = w_conv.shape[1]
    a = -mixer.A_log.detach().exp()

    b, n, _ = x.shape
    z, xbc, dt = (x @ mixer.in_proj.weight.detach().T).split([e, e + 2 * s, mixer.heads], -1)
    conv = torch.stack(
        [
            b_conv + sum(w_conv[:, taps - 1 - i] * xbc[:, t - i] for i in range(taps) if t - i >= 0)
            for t in range(n)
        ],
        dim=1,
    )
    xs, bs, cs = F.silu(conv).split([e, s, s], -1)
    delta = F.softplus(dt + mixer.dt_bias.detach())

    def scan(xs, bs, cs, delta):
        y = torch.zeros(b, n, e, dtype=torch.float64)
        for h in range(mixer.heads):
            cols = slice(h * p, (h + 1) * p)
            state = torch.zeros(b, s, p, dtype=torch.float64)
            for t in range(n):
                dth = delta[:, t, h, None, None]
                state = (
                    torch.exp(dth * a[h]) * state + dth * bs[:, t, :, None] * xs[:, t, None, cols]
                )
                y[:, t, cols] = torch.einsum("bs,bsp->bp", cs[:, t], state)
        return y

    y = scan(xs, bs, cs, delta)
    if not causal:  # the convolution stays causal; the scan also runs over the reverse
        y = y + scan(xs.flip(1), bs.flip(1), cs.flip(1), delta.flip(1)).flip(1)
    y = (y + xs * mixer.D.detach().repeat_interleave(p)) * F.silu(z)
    y = y / (y.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * mixer.norm_weight.detach()
    return y @ mixer.proj.weight.detach().T


def deltanet_reference(mixer, x, causal):
    """The delta rule per head, S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,
    o_t = S_tᵀ q_t / √dk, with q, k, v through a causal depthwise conv (a sum over the last
    taps) and SiLU, q and k L2-normalised per head, β = σ(x W_β) and, gated,
    α = exp(−exp(A_log) softplus(x W_α + dt_bias)); then RMSNorm per head, gated times the output
    gate SiLU(x W_g), and the output projection."""
    dk = D // H
    w_conv = mixer.conv.weight.detach()[:, 0]
    taps = w_conv.shape[1]
    b, n, _ = x.shape
    qkv = x @ mixer.qkv.weight.detach().T
    conv = torch.stack(
        [
            sum(w_conv[:, taps - 1 - i] * qkv[:, t - i] for i in range(taps) if t - i >= 0)
            for t in range(n)
        ],
        dim=1,
    )
    q, k, v = F.silu(conv).split(D, dim=-1)
    beta = torch.sigmoid(x @ mixer.beta.weight.detach().T)
    alpha = torch.ones(b, n, H, dtype=torch.float64)
    if mixer.gated:
        dt = F.softplus(x @ mixer.decay.weight.detach().T + mixer.dt_bias.detach())
        alpha = torch.exp(-mixer.A_log.detach().exp() * dt)

    def scan(q, k, v, beta, alpha):
        out = torch.zeros(b, n, D, dtype=torch.float64)
        for h in range(H):
            cols = slice(h * dk, (h + 1) * dk)
            state = torch.zeros(b, dk, dk, dtype=torch.float64)
            for t in range(n):
                qt, kt = (F.normalize(z[:, t, cols], dim=-1) for z in (q, k))
                state = alpha[:, t, h, None, None] * state
                error = v[:, t, cols] - torch.einsum("bkv,bk->bv", state, kt)
                state = state + beta[:, t, h, None, None] * kt[:, :, None] * error[:, None, :]
                out[:, t, cols] = torch.einsum("bk,bkv->bv", qt, state) / math.sqrt(dk)
        return out

    o = scan(q, k, v, beta, alpha)
    if not causal:  # the convolution stays causal; the scan also runs over the reverse
        o = o + scan(*(t.flip(1) for t in (q, k, v, beta, alpha))).flip(1)
    o = o.unflatten(-1, (H, dk))
    normed = o / (o.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * mixer.norm.weight.detach()
    normed = normed.flatten(-2)
    if mixer.gated:
        normed = normed * F.silu(x @ mixer.gate.weight.detach().T)
    return normed @ mixer.proj.weight.detach().T


REFERENCES = {
    "retention": retention_reference,
    "gla": gla_reference,
    "mamba2": mamba2_reference,
    "deltanet": deltanet_reference,
}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", RECURRENT)
def test_matches_the_papers_recurrence_in_float64(name, causal):
    mixer = built(name, causal)
    x = torch.randn(2, N, D, dtype=torch.float64)
    expected = REFERENCES[name](mixer, x, causal)
    torch.testing.assert_close(mixer(x), expected, rtol=1e-9, atol=1e-10)


def test_retention_decays_are_the_papers_schedule():
    mixer = build_mixer("retention", dim=64, heads=8, causal=True)
    expected = torch.tensor([1 - 2.0 ** (-5 - h) for h in range(8)], dtype=torch.float64)
    torch.testing.assert_close(mixer.log_gamma.exp(), expected)
    assert mixer.log_gamma.exp()[0] == 1 - 1 / 32


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", RECURRENT)
def test_hidden_attention_matrix_reproduces_the_mixing_output(name, causal):
    mixer = built(name, causal, seed=1)
    x = torch.randn(2, N, D, dtype=torch.float64)
    mask = torch.zeros(2, N, dtype=torch.bool)
    mask[1, -3:] = True
    m_bhnn = mixer.attention_probs(x, mask)
    _, _, v_bhnv, _, _ = mixer.operands(x, mask)
    torch.testing.assert_close(m_bhnn @ v_bhnv, mixer.mixing(x, mask), rtol=1e-9, atol=1e-10)
    upper = torch.ones(N, N, dtype=torch.bool).triu(1)
    if causal:
        assert (m_bhnn[..., upper] == 0).all()
    else:
        assert (m_bhnn[..., upper] != 0).any()
    # rows are not distributions: the entropy measure reads n/a for a model of these
    assert not torch.allclose(m_bhnn[0].sum(-1), torch.ones(H, N, dtype=torch.float64))
    cfg = ModelConfig(dim=D, depth=2, heads=H, mixer=name, causal=causal, impl="torch")
    model = Model(cfg, out_features=5, max_len=N, vocab_size=11, head="token")
    profile = rank_profile(model, torch.randint(0, 11, (2, N)), measures=("attention_entropy",))
    assert all(math.isnan(v) for v in profile.measures["attention_entropy"])


@pytest.mark.parametrize("name", RECURRENT)
def test_output_at_t_ignores_later_inputs(name):
    mixer = built(name, causal=True)
    x = torch.randn(2, N, D, dtype=torch.float64)
    changed = x.clone()
    changed[:, 5:] += torch.randn_like(changed[:, 5:])
    out, out_changed = mixer(x), mixer(changed)
    torch.testing.assert_close(out[:, :5], out_changed[:, :5], rtol=0, atol=0)
    assert not torch.allclose(out[:, 5:], out_changed[:, 5:])


# retention: q, k, v, gate, out (5 D²), GroupNorm weight and bias (2 D)
# gla: q, k (D → D/2 each), v, gate, out (D²), the decay's D → 16 → D/2 (+ bias), RMSNorm D/H
# mamba2 (E = 2D, S = 16, H heads): in D(2E + 2S + H), conv (E + 2S)(4 + 1), Δ bias, A, D
# (H each), norm E, out E D
E, S = 2 * D, 16
PARAMETERS = {
    "retention": 5 * D * D + 2 * D,
    "gla": 4 * D * D + 16 * D + 17 * D // 2 + D // H,
    "mamba2": D * (2 * E + 2 * S + H) + (E + 2 * S) * 5 + 3 * H + E + E * D,
    # deltanet: q, k, v, out (4 D²), the conv 3D · 4 (no bias), β's D → H, RMSNorm D/H
    "deltanet": 4 * D * D + 12 * D + D * H + D // H,
}


@pytest.mark.parametrize("name", RECURRENT)
def test_parameter_count(name):
    mixer = build_mixer(name, dim=D, heads=H, causal=True)
    assert sum(p.numel() for p in mixer.parameters()) == PARAMETERS[name]


@pytest.mark.parametrize(
    "name", [n if n == "gla" else pytest.param(n, marks=pytest.mark.slow) for n in RECURRENT]
)  # one through the command line in the default tier: all three share the trainer's path
@pytest.mark.slow  # subprocess runs; in-process training of each mixer stays
def test_trains_on_a_causal_task_from_the_command_line(name, tmp_path):
    home = str(tmp_path / "wandb-home")
    env = {
        **os.environ,
        "WANDB_DIR": home,
        "WANDB_CONFIG_DIR": home,
        "WANDB_SILENT": "true",
        "OMP_NUM_THREADS": "1",
    }
    args = [
        "task=mqar",
        f"mixer={name}",
        "task.vocab_size=16",
        "task.seq_len=12",
        "task.num_kv_pairs=3",
        "task.val_size=64",
        "task.test_size=64",
        "model.dim=16",
        "model.depth=2",
        "model.heads=2",
        "train.batch_size=8",
        "train.max_steps=5",
        "train.eval_every=5",
        "train.eval_batches=1",
        "train.eval_batch_size=512",  # the final evaluation in a few batches
        "train.probe_batch_size=4",
        "train.progress=false",
        "logger.mode=disabled",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "attnzoo.train", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["step"] == 5
    assert math.isfinite(summary["final"]["test/loss"])


@pytest.mark.parametrize("causal", [True, False])
def test_gated_deltanet_matches_its_recurrence_and_hidden_matrix(causal):
    """Gated DeltaNet: the decay joins the recurrence, the hidden matrix and the parameters
    (W_α: D → H, A_log and dt_bias per head), and the output gate W_g: D → D."""
    mixer = built("deltanet", causal, seed=2, gated=True)
    x = torch.randn(2, N, D, dtype=torch.float64)
    torch.testing.assert_close(
        mixer(x), deltanet_reference(mixer, x, causal), rtol=1e-9, atol=1e-10
    )
    v = mixer.operands(x)[2]
    torch.testing.assert_close(mixer.attention_probs(x) @ v, mixer.mixing(x), rtol=1e-9, atol=1e-10)
    plain = sum(
        p.numel() for p in build_mixer("deltanet", dim=D, heads=H, causal=True).parameters()
    )
    gated = sum(p.numel() for p in mixer.parameters())
    assert gated - plain == D * H + 2 * H + D * D
