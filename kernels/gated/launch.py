"""The gated_linear_attention launchers: the kernels' own limits, output allocation, the grid.

The arguments arrive checked by the public op (ops.py); what is checked here are the kernels'
limits: K and V up to MAX_WIDTH, rows of one head indexed in int32, no bf16 under the interpreter.
q, k, v, the log decay and the upstream gradient are read through their strides (a decay per token
as a zero-stride view over K, no copy); the log decay and the states are fp32 in the kernels, and
each gradient is returned in its input's dtype. Outputs are contiguous.

The grid is (B·H, NV), one program per (batch, head) and V tile of BV columns, NV = cdiv(V, BV);
one config: chunks of BT = 16 tokens, one stage, 8 warps (4 for a half-precision state below
64 × 64). BV is the padded V except where the compile report (scripts/kernel_report.py) shows
the whole state spilling (`V_TILES`). dq and dk come from the kernels as fp32 parts, one per
V tile, in (NV, B, H, N, K) buffers summed here (with one tile, the gradients): two buffers of NV
times q's size in fp32 and a pass over them; the dk kernel also gets a state-sized fp32 scratch
buffer (its dS, read back in key tiles). The log decay's gradient is formed here from dq and dk in fp32
(`_log_decay_grad`), whatever NV: a few passes over (B, H, N, K) fp32 tensors.
"""

from __future__ import annotations

import functools

import torch
import triton

from .._checks import check_chunked_launch
from ..linear.tuning import dot_precision, width
from ._jit import BT, MAX_WIDTH, _gla_bwd_dq_kernel, _gla_fwd_kernel
from ._jit_dkdv import _gla_bwd_dk_kernel, _gla_bwd_dv_kernel

# Tests set this to True: outputs are then allocated full of NaN, so an element the kernel never
# writes shows up as NaN instead of as whatever memory held before.
POISON_OUTPUTS = False


# The V tile (dtype, the wider of the padded K and V) -> BV where the whole state would spill,
# from the compile report (K = V): the widest power of two with no spills in any kernel on sm_80
# and sm_90 (at width 128 the half-precision dq kernel spills 216 B on sm_90 at BV = 64, the fp32
# dq kernel 16 B at BV = 32). Every width not listed keeps the whole state (BV = the padded V).
V_TILES: dict[tuple[torch.dtype, int], int] = {
    (torch.float16, 128): 32,
    (torch.bfloat16, 128): 32,
    (torch.float32, 128): 16,
}


# BKA, the key columns a kernel reads at a time where it sums over K (the intra-chunk block, the
# state's product with the chunk's queries or keys): an fp32 dot over all 128 columns spilled
# 0.7-2.7 KB; with 32 no kernel spills at any width and dtype (the compile report).
KEY_TILE = 32


def key_tile(bk: int) -> int:
    """BKA: the key tile for a padded K of bk."""
    return min(bk, KEY_TILE)


def value_tile(dtype: torch.dtype, bk: int, bv: int) -> int:
    """BV: the V tile's width for a BK × BV state in `dtype` (BK, BV the padded widths)."""
    return min(bv, V_TILES.get((dtype, max(bk, bv)), bv))


def num_warps(dtype: torch.dtype, bk: int, bv: int) -> int:
    """Warps for a BK × BV state (padded widths, the whole state, not its V tile): 8 in fp32
    (whose fp32 dot operands spill on 4 from width 16 on) and from a 64 × 64 state on."""
    return 8 if dtype == torch.float32 or bk * bv >= 64 * 64 else 4


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
    dtype, bk, bv = q_bhnk.dtype, width(q_bhnk.shape[-1]), width(v_bhnv.shape[-1])
    return dict(
        DOT_PREC=dot_precision(dtype),
        BK=bk,
        BV=value_tile(dtype, bk, bv),
        BT=BT,
        num_warps=num_warps(dtype, bk, bv),
        num_stages=1,
    )


def _grid(b: int, h: int, dv: int, switches: dict) -> tuple[int, int]:
    return (b * h, triton.cdiv(dv, switches["BV"]))


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
    switches = _switches(q_bhnk, v_bhnv)
    _gla_fwd_kernel[_grid(b, h, dv, switches)](
        q_bhnk,
        k_bhnk,
        v_bhnv,
        g_bhnk,
        _state(initial_state, device),
        out_bhnv,
        ht_bhkv,
        float(scale),
        h,
        n,
        kd,
        dv,
        *q_bhnk.stride(),
        *k_bhnk.stride(),
        *v_bhnv.stride(),
        *g_bhnk.stride(),
        HAS_H0=initial_state is not None,
        BKA=key_tile(switches["BK"]),
        **switches,
    )
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
    """Run the three backward kernels: (dq, dk, dv) contiguous in q's dtype, d log_decay in its
    shape and dtype, d initial_state (B, H, K, V) fp32 (the gradient of S_{−1} whether or not
    one was given)."""
    g_bhnk = _per_key(log_decay, q_bhnk.shape[-1])
    named = {"q": q_bhnk, "k": k_bhnk, "v": v_bhnv, "log_decay": g_bhnk, "d_out": d_out}
    _check_limits(q_bhnk, v_bhnv, named)
    b, h, n, kd = q_bhnk.shape
    dv = v_bhnv.shape[-1]
    device, dtype = q_bhnk.device, q_bhnk.dtype
    dv_bhnv = _alloc((b, h, n, dv), dtype, device)
    dh0_bhkv = _alloc((b, h, kd, dv), torch.float32, device)
    if b * h * kd * dv == 0 or n == 0:
        dh0_bhkv = dh0_bhkv.zero_() if d_final is None else dh0_bhkv.copy_(d_final)
        dq_bhnk, dk_bhnk = (torch.zeros((b, h, n, kd), dtype=dtype, device=device) for _ in "qk")
        dg_bhnk = torch.zeros((b, h, n, kd), dtype=torch.float32, device=device)
        dv_bhnv.zero_()
    else:
        switches = _switches(q_bhnk, v_bhnv)
        grid = _grid(b, h, dv, switches)
        nv = grid[1]
        # dq and dk as fp32 parts, one per V tile (the gradients themselves with one tile), so
        # that the log decay's gradient is formed from them before they are rounded to q's dtype
        dq_pbhnk, dk_pbhnk = (_alloc((nv, b, h, n, kd), torch.float32, device) for _ in "qk")
        h0, dht = _state(initial_state, device), _state(d_final, device)
        strides = (*g_bhnk.stride(), *d_out.stride())
        _gla_bwd_dq_kernel[grid](
            k_bhnk,
            v_bhnv,
            g_bhnk,
            h0,
            d_out,
            dq_pbhnk,
            float(scale),
            h,
            n,
            kd,
            dv,
            *k_bhnk.stride(),
            *v_bhnv.stride(),
            *strides,
            HAS_H0=initial_state is not None,
            **switches,
        )
        ds_scratch = torch.empty((b, h, kd, dv), dtype=torch.float32, device=device)
        _gla_bwd_dk_kernel[grid](
            q_bhnk,
            v_bhnv,
            g_bhnk,
            d_out,
            dht,
            dk_pbhnk,
            ds_scratch,
            float(scale),
            h,
            n,
            kd,
            dv,
            *q_bhnk.stride(),
            *v_bhnv.stride(),
            *strides,
            HAS_DHT=d_final is not None,
            BKA=key_tile(switches["BK"]),
            **switches,
        )
        _gla_bwd_dv_kernel[grid](
            q_bhnk,
            k_bhnk,
            g_bhnk,
            d_out,
            dht,
            dv_bhnv,
            dh0_bhkv,
            float(scale),
            h,
            n,
            kd,
            dv,
            *q_bhnk.stride(),
            *k_bhnk.stride(),
            *strides,
            HAS_DHT=d_final is not None,
            BKA=key_tile(switches["BK"]),
            **switches,
        )
        # the parts of the sums over V: the sums themselves when there is one tile
        dq_bhnk, dk_bhnk = (p.sum(dim=0) if nv > 1 else p[0] for p in (dq_pbhnk, dk_pbhnk))
        dg_bhnk = _log_decay_grad(q_bhnk, k_bhnk, dq_bhnk, dk_bhnk, final_state, d_final)
        dq_bhnk, dk_bhnk = dq_bhnk.to(dtype), dk_bhnk.to(dtype)
    dg = dg_bhnk if log_decay.dim() == 4 else dg_bhnk.sum(dim=-1)
    return dq_bhnk, dk_bhnk, dv_bhnv, dg.to(log_decay.dtype), dh0_bhkv


def _log_decay_grad(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    dq_bhnk: torch.Tensor,
    dk_bhnk: torch.Tensor,
    final_state: torch.Tensor,
    d_final: torch.Tensor | None,
) -> torch.Tensor:
    """dg (B, H, N, K) fp32: the reverse cumulative sum over the sequence of
    ∂L/∂B_t = q_t ⊙ dq_t − k_t ⊙ dk_t, plus Σ_v S_N ⊙ dS_N (the final state's term, at the last
    token, so in every token's sum). A few fp32 passes over (B, H, N, K) tensors."""
    db_bhnk = q_bhnk.float() * dq_bhnk.float() - k_bhnk.float() * dk_bhnk.float()
    dg_bhnk = db_bhnk.flip(2).cumsum(dim=2).flip(2)
    if d_final is not None:
        dg_bhnk += (final_state.float() * d_final.float()).sum(dim=-1)[:, :, None, :]
    return dg_bhnk
