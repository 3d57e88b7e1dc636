"""The Triton kernels as PyTorch operators in the `attnzoo` namespace (`torch.ops.attnzoo.*`).

Each public op is registered with `torch.library`: a schema, a fake (meta) implementation that
gives output shapes without running anything, its autograd formula, and an autocast rule. That
is what lets `torch.compile` (with `fullgraph=True`), autocast and `torch.library.opcheck` treat
the kernels like built-in ops: Dynamo and Inductor see an opaque op with known shapes instead of
tracing into Triton's launcher.

| op | inputs | outputs |
|---|---|---|
| `scaled_dot_attention` | q, k, v, mask?, causal, scale, dropout_p, seed?, window?, sink? | out, lse |
| `quadratic_attention` | x, u, v, mask?, causal, scale, dropout_p, seed?, sink? | out |
| `metric_attention` | p, m, mask?, causal, scale, dropout_p, seed?, sink? | out, lse |
| `sigmoid_attention` | q, k, v, mask?, causal, scale, bias | out |
| `pool_mix` | x, window, causal, mask? | out, rcount |
| `linear_attention` | q, k, v, mask?, causal, eps | out, den |
| `gated_linear_attention` | q, k, v, log_decay, scale, initial_state? | out, final_state |

`lse` (the rows' log-sum-exp), `rcount` (reciprocal window counts) and `den` (linear
attention's denominators) are what the backward needs; they are outputs so that nothing is recomputed. The backward passes are ops too
(`*_backward`), so a compiled graph holds them as single nodes. `quadratic_attention` is a
composite op: q = x·U[h] as one batched matmul, then `scaled_dot_attention` with k = x read for
every head through a zero head stride (docs/kernels.md says why q is formed outside the
kernel); its autograd is that of its parts.

`seed` is a one-element int64 tensor on the inputs' device, the Philox key from which the kernels
draw the dropout mask (forward and backward alike); `kernels/ops.py` draws it from torch's
generator on that device, so `torch.manual_seed` makes dropout reproducible and no host
synchronisation is needed.

`window` (scaled_dot_attention, optional: `[left, right]` or None) is the sliding window, query i
seeing keys i − left ..= i + right; with `causal` the right reach is 0 (kernels/ops.py).

`sink` (the three softmax ops, last and optional: a float tensor (H,) or None) is one more logit
per head in every row's softmax whose value is zero; it has a gradient, which the backward op
returns after the others (its outputs are a list: the inputs' gradients, then dsink if there is
a sink). `lse` then includes the sink. `sigmoid_attention` (σ(scale · q·k + bias) v, no row
normalisation) saves nothing but its inputs: its backward recomputes the weights.

The Triton modules are imported on first use of an op, not here: triton is optional off Linux and
slow to import.

`gated_linear_attention`'s final state is a real output (fp32, with a gradient), and its log
decay and initial state are fp32 in the kernels whatever dtype they come in.

Autocast: under `torch.autocast` on CPU or CUDA every floating input in fp16/bf16/fp32 is cast to
the autocast dtype and the op runs with autocast off — the dtype policy of `kernels/ops.py`
(`compute_dtype`), stated there once; gated_linear_attention casts q, k and v only (its log
decay and initial state keep their precision), and a sink keeps its dtype (the kernels read it
in fp32).
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

import torch
from torch import Tensor

from ._checks import (
    check_attention,
    check_causal,
    check_dropout,
    check_gated,
    check_linear,
    check_metric,
    check_pool,
    check_quadratic,
    check_saved,
    check_scale,
    check_sink,
    check_triton,
    check_window,
)

NAMESPACE = "attnzoo"
OPS = (
    "scaled_dot_attention",
    "quadratic_attention",
    "metric_attention",
    "sigmoid_attention",
    "pool_mix",
)
AUTOCAST_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

_lib = torch.library.Library(NAMESPACE, "FRAGMENT")


@functools.cache
def triton_module(name: str) -> ModuleType:
    """The kernel package kernels/<name>/ (`attention` or `pooling`), imported on first use."""
    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError as err:  # pragma: no cover - depends on the platform
        raise NotImplementedError(
            f"impl='triton' needs triton and attnzoo.kernels.{name}, which failed to import: {err}"
        ) from err


def compute_dtype(activation: Tensor) -> torch.dtype:
    """The dtype every op computes and returns in: under autocast on the activation's device the
    autocast dtype, otherwise the activation's own (fp64 is never cast, as autocast does)."""
    device = activation.device.type
    if (
        device in ("cpu", "cuda")
        and activation.dtype in AUTOCAST_DTYPES
        and torch.is_autocast_enabled(device)
    ):
        return torch.get_autocast_dtype(device)
    return activation.dtype


def cast_floats(args: tuple, dtype: torch.dtype) -> tuple:
    """Every fp16/bf16/fp32 tensor in `args` in `dtype`; other arguments as they are."""
    return tuple(
        a.to(dtype) if isinstance(a, Tensor) and a.dtype in AUTOCAST_DTYPES else a for a in args
    )


def _empty_like_rows(t: Tensor, b: int, n: int) -> Tensor:
    """A (b, n) fp32 per-row statistic (lse, rcount), as the kernels allocate it."""
    return t.new_empty((b, n), dtype=torch.float32)


def _contiguous_like(t: Tensor) -> Tensor:
    """What the kernels allocate for an output shaped like `t`: contiguous, whatever t's strides."""
    return t.new_empty(t.shape)


# The operators check their arguments (a compiled graph or a user may call them without
# kernels/ops.py); the eager path below calls the implementations after ops.py has checked.


def _check_attention_call(
    q, k, v, key_padding_mask, causal, scale, dropout_p, window=None, sink=None
):
    check_attention(q, k, v, key_padding_mask)
    check_triton("q", q)
    check_causal(causal)
    check_scale(scale)
    check_dropout(dropout_p)
    check_sink(sink, q.shape[1], q.device)
    return check_window(window)


def _check_metric_call(p, m, key_padding_mask, causal, scale, dropout_p, sink=None) -> None:
    check_metric(p, m, key_padding_mask)
    check_triton("p", p)
    check_causal(causal)
    check_scale(scale)
    check_dropout(dropout_p)
    check_sink(sink, p.shape[1], p.device)


def _check_backward_inputs(d_out: Tensor, out: Tensor, lse: Tensor, q: Tensor, d_v: int) -> None:
    """The upstream gradient and what the forward saved, against the forward's inputs."""
    b, h, n, _ = q.shape
    check_saved("d_out", d_out, (b, h, n, d_v), q)
    check_saved("out", out, (b, h, n, d_v), q)
    check_saved("lse", lse, (b * h, n), q, torch.float32, contiguous=True)


# --------------------------------------------------------------------------------------------
# scaled_dot_attention
# --------------------------------------------------------------------------------------------


@torch.library.custom_op(f"{NAMESPACE}::scaled_dot_attention", mutates_args=())
def scaled_dot_attention(
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
) -> tuple[Tensor, Tensor]:
    window = _check_attention_call(
        q, k, v, key_padding_mask, causal, scale, dropout_p, window, sink
    )
    return triton_module("attention").scaled_dot_forward(
        q, k, v, key_padding_mask, causal, scale, dropout_p, seed, window, sink
    )


@scaled_dot_attention.register_fake
def _(q, k, v, key_padding_mask, causal, scale, dropout_p, seed, window=None, sink=None):
    b, h, n, _ = q.shape
    return q.new_empty((b, h, n, v.shape[-1])), _empty_like_rows(q, b * h, n)


@torch.library.custom_op(f"{NAMESPACE}::scaled_dot_attention_backward", mutates_args=())
def scaled_dot_attention_backward(
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
) -> list[Tensor]:
    window = _check_attention_call(
        q, k, v, key_padding_mask, causal, scale, dropout_p, window, sink
    )
    _check_backward_inputs(d_out, out, lse, q, v.shape[-1])
    return triton_module("attention").scaled_dot_backward(
        d_out, q, k, v, out, lse, key_padding_mask, causal, scale, dropout_p, seed, window, sink
    )


@scaled_dot_attention_backward.register_fake
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
):
    return [_contiguous_like(q), _contiguous_like(k), _contiguous_like(v)] + _sink_grad_like(sink)


def _sink_grad_like(sink: Tensor | None) -> list[Tensor]:
    """A backward op's last output: the sink's gradient, where there is a sink."""
    return [] if sink is None else [sink.new_empty(sink.shape)]


def _no_gradient_for(ctx, statistic: Tensor) -> None:
    """A forward's second output (lse, rcount) is a statistic for the backward, not a function to
    differentiate: it gets no gradient, and the backward is handed None for it (by default
    autograd would allocate and zero-fill a tensor of its shape on every backward call)."""
    ctx.mark_non_differentiable(statistic)
    ctx.set_materialize_grads(False)


def _scaled_dot_setup(ctx, inputs, output) -> None:
    q, k, v, mask, causal, scale, dropout_p, seed, *optional = inputs  # window?, sink?
    window, sink = (*optional, None, None)[:2]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, mask, seed, sink)
    ctx.causal, ctx.scale, ctx.dropout_p = causal, scale, dropout_p
    ctx.window, ctx.n_inputs = window, len(inputs)
    _no_gradient_for(ctx, lse)


def _with_sink_gradient(grads: list[Tensor], n_inputs: int, n_first: int) -> tuple:
    """A forward's input gradients from its backward op's outputs: the first `n_first` inputs',
    None for the arguments in between, and the sink's last (when the call passed one)."""
    dsink = grads[n_first:]
    return (*grads[:n_first], *(None,) * (n_inputs - n_first - len(dsink)), *dsink)


def _scaled_dot_backward(ctx, d_out, d_lse):
    q, k, v, out, lse, mask, seed, sink = ctx.saved_tensors
    grads = _backward(
        ctx,
        "scaled_dot_attention_backward",
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
    )
    return _with_sink_gradient(grads, ctx.n_inputs, 3)


scaled_dot_attention.register_autograd(_scaled_dot_backward, setup_context=_scaled_dot_setup)


# --------------------------------------------------------------------------------------------
# metric_attention (the fused prologue: reads p and M only)
# --------------------------------------------------------------------------------------------


@torch.library.custom_op(f"{NAMESPACE}::metric_attention", mutates_args=())
def metric_attention(
    p: Tensor,
    m: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: Tensor | None,
    sink: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    _check_metric_call(p, m, key_padding_mask, causal, scale, dropout_p, sink)
    return triton_module("attention").metric_forward(
        p, m, key_padding_mask, causal, scale, dropout_p, seed, sink
    )


@metric_attention.register_fake
def _(p, m, key_padding_mask, causal, scale, dropout_p, seed, sink=None):
    b, h, n, _ = p.shape
    return _contiguous_like(p), _empty_like_rows(p, b * h, n)


@torch.library.custom_op(f"{NAMESPACE}::metric_attention_backward", mutates_args=())
def metric_attention_backward(
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
    _check_metric_call(p, m, key_padding_mask, causal, scale, dropout_p, sink)
    _check_backward_inputs(d_out, out, lse, p, p.shape[-1])
    return triton_module("attention").metric_backward(
        d_out, p, m, out, lse, key_padding_mask, causal, scale, dropout_p, seed, sink
    )


@metric_attention_backward.register_fake
def _(d_out, p, m, out, lse, key_padding_mask, causal, scale, dropout_p, seed, sink=None):
    return [_contiguous_like(p), _contiguous_like(m)] + _sink_grad_like(sink)


def _metric_setup(ctx, inputs, output) -> None:
    p, m, mask, causal, scale, dropout_p, seed, *optional = inputs  # sink?
    out, lse = output
    ctx.save_for_backward(p, m, out, lse, mask, seed, optional[0] if optional else None)
    ctx.causal, ctx.scale, ctx.dropout_p, ctx.n_inputs = causal, scale, dropout_p, len(inputs)
    _no_gradient_for(ctx, lse)


def _metric_backward(ctx, d_out, d_lse):
    p, m, out, lse, mask, seed, sink = ctx.saved_tensors
    grads = _backward(
        ctx,
        "metric_attention_backward",
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


metric_attention.register_autograd(_metric_backward, setup_context=_metric_setup)


# --------------------------------------------------------------------------------------------
# quadratic_attention: a composite of a batched matmul and scaled_dot_attention
# --------------------------------------------------------------------------------------------

_lib.define(
    "quadratic_attention(Tensor x, Tensor u, Tensor v, Tensor? key_padding_mask, bool causal, "
    "float scale, float dropout_p, Tensor? seed, Tensor? sink=None) -> Tensor"
)


def _quadratic(
    call,
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
    b, n, d = x.shape
    h = u.shape[0]
    q_bhnd = torch.einsum("bnd,hde->bhne", x, u)
    k_bhnd = x[:, None].expand(b, h, n, d)  # zero head stride: one x for every head, no copy
    out, _ = call(
        "scaled_dot_attention",
        q_bhnd,
        k_bhnd,
        v,
        key_padding_mask,
        causal,
        scale,
        dropout_p,
        seed,
        *(() if sink is None else (None, sink)),
    )
    return out


def _dispatch(name: str, *args):
    return getattr(torch.ops.attnzoo, name)(*args)


def _quadratic_op(x, u, v, key_padding_mask, causal, scale, dropout_p, seed, sink=None) -> Tensor:
    """The registered composite: the argument checks, then the parts as operators (the
    scaled-dot operator checks q = x·U, k = x and v again: on this path, which torch.compile
    traces once, not on the eager one)."""
    check_quadratic(x, u, v, key_padding_mask)
    check_triton("x", x)
    return _quadratic(_dispatch, x, u, v, key_padding_mask, causal, scale, dropout_p, seed, sink)


_lib.impl("quadratic_attention", _quadratic_op, "CompositeImplicitAutograd")


# --------------------------------------------------------------------------------------------
# sigmoid_attention: the scaled-dot kernels without the row normalisation
# --------------------------------------------------------------------------------------------


def _check_sigmoid_call(q, k, v, key_padding_mask, causal, scale, bias) -> None:
    check_attention(q, k, v, key_padding_mask)
    check_triton("q", q)
    check_causal(causal)
    check_scale(scale)
    check_scale(bias, "bias")


@torch.library.custom_op(f"{NAMESPACE}::sigmoid_attention", mutates_args=())
def sigmoid_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    scale: float,
    bias: float,
) -> Tensor:
    _check_sigmoid_call(q, k, v, key_padding_mask, causal, scale, bias)
    return triton_module("attention").sigmoid_forward(
        q, k, v, key_padding_mask, causal, scale, bias
    )


@sigmoid_attention.register_fake
def _(q, k, v, key_padding_mask, causal, scale, bias):
    b, h, n, _ = q.shape
    return q.new_empty((b, h, n, v.shape[-1]))


@torch.library.custom_op(f"{NAMESPACE}::sigmoid_attention_backward", mutates_args=())
def sigmoid_attention_backward(
    d_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    scale: float,
    bias: float,
) -> tuple[Tensor, Tensor, Tensor]:
    _check_sigmoid_call(q, k, v, key_padding_mask, causal, scale, bias)
    check_saved("d_out", d_out, (*q.shape[:3], v.shape[-1]), q)
    return triton_module("attention").sigmoid_backward(
        d_out, q, k, v, key_padding_mask, causal, scale, bias
    )


@sigmoid_attention_backward.register_fake
def _(d_out, q, k, v, key_padding_mask, causal, scale, bias):
    return _contiguous_like(q), _contiguous_like(k), _contiguous_like(v)


def _sigmoid_setup(ctx, inputs, output) -> None:
    q, k, v, mask, causal, scale, bias = inputs
    ctx.save_for_backward(q, k, v, mask)
    ctx.causal, ctx.scale, ctx.bias = causal, scale, bias


def _sigmoid_backward(ctx, d_out):
    q, k, v, mask = ctx.saved_tensors
    dq, dk, dv = _backward(
        ctx, "sigmoid_attention_backward", d_out, q, k, v, mask, ctx.causal, ctx.scale, ctx.bias
    )
    return dq, dk, dv, None, None, None, None


sigmoid_attention.register_autograd(_sigmoid_backward, setup_context=_sigmoid_setup)


# --------------------------------------------------------------------------------------------
# pool_mix
# --------------------------------------------------------------------------------------------


@torch.library.custom_op(f"{NAMESPACE}::pool_mix", mutates_args=())
def pool_mix(
    x: Tensor, window: int, causal: bool, key_padding_mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    check_pool(x, window, causal, key_padding_mask)
    check_triton("x", x)
    return triton_module("pooling").pool_mix_forward(x, window, causal, key_padding_mask)


@pool_mix.register_fake
def _(x, window, causal, key_padding_mask):
    b, n, _ = x.shape
    return _contiguous_like(x), _empty_like_rows(x, b, n)


@torch.library.custom_op(f"{NAMESPACE}::pool_mix_backward", mutates_args=())
def pool_mix_backward(grad: Tensor, rcount: Tensor, window: int, causal: bool) -> Tensor:
    check_pool(grad, window, causal, None, name="grad")
    check_triton("grad", grad)
    check_saved("rcount", rcount, tuple(grad.shape[:2]), grad, torch.float32, contiguous=True)
    return triton_module("pooling").pool_mix_backward(grad, rcount, window, causal)


@pool_mix_backward.register_fake
def _(grad, rcount, window, causal):
    return _contiguous_like(grad)


def _pool_setup(ctx, inputs, output) -> None:
    _, window, causal, _ = inputs
    ctx.save_for_backward(output[1])
    ctx.window, ctx.causal = window, causal
    _no_gradient_for(ctx, output[1])


def _pool_backward(ctx, d_out, d_rcount):
    (rcount,) = ctx.saved_tensors
    return (
        _backward(ctx, "pool_mix_backward", d_out, rcount, ctx.window, ctx.causal),
        None,
        None,
        None,
    )


pool_mix.register_autograd(_pool_backward, setup_context=_pool_setup)


# --------------------------------------------------------------------------------------------
# Calling the ops: the dispatcher while torch.compile traces, a lean path in eager mode
# --------------------------------------------------------------------------------------------


class _Eager(torch.autograd.Function):
    """An op's implementation and autograd formula (the very functions registered above) without
    the dispatcher. In eager mode a call through `torch.ops` pays for the custom-op machinery in
    Python (default filling, alias checks, an autograd wrapper, redispatch): about six times the
    host time of this path, measured on CPU with the kernels stubbed out. The attention kernels
    at training sizes are host-bound, so eager calls come here; torch.compile sees the ops."""

    @staticmethod
    def forward(ctx, name: str, *args):
        impl, setup, _ = _FORMULAS[name]
        output = impl(*args)
        setup(ctx, args, output)
        ctx.name, ctx.eager = name, True
        return output

    @staticmethod
    def backward(ctx, *grads):
        _, _, backward = _FORMULAS[ctx.name]
        return (None, *backward(ctx, *grads))


def _kernel(module: str, function: str):
    """kernels/<module>/'s `function`, looked up at call time (the package loads lazily)."""
    return lambda *args: getattr(triton_module(module), function)(*args)


# op name -> (implementation, setup_context, backward): what the custom ops above run and register
_FORMULAS = {
    "scaled_dot_attention": (
        _kernel("attention", "scaled_dot_forward"),
        _scaled_dot_setup,
        _scaled_dot_backward,
    ),
    "metric_attention": (_kernel("attention", "metric_forward"), _metric_setup, _metric_backward),
    "sigmoid_attention": (
        _kernel("attention", "sigmoid_forward"),
        _sigmoid_setup,
        _sigmoid_backward,
    ),
    "pool_mix": (_kernel("pooling", "pool_mix_forward"), _pool_setup, _pool_backward),
}
_BACKWARDS = {
    "scaled_dot_attention_backward": _kernel("attention", "scaled_dot_backward"),
    "metric_attention_backward": _kernel("attention", "metric_backward"),
    "sigmoid_attention_backward": _kernel("attention", "sigmoid_backward"),
    "pool_mix_backward": _kernel("pooling", "pool_mix_backward"),
}


def run(name: str, *args):
    """Call op `name`: through `torch.ops.attnzoo.<name>` whenever something traces the call
    (torch.compile, fake tensors, make_fx, opcheck), so it is one opaque node of the graph; in
    plain eager mode the same implementation and autograd formula directly (the implementation
    alone where autograd records nothing: under no_grad, or when no input requires grad)."""
    if _traced(args[0]):
        return _dispatch(name, *args)
    if name == "quadratic_attention":
        return _quadratic(run, *args)
    if not (torch.is_grad_enabled() and any(_requires_grad(a) for a in args)):
        return _FORMULAS[name][0](*args)
    return _Eager.apply(name, *args)


def _requires_grad(arg) -> bool:
    return isinstance(arg, Tensor) and arg.requires_grad


def _traced(activation: Tensor) -> bool:
    return (
        torch.compiler.is_compiling()
        or torch._C._len_torch_dispatch_stack() > 0  # fake tensor, proxy and other modes
        or type(activation) is not Tensor  # tensor subclasses, e.g. FakeTensor
    )


def _backward(ctx, name: str, *args):
    """A backward op, from an autograd formula: its implementation directly when the forward
    took the eager path, else `torch.ops.attnzoo.<name>` (what compile and opcheck trace)."""
    if getattr(ctx, "eager", False):
        return _BACKWARDS[name](*args)
    return _dispatch(name, *args)


# --------------------------------------------------------------------------------------------
# Autocast: one rule for every public op
# --------------------------------------------------------------------------------------------


def _register_autocast(name: str, device_type: str, n_cast: int | None = None) -> None:
    """The rule for op `name` on `device_type`; `n_cast`: only the first n_cast arguments are
    activations to cast (the others keep their dtype), default all of them."""
    op = getattr(torch.ops.attnzoo, name).default
    key = "Autocast" + torch._C._dispatch_key_for_device(device_type)
    excluded = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

    def autocast_kernel(keyset, *args):
        first = next(a for a in args if isinstance(a, Tensor))
        dtype = compute_dtype(first)
        cast = args if n_cast is None else args[:n_cast]
        with torch._C._ExcludeDispatchKeyGuard(excluded):
            return op(*cast_floats(cast, dtype), *args[len(cast) :])

    _lib.impl(name, autocast_kernel, key, with_keyset=True)


# The activations (and U, M) each op casts: the leading arguments; a sink, last, keeps its dtype.
_CAST = {
    "scaled_dot_attention": 3,
    "quadratic_attention": 3,
    "metric_attention": 2,
    "sigmoid_attention": 3,
    "pool_mix": None,
}
for _name in OPS:
    for _device in ("cpu", "cuda"):
        _register_autocast(_name, _device, _CAST[_name])


# --------------------------------------------------------------------------------------------
# linear_attention (kernels/linear/): registered after the rule above, with its own autocast
# --------------------------------------------------------------------------------------------

LINEAR_OPS = ("linear_attention",)


def _check_linear_call(q, k, v, key_padding_mask, causal, eps) -> None:
    check_linear(q, k, v, key_padding_mask, causal, eps)
    check_triton("q", q)


@torch.library.custom_op(f"{NAMESPACE}::linear_attention", mutates_args=())
def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    eps: float,
) -> tuple[Tensor, Tensor]:
    _check_linear_call(q, k, v, key_padding_mask, causal, eps)
    return triton_module("linear").linear_attention_forward(q, k, v, key_padding_mask, causal, eps)


@linear_attention.register_fake
def _(q, k, v, key_padding_mask, causal, eps):
    b, h, n, _ = q.shape
    return q.new_empty((b, h, n, v.shape[-1])), _empty_like_rows(q, b * h, n)


@torch.library.custom_op(f"{NAMESPACE}::linear_attention_backward", mutates_args=())
def linear_attention_backward(
    d_out: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    den: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    _check_linear_call(q, k, v, key_padding_mask, causal, 0.0)
    b, h, n, _ = q.shape
    check_saved("d_out", d_out, (b, h, n, v.shape[-1]), q)
    check_saved("out", out, (b, h, n, v.shape[-1]), q)
    check_saved("den", den, (b * h, n), q, torch.float32, contiguous=True)
    return triton_module("linear").linear_attention_backward(
        d_out, q, k, v, out, den, key_padding_mask, causal
    )


@linear_attention_backward.register_fake
def _(d_out, q, k, v, out, den, key_padding_mask, causal):
    return _contiguous_like(q), _contiguous_like(k), _contiguous_like(v)


def _linear_setup(ctx, inputs, output) -> None:
    q, k, v, mask, causal, _ = inputs
    out, den = output
    ctx.save_for_backward(q, k, v, out, den, mask)
    ctx.causal = causal
    _no_gradient_for(ctx, den)


def _linear_backward(ctx, d_out, d_den):
    q, k, v, out, den, mask = ctx.saved_tensors
    dq, dk, dv = _backward(
        ctx, "linear_attention_backward", d_out, q, k, v, out, den, mask, ctx.causal
    )
    return dq, dk, dv, None, None, None


linear_attention.register_autograd(_linear_backward, setup_context=_linear_setup)

_FORMULAS["linear_attention"] = (
    _kernel("linear", "linear_attention_forward"),
    _linear_setup,
    _linear_backward,
)
_BACKWARDS["linear_attention_backward"] = _kernel("linear", "linear_attention_backward")

for _name in LINEAR_OPS:
    for _device in ("cpu", "cuda"):
        _register_autocast(_name, _device)


# --------------------------------------------------------------------------------------------
# gated_linear_attention (kernels/gated/): a decaying state; autocast casts q, k, v only
# --------------------------------------------------------------------------------------------


def _check_gated_call(q, k, v, log_decay, scale, initial_state) -> None:
    check_gated(q, k, v, log_decay, initial_state, True)
    check_triton("q", q)
    check_scale(scale)


@torch.library.custom_op(f"{NAMESPACE}::gated_linear_attention", mutates_args=())
def gated_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    scale: float,
    initial_state: Tensor | None,
) -> tuple[Tensor, Tensor]:
    _check_gated_call(q, k, v, log_decay, scale, initial_state)
    return triton_module("gated").gated_linear_attention_forward(
        q, k, v, log_decay, scale, initial_state
    )


@gated_linear_attention.register_fake
def _(q, k, v, log_decay, scale, initial_state):
    b, h, n, kd = q.shape
    dv = v.shape[-1]
    return q.new_empty((b, h, n, dv)), q.new_empty((b, h, kd, dv), dtype=torch.float32)


@torch.library.custom_op(f"{NAMESPACE}::gated_linear_attention_backward", mutates_args=())
def gated_linear_attention_backward(
    d_out: Tensor,
    d_final: Tensor | None,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    scale: float,
    initial_state: Tensor | None,
    final_state: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    _check_gated_call(q, k, v, log_decay, scale, initial_state)
    b, h, n, kd = q.shape
    state = (b, h, kd, v.shape[-1])
    check_saved("d_out", d_out, (b, h, n, v.shape[-1]), q)
    check_saved("final_state", final_state, state, q, torch.float32)
    if d_final is not None:
        check_saved("d_final", d_final, state, q, torch.float32)
    return triton_module("gated").gated_linear_attention_backward(
        d_out, d_final, q, k, v, log_decay, scale, initial_state, final_state
    )


@gated_linear_attention_backward.register_fake
def _(d_out, d_final, q, k, v, log_decay, scale, initial_state, final_state):
    b, h, _, kd = q.shape
    return (
        _contiguous_like(q),
        _contiguous_like(k),
        _contiguous_like(v),
        log_decay.new_empty(log_decay.shape),
        q.new_empty((b, h, kd, v.shape[-1]), dtype=torch.float32),
    )


def _gated_setup(ctx, inputs, output) -> None:
    q, k, v, log_decay, scale, initial_state = inputs
    ctx.save_for_backward(q, k, v, log_decay, initial_state, output[1])
    ctx.scale = scale
    ctx.set_materialize_grads(False)  # an unused output (often the final state) gets None


def _gated_backward(ctx, d_out, d_final):
    q, k, v, log_decay, initial_state, final_state = ctx.saved_tensors
    if d_out is None:  # only the final state was used
        d_out = q.new_zeros((*q.shape[:3], v.shape[-1]))
    dq, dk, dv, dg, dh0 = _backward(
        ctx,
        "gated_linear_attention_backward",
        d_out,
        d_final,
        q,
        k,
        v,
        log_decay,
        ctx.scale,
        initial_state,
        final_state,
    )
    dh0 = None if initial_state is None else dh0.to(initial_state.dtype)
    return dq, dk, dv, dg, None, dh0


gated_linear_attention.register_autograd(_gated_backward, setup_context=_gated_setup)

_FORMULAS["gated_linear_attention"] = (
    _kernel("gated", "gated_linear_attention_forward"),
    _gated_setup,
    _gated_backward,
)
_BACKWARDS["gated_linear_attention_backward"] = _kernel("gated", "gated_linear_attention_backward")

for _device in ("cpu", "cuda"):
    _register_autocast("gated_linear_attention", _device, n_cast=3)
