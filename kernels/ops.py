"""The public ops of attnzoo.kernels: argument checks, defaults, the dtype policy, and the choice
of implementation.

Every op takes `impl`:
- "torch": the PyTorch reference in `reference.py` (any device, any float dtype);
- "triton": the Triton kernels, the custom ops `torch.ops.attnzoo.*` of `library.py` (CUDA
  tensors, or any tensor under TRITON_INTERPRET=1; eager calls skip the dispatcher, see there);
- "auto": the fastest path measured for the op on the device. On CUDA, the Triton kernel only
  where a measurement chose it: the GPU's dispatch table (the card's own, else its compute
  capability's, written by `scripts/gpu_check.py` from its benchmark), or a decision of benchmark
  mode; everywhere else PyTorch: the attention ops through the fused
  `scaled_dot_product_attention` (flash, cuDNN or efficient backend) on their one-line
  formulations, pool_mix through the reference (`avg_pool1d`), a call with an attention sink
  (which SDPA does not take) and sigmoid_attention through the reference too.
  `kernels/dispatch.py` says how the choice is keyed and made. On CPU, the three attention ops
  in fp32/fp64 without a sink run through the fused SDPA too (the fastest CPU path, same result
  as the reference to rounding), everything else through the reference;
- "tune": "auto" with benchmark mode on for this call (`attnzoo.kernels.benchmark_mode = True`
  turns it on for every "auto" call): on CUDA the first call of a new key times the Triton kernel
  against the PyTorch path and keeps the faster.
The torch paths are compositions of PyTorch ops, which `torch.compile` traces like any model
code; the Triton path is one opaque op per call (forward and backward), which it does not trace.

**Dtype policy** (one rule for every op and every implementation): an op computes in its
*activations'* dtype — the autocast dtype under `torch.autocast` on the inputs' device (fp16,
bf16 and fp32 inputs are cast to it, as autocast casts a matmul's), otherwise the dtype of the
first activation (q, x or p), which the other activations must share. Parameters (U, M) are
cast to it. Scores, softmax statistics and every product accumulate in fp32 (fp64 for fp64
inputs), and the output has the activations' dtype. The op body then runs with autocast off,
so nothing inside it is cast again.

**Dropout** (`dropout_p`, the three attention ops) has `scaled_dot_product_attention`'s meaning:
each attention probability is dropped with probability p and the kept ones are scaled by
1/(1-p); the caller passes 0 in eval mode. The Triton kernels draw the mask from a Philox
counter keyed by a seed tensor drawn here from torch's generator on the inputs' device, redraw
it in the backward and never store it; the torch paths draw it with torch's own RNG.

Layouts are (batch, heads, tokens, features). `key_padding_mask` is a bool (batch, tokens) tensor
in which True marks a padding token, as in `torch.nn.MultiheadAttention`. A query whose every key
is masked (causal and padding together) gets a zero output.

**Sliding window** (`window=(left, right)`, scaled_dot_attention): query i attends to key j only
when i − left ≤ j ≤ i + right, both reaches non-negative ints (a reach ≥ N bounds nothing). It
combines with the other masks by intersection: with `causal=True` the right reach is 0 whatever
it was given as, and padding keys stay invisible. The Triton kernels skip the key tiles outside
the window; no GPU has timed them yet, so impl="auto" takes PyTorch (SDPA with a boolean mask)
for every windowed call unless a dispatch table has a windowed entry, and benchmark mode does
not time windowed calls.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable

import torch

from . import dispatch, library, reference
from ._checks import (
    TRITON_DTYPES,
    check_attention,
    check_causal,
    check_delta,
    check_dropout,
    check_gated,
    check_impl,
    check_linear,
    check_metric,
    check_pool,
    check_quadratic,
    check_scale,
    check_sink,
    check_triton,
    check_window,
)
from .delta import naive as delta_naive
from .gated import naive as gated_naive


def _apply_dtype_policy(
    activations: tuple[torch.Tensor, ...], parameters: tuple[torch.Tensor, ...] = ()
) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """The module docstring's dtype policy; mismatches it does not resolve are left for
    `check_same` to report."""
    first = activations[0]
    if not isinstance(first, torch.Tensor) or not first.is_floating_point():
        return activations, parameters
    dtype = library.compute_dtype(first)
    if dtype != first.dtype:  # autocast: every activation goes to its dtype
        activations = library.cast_floats(activations, dtype)
    parameters = tuple(
        t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
        for t in parameters
    )
    return activations, parameters


def autocast_off(t: torch.Tensor) -> contextlib.AbstractContextManager:
    """Autocast off for t's device while the block runs (an op body, whose inputs already have
    the policy's dtype; a mixer's part that must run in fp32); nothing where it is not on."""
    device = t.device.type
    if device in ("cpu", "cuda") and torch.is_autocast_enabled(device):
        return torch.autocast(device, enabled=False)
    return contextlib.nullcontext()


def _dropout_seed(t: torch.Tensor, dropout_p: float) -> torch.Tensor | None:
    """The Philox key of one call's dropout mask, drawn on t's device (no host round trip)."""
    if dropout_p == 0.0:
        return None
    return torch.randint(0, 2**62, (1,), dtype=torch.int64, device=t.device)


def _use_triton(
    impl: str,
    op: str,
    name: str,
    tensors: tuple[torch.Tensor, ...],
    causal: bool,
    dim: int,
    n: int,
    shape: Callable[[], tuple[int, ...]],
    window: int = 0,
    windowed: bool = False,
) -> bool:
    """Whether the call runs the Triton kernel. `tensors` are the op's inputs, the first of them
    its first activation (called `name` in an error); `dim` and `n` key the measured choice of
    impl="auto" (kernels/dispatch.py) and `shape()` is the shape benchmark mode times (batch and
    tokens bucketed: plain ints even under torch.compile); `window` is pool_mix's window, and
    `windowed` whether an attention call has a sliding window (a key of its own)."""
    check_impl(impl)
    t = tensors[0]
    if impl == "torch":
        return False
    if impl == "triton":
        check_triton(name, t)
        return True
    if not (t.is_cuda and t.dtype in TRITON_DTYPES):
        return False
    grad = False
    if torch.is_grad_enabled():
        for x in tensors:
            if x.requires_grad:
                grad = True
                break
    tune = impl == "tune" or dispatch.benchmark_mode()
    return dispatch.choose(
        op,
        t.dtype,
        causal,
        dim,
        dispatch.n_bucket(n),
        grad,
        t.device.index,
        tune,
        shape() if tune else (),
        window,
        windowed,
    )


def _use_sdpa(impl: str, t: torch.Tensor) -> bool:
    """impl="auto" (or "tune") where Triton was not chosen: attention through torch's fused SDPA
    on CUDA, and on CPU in fp32/fp64 (call after `_use_triton`, which has already checked `impl`)."""
    return impl in ("auto", "tune") and (t.is_cuda or t.dtype in (torch.float32, torch.float64))


def _sdpa(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    scale: float,
    dropout_p: float,
    window: tuple[int, int] | None = None,
) -> torch.Tensor:
    """The reference's masked attention through `F.scaled_dot_product_attention` (a sliding
    window as part of its boolean mask).

    Some torch versions give NaN for a query whose every key is masked, where the reference
    gives zeros. Such rows are therefore let see every key (so nothing is NaN, forward or
    backward) and their output is then zeroed, which also zeroes their gradient.
    """
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if key_padding_mask is None and window is None:
        return sdpa(q_bhnk, k_bhnk, v_bhnv, is_causal=causal, scale=scale, dropout_p=dropout_p)
    n, device = q_bhnk.shape[-2], q_bhnk.device
    allowed_b1nn = reference.allowed_keys(n, causal, key_padding_mask, device, window)
    empty_b1n1 = ~allowed_b1nn.any(dim=-1, keepdim=True)
    out = sdpa(
        q_bhnk,
        k_bhnk,
        v_bhnv,
        attn_mask=allowed_b1nn | empty_b1n1,
        scale=scale,
        dropout_p=dropout_p,
    )
    return out.masked_fill(empty_b1n1, 0.0)


def _sdpa_quadratic(
    x_bnd: torch.Tensor,
    u_hdd: torch.Tensor,
    v_bhnv: torch.Tensor,
    causal: bool,
    key_padding_mask: torch.Tensor | None,
    scale: float,
    dropout_p: float,
) -> torch.Tensor:
    """`sdpa(x @ U[h], x, v)`: quadratic attention as SDPA with k = x for every head."""
    b, n, d = x_bnd.shape
    q_bhnd = torch.einsum("bnd,hde->bhne", x_bnd, u_hdd)
    k_bhnd = x_bnd[:, None].expand(b, u_hdd.shape[0], n, d)
    return _sdpa(q_bhnd, k_bhnd, v_bhnv, causal, key_padding_mask, scale, dropout_p)


def _scale(scale: float | None, features: int) -> float:
    return 1.0 / math.sqrt(features) if scale is None else check_scale(scale)


def _sink_args(sink: torch.Tensor | None, values: torch.Tensor) -> tuple:
    """An attention sink, checked: `sink` a float tensor of one logit per head, (H,), on the
    values' device; the softmax's denominator gains exp(sink_h) and its value is zero (a
    "softmax + 1" sink is sink = 0, a learned one a parameter), and it gets a gradient. It keeps
    its own dtype (the kernels read it in fp32). The Triton kernels take it; SDPA does not, so
    impl="auto" makes the same choice as without a sink and, where that is PyTorch, runs the
    reference. Returns the trailing arguments of the op's call: () without a sink."""
    if sink is None:
        return ()
    check_sink(sink, values.shape[1], values.device)
    return (sink,)


def scaled_dot_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    impl: str = "auto",
    window: tuple[int, int] | None = None,
    sink: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(q kᵀ · scale) v, per head, with dropout on the probabilities.

    q, k: (B, H, N, dk); v: (B, H, N, dv) -> (B, H, N, dv). `scale` defaults to 1/sqrt(dk).
    `window` = (left, right): query i sees only keys i − left ..= i + right (the module
    docstring says how it combines with `causal` and the padding mask); None: every key.
    `sink` (H,): an attention sink per head (`_sink_args`).
    """
    (q, k, v), _ = _apply_dtype_policy((q, k, v))
    check_attention(q, k, v, key_padding_mask)
    check_causal(causal)
    window = check_window(window)
    scale, dropout_p = _scale(scale, q.shape[-1]), check_dropout(dropout_p)
    sink_args = _sink_args(sink, q)
    with autocast_off(q):
        b, h, n, dk = q.shape
        shape = lambda: (dispatch.n_bucket(b), h, dispatch.n_bucket(n), dk, v.shape[-1])
        if _use_triton(
            impl,
            "scaled_dot_attention",
            "q",
            (q, k, v, *sink_args),
            causal,
            dk,
            n,
            shape,
            windowed=window is not None,
        ):
            seed = _dropout_seed(q, dropout_p)
            out, _ = library.run(
                "scaled_dot_attention",
                q,
                k,
                v,
                key_padding_mask,
                causal,
                scale,
                dropout_p,
                seed,
                window,
                *sink_args,
            )
            return out
        if _use_sdpa(impl, q) and sink is None:
            return _sdpa(q, k, v, causal, key_padding_mask, scale, dropout_p, window)
        return reference.scaled_dot_attention(
            q, k, v, causal, key_padding_mask, scale, dropout_p, window=window, sink=sink
        )


def quadratic_attention(
    x: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    impl: str = "auto",
    sink: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention whose scores are a quadratic form of the tokens: x[i] · U[h] · x[j] · scale.

    x: (B, N, D); u: (H, D, D); v: (B, H, N, dv) -> (B, H, N, dv). `scale` defaults to 1/sqrt(D).
    Equivalent to scaled-dot attention with q = x U[h] and k = x shared by every head. `sink`
    (H,): an attention sink per head (`_sink_args`).
    """
    (x, v), (u,) = _apply_dtype_policy((x, v), (u,))
    check_quadratic(x, u, v, key_padding_mask)
    check_causal(causal)
    b, n, d = x.shape
    h = u.shape[0]
    scale, dropout_p = _scale(scale, d), check_dropout(dropout_p)
    sink_args = _sink_args(sink, v)
    with autocast_off(x):
        shape = lambda: (dispatch.n_bucket(b), h, dispatch.n_bucket(n), d, v.shape[-1])
        tensors = (x, u, v, *sink_args)
        if _use_triton(impl, "quadratic_attention", "x", tensors, causal, d, n, shape):
            seed = _dropout_seed(x, dropout_p)
            return library.run(
                "quadratic_attention",
                x,
                u,
                v,
                key_padding_mask,
                causal,
                scale,
                dropout_p,
                seed,
                *sink_args,
            )
        if _use_sdpa(impl, x) and sink is None:
            return _sdpa_quadratic(x, u, v, causal, key_padding_mask, scale, dropout_p)
        return reference.quadratic_attention(
            x, u, v, causal, key_padding_mask, scale, dropout_p, sink=sink
        )


def metric_attention(
    p: torch.Tensor,
    m: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    impl: str = "auto",
    sink: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention under a learned metric: scores p[i] · M[h] · p[j] · scale, values p itself.

    p: (B, H, N, dk); m: (H, dk, dk) -> (B, H, N, dk). `scale` defaults to 1/sqrt(dk). The mixer
    passes a symmetric M; the op itself is correct for any M (its symmetry is never checked, since
    that would read values on the device). `sink` (H,): an attention sink per head (`_sink_args`).
    """
    (p,), (m,) = _apply_dtype_policy((p,), (m,))
    check_metric(p, m, key_padding_mask)
    check_causal(causal)
    scale, dropout_p = _scale(scale, p.shape[-1]), check_dropout(dropout_p)
    sink_args = _sink_args(sink, p)
    with autocast_off(p):
        b, h, n, dk = p.shape
        shape = lambda: (dispatch.n_bucket(b), h, dispatch.n_bucket(n), dk)
        if _use_triton(impl, "metric_attention", "p", (p, m, *sink_args), causal, dk, n, shape):
            seed = _dropout_seed(p, dropout_p)
            out, _ = library.run(
                "metric_attention",
                p,
                m,
                key_padding_mask,
                causal,
                scale,
                dropout_p,
                seed,
                *sink_args,
            )
            return out
        if _use_sdpa(impl, p) and sink is None:
            return _sdpa(p @ m[None], p, p, causal, key_padding_mask, scale, dropout_p)
        return reference.metric_attention(
            p, m, causal, key_padding_mask, scale, dropout_p, sink=sink
        )


def pool_mix(
    x: torch.Tensor,
    window: int,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Mean over a window of tokens minus the token (PoolFormer): (B, N, D) -> (B, N, D).

    Centred windows (odd `window`) reach `window // 2` tokens each side; causal windows take the
    token and the `window - 1` before it. Tokens outside the sequence or marked as padding are not
    counted; padding positions themselves get zeros.
    """
    (x,), _ = _apply_dtype_policy((x,))
    check_pool(x, window, causal, key_padding_mask)
    with autocast_off(x):
        b, n, d = x.shape
        shape = lambda: (dispatch.n_bucket(b), dispatch.n_bucket(n), d)
        if _use_triton(impl, "pool_mix", "x", (x,), causal, d, n, shape, window):
            out, _ = library.run("pool_mix", x, window, causal, key_padding_mask)
            return out
        return reference.pool_mix(x, window, causal, key_padding_mask)


# --------------------------------------------------------------------------------------------
# What benchmark mode times (kernels/dispatch.py): per op, the Triton kernel and the path
# impl="auto" takes otherwise, on random inputs of the call's bucketed shape, without masks or
# dropout, forward and (with grad) backward.
# --------------------------------------------------------------------------------------------


def _timed_call(
    run: Callable[..., torch.Tensor], leaves: tuple[torch.Tensor, ...], grad: bool
) -> Callable[[], object]:
    if not grad:

        def forward() -> object:
            with torch.no_grad():
                return run(*leaves)

        return forward
    leaves = tuple(t.detach().requires_grad_(True) for t in leaves)
    out = run(*leaves).detach()
    gen = torch.Generator(device="cpu").manual_seed(1)  # the same upstream for both candidates
    upstream = torch.randn(out.shape, generator=gen).to(device=out.device, dtype=out.dtype)

    def forward_backward() -> object:
        return torch.autograd.grad(run(*leaves), leaves, upstream)

    return forward_backward


def _tuning_candidates(op: str) -> dispatch.CandidateMaker:
    def make(dtype, causal, shape, window, device, grad):
        gen = torch.Generator(device="cpu").manual_seed(0)

        def randn(*size: int, scale: float = 1.0) -> torch.Tensor:
            return (torch.randn(*size, generator=gen) * scale).to(device=device, dtype=dtype)

        if op == "pool_mix":
            b, n, d = shape
            leaves = (randn(b, n, d),)
            ours = lambda x: library.run("pool_mix", x, window, causal, None)[0]
            theirs = lambda x: reference.pool_mix(x, window, causal, None)
        elif op == "quadratic_attention":
            b, h, n, d, dv = shape
            leaves = (randn(b, n, d), randn(h, d, d, scale=d**-0.5), randn(b, h, n, dv))
            s = 1.0 / math.sqrt(d)
            ours = lambda x, u, v: library.run(op, x, u, v, None, causal, s, 0.0, None)
            theirs = lambda x, u, v: _sdpa_quadratic(x, u, v, causal, None, s, 0.0)
        elif op == "sigmoid_attention":
            b, h, n, dk, dv = shape
            leaves = (randn(b, h, n, dk), randn(b, h, n, dk), randn(b, h, n, dv))
            s, bias = 1.0 / math.sqrt(dk), -math.log(n)  # the mixer's default bias, −log N
            ours = lambda q, k, v: library.run(op, q, k, v, None, causal, s, bias)
            theirs = lambda q, k, v: reference.sigmoid_attention(q, k, v, causal, None, s, bias)
        elif op == "metric_attention":
            b, h, n, dk = shape
            c = randn(h, dk, dk, scale=dk**-0.5)
            leaves = (randn(b, h, n, dk), (c + c.mT) / 2)
            s = 1.0 / math.sqrt(dk)
            ours = lambda p, m: library.run(op, p, m, None, causal, s, 0.0, None)[0]
            theirs = lambda p, m: _sdpa(p @ m[None], p, p, causal, None, s, 0.0)
        else:
            b, h, n, dk, dv = shape
            leaves = (randn(b, h, n, dk), randn(b, h, n, dk), randn(b, h, n, dv))
            s = 1.0 / math.sqrt(dk)
            ours = lambda q, k, v: library.run(op, q, k, v, None, causal, s, 0.0, None)[0]
            theirs = lambda q, k, v: _sdpa(q, k, v, causal, None, s, 0.0)
        return _timed_call(ours, leaves, grad), _timed_call(theirs, leaves, grad)

    return make


for _op in library.OPS:
    dispatch.CANDIDATES[_op] = _tuning_candidates(_op)


# --------------------------------------------------------------------------------------------
# linear_attention: normalised linear attention on feature-mapped q and k
# --------------------------------------------------------------------------------------------


def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    eps: float = 1e-6,
    impl: str = "auto",
) -> torch.Tensor:
    """Normalised linear attention (Katharopoulos et al. 2020): y_i = q_iᵀ S_i / (q_iᵀ z_i + eps).

    q, k: (B, H, N, F), already feature-mapped (non-negative, e.g. elu(x) + 1); v: (B, H, N, dv)
    -> (B, H, N, dv). S_i = Σ_j k_j v_jᵀ and z_i = Σ_j k_j over the non-padding keys j (causal:
    j ≤ i). `key_padding_mask` masks keys only: a padding query is computed like any other, and
    a query with no visible key gets 0. eps ≥ 0 keeps the denominator off zero. The Triton path
    takes F and dv up to 128.
    """
    (q, k, v), _ = _apply_dtype_policy((q, k, v))
    eps = check_linear(q, k, v, key_padding_mask, causal, eps)
    with autocast_off(q):
        b, h, n, f = q.shape
        shape = lambda: (dispatch.n_bucket(b), h, dispatch.n_bucket(n), f, v.shape[-1])
        if _use_triton(impl, "linear_attention", "q", (q, k, v), causal, f, n, shape):
            out, _ = library.run("linear_attention", q, k, v, key_padding_mask, causal, eps)
            return out
        return reference.linear_attention(q, k, v, causal, key_padding_mask, eps)


def _linear_candidates(dtype, causal, shape, window, device, grad):
    """What benchmark mode times for linear_attention: the kernel against the reference, on
    non-negative features (elu + 1 of a normal draw)."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    b, h, n, f, dv = shape
    feature = lambda: torch.nn.functional.elu(torch.randn(b, h, n, f, generator=gen)) + 1
    leaves = tuple(
        t.to(device=device, dtype=dtype)
        for t in (feature(), feature(), torch.randn(b, h, n, dv, generator=gen))
    )
    ours = lambda q, k, v: library.run("linear_attention", q, k, v, None, causal, 1e-6)[0]
    theirs = lambda q, k, v: reference.linear_attention(q, k, v, causal, None, 1e-6)
    return _timed_call(ours, leaves, grad), _timed_call(theirs, leaves, grad)


dispatch.CANDIDATES["linear_attention"] = _linear_candidates


# --------------------------------------------------------------------------------------------
# gated_linear_attention: linear attention with a decaying state (RetNet, Mamba-2, GLA)
# --------------------------------------------------------------------------------------------


def gated_linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_decay: torch.Tensor,
    causal: bool = True,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    impl: str = "auto",
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Un-normalised linear attention whose state decays:

        S_t = diag(exp(log_decay_t)) S_{t−1} + k_t v_tᵀ,    o_t = scale · S_tᵀ q_t

    q, k: (B, H, N, K); v: (B, H, N, V) -> o (B, H, N, V). `log_decay` ≤ 0 is one number per
    token, (B, H, N) — RetNet's constant log γ, Mamba-2's Δ·A — or one per key dimension,
    (B, H, N, K) — GLA; log_decay = 0 is causal linear attention without a normaliser. `scale`
    defaults to 1/sqrt(K). `initial_state` (B, H, K, V) is S_{−1} (default 0); with
    `output_final_state` the call returns (o, S_{N−1}). The recurrence runs forwards in time:
    causal=True is the only value (a bidirectional mixer runs it over the sequence and over its
    reverse). q, k and v follow the dtype policy; log_decay and the states are computed in fp32
    (fp64 for fp64 inputs), the final state is returned in that dtype, and every input gets its
    gradient in its own dtype.
    """
    (q, k, v), _ = _apply_dtype_policy((q, k, v))
    check_gated(q, k, v, log_decay, initial_state, causal)
    if not isinstance(output_final_state, bool):
        raise ValueError(f"output_final_state must be a bool, got {output_final_state!r}")
    scale = _scale(scale, q.shape[-1])
    ct = gated_naive.compute_dtype(q)
    log_decay = log_decay.to(ct)
    if initial_state is not None:
        initial_state = initial_state.to(ct)
    with autocast_off(q):
        b, h, n, kd = q.shape
        shape = lambda: (dispatch.n_bucket(b), h, dispatch.n_bucket(n), kd, v.shape[-1])
        tensors = (q, k, v, log_decay) + (() if initial_state is None else (initial_state,))
        if _use_triton(impl, "gated_linear_attention", "q", tensors, True, kd, n, shape):
            out, final_state = library.run(
                "gated_linear_attention", q, k, v, log_decay, scale, initial_state
            )
        else:
            out, final_state = gated_naive.chunked(q, k, v, log_decay, scale, initial_state)
    return (out, final_state) if output_final_state else out


def sigmoid_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    bias: float = 0.0,
    impl: str = "auto",
) -> torch.Tensor:
    """Sigmoid attention (Ramapuram et al. 2024, arXiv 2409.04431): Σ_j σ(scale · q_i·k_j + bias)
    v_j over the keys query i may see (causal, padding); no row normalisation, so masked pairs
    contribute nothing and a row's weights sum to anything in [0, N). q, k: (B, H, N, dk);
    v: (B, H, N, dv). `scale` defaults to 1/sqrt(dk); the paper's bias is −log N (the mixer's
    default). impl="triton" runs the scaled-dot kernels with the softmax switched off (value
    widths up to 128, as there); "auto" and "tune" choose between them and the reference as
    for the other ops (`kernels/dispatch.py`: without a measured entry, the reference)."""
    (q, k, v), _ = _apply_dtype_policy((q, k, v))
    check_attention(q, k, v, key_padding_mask)
    check_causal(causal)
    scale, bias = _scale(scale, q.shape[-1]), check_scale(bias, "bias")
    with autocast_off(q):
        b, h, n, dk = q.shape
        shape = lambda: (dispatch.n_bucket(b), h, dispatch.n_bucket(n), dk, v.shape[-1])
        if _use_triton(impl, "sigmoid_attention", "q", (q, k, v), causal, dk, n, shape):
            return library.run("sigmoid_attention", q, k, v, key_padding_mask, causal, scale, bias)
        return reference.sigmoid_attention(q, k, v, causal, key_padding_mask, scale, bias)


DELTA_IMPLS = ("auto", "torch", "tune", "fla")


def delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_decay: torch.Tensor | None = None,
    scale: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Linear attention whose state is written by error correction (the delta rule):

        S_t = exp(log_decay_t) · (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,    o_t = scale · S_tᵀ q_t

    q, k: (B, H, N, K); v: (B, H, N, V) -> o (B, H, N, V); `beta` (B, H, N), the write strength
    (in (0, 1) for a contraction when ‖k_t‖ = 1; DeltaNet normalises k); `log_decay` (B, H, N)
    ≤ 0 or None (no decay: DeltaNet; with it, Gated DeltaNet). Causal by nature; `scale`
    defaults to 1/sqrt(K). q, k and v follow the dtype policy; beta, log_decay and the state are
    computed in fp32 (fp64 for fp64 inputs). impl: "auto", "torch" and "tune" run the chunked
    PyTorch path (kernels/delta/naive.py: the WY/UT form, chunks of 64, autograd backward);
    attnzoo has no Triton kernel of the delta rule, so "triton" is refused; "fla" calls
    flash-linear-attention's chunk_delta_rule / chunk_gated_delta_rule (CUDA, with the optional
    `fla-core` installed)."""
    (q, k, v), _ = _apply_dtype_policy((q, k, v))
    check_delta(q, k, v, beta, log_decay)
    if impl not in DELTA_IMPLS:
        raise ValueError(
            f"impl={impl!r}: delta_rule takes one of {DELTA_IMPLS} (attnzoo has no Triton kernel "
            "of the delta rule; 'fla' runs flash-linear-attention's where fla-core is installed)"
        )
    scale = _scale(scale, q.shape[-1])
    ct = delta_naive.compute_dtype(q)
    beta = beta.to(ct)
    log_decay = None if log_decay is None else log_decay.to(ct)
    with autocast_off(q):
        if impl == "fla":
            return _fla_delta_rule(q, k, v, beta, log_decay, scale)
        return delta_naive.chunked(q, k, v, beta, log_decay, scale)[0]


def _fla_delta_rule(q, k, v, beta, log_decay, scale) -> torch.Tensor:
    """flash-linear-attention's chunked delta rule on (B, N, H, ·) tensors, back to (B, H, N, V)."""
    try:
        if log_decay is None:
            from fla.ops.delta_rule import chunk_delta_rule as run
        else:
            from fla.ops.gated_delta_rule import chunk_gated_delta_rule as run
    except Exception as err:  # noqa: BLE001 - absent, or present and broken
        raise ValueError(
            "impl='fla' needs flash-linear-attention: pip install 'attnzoo[fla]' on a CUDA "
            f"machine ({type(err).__name__}: {str(err)[:120]})"
        ) from err
    if not q.is_cuda:
        raise ValueError(f"impl='fla' runs on CUDA tensors only, got q on {q.device}")
    keywords = {"scale": scale}
    if "head_first" in inspect.signature(run).parameters:
        keywords["head_first"] = False  # older releases: (B, H, N, K) unless told otherwise
    tokens_first = lambda t: t.transpose(1, 2).contiguous()
    gate = () if log_decay is None else (tokens_first(log_decay),)
    out = run(
        tokens_first(q), tokens_first(k), tokens_first(v), *gate, tokens_first(beta), **keywords
    )[0]
    return out.transpose(1, 2).to(q.dtype)


def _gated_candidates(dtype, causal, shape, window, device, grad):
    """What benchmark mode times for gated_linear_attention: the kernel against the chunked
    PyTorch path, with a log decay per key dimension (`gated_naive.sample_log_decay`, as the
    kernel benchmark draws it)."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    b, h, n, kd, dv = shape
    draw = lambda *size: torch.randn(*size, generator=gen)
    log_decay = gated_naive.sample_log_decay(b, h, n, kd, generator=gen).to(device)
    leaves = tuple(
        t.to(device=device, dtype=dtype)
        for t in (draw(b, h, n, kd), draw(b, h, n, kd), draw(b, h, n, dv))
    )
    s = 1.0 / math.sqrt(kd)
    ours = lambda q, k, v: library.run("gated_linear_attention", q, k, v, log_decay, s, None)[0]
    theirs = lambda q, k, v: gated_naive.chunked(q, k, v, log_decay, s)[0]
    return _timed_call(ours, leaves, grad), _timed_call(theirs, leaves, grad)


dispatch.CANDIDATES["gated_linear_attention"] = _gated_candidates
