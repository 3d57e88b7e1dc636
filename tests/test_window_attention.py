"""Sliding-window scaled-dot attention: `scaled_dot_attention(..., window=(left, right))`.

Query i sees key j only when i − left ≤ j ≤ i + right, intersected with causal and the padding
mask. Every implementation (the Triton kernels in the interpreter, the reference, the SDPA path
of impl="auto") is checked against a float64 softmax over an explicit mask built here, forward
and backward (dq, dk, dv); with several 32-token key tiles (N up to 257), so that the kernels'
tile skipping and their masked window edges both run. Outputs are allocated full of NaN
(launch.POISON_OUTPUTS): an element the kernel never writes fails the comparison.
"""

from __future__ import annotations

import math

import attnzoo.kernels as ops
import pytest
import torch
import triton
from attnzoo.kernels import attention
from attnzoo.kernels.attention import launch
from attnzoo.kernels.attention import naive as reference

TOL = {torch.float32: 1e-4, torch.float16: 1e-2}


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "POISON_OUTPUTS", True)


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    assert torch.isfinite(got).all(), "NaN/inf in the result (an element never written?)"
    norm = want.norm()
    return float((got - want).norm() / (norm if norm > 0 else 1.0))


def visible(n: int, window, causal: bool, pad: torch.Tensor | None) -> torch.Tensor:
    """(B or 1, 1, N, N) bool: the keys each query may see, written out pair by pair."""
    left, right = window
    allowed = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(n):
            allowed[i, j] = i - left <= j <= i + right and (j <= i or not causal)
    allowed = allowed[None, None]
    if pad is not None:
        allowed = allowed & ~pad[:, None, None, :]
    return allowed


def softmax_attention(q, k, v, allowed, scale, keep=None, dropout_p=0.0) -> torch.Tensor:
    """float64 attention over an explicit mask; a row with no visible key gives zeros."""
    s = (q.double() @ k.double().mT) * scale
    p = torch.softmax(s.masked_fill(~allowed, -math.inf), -1).nan_to_num(0.0)
    if keep is not None:
        p = p * keep / (1.0 - dropout_p)
    return p @ v.double()


def padding(kind: str, b: int, n: int) -> torch.Tensor | None:
    if kind == "none":
        return None
    mask = torch.arange(n)[None, :] >= torch.tensor([n, max(1, n // 2)])[:b, None]
    if kind == "empty":  # item 1: every key in query 0's window is padding, and then some
        mask[1, : min(n, 8)] = True
    return mask


def check_against_reference(
    n: int, window, causal: bool, pad_kind: str, dtype: torch.dtype, impl: str, b: int = 2
) -> None:
    h, dk, dv = 1, 16, 16
    q, k, v = (torch.randn(b, h, n, d).to(dtype).requires_grad_() for d in (dk, dk, dv))
    pad = padding(pad_kind, b, n)
    scale = 1 / math.sqrt(dk)
    out = ops.scaled_dot_attention(q, k, v, causal, pad, scale, impl=impl, window=window)
    allowed = visible(n, window, causal, pad)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = softmax_attention(*leaves, allowed, scale)
    tol = TOL[dtype]
    assert out.dtype == dtype
    assert rel_err(out, want) <= tol
    cot = torch.randn_like(want)
    grads = torch.autograd.grad(out, (q, k, v), cot.to(dtype))
    wants = torch.autograd.grad(want, leaves, cot)
    for name, g, w in zip("qkv", grads, wants, strict=True):
        assert rel_err(g, w) <= 2 * tol, f"d{name}"
    empty = ~allowed.any(-1)  # (B or 1, 1, N): rows with no visible key get zeros
    if empty.any():
        assert (out.detach().masked_select(empty[..., None]) == 0).all()


F16, F32 = torch.float16, torch.float32
# (n, window, causal, padding, dtype): a covering set, not the product (the interpreter is slow)
CASES = [
    (1, (0, 0), False, "none", F32),
    (37, (3, 0), False, "pad", F32),
    (130, (2, 5), False, "none", F32),  # windows narrower than a tile: edges only, no full tile
    (130, (40, 70), True, "empty", F32),  # causal: the right reach drops to 0
    (100, (500, 3), False, "pad", F16),  # left ≥ N: no bound on the left; inner tiles unmasked
]
SLOW_CASES = [
    (257, (0, 0), False, "empty", F16),  # each query sees itself only (or nothing: padding)
    (96, (33, 64), False, "none", F32),  # whole tiles only
    (257, (31, 32), False, "pad", F32),
    (257, (64, 0), True, "empty", F16),
    (200, (7, 100), False, "empty", F32),
    (257, (300, 0), False, "none", F32),
]


def case_id(case) -> str:
    n, (left, right), causal, pad, dtype = case
    return f"n{n}-w{left},{right}-{'causal' if causal else 'full'}-{pad}-{str(dtype)[6:]}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_triton_window_matches_an_explicit_mask_forward_and_backward(case) -> None:
    check_against_reference(*case, impl="triton")


@pytest.mark.parametrize("impl", ["torch", "auto"])
@pytest.mark.parametrize("case", CASES + SLOW_CASES, ids=case_id)
@pytest.mark.sample(8)
def test_torch_paths_match_an_explicit_mask_forward_and_backward(case, impl: str) -> None:
    """impl="torch" is the reference; impl="auto" on CPU fp32 is SDPA with the window's mask
    (fp16 on CPU takes the reference there too)."""
    check_against_reference(*case, impl=impl)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES, ids=case_id)
def test_triton_window_more_shapes(case) -> None:
    check_against_reference(*case, impl="triton")


@pytest.mark.parametrize(
    "tiles",
    [
        {"_fwd": (16, 64), "_bwd_dkdv": (64, 16), "_bwd_dq": (16, 64)},
        pytest.param(
            {"_fwd": (64, 16), "_bwd_dkdv": (16, 64), "_bwd_dq": (64, 32)}, marks=pytest.mark.slow
        ),
    ],
    ids=["narrow-query-tiles", "narrow-key-tiles"],
)
def test_results_do_not_depend_on_the_tile_shape(tiles, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window's tile bounds with unequal query and key tiles (GPU configs are 128×64,
    64×128, 16×32 ...) give the same numbers as the interpreter's 32×32 tiles."""
    n, window, h, d = 90, (5, 40), 1, 16
    q, k, v = (torch.randn(2, h, n, d, requires_grad=True) for _ in range(3))
    pad = padding("empty", 2, n)
    cot = torch.randn(2, h, n, d)

    def run():
        out = ops.scaled_dot_attention(q, k, v, False, pad, 0.25, impl="triton", window=window)
        return [out, *torch.autograd.grad(out, (q, k, v), cot)]

    square = run()
    for name, (bm, bn) in tiles.items():
        config = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=4, num_stages=1)
        monkeypatch.setattr(getattr(launch, name), "configs", [config])
    for got, want in zip(run(), square, strict=True):
        assert rel_err(got, want) <= 1e-5


def test_key_tiles_outside_every_window_are_never_read() -> None:
    """The point of a window: a query tile skips the key tiles that no query of it can see. A
    NaN in one value row reaches (through P·V, where 0·NaN = NaN) exactly the query tiles whose
    loops visit that key's tile; with 32-token tiles and window (2, 5), key 100 (tile 3, keys
    96..127) is visited by the query tiles 2 (queries up to 95, reaching 100), 3 and 4 (from
    query 128, reaching 126) only."""
    n, d = 192, 16
    q, k, v = (torch.randn(1, 1, n, d) for _ in range(3))
    v[0, 0, 100] = math.nan
    out = ops.scaled_dot_attention(q, k, v, impl="triton", window=(2, 5))
    finite_rows = torch.isfinite(out[0, 0]).all(-1)
    assert finite_rows[:64].all() and finite_rows[160:].all()
    assert not finite_rows[98:103].any()  # the queries that do see key 100
    full = ops.scaled_dot_attention(q, k, v, impl="triton")
    assert not torch.isfinite(full).any()  # without a window every tile is read


@pytest.mark.parametrize("causal", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_triton_window_dropout_matches_the_reference_given_its_mask(causal: bool) -> None:
    """With the keep mask the kernels draw (written out by `dropout_keep_mask`), the reference
    gives the kernels' output and gradients."""
    b, h, n, d, p = 2, 1, 70, 16, 0.2
    window = (9, 20)
    q, k, v = (torch.randn(b, h, n, d, requires_grad=True) for _ in range(3))
    pad = padding("empty", b, n)
    seed = torch.tensor([4321])
    out, _ = torch.ops.attnzoo.scaled_dot_attention(q, k, v, pad, causal, 0.25, p, seed, window)
    keep = attention.dropout_keep_mask(seed, b, h, n, p)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    ref = reference.scaled_dot_attention(*leaves, causal, pad, 0.25, p, keep, window=window)
    assert rel_err(out, ref) <= 1e-5
    cot = torch.randn_like(ref)
    got = torch.autograd.grad(out, (q, k, v), cot)
    for g, r in zip(got, torch.autograd.grad(ref, leaves, cot), strict=True):
        assert rel_err(g, r) <= 1e-4


def test_causal_window_is_the_window_with_no_right_reach() -> None:
    q, k, v = (torch.randn(1, 2, 50, 16) for _ in range(3))
    for impl in ("triton", "torch"):
        a = ops.scaled_dot_attention(q, k, v, causal=True, impl=impl, window=(6, 9))
        b = ops.scaled_dot_attention(q, k, v, causal=False, impl=impl, window=(6, 0))
        assert torch.equal(a, b)


def test_a_window_spanning_the_sequence_is_full_attention() -> None:
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    for causal in (False, True):
        full = ops.scaled_dot_attention(q, k, v, causal, impl="triton")
        wide = ops.scaled_dot_attention(q, k, v, causal, impl="triton", window=(39, 2**40))
        assert rel_err(wide, full) <= 1e-6


@pytest.mark.parametrize(
    "window,match",
    [
        ((-1, 0), "left and right must be >= 0"),
        ((0, -3), "left and right must be >= 0"),
        ((1,), "pair"),
        ((1, 2, 3), "pair"),
        (3, "pair"),
        ((1.5, 2), "pair"),
        ((True, 0), "pair"),
        ("ab", "pair"),
        (torch.tensor([1, 2]), "pair"),
    ],
)
@pytest.mark.parametrize("impl", ["torch", "triton", "auto"])
def test_bad_windows_raise_a_value_error_naming_window(window, match, impl: str) -> None:
    q, k, v = (torch.randn(1, 1, 8, 16) for _ in range(3))
    with pytest.raises(ValueError, match=f"window.*{match}"):
        ops.scaled_dot_attention(q, k, v, impl=impl, window=window)


def test_opcheck_passes_with_a_window() -> None:
    """Schema, fake implementation, autograd and AOT dispatch with the optional window."""
    b, h, n, d = 2, 1, 11, 16
    leaf = lambda: torch.randn(b, h, n, d).requires_grad_()
    mask = torch.zeros(b, n, dtype=torch.bool)
    mask[1, n // 2 :] = True
    args = (leaf(), leaf(), leaf(), mask, False, 0.25, 0.25, torch.tensor([99]), [3, 1])
    results = torch.library.opcheck(torch.ops.attnzoo.scaled_dot_attention.default, args)
    assert set(results.values()) == {"SUCCESS"}, results


@pytest.mark.parametrize("impl", [pytest.param("triton", marks=pytest.mark.slow), "torch"])
def test_a_windowed_call_compiles_with_fullgraph(impl: str) -> None:
    """torch.compile traces the window through the operator (Triton) or the reference (torch):
    outputs and gradients equal eager's."""
    q, k, v = (torch.randn(1, 2, 40, 16, requires_grad=True) for _ in range(3))

    def attend(q, k, v):
        return ops.scaled_dot_attention(q, k, v, causal=True, impl=impl, window=(5, 3))

    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    results = []
    for fn in (attend, compiled):
        out = fn(q, k, v)
        results.append([out, *torch.autograd.grad(out.square().sum(), (q, k, v))])
    for eager, traced in zip(*results, strict=True):
        assert rel_err(traced, eager) <= 1e-6
