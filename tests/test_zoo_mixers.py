"""The efficient-attention mixers (attnzoo.mixers: kernelized, nystrom, parameter_free, local in
softmax, token_mlp) against their papers' formulas.

Padding invariance (real outputs do not depend on padding tokens' values) holds for every one
of them and is checked over the whole registry in tests/test_model.py; so is causality for the
mixers that can be causal. Here: each mixer's numbers against a naive reference.
"""

import math
import subprocess
import sys

import pytest
import torch

from attnzoo import build_mixer
from attnzoo.config import ConfigError, validate
from attnzoo.mixers import MIXERS
from attnzoo.mixers.kernelized import orthogonal_gaussian
from attnzoo.mixers.nystrom import iterative_pinv
from attnzoo.train import compose

D, H = 16, 2
DK = D // H


def split_heads(t_bnd: torch.Tensor) -> torch.Tensor:
    b, n, _ = t_bnd.shape
    return t_bnd.reshape(b, n, H, -1).transpose(1, 2)


def merge_heads(t_bhnk: torch.Tensor) -> torch.Tensor:
    b, _, n, _ = t_bhnk.shape
    return t_bhnk.transpose(1, 2).reshape(b, n, -1)


def qkv(mixer, x_bnd):
    return (split_heads(t) for t in mixer.qkv(x_bnd).chunk(3, dim=-1))


def softmax_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_linear_matches_the_papers_formula_in_float64(causal):
    torch.manual_seed(0)
    mixer = build_mixer("linear", dim=D, heads=H, causal=causal, impl="torch").double()
    x = torch.randn(2, 9, D, dtype=torch.float64)
    mask = torch.zeros(2, 9, dtype=torch.bool)
    mask[1, 6:] = True
    q, k, v = qkv(mixer, x)
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    want = torch.zeros_like(v)
    for b in range(2):
        for h in range(H):
            for i in range(9):
                js = [j for j in range(9) if not mask[b, j] and (not causal or j <= i)]
                s = sum(torch.outer(fk[b, h, j], v[b, h, j]) for j in js)
                z = sum(fk[b, h, j] for j in js)
                want[b, h, i] = fq[b, h, i] @ s / (fq[b, h, i] @ z + mixer.eps)
    torch.testing.assert_close(mixer(x, mask), mixer.proj(merge_heads(want)))


def test_linear_identity_feature_map_refuses_negative_features():
    mixer = build_mixer("linear", dim=D, heads=H, feature_map="identity")
    with pytest.raises(ValueError, match="non-negative features"):
        mixer(torch.randn(1, 4, D))
    with pytest.raises(ValueError, match="feature_map='tanh' is not one of"):
        build_mixer("linear", dim=D, heads=H, feature_map="tanh")


def test_fourier_is_the_real_part_of_two_dft_matrices():
    torch.manual_seed(0)
    n = 7
    x = torch.randn(2, n, D, dtype=torch.float64)
    mask = torch.zeros(2, n, dtype=torch.bool)
    mask[1, 5:] = True

    def dft(m: int) -> torch.Tensor:
        idx = torch.arange(m, dtype=torch.float64)
        return torch.exp(-2j * math.pi * torch.outer(idx, idx) / m)

    x0 = x.masked_fill(mask[..., None], 0.0).to(torch.complex128)
    want = (dft(n) @ x0 @ dft(D).T).real
    mixer = build_mixer("fourier", dim=D)
    assert sum(p.numel() for p in mixer.parameters()) == 0
    torch.testing.assert_close(mixer(x, mask), want)


def kernel_estimates(q_k: torch.Tensor, k_k: torch.Tensor, blocks: int) -> torch.Tensor:
    """`blocks` independent estimates of exp(qᵀk / √dk), one per block of dk orthogonal features,
    from the feature map of one FAVOR+ mixer whose m = blocks · dk features were drawn at build.
    Both vectors go through the keys' features: the queries' carry a factor per query (their
    largest exponent taken out), which cancels in attention but not in a bare kernel estimate."""
    mixer = build_mixer("favor", dim=D, heads=H, features=blocks * DK, impl="torch").double()
    _, fq = mixer.feature_maps(k_k.view(1, 1, 1, DK), q_k.view(1, 1, 1, DK), None)
    _, fk = mixer.feature_maps(q_k.view(1, 1, 1, DK), k_k.view(1, 1, 1, DK), None)
    per_feature = (fq * fk).flatten() * mixer.features  # each exp(ωᵀq' + ωᵀk' − ...) alone
    return per_feature.view(blocks, DK).mean(dim=1)


def test_favor_kernel_estimate_is_unbiased():
    """The paper's promise: E[φ(q)ᵀφ(k)] = exp(qᵀk / √dk) over draws of the features. The
    blocks of one draw are independent, so the block means are i.i.d. estimates and their sample
    standard deviation gives the standard error of their mean. The mean must lie within 4.5
    standard errors of the exact kernel: for an unbiased estimator |z| > 4.5 has probability
    about 7e-6 (the seeds are fixed, so the test is deterministic, and another seed would almost
    never fail it), while a bias of 2% already sits near z = 5 with these 10,000 blocks. q and k
    lie along (1, ..., 1), where features from an uncorrected QR are biased most (about −19%)."""
    q = k = torch.full((DK,), 0.5 / math.sqrt(DK), dtype=torch.float64) * DK**0.25
    exact = math.exp(float(q @ k) / math.sqrt(DK))
    torch.manual_seed(1)
    estimates = kernel_estimates(q, k, blocks=10_000)
    mean = float(estimates.mean())
    standard_error = float(estimates.std()) / math.sqrt(estimates.numel())
    z = (mean - exact) / standard_error
    assert abs(z) < 4.5, f"mean {mean:.4f}, exact {exact:.4f}, z = {z:.1f}"


def test_favor_error_falls_like_one_over_root_m():
    """An unbiased estimator averaged over m features has an error that falls like m^-½: the
    estimated attention weights against exact softmax attention (float64), averaged over 32
    draws per m and every query of two sequences, fitted on log-log axes from m = 64 to 4096.
    Biased features stop improving at their bias (a slope near −0.15 here)."""
    n, features = 32, (64, 256, 1024, 4096)
    x = torch.randn(2, n, D, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w_qkv = torch.randn(3 * D, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    errors = []
    for m in features:
        torch.manual_seed(2)
        mixer = build_mixer("favor", dim=D, heads=H, features=m, impl="torch").double()
        mixer.qkv.weight.data.copy_(w_qkv * 0.3 / math.sqrt(D))  # scores of order 0.1
        q, k, _ = qkv(mixer, x)
        exact = (q @ k.transpose(-1, -2) / math.sqrt(DK)).softmax(-1)
        runs = []
        with torch.no_grad():
            for _ in range(32):
                mixer.omega_mk.copy_(orthogonal_gaussian(m, DK))
                runs.append(float((mixer.attention_probs(x) - exact).norm() / exact.norm()))
        errors.append(sum(runs) / len(runs))
    log_m = torch.tensor(features, dtype=torch.float64).log()
    log_error = torch.tensor(errors, dtype=torch.float64).log()
    centred = log_m - log_m.mean()
    slope = float((centred * log_error).sum() / centred.square().sum())  # least squares
    assert -0.6 <= slope <= -0.4, (slope, errors)


def test_favor_features_come_from_the_seed_and_redraw_only_in_training():
    torch.manual_seed(3)
    a = build_mixer("favor", dim=D, heads=H, redraw_every=2)
    torch.manual_seed(3)
    b = build_mixer("favor", dim=D, heads=H, redraw_every=2)
    assert torch.equal(a.omega_mk, b.omega_mk)
    assert a.features == 18  # round(dk ln dk) = round(16.6) = 17, made even
    first = a.omega_mk.clone()
    x = torch.randn(1, 5, D)
    a.eval()
    a(x), a(x), a(x)
    assert torch.equal(a.omega_mk, first) and int(a.redraw_step) == 0
    a.train()
    a(x), a(x)
    assert torch.equal(a.omega_mk, first)
    a(x)  # the third training call: step 2, a multiple of redraw_every
    assert not torch.equal(a.omega_mk, first) and int(a.redraw_step) == 3


@pytest.mark.parametrize("n", [1, 7, 64])
def test_nystrom_up_to_its_landmarks_is_softmax_attention(n):
    """With N ≤ landmarks (default 64) every token would be its own landmark, and the mixer is
    exact softmax attention, as in the authors' code when the landmarks equal the length:
    float64 to 1e-10 at the default pseudo-inverse iterations, with and without padding keys."""
    torch.manual_seed(0)
    mixer = build_mixer("nystrom", dim=D, heads=H).double()
    x = torch.randn(2, n, D, dtype=torch.float64)
    mask = torch.zeros(2, n, dtype=torch.bool)
    mask[1, n // 2 + 1 :] = True  # the second sequence's tail is padding (none when n = 1)
    q, k, v = qkv(mixer, x)
    for key_padding_mask in (None, mask):
        hidden = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
        want = softmax_attention(q, k, v, hidden)
        got = mixer.attend(x, key_padding_mask)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
        torch.testing.assert_close(
            mixer(x, key_padding_mask), mixer.proj(merge_heads(want)), rtol=0, atol=1e-10
        )


def test_nystrom_with_fewer_landmarks_is_exact_on_tokens_constant_per_segment():
    """The landmark path (N > landmarks) against the Nyström method's own exactness: when the
    queries and keys are constant over each segment, the landmarks are the distinct tokens, the
    attention matrix has rank m and the approximation reproduces it (with the pseudo-inverse
    converged: 30 iterations in float64)."""
    torch.manual_seed(0)
    m, per_segment = 4, 6
    mixer = build_mixer("nystrom", dim=D, heads=H, landmarks=m, pinv_iterations=30).double()
    x = torch.randn(2, m, D, dtype=torch.float64).repeat_interleave(per_segment, dim=1)
    q, k, v = qkv(mixer, x)
    want = softmax_attention(q, k, v)
    torch.testing.assert_close(mixer.attend(x), want, rtol=0, atol=1e-10)
    six = build_mixer("nystrom", dim=D, heads=H, landmarks=m).double()
    six.load_state_dict(mixer.state_dict())
    assert (six.attend(x) - want).abs().max() > 1e-6  # the paper's 6 steps are not converged


def test_nystrom_outputs_do_not_depend_on_the_rest_of_the_batch():
    """The pseudo-inverse's init scale is taken per matrix (the authors' code takes it over the
    batch), so a sequence's output is the same alone or beside another of larger scale."""
    torch.manual_seed(0)
    mixer = build_mixer("nystrom", dim=D, heads=H, landmarks=4).double()
    x = torch.randn(1, 12, D, dtype=torch.float64)
    other = 5 * torch.randn(1, 12, D, dtype=torch.float64)
    together = mixer(torch.cat([x, other]))
    torch.testing.assert_close(together[:1], mixer(x), rtol=0, atol=1e-12)


def test_nystrom_pinv_inverts_a_softmax_matrix():
    a = torch.randn(3, 6, 6, dtype=torch.float64).softmax(-1)
    torch.testing.assert_close(iterative_pinv(a, 30), torch.linalg.pinv(a), rtol=1e-6, atol=1e-6)


def test_nystrom_uses_fewer_landmarks_on_short_and_uneven_sequences():
    mixer = build_mixer("nystrom", dim=D, heads=H, landmarks=4)
    for n in (3, 10):
        x = torch.randn(2, n, D)
        out = mixer(x)
        assert out.shape == x.shape and torch.isfinite(out).all()


@pytest.mark.parametrize("causal", [False, True])
def test_local_is_softmax_attention_under_a_band_mask(causal):
    torch.manual_seed(0)
    w, n = 2, 9
    mixer = build_mixer("local", dim=D, heads=H, causal=causal, window=w, impl="torch")
    x = torch.randn(2, n, D)
    q, k, v = qkv(mixer, x)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    hidden = (j < i - w) | (j > i + (0 if causal else w))
    torch.testing.assert_close(
        mixer(x), mixer.proj(merge_heads(softmax_attention(q, k, v, hidden)))
    )
    probs = mixer.attention_probs(x)
    assert probs[..., hidden].abs().max() == 0
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, H, n))


@pytest.mark.parametrize("name", ["nystrom", "fourier"])
def test_non_causal_mixers_refuse_causal(name):
    assert MIXERS[name].supports_causal is False
    with pytest.raises(ValueError, match="cannot be causal"):
        build_mixer(name, dim=D, heads=H, causal=True)


@pytest.mark.parametrize("name", ["nystrom", "fourier"])
def test_a_causal_task_is_refused_before_any_work(name):
    cfg = compose([f"mixer={name}", "task=shakespeare_char", "logger.mode=disabled"])
    with pytest.raises(ConfigError, match="task is causal"):
        validate(cfg)


def test_the_cli_exits_2_naming_causal(tmp_path):
    """The refusal comes before the corpus is read: data_dir points at an empty folder."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnzoo.train",
            "mixer=fourier",
            "task=shakespeare_char",
            f"data_dir={tmp_path}",
            f"hydra.run.dir={tmp_path / 'run'}",
            "logger.mode=disabled",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "causal" in proc.stderr


@pytest.mark.parametrize(
    "name",
    [
        "linear",
        "favor",
        "nystrom",
        "fourier",
        "local",
        "token_mlp",
        "retention",
        "gla",
        "mamba2",
        "deltanet",
    ],
)
def test_each_trains_under_bf16_autocast(name):
    torch.manual_seed(0)
    extra = {"max_len": 10} if name == "token_mlp" else {}
    mixer = build_mixer(name, dim=D, heads=H, impl="torch", **extra)
    x = torch.randn(2, 10, D, requires_grad=True)
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[1, 7:] = True
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = mixer(x, mask)
    out.float().square().mean().backward()
    assert torch.isfinite(out.float()).all() and torch.isfinite(x.grad).all()
    for p in mixer.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()


def token_mlp_reference(mixer, x, mask, causal):
    """The token-mixing MLP written out per token position, float64."""
    n, length = x.shape[1], mixer.seq_len
    x = torch.nn.functional.pad(x.masked_fill(mask[..., None], 0.0), (0, 0, 0, length - n))
    w1, w2 = mixer.w1_ul.detach().double(), mixer.w2_lu.detach().double()
    place = torch.arange(mixer.hidden) * length // mixer.hidden
    out = torch.zeros_like(x)
    for i in range(length):
        for u in range(mixer.hidden):
            if causal and place[u] > i:
                continue
            js = [j for j in range(length) if not causal or j <= place[u]]
            h = torch.nn.functional.gelu(
                sum(w1[u, j] * x[:, j] for j in js) + mixer.b1_u.double()[u]
            )
            out[:, i] += w2[i, u] * h
        out[:, i] += mixer.b2_l.double()[i]
    return out[:, :n]


@pytest.mark.parametrize("causal", [False, True])
def test_token_mlp_matches_the_mlp_across_tokens(causal):
    torch.manual_seed(0)
    mixer = build_mixer("token_mlp", dim=4, causal=causal, max_len=6, hidden_ratio=1.5).double()
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[1, 3:] = True
    torch.testing.assert_close(mixer(x, mask), token_mlp_reference(mixer, x, mask, causal))


def test_token_mlp_takes_the_models_max_len_and_refuses_longer_inputs():
    from attnzoo import Model, ModelConfig

    cfg = ModelConfig(dim=D, depth=1, heads=H, mixer="token_mlp")
    model = Model(cfg, out_features=3, max_len=12, vocab_size=5)
    assert model.blocks[0].mixer.seq_len == 12
    with pytest.raises(ValueError, match="needs max_len"):
        build_mixer("token_mlp", dim=D)
    with pytest.raises(ValueError, match="at most max_len=4"):
        build_mixer("token_mlp", dim=D, max_len=4)(torch.randn(1, 5, D))
    # one set shorter than the model's positions: refused when the model is built
    short = ModelConfig(dim=D, depth=1, heads=H, mixer="token_mlp", mixer_options={"max_len": 4})
    with pytest.raises(ValueError, match="at most max_len=4 tokens.*allowed: max_len >= 12"):
        Model(short, out_features=3, max_len=12, vocab_size=5)
