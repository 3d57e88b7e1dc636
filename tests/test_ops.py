"""The PyTorch reference ops against independent formulations, masks, and argument errors."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnzoo import kernels


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def sdpa(q, k, v, causal=False, key_padding_mask=None, scale=None):
    """torch's own attention; `attn_mask` True marks a key that may be attended to."""
    n = q.shape[-2]
    allowed = torch.ones(q.shape[0], 1, n, n, dtype=torch.bool)
    if causal:
        allowed = allowed & torch.ones(n, n, dtype=torch.bool).tril()
    if key_padding_mask is not None:
        allowed = allowed & ~key_padding_mask[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)


def padding_mask(b: int, n: int) -> torch.Tensor:
    """Each sequence has a random number (>= 1) of real tokens followed by padding."""
    lengths = torch.randint(1, n + 1, (b,))
    return torch.arange(n)[None, :] >= lengths[:, None]


def grads(fn, inputs):
    inputs = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*inputs)
    cot = torch.randn(out.shape, dtype=out.dtype)  # not randn_like: it follows strides
    (out * cot).sum().backward(inputs=inputs)
    return out.detach(), [t.grad for t in inputs], cot


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_scaled_dot_matches_sdpa_with_gradients(causal, masked):
    b, h, n, dk, dv = 2, 3, 13, 8, 5
    q, k, v = torch.randn(b, h, n, dk), torch.randn(b, h, n, dk), torch.randn(b, h, n, dv)
    mask = padding_mask(b, n) if masked else None
    torch.manual_seed(1)
    out, g, _ = grads(
        lambda q, k, v: kernels.scaled_dot_attention(q, k, v, causal, mask), (q, k, v)
    )
    torch.manual_seed(1)
    ref, g_ref, _ = grads(lambda q, k, v: sdpa(q, k, v, causal, mask), (q, k, v))
    assert rel_err(out, ref) <= 1e-5
    for a, r in zip(g, g_ref, strict=True):
        assert rel_err(a, r) <= 1e-5


@pytest.mark.parametrize("causal", [False, True])
def test_quadratic_matches_explicit_quadratic_form(causal):
    b, h, n, d, dv = 2, 2, 11, 12, 6
    x, u, v = torch.randn(b, n, d), torch.randn(h, d, d) / d, torch.randn(b, h, n, dv)
    mask = padding_mask(b, n)
    scale = 0.3

    def explicit(x, u, v):
        scores = torch.einsum("bid,hde,bje->bhij", x, u, x) * scale
        allowed = ~mask[:, None, None, :]
        if causal:
            allowed = allowed & torch.ones(n, n, dtype=torch.bool).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
        return scores.softmax(-1) @ v

    torch.manual_seed(1)
    out, g, _ = grads(
        lambda x, u, v: kernels.quadratic_attention(x, u, v, causal, mask, scale), (x, u, v)
    )
    torch.manual_seed(1)
    ref, g_ref, _ = grads(explicit, (x, u, v))
    assert rel_err(out, ref) <= 1e-5
    for a, r in zip(g, g_ref, strict=True):
        assert rel_err(a, r) <= 1e-5


@pytest.mark.parametrize("causal", [False, True])
def test_metric_is_attention_with_q_pm_and_k_v_p(causal):
    b, h, n, dk = 2, 3, 10, 8
    c = torch.randn(h, dk, dk)
    p, m = torch.randn(b, h, n, dk), (c + c.transpose(1, 2)) / 2
    mask = padding_mask(b, n)
    torch.manual_seed(1)
    out, g, _ = grads(lambda p, m: kernels.metric_attention(p, m, causal, mask), (p, m))
    torch.manual_seed(1)
    ref, g_ref, _ = grads(lambda p, m: sdpa(p @ m, p, p, causal, mask), (p, m))
    assert rel_err(out, ref) <= 1e-5
    for a, r in zip(g, g_ref, strict=True):
        assert rel_err(a, r) <= 1e-5


def test_fully_masked_rows_give_zeros_not_nan():
    b, h, n, dk = 2, 2, 6, 4
    q, k, v = (torch.randn(b, h, n, dk, requires_grad=True) for _ in range(3))
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[0, 0] = True  # with causal, query 0 of sequence 0 sees no key at all
    mask[1] = True  # sequence 1 is all padding
    out = kernels.scaled_dot_attention(q, k, v, causal=True, key_padding_mask=mask)
    assert torch.isfinite(out).all()
    assert out[0, :, 0].abs().max() == 0 and out[1].abs().max() == 0
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    p, m = torch.randn(b, h, n, dk), torch.eye(dk).expand(h, dk, dk)
    assert kernels.metric_attention(p, m, True, mask)[1].abs().max() == 0
    pooled = kernels.pool_mix(torch.randn(b, n, 3), 3, key_padding_mask=mask)
    assert torch.isfinite(pooled).all() and pooled[1].abs().max() == 0


def naive_pool(x, window, causal, mask):
    b, n, _ = x.shape
    out = torch.zeros_like(x)
    for bi in range(b):
        for i in range(n):
            lo, hi = (i - window + 1, i) if causal else (i - window // 2, i + window // 2)
            js = [
                j for j in range(max(lo, 0), min(hi, n - 1) + 1) if mask is None or not mask[bi, j]
            ]
            if mask is not None and mask[bi, i]:
                continue
            out[bi, i] = x[bi, js].mean(0) - x[bi, i]
    return out


@pytest.mark.parametrize(
    "window,causal", [(1, False), (3, False), (5, False), (3, True), (4, True)]
)
@pytest.mark.parametrize("masked", [False, True])
def test_pool_mix_matches_naive_loop_with_gradients(window, causal, masked):
    x = torch.randn(2, 9, 4)
    mask = padding_mask(2, 9) if masked else None
    torch.manual_seed(1)
    out, g, _ = grads(lambda x: kernels.pool_mix(x, window, causal, mask), (x,))
    torch.manual_seed(1)
    ref, g_ref, _ = grads(lambda x: naive_pool(x, window, causal, mask), (x,))
    assert rel_err(out, ref) <= 1e-5
    assert rel_err(g[0], g_ref[0]) <= 1e-5


def test_half_precision_inputs_compute_in_float32_and_return_their_dtype():
    q, k, v = (torch.randn(1, 2, 7, 8) for _ in range(3))
    out16 = kernels.scaled_dot_attention(q.half(), k.half(), v.half())
    assert out16.dtype == torch.float16
    assert rel_err(out16.float(), kernels.scaled_dot_attention(q, k, v)) <= 1e-2


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda: kernels.scaled_dot_attention(
                torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.randn(2, 3, 4)
            ),
            "q must have 4 dims",
        ),
        (
            lambda: kernels.scaled_dot_attention(
                torch.randn(1, 2, 5, 4), torch.randn(1, 2, 6, 4), torch.randn(1, 2, 5, 4)
            ),
            "k must have the shape of q",
        ),
        (
            lambda: kernels.scaled_dot_attention(
                torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 3, 5, 4)
            ),
            "v must have",
        ),
        (
            lambda: kernels.scaled_dot_attention(
                torch.randn(1, 2, 5, 4),
                torch.randn(1, 2, 5, 4, device="meta"),
                torch.randn(1, 2, 5, 4),
            ),
            "one device",
        ),
        (
            lambda: kernels.scaled_dot_attention(
                torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4).double(), torch.randn(1, 2, 5, 4)
            ),
            "one dtype",
        ),
        (
            lambda: kernels.scaled_dot_attention(*(torch.ones(1, 2, 5, 4, dtype=torch.long),) * 3),
            "dtype torch.int64",
        ),
        (
            lambda: kernels.scaled_dot_attention(
                *(torch.randn(1, 2, 5, 4),) * 3, key_padding_mask=torch.zeros(1, 5)
            ),
            "bool tensor",
        ),
        (
            lambda: kernels.scaled_dot_attention(
                *(torch.randn(1, 2, 5, 4),) * 3,
                key_padding_mask=torch.zeros(1, 4, dtype=torch.bool),
            ),
            r"shape \(batch, tokens\)",
        ),
        (
            lambda: kernels.scaled_dot_attention(*(torch.randn(1, 2, 5, 4),) * 3, impl="cuda"),
            "impl='cuda' is not one of",
        ),
        (
            lambda: kernels.quadratic_attention(
                torch.randn(1, 5, 6), torch.randn(2, 6, 5), torch.randn(1, 2, 5, 3)
            ),
            r"u must have shape \(heads, dim, dim\)",
        ),
        (
            lambda: kernels.quadratic_attention(
                torch.randn(1, 5, 6), torch.randn(2, 6, 6), torch.randn(1, 3, 5, 3)
            ),
            "v must have",
        ),
        (
            lambda: kernels.metric_attention(torch.randn(1, 2, 5, 4), torch.randn(2, 4, 3)),
            r"m must have shape \(heads, dk, dk\)",
        ),
        (lambda: kernels.pool_mix(torch.randn(1, 5, 4), 4), "window must be odd"),
        (
            lambda: kernels.pool_mix(torch.randn(1, 5, 4), 0, causal=True),
            "window must be a positive int",
        ),
        (lambda: kernels.pool_mix(torch.randn(5, 4), 3), "x must have 3 dims"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_scale_and_dropout_take_any_real_scalar_but_not_a_tensor():
    """NumPy scalars (a scale computed with numpy, a config value) are numbers like Python's; a
    0-d tensor is refused by name, since reading its value would synchronise the device."""
    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    want = kernels.scaled_dot_attention(q, k, v, scale=0.25, impl="torch")
    for scale in (np.float32(0.25), np.float64(0.25)):
        got = kernels.scaled_dot_attention(q, k, v, scale=scale, impl="torch")
        torch.testing.assert_close(got, want)
    kernels.scaled_dot_attention(q, k, v, dropout_p=np.float32(0.0), impl="torch")
    with pytest.raises(ValueError, match=r"scale must be a finite real number .* got tensor"):
        kernels.scaled_dot_attention(q, k, v, scale=torch.tensor(0.25), impl="torch")
    with pytest.raises(ValueError, match=r"dropout_p must be a float in \[0, 1\), got True"):
        kernels.scaled_dot_attention(q, k, v, dropout_p=True, impl="torch")


def test_checks_read_no_values_so_meta_tensors_pass():
    """Validation looks only at metadata: on the meta device, where reading a value raises, every
    op still runs end to end. That is what keeps validation free of device synchronisations."""
    meta = torch.device("meta")
    q = torch.empty(2, 3, 16, 8, device=meta)
    mask = torch.empty(2, 16, dtype=torch.bool, device=meta)
    assert kernels.scaled_dot_attention(q, q, q, True, mask).shape == (2, 3, 16, 8)
    x = torch.empty(2, 16, 12, device=meta)
    assert kernels.quadratic_attention(
        x, torch.empty(3, 12, 12, device=meta), q, False, mask
    ).shape == (2, 3, 16, 8)
    assert (
        kernels.metric_attention(q, torch.empty(3, 8, 8, device=meta), False, mask).shape == q.shape
    )
    assert kernels.pool_mix(x, 3, False, mask).shape == x.shape


def test_host_arithmetic_matches_tritons() -> None:
    """The launchers' plain-Python cdiv / next_power_of_2 give what triton's own helpers give."""
    triton = pytest.importorskip("triton")
    from attnzoo.kernels._host import cdiv, next_power_of_2

    for n in range(0, 1100):
        assert next_power_of_2(n) == triton.next_power_of_2(n), n
        for d in (1, 3, 16, 64, 128):
            assert cdiv(n, d) == triton.cdiv(n, d), (n, d)


@pytest.mark.parametrize(
    ("triton_version", "numpy_version", "refused"),
    [
        ("3.6.0", "2.4.6", True),
        ("3.4.0", "2.4.0rc1", True),
        ("3.6.0", "2.3.5", False),
        ("3.7.0", "2.4.6", False),
        ("3.9.0+git1234", "2.5.0", False),
        ("3.6.0", "2.4rc1", True),  # a minor with a suffix is still 4, not 41 or an error
        ("3.10.0", "2.4.0", False),
    ],
)
def test_interpreter_check_names_the_fix(triton_version, numpy_version, refused) -> None:
    """Triton < 3.7's interpreter cannot run the kernels' loops with numpy >= 2.4: refused at
    import with both versions and the two ways out, instead of a numpy error from inside a kernel."""
    from attnzoo.kernels._host import check_interpreter

    if not refused:
        check_interpreter(triton_version, numpy_version)
        return
    with pytest.raises(ImportError) as err:
        check_interpreter(triton_version, numpy_version)
    for words in (triton_version, numpy_version, "numpy<2.4", "triton >= 3.7"):
        assert words in str(err.value)
