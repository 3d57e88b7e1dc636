"""The attention ops: scaled-dot (with an optional sliding window), quadratic-form, metric-tensor
and sigmoid attention, on one family of flash-attention kernels.

Each public function checks its arguments once and picks the path (`impl`): the Triton kernels
through its custom op `torch.ops.attnzoo.<op>` (forward and backward ops, a fake, autograd and
an autocast rule), or PyTorch — the fused `scaled_dot_product_attention` on the op's one-line
formulation (`sdpa(p @ M, p, p)` for metric, `sdpa(x @ U[h], x, v)` for quadratic) where it
takes the call (fp32/fp64 on CPU, any float on CUDA; not a sink, not sigmoid attention), else
the references of naive.py.

| op | the custom op's inputs | outputs |
|---|---|---|
| scaled_dot_attention | q, k, v, mask?, causal, scale, dropout_p, seed?, window?, sink?, key_bias? | out, lse |
| quadratic_attention | x, u, v, mask?, causal, scale, dropout_p, seed?, sink? | out |
| metric_attention | p, m, mask?, causal, scale, dropout_p, seed?, sink? | out, lse |
| sigmoid_attention | q, k, v, mask?, causal, scale, bias | out |

`lse` (the rows' log-sum-exp, the sink included) is what the backward needs; it is an output so
that nothing is recomputed. The quadratic op is a composite: q = x·U[h] as one batched matmul,
then the scaled-dot op with k = x read for every head through a zero head stride (docs/kernels.md
says why q is formed outside the kernel); its autograd is that of its parts. Sigmoid attention
(σ(scale · q·k + bias) v, no row normalisation) saves nothing but its inputs: its backward
recomputes the weights.

**Dropout** (`dropout_p`) has `scaled_dot_product_attention`'s meaning: each attention
probability is dropped with probability p and the kept ones are scaled by 1/(1-p); the caller
passes 0 in eval mode. The kernels draw the mask from a Philox counter keyed by `seed`, a
one-element int64 tensor drawn from torch's generator on the inputs' device
(`_op.dropout_seed`), redraw it in the backward and never store it; the PyTorch paths draw it
with torch's own RNG.

Layouts are (batch, heads, tokens, features). `key_padding_mask` is a bool (batch, tokens)
tensor in which True marks a padding token, as in `torch.nn.MultiheadAttention`. A query whose
every key is masked (causal and padding together) gets a zero output.

**Sliding window** (`window=(left, right)`, scaled_dot_attention): query i attends to key j only
when i − left ≤ j ≤ i + right, both reaches non-negative ints (a reach ≥ N bounds nothing). It
combines with the other masks by intersection: with `causal=True` the right reach is 0 whatever
it was given as, and padding keys stay invisible. The kernels skip the key tiles outside the
window.

**Sink** (the three softmax ops, optional: a float tensor (H,)): one more logit per head in
every row's softmax whose value is zero (`_sink_args`); it has a gradient, which the backward op
returns after the others.

**Key bias** (`key_bias`, scaled_dot_attention, optional: a float tensor (B, H, N)): a logit
added to every score of key j, in every row, before the softmax: softmax_j(scale · q_i·k_j +
key_bias_j). A bias of the form c_i − c_j is one per key, since a row's own c_i cancels in its
softmax: the Forgetting Transformer's decay Σ_{l=j+1..i} log f_l is key_bias = −cumsum(log f)
under a causal mask (attnzoo.mixers.forgetting). It composes with the masks, the window, the
sink and dropout (a masked pair stays masked whatever its bias). Its gradient is the column sums
of the scores' gradient, d key_bias_j = Σ_i dS_ij with dS = P ∘ (dP − rowsum(dO ∘ O)); the
backward op returns it last. SDPA does not take it: impl="auto" then runs the reference where
it would have run SDPA, as with a sink.
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor

from .. import _op
from .._checks import (
    check_attention,
    check_causal,
    check_dropout,
    check_mask,
    check_same,
    check_saved,
    check_scale,
    check_tensor,
)
from . import naive

# impl="auto" on CUDA, per op: PyTorch's path (SDPA, or the reference for sigmoid attention and
# a sink) was faster than the kernels at every shape measured (H100, 2026-11-23; docs/gpu.md).
# Flip an op to True where scripts/gpu_check.py says its kernel wins.
AUTO_TRITON = {
    "scaled_dot_attention": False,
    "quadratic_attention": False,
    "metric_attention": False,
    "sigmoid_attention": False,
}


def check_quadratic(x_bnd: Tensor, u_hdd: Tensor, v_bhnv: Tensor, key_padding_mask) -> None:
    check_tensor("x", x_bnd, 3, "(batch, tokens, dim)")
    check_tensor("u", u_hdd, 3, "(heads, dim, dim)")
    check_tensor("v", v_bhnv, 4, "(batch, heads, tokens, dv)")
    check_same(("x", "u", "v"), (x_bnd, u_hdd, v_bhnv))
    b, n, d = x_bnd.shape
    h = u_hdd.shape[0]
    if tuple(u_hdd.shape) != (h, d, d):
        raise ValueError(
            f"u must have shape (heads, dim, dim) = ({h}, {d}, {d}), got {tuple(u_hdd.shape)}"
        )
    if tuple(v_bhnv.shape[:3]) != (b, h, n):
        raise ValueError(
            f"v must have (batch, heads, tokens) = {(b, h, n)} from x and u, "
            f"got {tuple(v_bhnv.shape)}"
        )
    check_mask(key_padding_mask, b, n, x_bnd.device)


def check_metric(p_bhnk: Tensor, m_hkk: Tensor, key_padding_mask) -> None:
    check_tensor("p", p_bhnk, 4, "(batch, heads, tokens, dk)")
    check_tensor("m", m_hkk, 3, "(heads, dk, dk)")
    check_same(("p", "m"), (p_bhnk, m_hkk))
    b, h, n, dk = p_bhnk.shape
    if tuple(m_hkk.shape) != (h, dk, dk):
        raise ValueError(
            f"m must have shape (heads, dk, dk) = ({h}, {dk}, {dk}), got {tuple(m_hkk.shape)}"
        )
    check_mask(key_padding_mask, b, n, p_bhnk.device)


def check_window(window) -> tuple[int, int] | None:
    """A sliding window as the pair (left, right) of plain ints, or None (no window): query i
    sees the keys i − left ..= i + right. Both reaches are non-negative (every query sees
    itself); a reach of N or more is no bound on that side."""
    if window is None:
        return None
    if (
        not isinstance(window, (tuple, list))
        or len(window) != 2
        or not all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in window)
    ):
        raise ValueError(
            f"window must be None or a pair (left, right) of ints (query i sees keys "
            f"i - left ..= i + right), got {window!r}"
        )
    left, right = int(window[0]), int(window[1])
    if left < 0 or right < 0:
        raise ValueError(
            f"window = {window!r}: left and right must be >= 0 (query i sees keys "
            "i - left ..= i + right, itself included)"
        )
    return left, right


def check_sink(sink, heads: int, device: torch.device) -> None:
    """An attention sink: a float tensor of one logit per head, (heads,), on the inputs' device
    (its values are not read: that would cost a device synchronisation per call)."""
    if sink is None:
        return
    if not isinstance(sink, Tensor) or not sink.is_floating_point() or sink.shape != (heads,):
        got = (
            f"{tuple(sink.shape)} {sink.dtype}" if isinstance(sink, Tensor) else type(sink).__name__
        )
        raise ValueError(
            f"sink must be a float tensor of one logit per head, ({heads},), got {got}"
        )
    if sink.device != device:
        raise ValueError(f"sink is on {sink.device} but the inputs are on {device}")


def check_key_bias(key_bias, q: Tensor) -> None:
    """A key bias: a float tensor (batch, heads, tokens) on q's device, one logit per key added
    to every row's scores (its values are not read: that would cost a device synchronisation)."""
    if key_bias is None:
        return
    b, h, n, _ = q.shape
    if (
        not isinstance(key_bias, Tensor)
        or not key_bias.is_floating_point()
        or tuple(key_bias.shape) != (b, h, n)
    ):
        got = (
            f"{tuple(key_bias.shape)} {key_bias.dtype}"
            if isinstance(key_bias, Tensor)
            else type(key_bias).__name__
        )
        raise ValueError(
            f"key_bias must be a float tensor of one logit per key, (batch, heads, tokens) = "
            f"({b}, {h}, {n}), got {got}"
        )
    if key_bias.device != q.device:
        raise ValueError(f"key_bias is on {key_bias.device} but the inputs are on {q.device}")


def _launch():
    return _op.triton_part(f"{__package__}.launch")


def _check_backward_inputs(d_out: Tensor, out: Tensor, lse: Tensor, q: Tensor, d_v: int) -> None:
    """The upstream gradient and what the forward saved, against the forward's inputs."""
    b, h, n, _ = q.shape
    check_saved("d_out", d_out, (b, h, n, d_v), q)
    check_saved("out", out, (b, h, n, d_v), q)
    check_saved("lse", lse, (b * h, n), q, torch.float32, contiguous=True)


@torch.library.custom_op(f"{_op.NAMESPACE}::scaled_dot_attention", mutates_args=())
def scaled_dot_attention_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: Tensor | None,
    window: list[int] | None = None,
    sink: Tensor | None = None,
    key_bias: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    return _launch().scaled_dot_forward(
        q, k, v, key_padding_mask, causal, scale, dropout_p, seed, window, sink, key_bias
    )


@scaled_dot_attention_op.register_fake
def _(
    q, k, v, key_padding_mask, causal, scale, dropout_p, seed, window=None, sink=None, key_bias=None
):
    b, h, n, _ = q.shape
    return q.new_empty((b, h, n, v.shape[-1])), _op.rows_like(q, b * h, n)


@torch.library.custom_op(f"{_op.NAMESPACE}::scaled_dot_attention_backward", mutates_args=())
def scaled_dot_attention_backward_op(
    d_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: Tensor | None,
    window: list[int] | None = None,
    sink: Tensor | None = None,
    key_bias: Tensor | None = None,
) -> list[Tensor]:
    _check_backward_inputs(d_out, out, lse, q, v.shape[-1])
    return _launch().scaled_dot_backward(
        d_out,
        q,
        k,
        v,
        out,
        lse,
        key_padding_mask,
        causal,
        scale,
        dropout_p,
        seed,
        window,
        sink,
        key_bias,
    )


@scaled_dot_attention_backward_op.register_fake
def _(
    d_out,
    q,
    k,
    v,
    out,
    lse,
    key_padding_mask,
    causal,
    scale,
    dropout_p,
    seed,
    window=None,
    sink=None,
    key_bias=None,
):
    return (
        [
            _op.contiguous_like(q),
            _op.contiguous_like(k),
            _op.contiguous_like(v),
        ]
        + _sink_grad_like(sink)
        + _sink_grad_like(key_bias)
    )


def _sink_grad_like(sink: Tensor | None) -> list[Tensor]:
    """A backward op's trailing output: the gradient of an optional input (a sink, a key bias),
    where the call has one."""
    return [] if sink is None else [sink.new_empty(sink.shape)]


def _scaled_dot_setup(ctx, inputs, output) -> None:
    q, k, v, mask, causal, scale, dropout_p, seed, *optional = inputs  # window?, sink?, key_bias?
    window, sink, key_bias = (*optional, None, None, None)[:3]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, mask, seed, sink, key_bias)
    ctx.causal, ctx.scale, ctx.dropout_p = causal, scale, dropout_p
    ctx.window, ctx.n_inputs = window, len(inputs)
    _op.no_gradient_for(ctx, lse)


def _with_sink_gradient(grads: list[Tensor], n_inputs: int, n_first: int) -> tuple:
    """A forward's input gradients from its backward op's outputs: the first `n_first` inputs',
    None for the arguments in between, and the sink's last (when the call passed one)."""
    dsink = grads[n_first:]
    return (*grads[:n_first], *(None,) * (n_inputs - n_first - len(dsink)), *dsink)


def _scaled_dot_backward(ctx, d_out, d_lse):
    q, k, v, out, lse, mask, seed, sink, key_bias = ctx.saved_tensors
    optional = () if key_bias is None else (key_bias,)
    grads = scaled_dot_attention_backward_op(
        d_out,
        q,
        k,
        v,
        out,
        lse,
        mask,
        ctx.causal,
        ctx.scale,
        ctx.dropout_p,
        seed,
        ctx.window,
        sink,
        *optional,
    )
    # the inputs' gradients: q, k, v, then the sink's (input 9) and the key bias's (input 10)
    # where the call has them, in the backward op's order
    result = [*grads[:3], *(None,) * (ctx.n_inputs - 3)]
    optional_grads = iter(grads[3:])
    for position, given in ((9, sink), (10, key_bias)):
        if given is not None:
            result[position] = next(optional_grads)
    return tuple(result)


scaled_dot_attention_op.register_autograd(_scaled_dot_backward, setup_context=_scaled_dot_setup)


# --------------------------------------------------------------------------------------------
# metric_attention (the fused prologue: reads p and M only)
# --------------------------------------------------------------------------------------------


@torch.library.custom_op(f"{_op.NAMESPACE}::metric_attention", mutates_args=())
def metric_attention_op(
    p: Tensor,
    m: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: Tensor | None,
    sink: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    return _launch().metric_forward(p, m, key_padding_mask, causal, scale, dropout_p, seed, sink)


@metric_attention_op.register_fake
def _(p, m, key_padding_mask, causal, scale, dropout_p, seed, sink=None):
    b, h, n, _ = p.shape
    return _op.contiguous_like(p), _op.rows_like(p, b * h, n)


@torch.library.custom_op(f"{_op.NAMESPACE}::metric_attention_backward", mutates_args=())
def metric_attention_backward_op(
    d_out: Tensor,
    p: Tensor,
    m: Tensor,
    out: Tensor,
    lse: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: Tensor | None,
    sink: Tensor | None = None,
) -> list[Tensor]:
    _check_backward_inputs(d_out, out, lse, p, p.shape[-1])
    return _launch().metric_backward(
        d_out, p, m, out, lse, key_padding_mask, causal, scale, dropout_p, seed, sink
    )


@metric_attention_backward_op.register_fake
def _(d_out, p, m, out, lse, key_padding_mask, causal, scale, dropout_p, seed, sink=None):
    return [_op.contiguous_like(p), _op.contiguous_like(m)] + _sink_grad_like(sink)


def _metric_setup(ctx, inputs, output) -> None:
    p, m, mask, causal, scale, dropout_p, seed, *optional = inputs  # sink?
    out, lse = output
    ctx.save_for_backward(p, m, out, lse, mask, seed, optional[0] if optional else None)
    ctx.causal, ctx.scale, ctx.dropout_p, ctx.n_inputs = causal, scale, dropout_p, len(inputs)
    _op.no_gradient_for(ctx, lse)


def _metric_backward(ctx, d_out, d_lse):
    p, m, out, lse, mask, seed, sink = ctx.saved_tensors
    grads = metric_attention_backward_op(
        d_out,
        p,
        m,
        out,
        lse,
        mask,
        ctx.causal,
        ctx.scale,
        ctx.dropout_p,
        seed,
        sink,
    )
    return _with_sink_gradient(grads, ctx.n_inputs, 2)


metric_attention_op.register_autograd(_metric_backward, setup_context=_metric_setup)


# --------------------------------------------------------------------------------------------
# quadratic_attention: a composite of a batched matmul and scaled_dot_attention
# --------------------------------------------------------------------------------------------

_op.lib.define(
    "quadratic_attention(Tensor x, Tensor u, Tensor v, Tensor? key_padding_mask, bool causal, "
    "float scale, float dropout_p, Tensor? seed, Tensor? sink=None) -> Tensor"
)


def _quadratic_composite(
    x: Tensor,
    u: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: Tensor | None,
    sink: Tensor | None = None,
) -> Tensor:
    """q = x·U[h] as one batched matmul, then the scaled-dot op with k = x for every head."""
    b, n, d = x.shape
    h = u.shape[0]
    q_bhnd = torch.einsum("bnd,hde->bhne", x, u)
    k_bhnd = x[:, None].expand(b, h, n, d)  # zero head stride: one x for every head, no copy
    out, _ = scaled_dot_attention_op(
        q_bhnd, k_bhnd, v, key_padding_mask, causal, scale, dropout_p, seed, None, sink
    )
    return out


_op.lib.impl("quadratic_attention", _quadratic_composite, "CompositeImplicitAutograd")


# --------------------------------------------------------------------------------------------
# sigmoid_attention: the scaled-dot kernels without the row normalisation
# --------------------------------------------------------------------------------------------


@torch.library.custom_op(f"{_op.NAMESPACE}::sigmoid_attention", mutates_args=())
def sigmoid_attention_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    scale: float,
    bias: float,
) -> Tensor:
    return _launch().sigmoid_forward(q, k, v, key_padding_mask, causal, scale, bias)


@sigmoid_attention_op.register_fake
def _(q, k, v, key_padding_mask, causal, scale, bias):
    b, h, n, _ = q.shape
    return q.new_empty((b, h, n, v.shape[-1]))


@torch.library.custom_op(f"{_op.NAMESPACE}::sigmoid_attention_backward", mutates_args=())
def sigmoid_attention_backward_op(
    d_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    scale: float,
    bias: float,
) -> tuple[Tensor, Tensor, Tensor]:
    check_saved("d_out", d_out, (*q.shape[:3], v.shape[-1]), q)
    return _launch().sigmoid_backward(d_out, q, k, v, key_padding_mask, causal, scale, bias)


@sigmoid_attention_backward_op.register_fake
def _(d_out, q, k, v, key_padding_mask, causal, scale, bias):
    return _op.contiguous_like(q), _op.contiguous_like(k), _op.contiguous_like(v)


def _sigmoid_setup(ctx, inputs, output) -> None:
    q, k, v, mask, causal, scale, bias = inputs
    ctx.save_for_backward(q, k, v, mask)
    ctx.causal, ctx.scale, ctx.bias = causal, scale, bias


def _sigmoid_backward(ctx, d_out):
    q, k, v, mask = ctx.saved_tensors
    dq, dk, dv = sigmoid_attention_backward_op(
        d_out, q, k, v, mask, ctx.causal, ctx.scale, ctx.bias
    )
    return dq, dk, dv, None, None, None, None


sigmoid_attention_op.register_autograd(_sigmoid_backward, setup_context=_sigmoid_setup)

# The activations (and U, M) each op casts under autocast: the leading arguments; a sink, last,
# keeps its dtype.
_op.register_autocast("scaled_dot_attention", n_cast=3)
_op.register_autocast("quadratic_attention", n_cast=3)
_op.register_autocast("metric_attention", n_cast=2)
_op.register_autocast("sigmoid_attention", n_cast=3)


# --------------------------------------------------------------------------------------------
# The public functions
# --------------------------------------------------------------------------------------------


def _use_sdpa(impl: str, t: Tensor) -> bool:
    """impl="auto" where Triton was not chosen: attention through torch's fused SDPA on CUDA,
    and on CPU in fp32/fp64 (call after `_op.use_triton`, which has already checked `impl`)."""
    return impl == "auto" and (t.is_cuda or t.dtype in (torch.float32, torch.float64))


def _sdpa(
    q_bhnk: Tensor,
    k_bhnk: Tensor,
    v_bhnv: Tensor,
    causal: bool,
    key_padding_mask: Tensor | None,
    scale: float,
    dropout_p: float,
    window: tuple[int, int] | None = None,
) -> Tensor:
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
    allowed_b1nn = naive.allowed_keys(n, causal, key_padding_mask, device, window)
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
    x_bnd: Tensor,
    u_hdd: Tensor,
    v_bhnv: Tensor,
    causal: bool,
    key_padding_mask: Tensor | None,
    scale: float,
    dropout_p: float,
) -> Tensor:
    """`sdpa(x @ U[h], x, v)`: quadratic attention as SDPA with k = x for every head."""
    b, n, d = x_bnd.shape
    q_bhnd = torch.einsum("bnd,hde->bhne", x_bnd, u_hdd)
    k_bhnd = x_bnd[:, None].expand(b, u_hdd.shape[0], n, d)
    return _sdpa(q_bhnd, k_bhnd, v_bhnv, causal, key_padding_mask, scale, dropout_p)


def _sink_args(sink: Tensor | None, values: Tensor) -> tuple:
    """An attention sink, checked: `sink` a float tensor of one logit per head, (H,), on the
    values' device; the softmax's denominator gains exp(sink_h) and its value is zero (a
    "softmax + 1" sink is sink = 0, a learned one a parameter), and it gets a gradient. It keeps
    its own dtype (the kernels read it in fp32). The Triton kernels take it; SDPA does not, so
    impl="auto" makes the same choice as without a sink and, where that is PyTorch, runs the
    reference (naive.py). Returns the trailing arguments of the op's call: () without a sink."""
    if sink is None:
        return ()
    check_sink(sink, values.shape[1], values.device)
    return (sink,)


def scaled_dot_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    impl: str = "auto",
    window: tuple[int, int] | None = None,
    sink: Tensor | None = None,
    key_bias: Tensor | None = None,
) -> Tensor:
    """softmax(q kᵀ · scale + key_bias) v, per head, with dropout on the probabilities.

    q, k: (B, H, N, dk); v: (B, H, N, dv) -> (B, H, N, dv). `scale` defaults to 1/sqrt(dk).
    `window` = (left, right): query i sees only keys i − left ..= i + right (the module
    docstring says how it combines with `causal` and the padding mask); None: every key.
    `sink` (H,): an attention sink per head (`_sink_args`). `key_bias` (B, H, N): a logit added
    to every score of key j (the module docstring's **Key bias**); None: no bias.
    """
    (q, k, v), _ = _op.apply_dtype_policy((q, k, v))
    check_attention(q, k, v, key_padding_mask)
    check_causal(causal)
    window = check_window(window)
    scale, dropout_p = _op.default_scale(scale, q.shape[-1]), check_dropout(dropout_p)
    sink_args = _sink_args(sink, q)
    check_key_bias(key_bias, q)
    with _op.autocast_off(q):
        if _op.use_triton(impl, "q", q, AUTO_TRITON["scaled_dot_attention"]):
            seed = _op.dropout_seed(q, dropout_p)
            optional = sink_args if key_bias is None else (sink, key_bias)
            out, _ = scaled_dot_attention_op(
                q, k, v, key_padding_mask, causal, scale, dropout_p, seed, window, *optional
            )
            return out
        if _use_sdpa(impl, q) and sink is None and key_bias is None:
            return _sdpa(q, k, v, causal, key_padding_mask, scale, dropout_p, window)
        return naive.scaled_dot_attention(
            q,
            k,
            v,
            causal,
            key_padding_mask,
            scale,
            dropout_p,
            window=window,
            sink=sink,
            key_bias=key_bias,
        )


def quadratic_attention(
    x: Tensor,
    u: Tensor,
    v: Tensor,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    impl: str = "auto",
    sink: Tensor | None = None,
) -> Tensor:
    """Attention whose scores are a quadratic form of the tokens: x[i] · U[h] · x[j] · scale.

    x: (B, N, D); u: (H, D, D); v: (B, H, N, dv) -> (B, H, N, dv). `scale` defaults to 1/sqrt(D).
    Equivalent to scaled-dot attention with q = x U[h] and k = x shared by every head. `sink`
    (H,): an attention sink per head (`_sink_args`).
    """
    (x, v), (u,) = _op.apply_dtype_policy((x, v), (u,))
    check_quadratic(x, u, v, key_padding_mask)
    check_causal(causal)
    scale, dropout_p = _op.default_scale(scale, x.shape[-1]), check_dropout(dropout_p)
    sink_args = _sink_args(sink, v)
    with _op.autocast_off(x):
        if _op.use_triton(impl, "x", x, AUTO_TRITON["quadratic_attention"]):
            seed = _op.dropout_seed(x, dropout_p)
            return torch.ops.attnzoo.quadratic_attention(
                x, u, v, key_padding_mask, causal, scale, dropout_p, seed, *sink_args
            )
        if _use_sdpa(impl, x) and sink is None:
            return _sdpa_quadratic(x, u, v, causal, key_padding_mask, scale, dropout_p)
        return naive.quadratic_attention(
            x, u, v, causal, key_padding_mask, scale, dropout_p, sink=sink
        )


def metric_attention(
    p: Tensor,
    m: Tensor,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    impl: str = "auto",
    sink: Tensor | None = None,
) -> Tensor:
    """Attention under a learned metric: scores p[i] · M[h] · p[j] · scale, values p itself.

    p: (B, H, N, dk); m: (H, dk, dk) -> (B, H, N, dk). `scale` defaults to 1/sqrt(dk). The mixer
    passes a symmetric M; the op itself is correct for any M (its symmetry is never checked, since
    that would read values on the device). `sink` (H,): an attention sink per head (`_sink_args`).
    """
    (p,), (m,) = _op.apply_dtype_policy((p,), (m,))
    check_metric(p, m, key_padding_mask)
    check_causal(causal)
    scale, dropout_p = _op.default_scale(scale, p.shape[-1]), check_dropout(dropout_p)
    sink_args = _sink_args(sink, p)
    with _op.autocast_off(p):
        if _op.use_triton(impl, "p", p, AUTO_TRITON["metric_attention"]):
            seed = _op.dropout_seed(p, dropout_p)
            out, _ = metric_attention_op(
                p, m, key_padding_mask, causal, scale, dropout_p, seed, *sink_args
            )
            return out
        if _use_sdpa(impl, p) and sink is None:
            return _sdpa(p @ m[None], p, p, causal, key_padding_mask, scale, dropout_p)
        return naive.metric_attention(p, m, causal, key_padding_mask, scale, dropout_p, sink=sink)


def sigmoid_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    bias: float = 0.0,
    impl: str = "auto",
) -> Tensor:
    """Sigmoid attention (Ramapuram et al. 2024, arXiv 2409.04431): Σ_j σ(scale · q_i·k_j + bias)
    v_j over the keys query i may see (causal, padding); no row normalisation, so masked pairs
    contribute nothing and a row's weights sum to anything in [0, N). q, k: (B, H, N, dk);
    v: (B, H, N, dv). `scale` defaults to 1/sqrt(dk); the paper's bias is −log N (the mixer's
    default). impl="triton" runs the scaled-dot kernels with the softmax switched off (value
    widths up to 128, as there); "auto" chooses between them and the reference as for the
    other ops (`AUTO_TRITON`)."""
    (q, k, v), _ = _op.apply_dtype_policy((q, k, v))
    check_attention(q, k, v, key_padding_mask)
    check_causal(causal)
    scale, bias = _op.default_scale(scale, q.shape[-1]), check_scale(bias, "bias")
    with _op.autocast_off(q):
        if _op.use_triton(impl, "q", q, AUTO_TRITON["sigmoid_attention"]):
            return sigmoid_attention_op(q, k, v, key_padding_mask, causal, scale, bias)
        return naive.sigmoid_attention(q, k, v, causal, key_padding_mask, scale, bias)
