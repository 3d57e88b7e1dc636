"""Softpick attention against the paper's formula written as a float64 loop over query-key
pairs (forward and gradients), its known answers (rows sum to at most 1, all-negative scores give
exactly 0), its refusals, the softpick mixer's weights, and, where the authors' repository is at
hand, against their naive PyTorch softpick."""

import importlib.util
import math
import os
from pathlib import Path

import pytest
import torch
from attnzoo.kernels.softpick import naive, softpick_attention

from attnzoo import build_mixer
from attnzoo.model import Model, ModelConfig
from attnzoo.rank import rank_profile

B, H, N, DK, DV = 2, 2, 7, 4, 3


def loop(q, k, v, causal, mask, scale, eps):
    """y_i = Σ_j w_ij v_j, w_ij = ReLU(e^{s_ij} − 1) / (Σ_j' |e^{s_ij'} − 1| + ε e^{m_i}), over
    the keys j query i sees, one pair at a time (all heads at once; differentiable). m_i is the
    row's largest score: the authors add ε after shifting the scores by m_i, which is ε e^{m_i}
    before the shift."""
    out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=torch.float64)
    for b in range(q.shape[0]):
        for i in range(q.shape[2]):
            seen = [
                j
                for j in range(k.shape[2])
                if not ((causal and j > i) or (mask is not None and mask[b, j]))
            ]
            if not seen:
                continue
            s = {j: scale * (q[b, :, i] * k[b, :, j]).sum(-1) for j in seen}  # (H,)
            m = torch.stack(list(s.values())).amax(0)
            total = sum(abs(torch.exp(s[j]) - 1) for j in seen) + eps * torch.exp(m)
            row = sum((torch.relu(torch.exp(s[j]) - 1) / total)[:, None] * v[b, :, j] for j in seen)
            out[b, :, i] = row
    return out


def draw(seed, n=N, dk=DK, dv=DV, spread=2.0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    qk = [torch.randn(B, H, n, dk, generator=gen, dtype=torch.float64) * spread for _ in range(2)]
    v = torch.randn(B, H, n, dv, generator=gen, dtype=torch.float64)
    return [t.to(dtype).requires_grad_() for t in (*qk, v)]


def padding() -> torch.Tensor:
    mask = torch.zeros(B, N, dtype=torch.bool)
    mask[1, -3:] = True  # item 1's last three keys are padding
    mask[0, 0] = True  # item 0's first key: under a causal mask its query 0 sees nothing
    return mask


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("eps", [1e-8, 0.5])
@pytest.mark.sample(4)  # the default tier: 4 of the 8, every value of each axis
def test_matches_the_formula_and_its_gradients_in_float64(causal, masked, eps):
    """Forward and dq, dk, dv against the loop (eps 0.5 makes the authors' placement of ε show),
    and gradcheck against finite differences of the op itself."""
    q, k, v = draw(0)
    mask = padding() if masked else None
    out = softpick_attention(q, k, v, causal, mask, eps=eps)
    want = loop(q, k, v, causal, mask, DK**-0.5, eps)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-13)
    d_out = torch.randn(want.shape, generator=torch.Generator().manual_seed(1), dtype=want.dtype)
    got, expected = (torch.autograd.grad(o, (q, k, v), d_out) for o in (out, want))
    for name, a, b in zip("qkv", got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=f"d{name}")
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    op = lambda a, b, c: softpick_attention(a, b, c, causal, mask, eps=eps)
    assert torch.autograd.gradcheck(op, leaves, fast_mode=True)


def test_rows_sum_to_at_most_one_and_to_zero_where_no_score_is_positive():
    """The weights (values = identity) are ≥ 0 with row sums ≤ 1; a row whose visible scores
    are all ≤ 0, or with no visible key, gets exactly 0 and gradients 0, not NaN, even where
    exp(−max score) overflows fp32."""
    q, k, _ = draw(2, spread=3.0, dtype=torch.float32)
    eye = torch.eye(N).expand(B, H, N, N)
    weights = softpick_attention(q, k, eye, True, padding())
    assert (weights >= 0).all() and (weights.sum(-1) <= 1 + 1e-6).all()
    assert (weights[0, :, 0] == 0).all()  # query 0 of item 0 sees no key
    assert (weights.sum(-1) < 0.99).any() and (weights.sum(-1) > 0.99).any()
    # every score −100 or lower: exp(−m) = e^100 overflows fp32; the output and gradients are 0
    q = torch.full((1, 1, 3, 2), 10.0, requires_grad=True)
    k = torch.full((1, 1, 3, 2), -10.0, requires_grad=True)
    v = torch.randn(1, 1, 3, 4, requires_grad=True)
    out = softpick_attention(q, k, v, False, scale=0.5)
    assert (out == 0).all()
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all((g == 0).all() for g in grads)
    # one positive score, the others −∞-like: that key's weight is (e^s − 1)/(e^s − 1 + …) ≈ 1
    s = torch.tensor([[[[3.0, -50.0, -50.0]]]], dtype=torch.float64)
    w = naive.softpick(s, None, 1e-8)
    expected = (math.e**3 - 1) / (math.e**3 - 1 + 2 * (1 - math.exp(-50)) + 1e-8 * math.e**3)
    torch.testing.assert_close(w, torch.tensor([[[[expected, 0.0, 0.0]]]], dtype=torch.float64))


def test_dtype_policy_bf16_and_autocast():
    q, k, v = (t.detach() for t in draw(3, dtype=torch.float32))
    want = softpick_attention(q.double(), k.double(), v.double(), True)
    out = softpick_attention(q, k, v, True)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-6)
    bf16 = softpick_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), True)
    assert bf16.dtype == torch.bfloat16
    torch.testing.assert_close(bf16.double(), want, rtol=0.05, atol=0.05)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert softpick_attention(q, k, v, True).dtype == torch.bfloat16


def test_bad_arguments_are_refused_with_what_is_allowed():
    q = torch.randn(1, 1, 4, DK)
    with pytest.raises(ValueError, match=r"impl='triton'.*\('auto', 'torch'\).*no Triton kernel"):
        softpick_attention(q, q, q, impl="triton")
    with pytest.raises(ValueError, match=r"impl='tritn'"):
        softpick_attention(q, q, q, impl="tritn")
    for eps in (0.0, -1e-8, float("nan"), float("inf"), "1e-8", True):
        with pytest.raises(ValueError, match=r"eps must be a finite real number > 0"):
            softpick_attention(q, q, q, eps=eps)
    with pytest.raises(ValueError, match="scale must be a finite real number"):
        softpick_attention(q, q, q, scale=float("nan"))
    with pytest.raises(ValueError, match="causal must be a bool, got 1"):
        softpick_attention(q, q, q, 1)
    with pytest.raises(ValueError, match=r"k must have the shape of q"):
        softpick_attention(q, q[:, :, :3], q)
    with pytest.raises(ValueError, match="key_padding_mask must be a bool tensor"):
        softpick_attention(q, q, q, False, torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"eps must be a finite real number > 0 .*, got 0"):
        build_mixer("softpick", dim=8, heads=2, eps=0)


@pytest.mark.parametrize("causal", [False, True])
def test_the_mixer_is_its_weights_times_values_through_the_projection(causal):
    torch.manual_seed(1)
    mixer = build_mixer("softpick", dim=12, heads=3, causal=causal, impl="triton").double()
    x = torch.randn(2, N, 12, dtype=torch.float64)
    mask = torch.zeros(2, N, dtype=torch.bool)
    mask[1, -2:] = True
    weights = mixer.attention_probs(x, mask)
    _, _, v = mixer._qkv(x)
    heads_bnd = (weights @ v).transpose(1, 2).reshape(2, N, 12)
    torch.testing.assert_close(mixer(x, mask), mixer.proj(heads_bnd))
    assert (weights.sum(-1) <= 1 + 1e-12).all() and (weights[1, ..., -2:] == 0).all()
    if causal:
        assert (weights.triu(1) == 0).all()
    # the weights are not distributions: the entropy measure reads n/a for a model of them
    cfg = ModelConfig(dim=12, depth=2, heads=3, mixer="softpick", causal=causal, impl="torch")
    model = Model(cfg, out_features=5, max_len=N, vocab_size=11, head="token")
    profile = rank_profile(model, torch.randint(0, 11, (2, N)), measures=("attention_entropy",))
    assert all(math.isnan(v) for v in profile.measures["attention_entropy"])


# ---------------------------------------------------------------------------------------------
# The authors' code (optional: their repository is not a dependency)
# ---------------------------------------------------------------------------------------------

AUTHORS = "ATTNZOO_AUTHORS_CODE"


def authors_naive():
    """The authors' naive_softpick_attn.py from $ATTNZOO_AUTHORS_CODE/softpick-attention/."""
    folder = os.environ.get(AUTHORS)
    path = Path(folder or ".") / "softpick-attention" / "naive_softpick_attn.py"
    if not folder or not path.is_file():
        pytest.skip(
            f"set {AUTHORS} to a folder holding a checkout of "
            "https://github.com/zaydzuhri/softpick-attention as softpick-attention/ "
            f"(no {path})"
        )
    spec = importlib.util.spec_from_file_location("authors_naive_softpick_attn", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_matches_the_authors_naive_softpick_forward_and_backward():
    """Their causal naive_softpick_attn (tokens-first, fp32 weights) against the op in fp32,
    and their `softpick` on masked scores against ours in fp64: outputs and every gradient."""
    authors = authors_naive()
    n, dk = 33, 16
    q, k, v = draw(4, n=n, dk=dk, dv=dk, spread=1.5, dtype=torch.float32)
    tokens_first = lambda t: t.transpose(1, 2)
    theirs = tokens_first(authors.naive_softpick_attn(*map(tokens_first, (q, k, v)))[0])
    ours = softpick_attention(q, k, v, True)
    d_out = torch.randn(ours.shape, generator=torch.Generator().manual_seed(5))
    diffs = {"out": (ours - theirs).abs().max().item()}
    grads = zip(
        "qkv", *(torch.autograd.grad(o, (q, k, v), d_out) for o in (ours, theirs)), strict=True
    )
    diffs |= {f"d{name}": (a - b).abs().max().item() for name, a, b in grads}
    # the softpick function alone in fp64, where the rounding of fp32 does not hide a difference
    s = (torch.randn(B, H, n, n, dtype=torch.float64) * 3).requires_grad_()
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    w_theirs = authors.softpick(s.masked_fill(~causal, float("-inf")), dim=-1)
    w_ours = naive.softpick(s, causal, 1e-8)
    d_w = torch.randn(s.shape, dtype=torch.float64)
    (g_ours,), (g_theirs,) = (torch.autograd.grad(w, s, d_w) for w in (w_ours, w_theirs))
    diffs |= {"w64": (w_ours - w_theirs).abs().max().item()}
    diffs |= {"dscores64": (g_ours - g_theirs).abs().max().item()}
    print("max abs differences from the authors' code:", diffs)
    for name in ("out", "dq", "dk", "dv"):
        assert diffs[name] <= 1e-5, (name, diffs)
    assert diffs["w64"] <= 1e-14 and diffs["dscores64"] <= 1e-13, diffs
