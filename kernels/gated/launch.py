"""The gated_linear_attention launchers: the kernels' own limits, output allocation, the grid.

The arguments arrive checked (kernels/_checks.py, at the public op or the torch.ops.attnzoo
operator the call came in by); what is checked here are the kernels' limits: K and V up to
MAX_WIDTH, rows of one head indexed in int32, no bf16 under the interpreter. q, k, v, the log
decay and the upstream gradient are read through their strides (a decay per token as a
zero-stride view over K, no copy); the log decay and the states are fp32 in the kernels, and
each gradient is returned in its input's dtype. Outputs are contiguous. One program per
(batch, head), one config: chunks of BT = 16 tokens, 4 warps (8 from a 64 × 64 state on).
"""

from __future__ import annotations

import functools

import torch

from .._checks import check_chunked_launch
from ..linear.tuning import dot_precision, width
from ._jit import BT, MAX_WIDTH, _gla_bwd_dkdv_kernel, _gla_bwd_dq_kernel, _gla_fwd_kernel

# Tests set this to True: outputs are then allocated full of NaN, so an element the kernel never
# writes shows up as NaN instead of as whatever memory held before.
POISON_OUTPUTS = False


def num_warps(bk: int, bv: int) -> int:
    return 8 if bk * bv >= 64 * 64 else 4


def _check_limits(q_bhnk: torch.Tensor, v_bhnv: torch.Tensor, named: dict) -> None:
    check_chunked_launch("gated_linear_attention", "key", q_bhnk, v_bhnv, named, MAX_WIDTH)


def _alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if POISON_OUTPUTS:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


@functools.cache
def _placeholder(device: torch.device) -> torch.Tensor:
    """A pointer passed where a state is switched off (HAS_H0 / HAS_DHT False): never read."""
    return torch.zeros(1, dtype=torch.float32, device=device)


def _per_key(log_decay: torch.Tensor, kd: int) -> torch.Tensor:
    """The log decay as fp32 (B, H, N, K): a decay per token as a zero-stride view over K."""
    g = log_decay.float()
    return g[..., None].expand(*g.shape, kd) if g.dim() == 3 else g


def _state(t: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    return _placeholder(device) if t is None else t.float().contiguous()


def _switches(q_bhnk: torch.Tensor, v_bhnv: torch.Tensor) -> dict:
    bk, bv = width(q_bhnk.shape[-1]), width(v_bhnv.shape[-1])
    return dict(
        DOT_PREC=dot_precision(q_bhnk.dtype), BK=bk, BV=bv, BT=BT, num_warps=num_warps(bk, bv),
        num_stages=1,
    )  # fmt: skip


def gated_linear_attention_forward(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    log_decay: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the forward kernel: (out (B, H, N, V) in q's dtype, final state (B, H, K, V) fp32)."""
    g_bhnk = _per_key(log_decay, q_bhnk.shape[-1])
    _check_limits(q_bhnk, v_bhnv, {"q": q_bhnk, "k": k_bhnk, "v": v_bhnv, "log_decay": g_bhnk})
    b, h, n, kd = q_bhnk.shape
    dv = v_bhnv.shape[-1]
    device = q_bhnk.device
    out_bhnv = _alloc((b, h, n, dv), q_bhnk.dtype, device)
    ht_bhkv = _alloc((b, h, kd, dv), torch.float32, device)
    if b * h * kd * dv == 0 or n == 0:  # nothing to launch
        ht_bhkv = ht_bhkv.zero_() if initial_state is None else ht_bhkv.copy_(initial_state)
        return out_bhnv.zero_(), ht_bhkv
    _gla_fwd_kernel[(b * h,)](
        q_bhnk, k_bhnk, v_bhnv, g_bhnk, _state(initial_state, device), out_bhnv, ht_bhkv,
        float(scale), h, n, kd, dv,
        *q_bhnk.stride(), *k_bhnk.stride(), *v_bhnv.stride(), *g_bhnk.stride(),
        HAS_H0=initial_state is not None, **_switches(q_bhnk, v_bhnv),
    )  # fmt: skip
    return out_bhnv, ht_bhkv


def gated_linear_attention_backward(
    d_out: torch.Tensor,
    d_final: torch.Tensor | None,
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    log_decay: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor | None,
    final_state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the two backward kernels: (dq, dk, dv) contiguous in q's dtype, d log_decay in its
    shape and dtype, d initial_state (B, H, K, V) fp32 (the gradient of S_{−1} whether or not
    one was given)."""
    g_bhnk = _per_key(log_decay, q_bhnk.shape[-1])
    named = {"q": q_bhnk, "k": k_bhnk, "v": v_bhnv, "log_decay": g_bhnk, "d_out": d_out}
    _check_limits(q_bhnk, v_bhnv, named)
    b, h, n, kd = q_bhnk.shape
    dv = v_bhnv.shape[-1]
    device, dtype = q_bhnk.device, q_bhnk.dtype
    dq_bhnk = _alloc((b, h, n, kd), dtype, device)
    dk_bhnk = _alloc((b, h, n, kd), dtype, device)
    dv_bhnv = _alloc((b, h, n, dv), dtype, device)
    dg_bhnk = _alloc((b, h, n, kd), torch.float32, device)
    dh0_bhkv = _alloc((b, h, kd, dv), torch.float32, device)
    if b * h * kd * dv == 0 or n == 0:
        dh0_bhkv = dh0_bhkv.zero_() if d_final is None else dh0_bhkv.copy_(d_final)
        for t in (dq_bhnk, dk_bhnk, dv_bhnv, dg_bhnk):
            t.zero_()
    else:
        switches = _switches(q_bhnk, v_bhnv)
        _gla_bwd_dq_kernel[(b * h,)](
            k_bhnk, v_bhnv, g_bhnk, _state(initial_state, device), d_out, dq_bhnk,
            float(scale), h, n, kd, dv,
            *k_bhnk.stride(), *v_bhnv.stride(), *g_bhnk.stride(), *d_out.stride(),
            HAS_H0=initial_state is not None, **switches,
        )  # fmt: skip
        _gla_bwd_dkdv_kernel[(b * h,)](
            q_bhnk, k_bhnk, v_bhnv, g_bhnk, d_out, _state(final_state, device),
            _state(d_final, device), dq_bhnk, dk_bhnk, dv_bhnv, dg_bhnk, dh0_bhkv,
            float(scale), h, n, kd, dv,
            *q_bhnk.stride(), *k_bhnk.stride(), *v_bhnv.stride(), *g_bhnk.stride(),
            *d_out.stride(), HAS_DHT=d_final is not None, **switches,
        )  # fmt: skip
    dg = dg_bhnk if log_decay.dim() == 4 else dg_bhnk.sum(dim=-1)
    return dq_bhnk, dk_bhnk, dv_bhnv, dg.to(log_decay.dtype), dh0_bhkv
