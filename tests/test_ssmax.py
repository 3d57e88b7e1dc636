"""Scalable-Softmax attention (SSMax, Nakanishi 2025, arXiv 2501.19399) against the paper's
formula written as a float64 loop over query-key pairs, softmax_j(s_h · log n_i · q_i·k_j /
√dk) with n_i the keys query i sees; its run on the Triton kernels (interpreter); the known
answer s_h · log n_i = 1 (scaled_dot); the option's refusals. The paper has no official code.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnzoo import build_mixer

DIM, HEADS, N = 12, 3, 7


def ssmax_loop(q, k, v, s, causal, mask=None):
    """y_i = Σ_j softmax_j(s_h · log n_i · q_i·k_j / √dk) v_j over the keys j query i sees,
    n_i their number, one pair at a time."""
    b_, h_, n = q.shape[:3]
    scale = q.shape[-1] ** -0.5
    out = torch.zeros(b_, h_, n, v.shape[-1], dtype=torch.float64)
    rows = []
    for b in range(b_):
        for h in range(h_):
            for i in range(n):
                seen = [
                    j
                    for j in range(n)
                    if not (causal and j > i) and not (mask is not None and mask[b, j])
                ]
                if not seen:
                    rows.append(out[b, h, i])
                    continue
                factor = s[h] * math.log(len(seen))
                logits = torch.stack([factor * scale * (q[b, h, i] @ k[b, h, j]) for j in seen])
                rows.append(torch.softmax(logits, 0) @ v[b, h, seen])
    return torch.stack(rows).reshape(b_, h_, n, v.shape[-1])


def mixer_and_input(causal, seed=1, n=N):
    torch.manual_seed(seed)
    mixer = build_mixer("ssmax", dim=DIM, heads=HEADS, causal=causal, impl="torch").double()
    with torch.no_grad():
        mixer.s.copy_(torch.tensor([0.2, 0.6, 1.5]))  # a scale per head, either side of 1/log n
    return mixer, torch.randn(2, n, DIM, dtype=torch.float64)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_the_mixer_is_the_papers_formula_forward_and_gradients(causal, masked):
    """attend and attention_probs against the loop on the mixer's own q, k, v (odd N; padding
    keys are not counted in n_i, and an item whose first key is padding has, causal, a query
    that sees nothing); gradients of every parameter s_h included."""
    mixer, x = mixer_and_input(causal)
    mask = None
    if masked:
        mask = torch.zeros(2, N, dtype=torch.bool)
        mask[0, 0] = True
        mask[1, -3:] = True
    params = [mixer.qkv.weight, mixer.s]
    out = mixer.attend(x, mask)
    q, k, v = mixer._qkv(x)
    want = ssmax_loop(q, k, v, mixer.s, causal, mask)
    torch.testing.assert_close(out, want)
    cot = torch.randn_like(want)
    for g, w in zip(
        torch.autograd.grad(out, params, cot), torch.autograd.grad(want, params, cot), strict=True
    ):
        torch.testing.assert_close(g, w)
    probs = mixer.attention_probs(x, mask)
    torch.testing.assert_close(probs @ v, want)
    if causal:
        assert (probs.triu(1) == 0).all()


def test_n_is_the_number_of_keys_a_query_sees():
    """The factor s_h log n_i: n_i = i + 1 causal, N bidirectional, padding keys not counted,
    and at least 1 (log 1 = 0: a query that sees one key, or none, has a flat softmax)."""
    mask = torch.tensor([[False, True, False, False], [False, False, True, True]])
    for causal, want in (
        (True, [[1, 1, 2, 3], [1, 2, 2, 2]]),
        (False, [[3, 3, 3, 3], [2, 2, 2, 2]]),
    ):
        mixer = build_mixer("ssmax", dim=4, heads=2, causal=causal, impl="torch")
        factor = mixer.score_factor(4, mask, torch.device("cpu"))[..., 0]
        expected = mixer.s.detach()[None, :, None] * torch.tensor(want).float().log()[:, None]
        torch.testing.assert_close(factor.detach(), expected)
    mixer = build_mixer("ssmax", dim=4, heads=2, causal=True, impl="torch")
    factor = mixer.score_factor(3, None, torch.device("cpu"))[0, 0, :, 0]
    torch.testing.assert_close(factor.detach(), mixer.s[0].detach() * torch.tensor([1, 2, 3]).log())


@pytest.mark.parametrize("causal", [False, True])
def test_with_s_log_n_one_it_is_scaled_dot_attention(causal):
    """s_h · log n_i = 1 for every row (no padding, bidirectional: s = 1 / log N) is the
    softmax: scaled_dot with the same weights; causal, the last row has n = N and equals
    scaled_dot's last row, and the first rows (log 1 = 0) are the mean of what they see."""
    mixer, x = mixer_and_input(causal)
    with torch.no_grad():
        mixer.s.fill_(1 / math.log(N))
    plain = build_mixer("scaled_dot", dim=DIM, heads=HEADS, causal=causal, impl="torch").double()
    plain.load_state_dict(mixer.state_dict(), strict=False)
    got, want = mixer.attend(x), plain.attend(x)
    if causal:
        torch.testing.assert_close(got[:, :, -1], want[:, :, -1])
        v = mixer._qkv(x)[2]
        torch.testing.assert_close(got[:, :, 0], v[:, :, 0])  # one key: itself
        torch.testing.assert_close(
            mixer.attention_probs(x)[:, :, 0, 0], torch.ones(2, HEADS).double()
        )
    else:
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_the_paper_init_and_the_refusals():
    mixer = build_mixer("ssmax", dim=8, heads=2, causal=True, impl="torch")
    torch.testing.assert_close(mixer.s.detach(), torch.full((2,), 1 / math.log(1024)))
    assert build_mixer("ssmax", dim=8, heads=2, s_init=0.43).s[0].item() == pytest.approx(0.43)
    for bad in (float("nan"), "0.4", True):
        with pytest.raises(ValueError, match="s_init must be a finite number"):
            build_mixer("ssmax", dim=8, heads=2, s_init=bad)


def test_the_mixer_runs_the_kernels_with_impl_triton():
    """impl="triton" (the scaled-dot kernels unchanged, on the scaled queries) gives
    impl="torch"'s outputs and parameter gradients, with padding."""
    x = torch.randn(2, 21, 12)
    mask = torch.zeros(2, 21, dtype=torch.bool)
    mask[1, 15:] = True
    outs, grads = [], []
    for impl in ("torch", "triton"):
        torch.manual_seed(7)
        mixer = build_mixer("ssmax", dim=12, heads=2, causal=True, impl=impl)
        out = mixer(x, mask)
        outs.append(out)
        grads.append(torch.autograd.grad(out.square().sum(), list(mixer.parameters())))
    rel = lambda a, b: float((a - b).norm() / b.norm())
    assert rel(outs[1], outs[0]) <= 1e-5
    for g, w in zip(grads[1], grads[0], strict=True):
        assert rel(g, w) <= 1e-4
