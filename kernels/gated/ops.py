"""gated_linear_attention: linear attention with a decaying state (RetNet, Mamba-2, GLA).

The public function checks its arguments once and picks the path; the custom op
`torch.ops.attnzoo.gated_linear_attention` (and its backward op) runs the chunked Triton kernels
of launch.py. Its final state is a real output (fp32, with a gradient), and its log decay and
initial state are fp32 in the kernels whatever dtype they come in; the autocast rule casts q, k
and v only.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _op
from .._checks import FLOAT_DTYPES, check_attention, check_causal, check_saved
from . import naive

# impl="auto" on CUDA: the chunked PyTorch path was faster than the kernels at every shape
# measured (H100, 2026-11-23; docs/gpu.md). Flip to True where scripts/gpu_check.py says the
# kernels win.
AUTO_TRITON = False


def check_gated(
    q_bhnk: Tensor,
    k_bhnk: Tensor,
    v_bhnv: Tensor,
    log_decay: Tensor,
    initial_state: Tensor | None,
    causal: bool,
) -> None:
    """gated_linear_attention's arguments: q, k (batch, heads, tokens, K) and v (batch, heads,
    tokens, V) as for attention; log_decay (batch, heads, tokens) or (batch, heads, tokens, K)
    and initial_state (batch, heads, K, V) of any float dtype on q's device; causal=True."""
    check_attention(q_bhnk, k_bhnk, v_bhnv, None)
    b, h, n, kd = q_bhnk.shape
    if not isinstance(log_decay, Tensor) or log_decay.dtype not in FLOAT_DTYPES:
        got = log_decay.dtype if isinstance(log_decay, Tensor) else type(log_decay).__name__
        raise ValueError(f"log_decay must be a float tensor, got {got}")
    if tuple(log_decay.shape) not in ((b, h, n), (b, h, n, kd)):
        raise ValueError(
            f"log_decay must have shape (batch, heads, tokens) = {(b, h, n)} (one decay per "
            f"token) or (batch, heads, tokens, K) = {(b, h, n, kd)} (one per key dimension), "
            f"got {tuple(log_decay.shape)}"
        )
    if log_decay.device != q_bhnk.device:
        raise ValueError(f"log_decay is on {log_decay.device} but q is on {q_bhnk.device}")
    if initial_state is not None:
        shape = (b, h, kd, v_bhnv.shape[-1])
        if not isinstance(initial_state, Tensor) or initial_state.dtype not in FLOAT_DTYPES:
            got = (
                initial_state.dtype
                if isinstance(initial_state, Tensor)
                else type(initial_state).__name__
            )
            raise ValueError(f"initial_state must be None or a float tensor, got {got}")
        if tuple(initial_state.shape) != shape:
            raise ValueError(
                f"initial_state must have shape (batch, heads, K, V) = {shape}, "
                f"got {tuple(initial_state.shape)}"
            )
        if initial_state.device != q_bhnk.device:
            raise ValueError(
                f"initial_state is on {initial_state.device} but q is on {q_bhnk.device}"
            )
    check_causal(causal)
    if not causal:
        raise ValueError(
            "causal=False: gated_linear_attention is a recurrence forwards in time and takes "
            "causal=True only (a bidirectional mixer runs it over the sequence and its reverse)"
        )


def _launch():
    return _op.triton_part(f"{__package__}.launch")


@torch.library.custom_op(f"{_op.NAMESPACE}::gated_linear_attention", mutates_args=())
def gated_linear_attention_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    scale: float,
    initial_state: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """The kernels' forward: the output and the final state (fp32)."""
    return _launch().gated_linear_attention_forward(q, k, v, log_decay, scale, initial_state)


@gated_linear_attention_op.register_fake
def _(q, k, v, log_decay, scale, initial_state):
    b, h, n, kd = q.shape
    dv = v.shape[-1]
    return q.new_empty((b, h, n, dv)), q.new_empty((b, h, kd, dv), dtype=torch.float32)


@torch.library.custom_op(f"{_op.NAMESPACE}::gated_linear_attention_backward", mutates_args=())
def gated_linear_attention_backward_op(
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
    b, h, n, kd = q.shape
    state = (b, h, kd, v.shape[-1])
    check_saved("d_out", d_out, (b, h, n, v.shape[-1]), q)
    check_saved("final_state", final_state, state, q, torch.float32)
    if d_final is not None:
        check_saved("d_final", d_final, state, q, torch.float32)
    return _launch().gated_linear_attention_backward(
        d_out, d_final, q, k, v, log_decay, scale, initial_state, final_state
    )


@gated_linear_attention_backward_op.register_fake
def _(d_out, d_final, q, k, v, log_decay, scale, initial_state, final_state):
    b, h, _, kd = q.shape
    return (
        _op.contiguous_like(q),
        _op.contiguous_like(k),
        _op.contiguous_like(v),
        log_decay.new_empty(log_decay.shape),
        q.new_empty((b, h, kd, v.shape[-1]), dtype=torch.float32),
    )


def _setup(ctx, inputs, output) -> None:
    q, k, v, log_decay, scale, initial_state = inputs
    ctx.save_for_backward(q, k, v, log_decay, initial_state, output[1])
    ctx.scale = scale
    ctx.set_materialize_grads(False)  # an unused output (often the final state) gets None


def _backward(ctx, d_out, d_final):
    q, k, v, log_decay, initial_state, final_state = ctx.saved_tensors
    if d_out is None:  # only the final state was used
        d_out = q.new_zeros((*q.shape[:3], v.shape[-1]))
    dq, dk, dv, dg, dh0 = gated_linear_attention_backward_op(
        d_out, d_final, q, k, v, log_decay, ctx.scale, initial_state, final_state
    )
    dh0 = None if initial_state is None else dh0.to(initial_state.dtype)
    return dq, dk, dv, dg, None, dh0


gated_linear_attention_op.register_autograd(_backward, setup_context=_setup)
_op.register_autocast("gated_linear_attention", n_cast=3)


def gated_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_decay: Tensor,
    causal: bool = True,
    scale: float | None = None,
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    impl: str = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
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
    (q, k, v), _ = _op.apply_dtype_policy((q, k, v))
    check_gated(q, k, v, log_decay, initial_state, causal)
    if not isinstance(output_final_state, bool):
        raise ValueError(f"output_final_state must be a bool, got {output_final_state!r}")
    scale = _op.default_scale(scale, q.shape[-1])
    ct = _op.accumulate_dtype(q)
    log_decay = log_decay.to(ct)
    if initial_state is not None:
        initial_state = initial_state.to(ct)
    with _op.autocast_off(q):
        if _op.use_triton(impl, "q", q, AUTO_TRITON):
            out, final_state = gated_linear_attention_op(q, k, v, log_decay, scale, initial_state)
        else:
            out, final_state = naive.chunked(q, k, v, log_decay, scale, initial_state)
    return (out, final_state) if output_final_state else out
