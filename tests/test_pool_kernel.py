"""The Triton pool_mix kernels (under TRITON_INTERPRET=1) against the PyTorch reference.

Forward and backward are run through the launchers with outputs allocated full of NaN
(pooling.launch.POISON_OUTPUTS), so an element the kernel forgets to write fails the comparison; the backward is compared with the reference's
vector-Jacobian product for a random upstream gradient.
"""

import pytest
import torch

pytest.importorskip("triton")

import attnzoo.kernels as ops  # noqa: E402
from attnzoo.kernels import pooling  # noqa: E402
from attnzoo.kernels.pooling import launch, tuning  # noqa: E402
from attnzoo.kernels.pooling import naive as reference  # noqa: E402


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "POISON_OUTPUTS", True)


WINDOWS = [
    (False, 1),
    (False, 3),
    (False, 5),
    (False, 7),
    (True, 1),
    (True, 2),
    (True, 3),
    (True, 6),
]
TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def assert_close(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor, tol: float) -> None:
    """‖out − ref‖ ≤ tol·‖ref‖, with a floor of tol/100 of the input's norm for outputs that are
    (nearly) zero, where the reference itself carries rounding (its sum is avg_pool × window)."""
    assert torch.isfinite(out).all(), "non-finite (unwritten/poisoned) elements in the output"
    err = (out.float() - ref.float()).norm().item()
    bound = tol * ref.float().norm().item() + tol * 1e-2 * scale.float().norm().item()
    assert err <= bound, f"error {err:.3g} above {bound:.3g} (‖ref‖ = {ref.float().norm():.3g})"


def padding_mask(b: int, n: int) -> torch.Tensor:
    """Row 0 no padding, row 1 random padding (holes, not only a tail), row 2 all padding."""
    mask = torch.rand(b, n) < 0.3
    mask[0] = False
    mask[2] = True
    return mask


def reference_vjp(x, window, causal, mask, grad):
    xr = x.detach().float().requires_grad_(True)
    out = reference.pool_mix(xr, window, causal, mask)
    (dx,) = torch.autograd.grad(out, xr, grad.float())
    return out.detach(), dx


def kernel_fwd_bwd(x, window, causal, mask, grad):
    out, rcount = pooling.pool_mix_forward(x, window, causal, mask)
    assert torch.isfinite(rcount).all(), "rcount has elements the forward never wrote"
    dx = pooling.pool_mix_backward(grad, rcount, window, causal)
    return out, dx


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize(("causal", "window"), WINDOWS)
@pytest.mark.parametrize("n", [1, 2, 17, 100, 257])
@pytest.mark.sample(8)
def test_fp32_forward_backward_match_reference(n, causal, window, masked):
    b, d = 3, 40  # two feature tiles of 32, the second ragged
    x = torch.randn(b, n, d)
    grad = torch.randn(b, n, d)
    mask = padding_mask(b, n) if masked else None
    out, dx = kernel_fwd_bwd(x, window, causal, mask, grad)
    ref, dx_ref = reference_vjp(x, window, causal, mask, grad)
    assert_close(out, ref, x, TOL[torch.float32])
    assert_close(dx, dx_ref, grad, TOL[torch.float32])
    if masked:  # padding positions get exact zeros, values and gradients
        assert (out[mask] == 0).all() and (dx[mask] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("causal", "window"), [(False, 5), (True, 4)])
@pytest.mark.parametrize("n", [17, 100])
def test_half_precision_forward_backward_match_reference(n, causal, window, dtype):
    b, d = 3, 24
    x = torch.randn(b, n, d).to(dtype)
    grad = torch.randn(b, n, d).to(dtype)
    mask = padding_mask(b, n)
    out, dx = kernel_fwd_bwd(x, window, causal, mask, grad)
    assert out.dtype == dtype and dx.dtype == dtype
    ref, dx_ref = reference_vjp(x, window, causal, mask, grad)
    assert_close(out, ref, x, TOL[dtype])
    assert_close(dx, dx_ref, grad, TOL[dtype])


@pytest.mark.parametrize(
    "view",
    [
        lambda t: t.transpose(1, 2).contiguous().transpose(1, 2),  # features-major storage
        lambda t: t[:, ::2, 1:-2],  # strided tokens, offset features
        lambda t: t[:1].expand(3, -1, -1),  # batch stride 0
    ],
    ids=["transposed", "sliced", "expanded"],
)
def test_strided_views_match_reference(view):
    x = view(torch.randn(3, 34, 41))
    grad = view(torch.randn(3, 34, 41))
    assert not x.is_contiguous()
    mask = padding_mask(*x.shape[:2])
    out, dx = kernel_fwd_bwd(x, 5, False, mask, grad)
    ref, dx_ref = reference_vjp(x, 5, False, mask, grad)
    assert_close(out, ref, x, 1e-5)
    assert_close(dx, dx_ref, grad, 1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_public_op_trains_like_the_reference(causal):
    """Through the public op (impl="triton"): autograd reaches x, grads match impl="torch"."""
    x = torch.randn(2, 19, 36)
    mask = torch.zeros(2, 19, dtype=torch.bool)
    mask[1, 15:] = True
    grads = []
    for impl in ("triton", "torch"):
        xi = x.clone().requires_grad_(True)
        out = ops.pool_mix(xi, 3, causal, mask, impl=impl)
        (out.square().sum()).backward()
        grads.append((out.detach(), xi.grad))
    assert_close(grads[0][0], grads[1][0], x, 1e-5)
    assert_close(grads[0][1], grads[1][1], x, 1e-5)


def test_empty_inputs_give_empty_outputs():
    for shape in [(0, 5, 4), (2, 0, 4), (2, 5, 0)]:
        x = torch.randn(shape, requires_grad=True)
        out = ops.pool_mix(x, 3, False, None, impl="triton")
        assert out.shape == x.shape
        out.sum().backward()
        assert x.grad.shape == x.shape


def _bad_calls():
    x = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(0))
    mask = torch.zeros(2, 5, dtype=torch.bool)
    calls = {  # test id: (the argument the error must name, the bad call's arguments)
        "x-int32": ("x", dict(x_bnd=x.to(torch.int32))),
        "x-float64": ("x", dict(x_bnd=x.double())),
        "x-2d": ("x", dict(x_bnd=x[0])),
        "x-meta": ("x", dict(x_bnd=x.to("meta"))),
        "x-numpy": ("x", dict(x_bnd=x.numpy())),
        "window-0": ("window", dict(window=0)),
        "window-negative": ("window", dict(window=-3)),
        "window-bool": ("window", dict(window=True)),
        "window-float": ("window", dict(window=3.0)),
        "window-even-centred": ("window", dict(window=4)),
        "causal-int": ("causal", dict(causal=1)),
        "mask-int": ("key_padding_mask", dict(key_padding_mask=mask.int())),
        "mask-short": ("key_padding_mask", dict(key_padding_mask=mask[:, :4])),
        "mask-meta": ("key_padding_mask", dict(key_padding_mask=mask.to("meta"))),
    }
    return [pytest.param(*call, id=test_id) for test_id, call in calls.items()]


@pytest.mark.parametrize(("name", "bad"), _bad_calls())
def test_bad_arguments_raise_value_error_naming_them(name, bad):
    """At the public op, whichever path it takes; the launcher itself checks only the kernels'
    limits."""
    args = dict(x_bnd=torch.randn(2, 5, 4), window=3, causal=False, key_padding_mask=None) | bad
    x, window, causal, mask = args.values()
    with pytest.raises(ValueError, match=name):
        ops.pool_mix(x, window, causal, mask, impl="triton")


def test_bad_saved_counts_raise_value_error():
    g = torch.randn(2, 5, 4)
    for bad in [torch.ones(2, 4), torch.ones(2, 5).half(), torch.ones(5, 2).mT]:
        with pytest.raises(ValueError, match="rcount"):
            torch.ops.attnzoo.pool_mix_backward(g, bad, 3, False)


def test_sequence_beyond_int32_indexing_raises_value_error():
    x = torch.randn(1, 1, 1).expand(1, 2**16, 2**15)  # 2**31 elements per sequence, no memory
    with pytest.raises(ValueError, match="x: one sequence spans"):
        pooling.pool_mix_forward(x, 3, False, None)


@pytest.mark.parametrize("causal", [False, True])
def test_pooling_model_trains_on_the_kernel_like_on_the_reference(causal):
    """A tiny pooling MetaFormer: impl="triton" gives impl="torch"'s loss and parameter gradients,
    with padding, and a few SGD steps on the kernel lower the loss."""
    from attnzoo import Model, ModelConfig

    ids = torch.randint(0, 11, (2, 13))
    mask = torch.zeros(2, 13, dtype=torch.bool)
    mask[1, 9:] = True
    models = {}
    for impl in ("torch", "triton"):
        torch.manual_seed(3)
        config = ModelConfig(dim=24, depth=2, heads=2, mixer="pooling", causal=causal, impl=impl)
        models[impl] = Model(config, out_features=11, max_len=16, vocab_size=11)
    losses = {}
    for impl, model in models.items():
        logits = model(ids, key_padding_mask=mask)
        losses[impl] = torch.nn.functional.cross_entropy(logits[~mask], ids[~mask])
        losses[impl].backward()
    assert abs(losses["triton"].item() - losses["torch"].item()) <= 1e-5 * losses["torch"].item()
    # all parameter gradients as one vector: some (e.g. position rows of padding) are ~0 alone
    grad_tr, grad_ref = (
        torch.cat([p.grad.flatten() for p in models[impl].parameters()])
        for impl in ("triton", "torch")
    )
    assert_close(grad_tr, grad_ref, grad_ref, 1e-5)

    model = models["triton"]
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    first = None
    for _ in range(5):
        opt.zero_grad()
        logits = model(ids, key_padding_mask=mask)
        loss = torch.nn.functional.cross_entropy(logits[~mask], ids[~mask])
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
    assert loss.item() < first


def test_gpu_autotuning_prunes_wasteful_tiles_and_keys_on_buckets():
    """What a GPU launch autotunes over (the interpreter runs one config, so this is checked
    directly): feature blocks that would leave over a quarter of their lanes idle are dropped,
    the narrowest always stays, and a new sequence length within a power of two reuses the key."""

    def widths(d):
        return sorted({c.kwargs["BLOCK_D"] for c in tuning._prune(tuning.GPU_CONFIGS, {"D": d})})

    assert widths(384) == [32, 64, 128]
    assert widths(512) == [32, 64, 128]
    assert widths(96) == [32]  # 64 or 128 would pad 96 to 128
    assert widths(40) == [32]  # nothing fits well: the narrowest stays
    assert widths(8) == [32]
    assert tuning.buckets(64, 250, 384) == tuning.buckets(64, 256, 384) == (16384, 512)
    assert tuning.buckets(2, 4096, 512) != tuning.buckets(2, 8192, 512)
    assert tuning.buckets(10**4, 10**4, 10**4) == (2**20, 4096)
