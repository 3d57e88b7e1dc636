"""Forgetting attention (FoX, Lin et al. 2025, arXiv 2503.02130) and the scaled-dot op's
`key_bias`, against the paper's formula written as a float64 loop over query-key pairs with the
decay D_ij = Σ_{l=j+1..i} log f_l summed term by term (not through a cumulative sum); the Triton
kernels with a key bias in the interpreter (tests/conftest.py); and, where they are installed,
the authors' own kernels and flash-linear-attention's reference.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from attnzoo.kernels.attention import launch
from attnzoo.kernels.attention import naive as reference

from attnzoo import build_mixer, kernels

B, H, N, DK, DV = 2, 2, 7, 4, 3


def fox_loop(q, k, v, log_f, mask=None, scale=None, causal=True):
    """y_i = Σ_{j ≤ i, j not padding} softmax_j(scale q_i·k_j + D_ij) v_j, D_ij = Σ_{l=j+1..i}
    log f_l (for j > i when not causal: D_ij = 0, no decay), one pair at a time; autograd
    runs through it."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    b_, h_, n = q.shape[:3]
    rows = []
    for b in range(b_):
        for h in range(h_):
            for i in range(n):
                logits, values = [], []
                for j in range(n):
                    if (causal and j > i) or (mask is not None and mask[b, j]):
                        continue
                    decay = sum((log_f[b, h, t] for t in range(j + 1, i + 1)), q.new_zeros(()))
                    logits.append(scale * (q[b, h, i] @ k[b, h, j]) + decay)
                    values.append(v[b, h, j])
                if logits:
                    weights = torch.softmax(torch.stack(logits), 0)
                    rows.append(weights @ torch.stack(values))
                else:
                    rows.append(v.new_zeros(v.shape[-1]))
    return torch.stack(rows).reshape(b_, h_, n, v.shape[-1])


def inputs64(b=B, h=H, n=N, dk=DK, dv=DV, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, n, dk, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(b, h, n, dv, generator=g, dtype=torch.float64)
    # forget gates from strong (f ≈ 0.1) to weak (f ≈ 1) decay
    log_f = F.logsigmoid(torch.randn(b, h, n, generator=g, dtype=torch.float64) * 2 + 1)
    return q, k, v, log_f


def padding(b: int, n: int) -> torch.Tensor:
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[1, -2:] = True  # right padding
    mask[0, 2] = True  # and a padding token inside the sequence
    return mask


# ---------------------------------------------------------------------------------------------
# The op's key bias against the formula
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("masked", [False, True])
def test_the_op_with_a_key_bias_is_the_papers_formula_forward_and_gradients(masked):
    """key_bias = −cumsum(log f) under a causal mask gives FoX's output and, by autograd through
    the bias, the gradients of q, k, v and log f (odd N, padding inside and at the end)."""
    q, k, v, log_f = (t.requires_grad_() for t in inputs64())
    mask = padding(B, N) if masked else None
    out = kernels.scaled_dot_attention(
        q, k, v, True, mask, impl="torch", key_bias=-log_f.cumsum(-1)
    )
    leaves = [q, k, v, log_f]
    want = fox_loop(q, k, v, log_f, mask)
    torch.testing.assert_close(out, want)
    cot = torch.randn_like(want)
    for got, exp in zip(
        torch.autograd.grad(out, leaves, cot), torch.autograd.grad(want, leaves, cot), strict=True
    ):
        torch.testing.assert_close(got, exp)


def test_gradcheck_of_the_op_with_a_key_bias_a_window_and_a_sink():
    """torch.autograd.gradcheck in float64: q, k, v, the key bias and a sink, with padding and
    a window, bidirectional (the key bias is not tied to causal attention)."""
    q, k, v, log_f = inputs64(h=1, n=5, dk=3, dv=2)
    leaves = [t.clone().requires_grad_() for t in (q, k, v, -log_f.cumsum(-1))]
    sink = torch.tensor([0.3], dtype=torch.float64, requires_grad=True)
    mask = padding(B, 5)

    def op(a, b, c, kb, s):
        return kernels.scaled_dot_attention(
            a, b, c, False, mask, impl="torch", window=(2, 1), sink=s, key_bias=kb
        )

    assert torch.autograd.gradcheck(op, (*leaves, sink), fast_mode=True)


def test_a_zero_key_bias_is_no_key_bias_on_every_path():
    q, k, v, _ = inputs64(b=1, h=1, n=9, dk=16, dv=16)
    zero = torch.zeros(1, 1, 9, dtype=torch.float64)
    for causal in (False, True):
        plain = kernels.scaled_dot_attention(q, k, v, causal, impl="torch")
        assert torch.equal(
            kernels.scaled_dot_attention(q, k, v, causal, impl="torch", key_bias=zero), plain
        )
    q32, k32, v32 = (t.float() for t in (q, k, v))
    got = kernels.scaled_dot_attention(q32, k32, v32, True, impl="triton", key_bias=zero.float())
    assert torch.allclose(got.double(), kernels.scaled_dot_attention(q, k, v, True), atol=1e-6)


def test_bad_key_biases_are_refused_with_what_is_allowed():
    q = torch.randn(1, 2, 5, 4)
    with pytest.raises(ValueError, match=r"key_bias must be a float tensor .* \(1, 2, 5\)"):
        kernels.scaled_dot_attention(q, q, q, key_bias=torch.zeros(1, 2, 4))
    with pytest.raises(ValueError, match="key_bias must be a float tensor"):
        kernels.scaled_dot_attention(q, q, q, key_bias=torch.zeros(1, 2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="key_bias must be a float tensor"):
        kernels.scaled_dot_attention(q, q, q, key_bias=[0.0] * 5)
    with pytest.raises(ValueError, match="key_bias is on meta but the inputs are on cpu"):
        kernels.scaled_dot_attention(q, q, q, key_bias=torch.zeros(1, 2, 5, device="meta"))
    kb = torch.zeros(1, 2, 5)
    with pytest.raises(ValueError, match="a key bias comes with scaled-dot attention's softmax"):
        launch._Problem(q, q, q, None, False, None, 0.5, sigmoid=0.0, key_bias=kb)
    with pytest.raises(ValueError, match="a key bias comes with scaled-dot attention's softmax"):
        launch._Problem(q, q, q, torch.eye(4).expand(2, 4, 4), False, None, 0.5, key_bias=kb)


# ---------------------------------------------------------------------------------------------
# The Triton kernels with a key bias (interpreter) against the float64 reference
# ---------------------------------------------------------------------------------------------

TOL = {torch.float32: 2e-5, torch.float16: 1e-2}


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    assert torch.isfinite(got).all(), "NaN/inf: an element never written?"
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


# (n, dk, dv, causal, mask, window, sink, dtype): n = 37 spans two ragged 32-token interpreter
# tiles; q/k wider than v (the forward's chunks); "empty": item 0's key 0 is padding, so with
# causal its query 0 sees nothing. The bias grows along the sequence as FoX's −cumsum(log f).
KERNEL_CASES = [
    (37, 24, 20, True, "empty", None, False, torch.float32),
    (37, 40, 16, True, "pad", None, True, torch.float32),  # with a sink
    (33, 16, 16, False, "pad", (5, 3), False, torch.float32),  # a window, bidirectional
    (37, 24, 24, True, "empty", None, False, torch.float16),
    (32, 16, 16, True, "none", None, False, torch.float16),  # whole tiles: the unmasked loops
]


@pytest.mark.parametrize(
    "case", KERNEL_CASES, ids=lambda c: "-".join(map(str, c[:7])) + f"-{c[7]}".replace("torch.", "")
)
def test_the_kernels_match_the_reference_forward_and_backward(case, monkeypatch):
    """impl="triton" with a key bias: the output and dq, dk, dv, d key_bias (and d sink) against
    the float64 reference; outputs allocated full of NaN, so an element never written fails."""
    monkeypatch.setattr(launch, "POISON_OUTPUTS", True)
    n, dk, dv, causal, kind, window, with_sink, dtype = case
    b, h = 1 if kind == "none" else 2, 1
    q, k, v, log_f = inputs64(b, h, n, dk, dv, seed=5)
    q, k = q * 1.5, k * 1.5
    leaves64 = [t.clone().requires_grad_() for t in (q, k, v, -log_f.cumsum(-1))]
    if with_sink:
        leaves64.append(torch.tensor([0.5], dtype=torch.float64, requires_grad=True))
    leaves = [t.detach().to(dtype).requires_grad_() for t in leaves64[:3]]
    leaves += [t.detach().float().requires_grad_() for t in leaves64[3:]]  # the bias in fp32
    mask = None
    if kind != "none":
        mask = torch.zeros(b, n, dtype=torch.bool)
        mask[1, n - 9 :] = True
        if kind == "empty":
            mask[0, 0] = True
    scale = dk**-0.5

    def call(ls, impl):
        sink = ls[4] if with_sink else None
        kw = {"window": window, "sink": sink, "key_bias": ls[3]}
        if impl == "triton":
            return kernels.scaled_dot_attention(*ls[:3], causal, mask, scale, impl=impl, **kw)
        return reference.scaled_dot_attention(*ls[:3], causal, mask, scale, **kw)

    out, want = call(leaves, "triton"), call(leaves64, "reference")
    assert out.dtype == dtype and rel_err(out, want) <= TOL[dtype]
    cot = torch.randn(want.shape, dtype=torch.float64)
    grads = torch.autograd.grad(out, leaves, cot.to(dtype))
    wants = torch.autograd.grad(want, leaves64, cot)
    names = ["q", "k", "v", "key_bias", "sink"]
    for name, g, w in zip(names, grads, wants, strict=False):
        assert rel_err(g, w) <= TOL[dtype], name
    assert grads[3].dtype == torch.float32 and grads[3].shape == (b, h, n)
    if mask is not None:  # a padding key's bias gets no gradient
        assert (grads[3].transpose(1, 2)[mask] == 0).all()


def test_the_kernels_with_a_key_bias_and_dropout_match_the_reference_given_its_mask():
    """Dropout with a key bias: the reference, handed the mask the kernels draw, gives the
    kernels' output and gradients (the key bias's gradient uses the dropped dP)."""
    b, h, n, p = 1, 1, 37, 0.2
    q, k, v, log_f = (t.float() for t in inputs64(b, h, n, 16, 16, seed=3))
    kb = -log_f.cumsum(-1)
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[0, -5:] = True
    leaves = [t.clone().requires_grad_() for t in (q, k, v, kb)]
    seed = torch.tensor([1234])
    out, _ = torch.ops.attnzoo.scaled_dot_attention(
        *leaves[:3], mask, True, 0.25, p, seed, None, None, leaves[3]
    )
    keep = launch.dropout_keep_mask(seed, b, h, n, p)
    ref_leaves = [t.detach().clone().requires_grad_() for t in leaves]
    ref = reference.scaled_dot_attention(
        *ref_leaves[:3], True, mask, 0.25, p, keep, key_bias=ref_leaves[3]
    )
    assert rel_err(out, ref) <= 1e-5
    cot = torch.randn_like(ref)
    for g, r in zip(
        torch.autograd.grad(out, leaves, cot),
        torch.autograd.grad(ref, ref_leaves, cot),
        strict=True,
    ):
        assert rel_err(g, r) <= 1e-4


def test_the_key_bias_gradient_in_half_precision_gathers_no_rounding_along_the_sequence():
    """FoX's d log f is a cumulative sum of the key bias's gradient, the column sums of dS. With
    delta = rowsum(dO ∘ O) from the fp16-rounded O every row of dS would carry that rounding,
    and the sum would gather it from every later row (relative error 1.3e-3 at N = 64 and 6.7e-3
    at N = 256 measured, growing with N); the kernels take delta from rowsum(P ∘ dP) instead
    (3.6e-4 at both lengths, the authors' kernels 4.9e-4)."""
    b, h, n, d = 1, 1, 96, 16
    q, k, v, log_f = inputs64(b, h, n, d, d, seed=2)
    cot = torch.randn(b, h, n, d, dtype=torch.float64)
    leaves = [t.half().requires_grad_() for t in (q, k, v)] + [log_f.float().requires_grad_()]
    out = kernels.scaled_dot_attention(
        *leaves[:3], True, impl="triton", key_bias=-leaves[3].cumsum(-1)
    )
    got = torch.autograd.grad(out, leaves[3], cot.half())[0]
    leaves64 = [t.clone().requires_grad_() for t in (q, k, v, log_f)]
    want = reference.scaled_dot_attention(
        *leaves64[:3], True, None, d**-0.5, key_bias=-leaves64[3].cumsum(-1)
    )
    assert rel_err(got, torch.autograd.grad(want, leaves64[3], cot)[0]) <= 7e-4


@pytest.mark.slow  # about 9 s in the interpreter (opcheck runs the op many times)
def test_opcheck_passes_with_a_key_bias():
    """Schema, fake, autograd registration and AOT dispatch of the op with a key bias:
    torch.library.opcheck."""
    b, h, n, d = 1, 1, 5, 16
    leaf = lambda *shape: torch.randn(*shape).requires_grad_()
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[0, -2:] = True
    args = (leaf(b, h, n, d), leaf(b, h, n, d), leaf(b, h, n, d), mask, True, 0.25, 0.0, None)
    op = torch.ops.attnzoo.scaled_dot_attention.default
    results = torch.library.opcheck(op, (*args, None, None, leaf(b, h, n)))
    assert set(results.values()) == {"SUCCESS"}, results


# ---------------------------------------------------------------------------------------------
# The mixer
# ---------------------------------------------------------------------------------------------


def mixer_and_input(n=N, dim=12, heads=3, seed=1):
    torch.manual_seed(seed)
    mixer = build_mixer("forgetting", dim=dim, heads=heads, causal=True, impl="torch").double()
    with torch.no_grad():  # gates from strong to no decay, so D_ij matters
        mixer.forget_gate.weight.normal_(0.0, 0.5)
        mixer.forget_gate.bias.uniform_(-1.0, 3.0)
    return mixer, torch.randn(2, n, dim, dtype=torch.float64)


def test_the_mixer_is_the_papers_formula_with_its_forget_gate_forward_and_gradients():
    """attend and attention_probs against the loop on the mixer's own q, k, v and f_t =
    σ(w_h·x_t + b_h), written here from the weights; gradients of every parameter."""
    mixer, x = mixer_and_input()
    mask = padding(2, N)

    def formula():
        q, k, v = mixer._qkv(x)
        logit_bhn = torch.einsum("bnd,hd->bhn", x, mixer.forget_gate.weight)
        log_f = F.logsigmoid(logit_bhn + mixer.forget_gate.bias[None, :, None])
        log_f = log_f.masked_fill(mask[:, None, :], 0.0)  # a padding token does not decay
        return fox_loop(q, k, v, log_f, mask)

    params = [mixer.qkv.weight, mixer.forget_gate.weight, mixer.forget_gate.bias]
    out, want = mixer.attend(x, mask), formula()
    torch.testing.assert_close(out, want)
    cot = torch.randn_like(want)
    got_g = torch.autograd.grad(out, params, cot)
    want_g = torch.autograd.grad(want, params, cot)
    for g, w in zip(got_g, want_g, strict=True):
        torch.testing.assert_close(g, w)
    probs = mixer.attention_probs(x, mask)
    assert probs.shape == (2, 3, N, N)
    torch.testing.assert_close(probs @ mixer._qkv(x)[2], want)
    assert (probs.triu(1) == 0).all()


def test_padding_tokens_are_as_if_removed():
    """A padding token neither decays nor is seen: the real tokens' outputs are those of the
    sequence without it."""
    mixer, x = mixer_and_input(n=8)
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[:, 3] = True
    out = mixer(x, mask)
    keep = [i for i in range(8) if i != 3]
    torch.testing.assert_close(out[:, keep], mixer(x[:, keep]))


def test_with_no_forgetting_it_is_causal_scaled_dot_attention_exactly():
    """f = 1 everywhere (log f = 0: a gate bias far past saturation) leaves softmax attention:
    the same bits as scaled_dot with the same q, k, v and output weights."""
    mixer, x = mixer_and_input()
    with torch.no_grad():
        mixer.forget_gate.weight.zero_()
        mixer.forget_gate.bias.fill_(1e4)
    assert torch.equal(mixer.log_forget(x), torch.zeros(2, 3, N, dtype=torch.float32))
    plain = build_mixer("scaled_dot", dim=12, heads=3, causal=True, impl="torch").double()
    plain.load_state_dict(mixer.state_dict(), strict=False)
    assert torch.equal(mixer(x), plain(x))


def test_the_authors_init_and_the_refusals():
    mixer = build_mixer("forgetting", dim=64, heads=4, causal=True, impl="torch")
    w, bias = mixer.forget_gate.weight, mixer.forget_gate.bias
    assert w.shape == (4, 64) and abs(w.std().item() - 0.02) < 0.004 and (bias == 0).all()
    assert type(mixer).supports_bidirectional is False
    with pytest.raises(ValueError, match="mixer 'forgetting' .* is causal only"):
        build_mixer("forgetting", dim=8, heads=2, causal=False)


def test_the_flop_formula_counts_what_the_reference_computes():
    """torch's FlopCounterMode on the mixer's PyTorch path, which masks a dense N × N score
    matrix: the formula with every key counted (causal=False) — q, k, v, output and forget-gate
    projections and the two attention matmuls; the causal figure is that less the masked half."""
    from torch.utils.flop_counter import FlopCounterMode

    dim, heads, n, b = 16, 2, 8, 3
    mixer = build_mixer("forgetting", dim=dim, heads=heads, causal=True, impl="torch")
    with FlopCounterMode(display=False) as counter:
        mixer(torch.randn(b, n, dim))
    formula = type(mixer).flops_per_token
    assert counter.get_total_flops() == formula(dim, heads, n, causal=False) * b * n
    masked_half = 4 * dim * (n - (n + 1) / 2)
    assert formula(dim, heads, n, causal=True) == formula(dim, heads, n, False) - masked_half


def test_the_mixer_runs_the_kernels_with_impl_triton():
    """impl="triton" (the key bias through the kernels) gives impl="torch"'s outputs and
    parameter gradients, with padding."""
    x = torch.randn(2, 21, 12)
    mask = torch.zeros(2, 21, dtype=torch.bool)
    mask[1, 15:] = True
    outs, grads = [], []
    for impl in ("torch", "triton"):
        torch.manual_seed(7)
        mixer = build_mixer("forgetting", dim=12, heads=2, causal=True, impl=impl)
        out = mixer(x, mask)
        outs.append(out)
        grads.append(torch.autograd.grad(out.square().sum(), list(mixer.parameters())))
    assert rel_err(outs[1], outs[0]) <= 1e-5
    for g, w in zip(grads[1], grads[0], strict=True):
        assert rel_err(g, w) <= 1e-4


# ---------------------------------------------------------------------------------------------
# Truths attnzoo did not write: the authors' kernels, flash-linear-attention's reference
# ---------------------------------------------------------------------------------------------

AUTHORS = os.environ.get("ATTNZOO_AUTHORS_CODE")


@pytest.fixture
def authors_fox(monkeypatch):
    """The authors' `forgetting_attention` (github.com/zhixuan-lin/forgetting-transformer,
    src/forgetting_transformer/ops/forgetting_attention.py: FlagAttention-based Triton kernels),
    run in the interpreter with 32×32 tiles set through its config functions (theirs ask the
    CUDA device for its capability). Their PyTorch reference is written inline in their GPU test,
    not importable, so their kernels are the comparison."""
    root = Path(AUTHORS or "") / "forgetting-transformer" / "src"
    if not AUTHORS or not root.is_dir():
        pytest.skip(
            "set ATTNZOO_AUTHORS_CODE to a folder holding a checkout of "
            "github.com/zhixuan-lin/forgetting-transformer as forgetting-transformer/"
        )
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the authors' kernels run here in Triton's interpreter (TRITON_INTERPRET=1)")
    monkeypatch.syspath_prepend(str(root))
    from forgetting_transformer.ops import forgetting_attention as fa

    small = lambda *args: (32, 32, 1, 4)  # BLOCK_M, BLOCK_N, num_stages, num_warps
    for name in ("get_fwd_config", "get_bwd_kv_config", "get_bwd_q_config"):
        monkeypatch.setattr(fa, name, small)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    yield fa.forgetting_attention
    sys.modules.pop("forgetting_transformer.ops.forgetting_attention", None)


def test_the_op_matches_the_authors_kernels_forward_and_gradients(authors_fox):
    """Their kernels (fp16 q, k, v and fp32 log f, as they require) against attnzoo's op on the
    same fp16 inputs, and both against the float64 formula: output and the gradients of q, k,
    v and log f, left padding as their `seq_start`."""
    b, h, n, d = 2, 1, 37, 16
    q, k, v, log_f = inputs64(b, h, n, d, d, seed=11)
    q16, k16, v16 = (t.half() for t in (q, k, v))
    seq_start = torch.tensor([0, 5])
    mask = torch.arange(n)[None, :] < seq_start[:, None]
    cot = torch.randn(b, h, n, d, dtype=torch.float64)

    def run(fn):
        leaves = [q16.clone().requires_grad_(), k16.clone().requires_grad_()]
        leaves += [v16.clone().requires_grad_(), log_f.float().requires_grad_()]
        out = fn(*leaves)
        return out, torch.autograd.grad(out, leaves, cot.to(out.dtype))

    theirs = run(lambda a, b_, c, g: authors_fox(a, b_, c, g, head_first=True, seq_start=seq_start))
    ours = run(
        lambda a, b_, c, g: kernels.scaled_dot_attention(
            a, b_, c, True, mask, impl="triton", key_bias=-g.cumsum(-1)
        )
    )
    leaves64 = [t.clone().requires_grad_() for t in (q, k, v, log_f)]
    truth = reference.scaled_dot_attention(
        *leaves64[:3], True, mask, d**-0.5, key_bias=-leaves64[3].cumsum(-1)
    )
    truth_g = torch.autograd.grad(truth, leaves64, cot)
    for name, got, exp, want in zip(
        ["out", "q", "k", "v", "log f"],
        [ours[0], *ours[1]],
        [theirs[0], *theirs[1]],
        [truth, *truth_g],
        strict=True,
    ):
        assert rel_err(got, exp) <= 1e-2, name
        assert rel_err(got, want) <= 1e-2 and rel_err(exp, want) <= 1e-2, name


def test_the_op_matches_flash_linear_attentions_reference_with_a_window():
    """fla-core's `naive_forgetting_attn` (plain PyTorch, fp32; its `window_size` w is the
    op's window (w − 1, 0)) against the op's reference (with and without the window) and
    kernels (with it), forward and gradients."""
    pytest.importorskip("fla", reason="fla-core (the [fla] extra) is not installed")
    import warnings

    with warnings.catch_warnings():  # fla warns, on a machine without a GPU, that it runs on CPU
        warnings.simplefilter("ignore", UserWarning)
        from fla.ops.forgetting_attn.naive import naive_forgetting_attn

    b, h, n, d, w = 1, 1, 37, 16, 9
    q, k, v, log_f = (t.float() for t in inputs64(b, h, n, d, d, seed=13))
    cot = torch.randn(b, h, n, d)
    bthd = lambda t: t.transpose(1, 2)
    for window, fla_window in ((None, None), ((w - 1, 0), w)):
        leaves = [t.clone().requires_grad_() for t in (q, k, v, log_f)]
        theirs = bthd(naive_forgetting_attn(*map(bthd, leaves), window_size=fla_window))
        theirs_g = torch.autograd.grad(theirs, leaves, cot)
        for impl in ("torch", "triton") if window else ("torch",):
            mine = [t.clone().requires_grad_() for t in (q, k, v, log_f)]
            out = kernels.scaled_dot_attention(
                *mine[:3], True, impl=impl, window=window, key_bias=-mine[3].cumsum(-1)
            )
            assert rel_err(out, theirs) <= 1e-5, impl
            for name, g, t in zip(
                "qkvf", torch.autograd.grad(out, mine, cot), theirs_g, strict=True
            ):
                assert rel_err(g, t) <= 1e-4, (impl, name)


def test_fox_math_constants():
    """The decay of a key one step back is log f of the query's own token: D_ii = 0 and
    D_{i,i−1} = log f_i (the loop's convention, checked once on numbers)."""
    log_f = torch.tensor([[[math.log(0.5), math.log(0.25), math.log(0.5)]]], dtype=torch.float64)
    q = torch.zeros(1, 1, 3, 1, dtype=torch.float64)  # no content: only the decay decides
    v = torch.eye(3, dtype=torch.float64)[None, None]
    weights = fox_loop(q, q, v, log_f)[0, 0]
    # row 2: D_22 = 0, D_21 = log f_2, D_20 = log f_2 + log f_1 -> weights ∝ 1, 0.5, 0.125
    torch.testing.assert_close(weights[2], torch.tensor([0.125, 0.5, 1.0]).double() / 1.625)
