"""Stick-breaking attention against its product formula written as a float64 loop, cases with a
known answer, the mixer's weights and refusals; and, where they are on this machine, against the
authors' PyTorch reference and flash-linear-attention's naive one."""

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from attnzoo.kernels.stick_breaking import stick_breaking_attention

from attnzoo import build_mixer
from attnzoo.config import ConfigError
from attnzoo.model import Model, ModelConfig
from attnzoo.rank import rank_profile
from attnzoo.train import compose
from attnzoo.train.build import build_task_and_model

B, H, N, DK, DV = 2, 3, 7, 4, 5
PADDED = (2, 5)  # item 1's padded positions in the cases below


def loop(q, k, v, mask, scale, remainder):
    """y_i = Σ_{j<i} A_ij v_j (+ rem_i v_i, i not padding), A_ij = σ(z_ij) ∏_{j<m<i} (1 − σ(z_im)) over the
    keys that are not padding, the product taken factor by factor."""

    def beta(b, h, i, j):
        return 1 / (1 + math.exp(-scale * float(q[b, h, i] @ k[b, h, j])))

    def seen(b, j):
        return mask is None or not mask[b, j]

    out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=torch.float64)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            for i in range(q.shape[2]):
                total = 0.0
                for j in range(i):
                    if not seen(b, j):
                        continue
                    a = beta(b, h, i, j)
                    for m in range(j + 1, i):
                        if seen(b, m):
                            a *= 1 - beta(b, h, i, m)
                    out[b, h, i] += a * v[b, h, j]
                    total += a
                if remainder and seen(b, i):  # a padded position drops its remainder
                    out[b, h, i] += (1 - total) * v[b, h, i]
    return out


def inputs(n=N, scale=1.0, seed=0):
    torch.manual_seed(seed)
    q, k = (scale * torch.randn(B, H, n, DK, dtype=torch.float64) for _ in range(2))
    return q, k, torch.randn(B, H, n, DV, dtype=torch.float64)


def padding(n=N):
    mask = torch.zeros(B, n, dtype=torch.bool)
    mask[1, list(PADDED)] = True
    return mask


@pytest.mark.parametrize("remainder", [True, False])
@pytest.mark.parametrize("masked", [False, True])
def test_matches_the_product_formula_and_its_gradients_in_float64(remainder, masked):
    q, k, v = inputs(scale=1.5)  # scores of a few units: every factor counts
    mask = padding() if masked else None
    out = stick_breaking_attention(q, k, v, mask, remainder=remainder)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, loop(q, k, v, mask, DK**-0.5, remainder))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    assert torch.autograd.gradcheck(  # fast mode: the full Jacobian takes ~20 s here
        lambda a, b, c: stick_breaking_attention(a, b, c, mask, remainder=remainder),
        leaves,
        fast_mode=True,
    )


def test_a_padded_key_takes_nothing_and_breaks_nothing():
    """With keys padded, every other query's output is the op on the sequence without them."""
    q, k, v = inputs()
    mask = padding()
    out = stick_breaking_attention(q, k, v, mask)
    kept = [j for j in range(N) if j not in PADDED]
    alone = stick_breaking_attention(q[1:, :, kept], k[1:, :, kept], v[1:, :, kept])
    torch.testing.assert_close(out[1:, :, kept], alone)
    torch.testing.assert_close(out[:1], stick_breaking_attention(q[:1], k[:1], v[:1]))


def weights(z: float, remainder: bool, n: int = N) -> torch.Tensor:
    """The mixing matrix for q_i·k_j / √dk = z for every pair (q = k, all entries alike)."""
    q = torch.full((1, 1, n, DK), math.sqrt(abs(z)), dtype=torch.float64)
    k = q if z >= 0 else -q
    q, k = q.requires_grad_(), k.detach().requires_grad_()
    eye = torch.eye(n, dtype=torch.float64)[None, None]
    w = stick_breaking_attention(q, k, eye, remainder=remainder, scale=DK**-1)
    w.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
    return w.detach()[0, 0]


@pytest.mark.parametrize("z", [40.0, 1e4])
def test_scores_far_above_zero_give_each_query_its_nearest_earlier_key(z):
    shift = torch.diag(torch.ones(N - 1, dtype=torch.float64), -1)
    first = torch.zeros(N, N, dtype=torch.float64)
    first[0, 0] = 1.0  # the first query has no earlier key: its whole stick is the remainder
    torch.testing.assert_close(weights(z, remainder=False), shift, atol=1e-15, rtol=0)
    torch.testing.assert_close(weights(z, remainder=True), shift + first, atol=1e-15, rtol=0)


@pytest.mark.parametrize("z", [-40.0, -1e4])
def test_scores_far_below_zero_leave_the_stick_whole(z):
    eye = torch.eye(N, dtype=torch.float64)
    torch.testing.assert_close(weights(z, remainder=False), 0 * eye, atol=1e-15, rtol=0)
    torch.testing.assert_close(weights(z, remainder=True), eye, atol=1e-15, rtol=0)


def test_scores_of_zero_halve_the_stick_at_each_key():
    """β = 1/2 everywhere: A_ij = 2^−(i−j), the remainder 2^−i."""
    w = weights(0.0, remainder=True)
    i, j = torch.arange(N)[:, None], torch.arange(N)[None]
    want = torch.where(j < i, 0.5 ** (i - j).double(), 0.0) + torch.diag(0.5 ** torch.arange(N))
    torch.testing.assert_close(w, want.double(), atol=1e-15, rtol=0)


def test_rows_sum_to_at_most_one_and_to_one_with_the_remainder():
    q, k, _ = inputs(n=33, scale=2.0)
    eye = torch.eye(33, dtype=torch.float64).expand(B, H, 33, 33)
    mask = padding(33)
    bare = stick_breaking_attention(q, k, eye, mask, remainder=False)
    assert (bare >= 0).all() and (bare.sum(-1) <= 1 + 1e-12).all()
    assert (bare.triu().abs() == 0).all() and (bare[1, :, :, list(PADDED)] == 0).all()
    assert bare.sum(-1).min() < 0.99  # a row need not sum to 1
    full = stick_breaking_attention(q, k, eye, mask)
    assert (full[1, :, :, list(PADDED)] == 0).all()  # padding reaches no row, its own included
    real = ~mask[:, None, :].expand(B, H, 33)
    torch.testing.assert_close(full.sum(-1)[real], torch.ones(int(real.sum()), dtype=torch.float64))
    assert (full.sum(-1)[~real] < 1).all()


def test_the_dtype_policy_fp32_bf16_autocast_and_fp64():
    q, k, v = (t.float() for t in inputs())
    want = stick_breaking_attention(*(t.double() for t in (q, k, v)))
    out = stick_breaking_attention(q, k, v)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, atol=1e-6, rtol=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = stick_breaking_attention(q, k, v)
        assert stick_breaking_attention(q.double(), k.double(), v.double()).dtype == torch.float64
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.double(), want, atol=0.05, rtol=0.05)


def test_bad_arguments_are_refused_with_what_is_allowed():
    q = torch.randn(1, 1, 4, DK)
    with pytest.raises(ValueError, match="impl='triton' is not available: attnzoo has no Triton"):
        stick_breaking_attention(q, q, q, impl="triton")
    with pytest.raises(ValueError, match=r"impl='tritn': stick_breaking_attention takes one of"):
        stick_breaking_attention(q, q, q, impl="tritn")
    with pytest.raises(ValueError, match="remainder must be a bool, got 'yes'"):
        stick_breaking_attention(q, q, q, remainder="yes")
    with pytest.raises(ValueError, match="scale must be a finite real number"):
        stick_breaking_attention(q, q, q, scale=float("nan"))
    with pytest.raises(ValueError, match=r"k must have the shape of q \(1, 1, 4, 4\)"):
        stick_breaking_attention(q, q[..., :3, :], q)
    with pytest.raises(ValueError, match="v has dtype torch.float64 but q has torch.float32"):
        stick_breaking_attention(q, q, q.double())
    with pytest.raises(ValueError, match="key_padding_mask must be a bool tensor"):
        stick_breaking_attention(q, q, q, torch.zeros(1, 4))
    with pytest.raises(ValueError, match="remainder must be a bool, got 1"):
        build_mixer("stick_breaking", dim=8, heads=2, causal=True, remainder=1)


def test_the_mixer_refuses_to_be_bidirectional():
    with pytest.raises(ValueError, match="'stick_breaking' cannot be bidirectional"):
        build_mixer("stick_breaking", dim=8, heads=2, causal=False)


def test_a_bidirectional_task_refuses_it_naming_the_mixer(tmp_path):
    """What the trainer does with it (exit 2 with this message: attnzoo.train.cli)."""
    cfg = compose(["mixer=stick_breaking", "task=sort", "logger.mode=disabled"])
    with pytest.raises(ConfigError, match="mixer=stick_breaking .*cannot be bidirectional"):
        build_task_and_model(cfg, tmp_path)


@pytest.mark.parametrize("remainder", [True, False])
def test_the_mixer_is_its_weights_times_values(remainder):
    torch.manual_seed(1)
    mixer = build_mixer(
        "stick_breaking", dim=12, heads=3, causal=True, impl="torch", remainder=remainder
    ).double()
    x = torch.randn(2, N, 12, dtype=torch.float64)
    mask = padding()
    probs = mixer.attention_probs(x, mask)
    q, k, v = mixer._qkv(x)
    attended = stick_breaking_attention(q, k, v, mask, remainder=remainder)
    torch.testing.assert_close(mixer.attend(x, mask), probs @ v)
    torch.testing.assert_close(mixer.attend(x, mask), attended)
    merged = (probs @ v).transpose(1, 2).reshape(2, N, 12)
    torch.testing.assert_close(mixer(x, mask), mixer.proj(merged))
    torch.testing.assert_close(mixer.head_outputs(x, mask).sum(1), mixer(x, mask))
    assert mixer.rows_are_distributions is False
    impl_triton = build_mixer(
        "stick_breaking", dim=12, heads=3, causal=True, impl="triton", remainder=remainder
    )
    impl_triton.load_state_dict(mixer.state_dict())
    torch.testing.assert_close(impl_triton.double()(x, mask), mixer(x, mask))


def test_the_entropy_measure_reads_na_and_a_real_rows_sum_is_one_with_the_remainder():
    """The rows are not all distributions (padded positions drop their remainder), so the
    entropy reads n/a; the row sums the trainer logs instead show 1 on real tokens."""
    cfg = ModelConfig(dim=12, depth=2, heads=3, mixer="stick_breaking", causal=True, impl="torch")
    model = Model(cfg, out_features=5, max_len=N, vocab_size=11, head="lm")
    tokens = torch.randint(0, 11, (2, N))
    profile = rank_profile(model, tokens, measures=("attention_entropy",))
    assert all(math.isnan(e) for e in profile.measures["attention_entropy"])
    x = torch.randn(2, N, 12)
    sums = model.blocks[0].mixer.attention_probs(x).sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums))


# ---------------------------------------------------------------------------------------------
# A truth attnzoo did not write: the authors' reference, and flash-linear-attention's
# ---------------------------------------------------------------------------------------------

AUTHORS = os.environ.get("ATTNZOO_AUTHORS_CODE")


def authors_reference():
    """`stickbreaking` from the authors' stickbreaking_attention/sb_ref.py, imported by path (the
    package's __init__ imports its Triton kernels)."""
    if not AUTHORS:
        pytest.skip(
            "the authors' code is not here: set ATTNZOO_AUTHORS_CODE to a folder holding a "
            "checkout of their repository as stickbreaking-attention/"
        )
    path = Path(AUTHORS) / "stickbreaking-attention" / "stickbreaking_attention" / "sb_ref.py"
    if not path.is_file():
        pytest.fail(f"ATTNZOO_AUTHORS_CODE={AUTHORS!r} has no {path}")
    spec = importlib.util.spec_from_file_location("authors_sb_ref", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.stickbreaking


def test_the_op_matches_the_authors_reference_forward_and_backward():
    """Their reference computes in fp32 (it casts the scores to float), on masks it is given:
    `mask` (True: no share, no break; j ≥ i, and here padded keys too) and the strictly lower
    triangular `cum_weight`; their models add rem · v_i, which attnzoo drops at a padded
    position (their code has no padding). Compared in fp32, N = 37."""
    stickbreaking = authors_reference()
    n = 37
    q, k, v = (t.float() for t in inputs(n, scale=1.5, seed=3))
    mask = padding(n)
    hidden = torch.ones(n, n, dtype=torch.bool).triu() | mask[:, None, None, :]
    cum_weight = torch.ones(n, n).tril(-1)
    grad_out = torch.randn(B, H, n, DV)

    def theirs(q, k, v, remainder):
        o, rem = stickbreaking(q, k, v, hidden, cum_weight)
        rem = rem.masked_fill(mask[:, None, :], 0.0)
        return o + rem[..., None] * v if remainder else o

    for remainder in (True, False):
        ours_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        their_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        ours = stick_breaking_attention(*ours_leaves, mask, remainder=remainder)
        want = theirs(*their_leaves, remainder)
        torch.testing.assert_close(ours, want, atol=2e-6, rtol=2e-5)
        ours.backward(grad_out)
        want.backward(grad_out)
        for a, b in zip(ours_leaves, their_leaves, strict=True):
            torch.testing.assert_close(a.grad, b.grad, atol=2e-5, rtol=2e-5)


def fla_naive():
    """fla-core's `naive_stickbreaking_attn`, imported by path: plain PyTorch, where importing
    the `fla` package (every Triton op it has) takes ~9 s here."""
    spec = importlib.util.find_spec("fla")
    if spec is None:
        pytest.skip("fla-core (flash-linear-attention's ops) is not installed")
    path = Path(spec.submodule_search_locations[0]) / "ops" / "stickbreaking_attn" / "naive.py"
    if not path.is_file():
        pytest.skip(f"this fla-core has no stick-breaking reference ({path} is missing)")
    module_spec = importlib.util.spec_from_file_location("fla_stickbreaking_naive", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.naive_stickbreaking_attn


def test_the_op_matches_flash_linear_attentions_naive_reference():
    """fla's `naive_stickbreaking_attn` on (B, T, H, ·) returns A v and rem; fp64, no padding
    (it takes none), forward and gradients."""
    naive = fla_naive()
    q, k, v = inputs(n=37, scale=1.5, seed=4)
    grad_out = torch.randn(B, H, 37, DV, dtype=torch.float64)

    def theirs(q, k, v, remainder):
        o, rem = naive(*(t.transpose(1, 2) for t in (q, k, v)))
        o, rem = o.transpose(1, 2), rem.transpose(1, 2)
        return o + rem[..., None] * v if remainder else o

    for remainder in (True, False):
        ours_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        their_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        ours = stick_breaking_attention(*ours_leaves, remainder=remainder)
        want = theirs(*their_leaves, remainder)
        torch.testing.assert_close(ours, want)
        ours.backward(grad_out)
        want.backward(grad_out)
        for a, b in zip(ours_leaves, their_leaves, strict=True):
            torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.slow
def test_the_cli_exits_2_naming_the_mixer_on_a_bidirectional_task(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnzoo.train",
            "mixer=stick_breaking",
            "task=sort",
            f"hydra.run.dir={tmp_path / 'run'}",
            "logger.mode=disabled",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert "mixer=stick_breaking is not allowed with task=sort" in proc.stderr
    assert "causal only" in proc.stderr and "allowed: a causal task (mqar" in proc.stderr
    assert not (tmp_path / "run").exists()  # refused before anything is written
