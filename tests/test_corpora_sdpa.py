"""impl="auto" on CPU runs attention through torch's fused scaled_dot_product_attention; it must
agree with the reference (impl="torch"), forward and backward, with causal and padding masks,
including queries that see no key at all (zeros, never NaN)."""

from __future__ import annotations

import pytest
import torch

from attnzoo import kernels

B, H, N, DK = 3, 2, 7, 5


def masks() -> dict[str, tuple[bool, torch.Tensor | None]]:
    right_pad = torch.zeros(B, N, dtype=torch.bool)
    right_pad[0, 4:] = True
    right_pad[2, 1:] = True
    all_pad = right_pad.clone()
    all_pad[1] = True  # a sequence that is all padding: every query sees nothing
    left_pad = torch.zeros(B, N, dtype=torch.bool)
    left_pad[:, :2] = True  # with causal, the first two queries of every row see nothing
    return {
        "none": (False, None),
        "causal": (True, None),
        "padding": (False, right_pad),
        "all_padding_row": (False, all_pad),
        "causal_left_padding": (True, left_pad),
        "causal_all_padding_row": (True, all_pad),
    }


def leaves(*shapes: tuple[int, ...], dtype: torch.dtype) -> list[torch.Tensor]:
    return [torch.randn(*s, dtype=dtype, requires_grad=True) for s in shapes]


def run_both(fn, inputs: list[torch.Tensor], **kwargs) -> None:
    outs, grads = [], []
    for impl in ("auto", "torch"):
        xs = [t.detach().clone().requires_grad_() for t in inputs]
        out = fn(*xs, impl=impl, **kwargs)
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape))
        outs.append(out.detach())
        grads.append([x.grad for x in xs])
    tol = {"atol": 1e-5, "rtol": 1e-4} if inputs[0].dtype == torch.float32 else {}
    assert torch.isfinite(outs[0]).all()
    torch.testing.assert_close(outs[0], outs[1], **tol)
    for g_auto, g_ref in zip(*grads, strict=True):
        assert torch.isfinite(g_auto).all()
        torch.testing.assert_close(g_auto, g_ref, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(masks()))
def test_scaled_dot_auto_matches_reference(case: str, dtype: torch.dtype) -> None:
    causal, mask = masks()[case]
    q, k, v = leaves((B, H, N, DK), (B, H, N, DK), (B, H, N, 3), dtype=dtype)
    run_both(kernels.scaled_dot_attention, [q, k, v], causal=causal, key_padding_mask=mask)


@pytest.mark.parametrize("case", ["none", "causal", "all_padding_row", "causal_left_padding"])
def test_quadratic_and_metric_auto_match_reference(case: str) -> None:
    causal, mask = masks()[case]
    d = 6
    x, u, v = leaves((B, N, d), (H, d, d), (B, H, N, 4), dtype=torch.float64)
    run_both(kernels.quadratic_attention, [x, u, v], causal=causal, key_padding_mask=mask)
    p, m = leaves((B, H, N, DK), (H, DK, DK), dtype=torch.float64)
    run_both(kernels.metric_attention, [p, m], causal=causal, key_padding_mask=mask)


def test_fully_masked_queries_give_zeros() -> None:
    causal, mask = masks()["causal_all_padding_row"]
    q, k, v = (torch.randn(B, H, N, DK) for _ in range(3))
    out = kernels.scaled_dot_attention(q, k, v, causal, mask, impl="auto")
    assert torch.equal(out[1], torch.zeros_like(out[1]))


def test_auto_keeps_half_precision_on_the_reference() -> None:
    """fp16/bf16 on CPU stay on the reference (fp32 accumulation), so auto equals torch exactly."""
    q, k, v = (torch.randn(B, H, N, DK, dtype=torch.bfloat16) for _ in range(3))
    a = kernels.scaled_dot_attention(q, k, v, True, impl="auto")
    b = kernels.scaled_dot_attention(q, k, v, True, impl="torch")
    assert torch.equal(a, b)


def test_auto_takes_the_fused_path_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused path is really taken (the reference is not called) for fp32 on CPU."""
    from attnzoo.kernels.attention import naive as reference

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("impl='auto' fell back to the reference")

    for name in ("scaled_dot_attention", "quadratic_attention", "metric_attention"):
        monkeypatch.setattr(reference, name, fail)
    q, k, v = (torch.randn(B, H, N, DK) for _ in range(3))
    kernels.scaled_dot_attention(q, k, v, True, masks()["padding"][1], impl="auto")
    kernels.quadratic_attention(torch.randn(B, N, 6), torch.randn(H, 6, 6), v, impl="auto")
    kernels.metric_attention(q, torch.randn(H, DK, DK), impl="auto")
    with pytest.raises(AssertionError, match="fell back"):
        kernels.scaled_dot_attention(q, k, v, impl="torch")
