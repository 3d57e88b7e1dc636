"""The Triton kernels as PyTorch operators in the `attnzoo` namespace (`torch.ops.attnzoo.*`).

Each public op is registered with `torch.library`: a schema, a fake (meta) implementation that
gives output shapes without running anything, its autograd formula, and an autocast rule. That
is what lets `torch.compile` (with `fullgraph=True`), autocast and `torch.library.opcheck` treat
the kernels like built-in ops: Dynamo and Inductor see an opaque op with known shapes instead of
tracing into Triton's launcher.

| op | inputs | outputs |
|---|---|---|
| `scaled_dot_attention` | q, k, v, mask?, causal, scale, dropout_p, seed? | out, lse |
| `quadratic_attention` | x, u, v, mask?, causal, scale, dropout_p, seed? | out |
| `metric_attention` | p, m, mask?, causal, scale, dropout_p, seed? | out, lse |
| `pool_mix` | x, window, causal, mask? | out, rcount |

`lse` (the rows' log-sum-exp) and `rcount` (reciprocal window counts) are what the backward
needs; they are outputs so that nothing is recomputed. The backward passes are ops too
(`*_backward`), so a compiled graph holds them as single nodes. `quadratic_attention` is a
composite op: q = x·U[h] as one batched matmul, then `scaled_dot_attention` with k = x read for
every head through a zero head stride (see kernels/attention.py for why q is formed outside the
kernel); its autograd is that of its parts.

`seed` is a one-element int64 tensor on the inputs' device, the Philox key from which the kernels
draw the dropout mask (forward and backward alike); `kernels/ops.py` draws it from torch's
generator on that device, so `torch.manual_seed` makes dropout reproducible and no host
synchronisation is needed.

The Triton modules are imported on first use of an op, not here: triton is optional off Linux and
slow to import.

Autocast: under `torch.autocast` on CPU or CUDA every floating input in fp16/bf16/fp32 is cast to
the autocast dtype and the op runs with autocast off — the dtype policy of `kernels/ops.py`
(`compute_dtype`), stated there once.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import torch
from torch import Tensor

NAMESPACE = "attnzoo"
OPS = ("scaled_dot_attention", "quadratic_attention", "metric_attention", "pool_mix")
AUTOCAST_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

_lib = torch.library.Library(NAMESPACE, "FRAGMENT")


def triton_module(name: str) -> ModuleType:
    """kernels/<name>.py (`attention` or `pooling`), imported on first use."""
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
) -> tuple[Tensor, Tensor]:
    return triton_module("attention").scaled_dot_forward(
        q, k, v, key_padding_mask, causal, scale, dropout_p, seed
    )


@scaled_dot_attention.register_fake
def _(q, k, v, key_padding_mask, causal, scale, dropout_p, seed):
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
) -> tuple[Tensor, Tensor, Tensor]:
    return triton_module("attention").scaled_dot_backward(
        d_out, q, k, v, out, lse, key_padding_mask, causal, scale, dropout_p, seed
    )


@scaled_dot_attention_backward.register_fake
def _(d_out, q, k, v, out, lse, key_padding_mask, causal, scale, dropout_p, seed):
    return _contiguous_like(q), _contiguous_like(k), _contiguous_like(v)


def _scaled_dot_setup(ctx, inputs, output) -> None:
    q, k, v, mask, causal, scale, dropout_p, seed = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, mask, seed)
    ctx.causal, ctx.scale, ctx.dropout_p = causal, scale, dropout_p


def _scaled_dot_backward(ctx, d_out, d_lse):
    q, k, v, out, lse, mask, seed = ctx.saved_tensors
    dq, dk, dv = scaled_dot_attention_backward(
        d_out, q, k, v, out, lse, mask, ctx.causal, ctx.scale, ctx.dropout_p, seed
    )
    return dq, dk, dv, None, None, None, None, None


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
) -> tuple[Tensor, Tensor]:
    return triton_module("attention").metric_forward(
        p, m, key_padding_mask, causal, scale, dropout_p, seed
    )


@metric_attention.register_fake
def _(p, m, key_padding_mask, causal, scale, dropout_p, seed):
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
) -> tuple[Tensor, Tensor]:
    return triton_module("attention").metric_backward(
        d_out, p, m, out, lse, key_padding_mask, causal, scale, dropout_p, seed
    )


@metric_attention_backward.register_fake
def _(d_out, p, m, out, lse, key_padding_mask, causal, scale, dropout_p, seed):
    return _contiguous_like(p), _contiguous_like(m)


def _metric_setup(ctx, inputs, output) -> None:
    p, m, mask, causal, scale, dropout_p, seed = inputs
    out, lse = output
    ctx.save_for_backward(p, m, out, lse, mask, seed)
    ctx.causal, ctx.scale, ctx.dropout_p = causal, scale, dropout_p


def _metric_backward(ctx, d_out, d_lse):
    p, m, out, lse, mask, seed = ctx.saved_tensors
    dp, dm = metric_attention_backward(
        d_out, p, m, out, lse, mask, ctx.causal, ctx.scale, ctx.dropout_p, seed
    )
    return dp, dm, None, None, None, None, None


metric_attention.register_autograd(_metric_backward, setup_context=_metric_setup)


# --------------------------------------------------------------------------------------------
# quadratic_attention: a composite of a batched matmul and scaled_dot_attention
# --------------------------------------------------------------------------------------------

_lib.define(
    "quadratic_attention(Tensor x, Tensor u, Tensor v, Tensor? key_padding_mask, bool causal, "
    "float scale, float dropout_p, Tensor? seed) -> Tensor"
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
) -> Tensor:
    b, n, d = x.shape
    h = u.shape[0]
    q_bhnd = torch.einsum("bnd,hde->bhne", x, u)
    k_bhnd = x[:, None].expand(b, h, n, d)  # zero head stride: one x for every head, no copy
    out, _ = torch.ops.attnzoo.scaled_dot_attention(
        q_bhnd, k_bhnd, v, key_padding_mask, causal, scale, dropout_p, seed
    )
    return out


_lib.impl("quadratic_attention", _quadratic_composite, "CompositeImplicitAutograd")


# --------------------------------------------------------------------------------------------
# pool_mix
# --------------------------------------------------------------------------------------------


@torch.library.custom_op(f"{NAMESPACE}::pool_mix", mutates_args=())
def pool_mix(
    x: Tensor, window: int, causal: bool, key_padding_mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    return triton_module("pooling").pool_mix_forward(x, window, causal, key_padding_mask)


@pool_mix.register_fake
def _(x, window, causal, key_padding_mask):
    b, n, _ = x.shape
    return _contiguous_like(x), _empty_like_rows(x, b, n)


@torch.library.custom_op(f"{NAMESPACE}::pool_mix_backward", mutates_args=())
def pool_mix_backward(grad: Tensor, rcount: Tensor, window: int, causal: bool) -> Tensor:
    return triton_module("pooling").pool_mix_backward(grad, rcount, window, causal)


@pool_mix_backward.register_fake
def _(grad, rcount, window, causal):
    return _contiguous_like(grad)


def _pool_setup(ctx, inputs, output) -> None:
    _, window, causal, _ = inputs
    ctx.save_for_backward(output[1])
    ctx.window, ctx.causal = window, causal


def _pool_backward(ctx, d_out, d_rcount):
    (rcount,) = ctx.saved_tensors
    return pool_mix_backward(d_out, rcount, ctx.window, ctx.causal), None, None, None


pool_mix.register_autograd(_pool_backward, setup_context=_pool_setup)


# --------------------------------------------------------------------------------------------
# Autocast: one rule for every public op
# --------------------------------------------------------------------------------------------


def _register_autocast(name: str, device_type: str) -> None:
    op = getattr(torch.ops.attnzoo, name).default
    key = "Autocast" + torch._C._dispatch_key_for_device(device_type)
    excluded = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

    def autocast_kernel(keyset, *args):
        first = next(a for a in args if isinstance(a, Tensor))
        dtype = compute_dtype(first)
        with torch._C._ExcludeDispatchKeyGuard(excluded):
            return op(*cast_floats(args, dtype))

    _lib.impl(name, autocast_kernel, key, with_keyset=True)


for _name in OPS:
    for _device in ("cpu", "cuda"):
        _register_autocast(_name, _device)
