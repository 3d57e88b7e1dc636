"""Differential attention against the paper's equations written out in float64 one (item, head)
at a time, its known answers (λ = 0, equal maps with λ = 1, the λ_init schedule), its refusals,
the Triton path, and (optionally) against the authors' own `multihead_diffattn.py`."""

import importlib.util
import inspect
import math
import os
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attnzoo import build_mixer
from attnzoo.mixers.diff_attention import lambda_init_at
from attnzoo.model import Model, ModelConfig
from attnzoo.rank import rank_profile

B, N, D, H = 2, 7, 16, 2  # N odd; d = D / (2H) = 4 per softmax map, values 2d = 8
EPS = 1e-5  # the authors' RMSNorm epsilon


def padding(b: int, n: int) -> torch.Tensor:
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[1, n - 3 :] = True
    return mask


def paper(mixer, x, causal: bool, mask: torch.Tensor | None) -> torch.Tensor:
    """Ye et al. 2024, eqs. (1)–(3), in float64 from the mixer's own parameters: per head h the
    scores of the q/k halves 2h and 2h+1, a plain softmax over the visible keys of each row,
    (A₁ − λA₂) V, RMSNorm with the shared weight, × (1 − λ_init), concat, W_O."""
    x = x.double()
    d = D // (2 * H)
    w_q, w_k, w_v = mixer.qkv.weight.double().chunk(3)
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    p = {n: t.detach().double() for n, t in mixer.named_parameters() if n.startswith("lambda")}
    lam = (
        torch.exp(p["lambda_q1"] @ p["lambda_k1"])
        - torch.exp(p["lambda_q2"] @ p["lambda_k2"])
        + mixer.lambda_init
    )
    weight = mixer.subln_weight.double()
    out = torch.zeros(B, N, D, dtype=torch.float64)
    for b in range(B):
        visible = torch.ones(N, N, dtype=torch.bool)
        if causal:
            visible = visible.tril()
        if mask is not None:
            visible[:, mask[b]] = False
        heads = []
        for h in range(H):
            q1, q2 = (
                q[b, :, 2 * h * d : (2 * h + 1) * d],
                q[b, :, (2 * h + 1) * d : (2 * h + 2) * d],
            )
            k1, k2 = (
                k[b, :, 2 * h * d : (2 * h + 1) * d],
                k[b, :, (2 * h + 1) * d : (2 * h + 2) * d],
            )
            v_h = v[b, :, 2 * h * d : (2 * h + 2) * d]
            a1 = torch.softmax((q1 @ k1.T / math.sqrt(d)).masked_fill(~visible, -math.inf), -1)
            a2 = torch.softmax((q2 @ k2.T / math.sqrt(d)).masked_fill(~visible, -math.inf), -1)
            o = (a1 - lam * a2) @ v_h
            o = o / torch.sqrt(o.square().mean(-1, keepdim=True) + EPS) * weight
            heads.append(o * (1 - mixer.lambda_init))
        out[b] = torch.cat(heads, -1) @ mixer.proj.weight.double().T
    return out


def mixer64(causal: bool, seed: int = 0, **options):
    """A float64 mixer with every parameter away from its init value (λ vectors, norm weight)."""
    torch.manual_seed(seed)
    mixer = build_mixer("diff_attention", dim=D, heads=H, causal=causal, impl="torch", **options)
    mixer = mixer.double()
    with torch.no_grad():
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            getattr(mixer, name).normal_(0, 0.5)
        mixer.subln_weight.uniform_(0.5, 1.5)
    return mixer


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_the_papers_equations_and_their_input_gradient_in_float64(causal, masked):
    mixer = mixer64(causal, layer_index=3)
    x = torch.randn(B, N, D, dtype=torch.float64, requires_grad=True)
    mask = padding(B, N) if masked else None
    out, want = mixer(x, mask), paper(mixer, x, causal, mask)
    torch.testing.assert_close(out, want)
    d_out = torch.randn(B, N, D, dtype=torch.float64)
    (grad,) = torch.autograd.grad(out, x, d_out, retain_graph=True)
    (want_grad,) = torch.autograd.grad(want, x, d_out)
    torch.testing.assert_close(grad, want_grad)
    # the lambda parameters get the gradient of the same formula
    (g_lambda,) = torch.autograd.grad((out * d_out).sum(), [mixer.lambda_q1])
    assert torch.isfinite(g_lambda).all() and g_lambda.abs().sum() > 0


@pytest.mark.parametrize("causal", [False, True])
def test_the_weights_are_the_signed_difference_and_give_the_output(causal):
    """attention_probs is A₁ − λA₂: rows sum to 1 − λ (not distributions), 0 above the diagonal
    under a causal mask and at padding keys, and (A₁ − λA₂) v normed is `attend`."""
    mixer = mixer64(causal, seed=1)
    with torch.no_grad():  # λ = e − 1 + 0.2 > 1: rows that sum to less than 0
        mixer.lambda_q1.fill_(0.5)
        mixer.lambda_k1.fill_(0.5)
    x = torch.randn(B, N, D, dtype=torch.float64)
    mask = padding(B, N)
    w = mixer.attention_probs(x, mask)
    assert w.shape == (B, H, N, N) and (w < 0).any()
    lam = mixer.lambda_full().detach()
    torch.testing.assert_close(w.sum(-1), (1 - lam).expand(B, H, N))
    assert (w[1, :, :, N - 3 :] == 0).all()
    if causal:
        assert (w.triu(1) == 0).all()
    _, _, v = mixer._halves(x)
    o = w @ v
    normed = F.rms_norm(o, (o.shape[-1],), mixer.subln_weight, EPS) * (1 - mixer.lambda_init)
    torch.testing.assert_close(mixer.attend(x, mask), normed)
    # the norm makes a head non-linear in its values: no path decomposition (attnzoo.paths)
    assert not hasattr(mixer, "head_outputs")


def test_with_lambda_zero_it_is_a_normed_scaled_softmax_attention():
    """λ_init = 0 and λ_q1·λ_k1 = λ_q2·λ_k2 (all zero): λ = 0, so each head is RMSNorm of
    softmax(q₁k₁ᵀ/√d) v, the second map playing no part."""
    mixer = mixer64(True, lambda_init=0.0)
    with torch.no_grad():
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            getattr(mixer, name).zero_()
    assert mixer.lambda_full().item() == 0.0
    x = torch.randn(B, N, D, dtype=torch.float64)
    (q1, k1), _, v = mixer._halves(x)
    plain = F.scaled_dot_product_attention(q1, k1, v, is_causal=True)
    normed = F.rms_norm(plain, (plain.shape[-1],), mixer.subln_weight, EPS)
    torch.testing.assert_close(mixer.attend(x), normed)
    future = torch.ones(N, N, dtype=torch.bool).triu(1)
    probs = torch.softmax((q1 @ k1.transpose(-1, -2) / 2.0).masked_fill(future, -math.inf), -1)
    torch.testing.assert_close(mixer.attention_probs(x), probs)


def test_equal_maps_with_lambda_one_cancel_to_zero():
    """q₂ = q₁, k₂ = k₁ (the halves' weights copied) and λ = exp(log 1.5) − exp(0) + 0.5 = 1: the
    weights A₁ − λA₂ vanish, and so does the output (RMSNorm of 0 is 0)."""
    mixer = mixer64(False, lambda_init=0.5)
    d = D // (2 * H)
    with torch.no_grad():
        w_q, w_k, _ = mixer.qkv.weight.view(3, H, 2, d, D).unbind(0)
        w_q[:, 1], w_k[:, 1] = w_q[:, 0], w_k[:, 0]
        mixer.lambda_q1.zero_()[0] = math.sqrt(math.log(1.5))
        mixer.lambda_k1.zero_()[0] = math.sqrt(math.log(1.5))
        mixer.lambda_q2.zero_()
        mixer.lambda_k2.zero_()
    assert mixer.lambda_full().item() == pytest.approx(1.0, abs=1e-15)
    x = torch.randn(B, N, D, dtype=torch.float64)
    assert mixer.attention_probs(x).abs().max() < 1e-15
    assert mixer(x).abs().max() < 1e-12


def test_lambda_init_follows_the_layer_index_schedule():
    """λ_init = 0.8 − 0.6 exp(−0.3 (l − 1)): 0.2 at l = 1, 0.3555 at 2, 0.7779 at 12."""
    assert lambda_init_at(1) == pytest.approx(0.2, abs=1e-12)
    assert lambda_init_at(2) == pytest.approx(0.355509067591, abs=1e-10)
    assert lambda_init_at(12) == pytest.approx(0.777870099559, abs=1e-10)
    build = lambda **o: build_mixer("diff_attention", dim=D, heads=H, **o)
    assert build().lambda_init == pytest.approx(0.2)  # no index given: layer 1
    assert build(layer_index=12).lambda_init == pytest.approx(0.777870099559)
    assert build(lambda_init=0.5, layer_index=12).lambda_init == 0.5
    # the paper's init of the λ vectors: normal(0, 0.1), one λ shared by the heads
    torch.manual_seed(0)
    mixer = build_mixer("diff_attention", dim=256, heads=2)
    lam = torch.cat([mixer.lambda_q1, mixer.lambda_k1, mixer.lambda_q2, mixer.lambda_k2])
    assert lam.shape == (4 * 64,) and lam.std().item() == pytest.approx(0.1, rel=0.15)
    assert torch.equal(mixer.subln_weight, torch.ones(128))
    # 4 D² (q, k, v, output) + 4 λ vectors of width d + the norm's weight of width 2d
    assert sum(p.numel() for p in mixer.parameters()) == 4 * 256**2 + 4 * 64 + 128


@pytest.mark.parametrize(
    "options,match",
    [
        ({"dim": 12, "heads": 4}, r"divisible by 2 \* heads = 8"),
        ({"dim": 10, "heads": 3}, r"dim=10 must be divisible by heads=3"),
        ({"heads": 0}, "heads must be a positive int"),
        ({"lambda_init": "layer"}, r"lambda_init must be a number in \[0, 1\) .* or 'depth'"),
        ({"lambda_init": 1.0}, r"lambda_init must be a number in \[0, 1\)"),
        ({"lambda_init": -0.1}, r"lambda_init must be a number in \[0, 1\)"),
        ({"lambda_init": True}, r"lambda_init must be a number in \[0, 1\)"),
        ({"lambda_init": float("nan")}, r"lambda_init must be a number in \[0, 1\)"),
        ({"layer_index": 0}, "layer_index must be a positive int"),
        ({"layer_index": 1.5}, "layer_index must be a positive int"),
        ({"layer_index": True}, "layer_index must be a positive int"),
        ({"attn_dropout": 1.5}, r"attn_dropout must be a float in \[0, 1\)"),
        ({"window": 3}, r"has no option\(s\) \['window'\]"),
    ],
)
def test_bad_options_are_refused_naming_what_is_allowed(options, match):
    args = {"dim": D, "heads": H, **options}
    with pytest.raises(ValueError, match=match):
        build_mixer("diff_attention", **args)


def test_dropout_drops_each_map_in_training_only():
    torch.manual_seed(2)
    mixer = build_mixer("diff_attention", dim=D, heads=H, causal=True, attn_dropout=0.5)
    x = torch.randn(B, N, D)
    mixer.eval()
    assert torch.equal(mixer(x), mixer(x))
    mixer.train()
    assert not torch.allclose(mixer(x), mixer(x))


def test_the_mixer_runs_the_kernels_with_impl_triton():
    """impl="triton" (the scaled-dot kernels, twice) gives the outputs and parameter gradients of
    impl="torch", with causal and padding masks."""
    x = torch.randn(B, N, D)
    mask = padding(B, N)
    outs, grads = [], []
    for impl in ("torch", "triton"):
        torch.manual_seed(7)
        mixer = build_mixer("diff_attention", dim=D, heads=H, causal=True, impl=impl)
        out = mixer(x, mask)
        outs.append(out)
        grads.append(torch.autograd.grad(out.square().sum(), list(mixer.parameters())))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    for g, w in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_in_a_model_the_entropy_reads_n_a_for_signed_weights():
    cfg = ModelConfig(dim=D, depth=2, heads=H, mixer="diff_attention", causal=True, impl="torch")
    model = Model(cfg, out_features=5, max_len=N, vocab_size=11, head="token")
    profile = rank_profile(model, torch.randint(0, 11, (2, N)), measures=("attention_entropy",))
    assert all(math.isnan(v) for v in profile.measures["attention_entropy"])


# ---------------------------------------------------------------------------------------------
# The authors' code (microsoft/unilm, Diff-Transformer/multihead_diffattn.py), when it is given
# ---------------------------------------------------------------------------------------------

AUTHORS_FILE = Path("unilm") / "Diff-Transformer" / "multihead_diffattn.py"


def _rms_norm_stub() -> types.ModuleType:
    """Their fallback `rms_norm.RMSNorm` (used when apex is absent), in plain PyTorch: x / rms(x)
    in fp32, cast back, times an optional weight of ones."""

    class RMSNorm(torch.nn.Module):
        def __init__(self, dim, eps=1e-6, elementwise_affine=True, memory_efficient=False):
            super().__init__()
            self.eps = eps
            self.weight = torch.nn.Parameter(torch.ones(dim)) if elementwise_affine else None

        def forward(self, x):
            out = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).type_as(x)
            return out if self.weight is None else out * self.weight

    module = types.ModuleType("rms_norm")
    module.RMSNorm = RMSNorm
    return module


def load_authors_module(folder: Path, monkeypatch) -> types.ModuleType:
    """Their module with what it imports stubbed: no RoPE (attnzoo has none: an identity
    `apply_rotary_emb`), no flash_attn (their class does not call it), no apex (their plain
    RMSNorm: theirs from `rms_norm.py` beside the file if it is there, else `_rms_norm_stub`).
    Stubs are registered both absolutely and under a package, for the revisions that import
    them relatively (`from .kernel.rotary import ...`)."""
    path = folder / AUTHORS_FILE
    rotary = types.ModuleType("kernel.rotary")
    rotary.apply_rotary_emb = lambda x, *args, **kwargs: x
    flash = types.ModuleType("flash_attn")
    flash.flash_attn_func = None
    norm = _rms_norm_stub()
    if (path.parent / "rms_norm.py").exists():
        spec = importlib.util.spec_from_file_location("rms_norm", path.parent / "rms_norm.py")
        norm = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(norm)
    package = types.ModuleType("diffattn_authors")
    package.__path__ = []
    stubs = {"kernel": types.ModuleType("kernel"), "kernel.rotary": rotary, "rms_norm": norm}
    for name, module in stubs.items():
        monkeypatch.setitem(sys.modules, name, module)
        monkeypatch.setitem(sys.modules, f"diffattn_authors.{name}", module)
    monkeypatch.setitem(sys.modules, "diffattn_authors", package)
    monkeypatch.setitem(sys.modules, "flash_attn", flash)
    monkeypatch.setitem(sys.modules, "apex", None)  # ModuleNotFoundError: their plain RMSNorm
    spec = importlib.util.spec_from_file_location("diffattn_authors.multihead_diffattn", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def authors_mixer(module: types.ModuleType, depth: int) -> torch.nn.Module:
    """Their MultiheadDiffAttn for width D, H heads, layer `depth` (their 0-based index)."""
    cls = module.MultiheadDiffAttn
    if "args" in inspect.signature(cls.__init__).parameters:  # the first revision
        args = types.SimpleNamespace(model_parallel_size=1, decoder_kv_attention_heads=None)
        return cls(args, embed_dim=D, depth=depth, num_heads=H)
    return cls(embed_dim=D, depth=depth, num_heads=H)


@pytest.mark.parametrize(
    "causal,masked", [(True, False), (False, False), (True, True), (False, True)]
)
def test_matches_the_authors_code_with_their_weights(causal, masked, monkeypatch):
    """Their module's weights copied into the mixer: the same outputs and input gradients in
    float32 (their softmax and norm run in fp32 whatever the input dtype)."""
    folder = os.environ.get("ATTNZOO_AUTHORS_CODE")
    if not folder:
        pytest.skip(
            f"set ATTNZOO_AUTHORS_CODE to a folder holding {AUTHORS_FILE} (microsoft/unilm's "
            "file, saved there) to compare with the authors' code"
        )
    module = load_authors_module(Path(folder), monkeypatch)
    torch.manual_seed(3)
    theirs = authors_mixer(module, depth=4)
    ours = build_mixer("diff_attention", dim=D, heads=H, causal=causal, layer_index=5)
    assert ours.lambda_init == pytest.approx(theirs.lambda_init, abs=1e-15)
    with torch.no_grad():
        ours.qkv.weight.copy_(
            torch.cat([theirs.q_proj.weight, theirs.k_proj.weight, theirs.v_proj.weight])
        )
        ours.proj.weight.copy_(theirs.out_proj.weight)
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            getattr(theirs, name).normal_(0, 0.5)  # away from λ ≈ λ_init
            getattr(ours, name).copy_(getattr(theirs, name))
        if theirs.subln.weight is not None:
            theirs.subln.weight.uniform_(0.5, 1.5)
            ours.subln_weight.copy_(theirs.subln.weight)
    mask = padding(B, N) if masked else None
    additive = torch.zeros(B, 1, N, N)  # their attn_mask: added to the scores
    if causal:
        additive = additive + torch.full((N, N), -math.inf).triu(1)
    if mask is not None:
        additive = additive.masked_fill(mask[:, None, None, :], -math.inf)
    x = torch.randn(B, N, D, requires_grad=True)
    out = ours(x, mask)
    want = theirs(x, (None, None), additive)
    d_out = torch.randn(B, N, D)
    (grad,) = torch.autograd.grad(out, x, d_out)
    (want_grad,) = torch.autograd.grad(want, x, d_out)
    print(
        f"causal={causal} masked={masked}: max |Δ out| = {(out - want).abs().max():.2e}, "
        f"max |Δ dx| = {(grad - want_grad).abs().max():.2e}"
    )
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, want_grad, rtol=1e-5, atol=1e-5)


def test_the_model_tells_each_block_its_layer_index():
    """With lambda_init=depth each block's λ_init follows the paper's schedule (0.2, 0.3555,
    0.4707 for blocks 1..3); a layer_index in the options fixes it for all; shared blocks are
    block 1."""
    cfg = lambda **o: ModelConfig(dim=D, depth=3, heads=H, mixer="diff_attention", **o)
    model = Model(cfg(), out_features=5, max_len=N, vocab_size=11)
    assert [b.mixer.layer_index for b in model.blocks] == [1, 2, 3]
    assert [b.mixer.lambda_init for b in model.blocks] == pytest.approx(
        [0.2, 0.8 - 0.6 * math.exp(-0.3), 0.8 - 0.6 * math.exp(-0.6)]
    )
    fixed = Model(cfg(mixer_options={"layer_index": 12}), 5, N, vocab_size=11)
    assert {b.mixer.layer_index for b in fixed.blocks} == {12}
    shared = Model(cfg(share_blocks=True), 5, N, vocab_size=11)
    assert {b.mixer.layer_index for b in shared.blocks} == {1}
