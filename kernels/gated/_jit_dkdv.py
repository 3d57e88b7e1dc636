"""The gated_linear_attention backward's dk and dv kernels (the math is in `_jit.py`).

Both walk the chunks from the last with the state's gradient dS, from the final state's upstream
gradient (or 0): dS_start = diag(exp(b_T)) dS_end + Σ_t (q_t ⊙ exp(b_t)) d_tᵀ. Each forms dS
itself and one of the two intra-chunk blocks: dk needs M_ts = d_t · v_s and no k, dv (and
d initial_state, the last dS) needs A_ts = Σ_k q_tk k_sk exp(rel_k(t, s)) and no v. One kernel
holding both blocks, dS and three gradient tiles spills at width 128; two kernels repeat the dS
walk (one BK × BT by BT × BV product a chunk) and the reads of q, g and the upstream gradient.
Grid (B·H, NV) as in `_jit.py`: dv and d initial_state per V column, dk the V tile's part.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._jit import _block_part, _decay_from, _key_tile, _state_mask, _tile, _to_end


@triton.jit
def _gla_bwd_dk_kernel(
    q_ptr,
    v_ptr,
    g_ptr,
    do_ptr,
    dht_ptr,
    dk_ptr,
    ds_ptr,
    scale,
    H,
    N,
    K,
    V,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_qk,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_gb,
    stride_gh,
    stride_gn,
    stride_gk,
    stride_ob,
    stride_oh,
    stride_on,
    stride_od,
    HAS_DHT: tl.constexpr,
    DOT_PREC: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    BT: tl.constexpr,
    BKA: tl.constexpr,
):
    """dk of one (batch, head) through one V tile (the part of its sum over V; the whole dk
    when there is one tile). ds (B·H, K, V) fp32 is scratch: dS's copy, read back in K tiles."""
    bh = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1).to(tl.int64) * tl.num_programs(0) + bh  # (V tile, batch·head)
    b = bh // H
    h = bh % H
    q_bh = q_ptr + b * stride_qb + h * stride_qh
    v_bh = v_ptr + b * stride_vb + h * stride_vh
    g_bh = g_ptr + b * stride_gb + h * stride_gh
    do_bh = do_ptr + b * stride_ob + h * stride_oh
    dk_bh = dk_ptr + part * N * K
    dt = q_ptr.dtype.element_ty
    offs_t = tl.arange(0, BT)
    cols_k = tl.arange(0, BK)
    cols_v = tl.program_id(1) * BV + tl.arange(0, BV)  # this program's V tile
    state_kv = cols_k[:, None] * V + cols_v[None, :]
    in_kv = _state_mask(cols_k, cols_v, K, V)

    ds_kv = tl.zeros((BK, BV), dtype=tl.float32)
    if HAS_DHT:  # zeros past K and V: the padding must not reach dk through v's zero columns
        ds_kv = tl.load(dht_ptr + bh * K * V + state_kv, mask=in_kv, other=0.0)
    n_chunks = tl.cdiv(N, BT)
    ds_bh = ds_ptr + bh * K * V
    for i in range(0, n_chunks):
        rows_t = (n_chunks - 1 - i) * BT + offs_t
        v_tv = _tile(v_bh, rows_t, cols_v, stride_vn, stride_vd, N, V)
        d_tv = _tile(do_bh, rows_t, cols_v, stride_on, stride_od, N, V).to(tl.float32) * scale
        d_tv = d_tv.to(dt)
        m_tt = tl.dot(d_tv, tl.trans(v_tv), input_precision=DOT_PREC)  # [t, s] = d_t · v_s
        # dk in tiles of BKA key columns: through dS at the chunk's end (its tile from its copy
        # in memory), then inside the chunk one key column s at a time
        tl.store(ds_bh + state_kv, ds_kv, mask=in_kv)
        tl.debug_barrier()
        for kk in range(0, BK, BKA):
            cols_a = kk + tl.arange(0, BKA)
            q_ta = _tile(q_bh, rows_t, cols_a, stride_qn, stride_qk, N, K).to(tl.float32)
            g_ta = _tile(g_bh, rows_t, cols_a, stride_gn, stride_gk, N, K).to(tl.float32)
            ds_av = tl.load(
                ds_bh + cols_a[:, None] * V + cols_v[None, :],
                mask=_state_mask(cols_a, cols_v, K, V),
                other=0.0,
            )
            dk_ta = tl.dot(v_tv, tl.trans(ds_av.to(dt)), input_precision=DOT_PREC)
            dk_ta = dk_ta * tl.exp(_to_end(g_ta))
            for s in range(0, BT):
                m_t = tl.sum(tl.where(offs_t[None, :] == s, m_tt, 0.0), 1)
                dk_s = tl.sum(m_t[:, None] * q_ta * _decay_from(g_ta, s, offs_t), 0)
                dk_ta += tl.where(offs_t[:, None] == s, dk_s[None, :], 0.0)
            tl.store(
                dk_bh + rows_t[:, None] * K + cols_a[None, :],
                dk_ta.to(dk_ptr.dtype.element_ty),
                mask=(rows_t < N)[:, None] & (cols_a < K)[None, :],
            )
        tl.debug_barrier()  # every read of dS is done before it is stored again
        # the state's gradient at the chunk's start (a product over the chunk's tokens)
        q_tk = _tile(q_bh, rows_t, cols_k, stride_qn, stride_qk, N, K).to(tl.float32)
        g_tk = _tile(g_bh, rows_t, cols_k, stride_gn, stride_gk, N, K).to(tl.float32)
        q_start = (q_tk * tl.exp(tl.cumsum(g_tk, 0))).to(dt)
        ds_kv = ds_kv * tl.exp(tl.sum(g_tk, 0))[:, None]
        ds_kv += tl.dot(tl.trans(q_start), d_tv, input_precision=DOT_PREC)


@triton.jit
def _gla_bwd_dv_kernel(
    q_ptr,
    k_ptr,
    g_ptr,
    do_ptr,
    dht_ptr,
    dv_ptr,
    dh0_ptr,
    scale,
    H,
    N,
    K,
    V,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_qk,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kk,
    stride_gb,
    stride_gh,
    stride_gn,
    stride_gk,
    stride_ob,
    stride_oh,
    stride_on,
    stride_od,
    HAS_DHT: tl.constexpr,
    DOT_PREC: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    BT: tl.constexpr,
    BKA: tl.constexpr,
):
    """dv and d initial_state (fp32) of one (batch, head), the columns of one V tile."""
    bh = tl.program_id(0).to(tl.int64)
    b = bh // H
    h = bh % H
    q_bh = q_ptr + b * stride_qb + h * stride_qh
    k_bh = k_ptr + b * stride_kb + h * stride_kh
    g_bh = g_ptr + b * stride_gb + h * stride_gh
    do_bh = do_ptr + b * stride_ob + h * stride_oh
    dv_bh = dv_ptr + bh * N * V
    dt = q_ptr.dtype.element_ty
    offs_t = tl.arange(0, BT)
    cols_k = tl.arange(0, BK)
    cols_v = tl.program_id(1) * BV + tl.arange(0, BV)  # this program's V tile
    state_kv = cols_k[:, None] * V + cols_v[None, :]
    in_kv = _state_mask(cols_k, cols_v, K, V)

    ds_kv = tl.zeros((BK, BV), dtype=tl.float32)
    if HAS_DHT:
        ds_kv = tl.load(dht_ptr + bh * K * V + state_kv, mask=in_kv, other=0.0)
    n_chunks = tl.cdiv(N, BT)
    dh0_bh = dh0_ptr + bh * K * V  # also where dS's K tiles are read back each chunk
    for i in range(0, n_chunks):
        rows_t = (n_chunks - 1 - i) * BT + offs_t
        d_tv = _tile(do_bh, rows_t, cols_v, stride_on, stride_od, N, V).to(tl.float32) * scale
        d_tv = d_tv.to(dt)
        # through dS at the chunk's end and the intra-chunk block, summed over K in tiles of
        # BKA columns (dS's from its copy in memory), as the forward does
        tl.store(dh0_bh + state_kv, ds_kv, mask=in_kv)
        tl.debug_barrier()
        dv_tv = tl.zeros((BT, BV), dtype=tl.float32)
        a_tt = tl.zeros((BT, BT), dtype=tl.float32)
        for kk in range(0, BK, BKA):
            cols_a = kk + tl.arange(0, BKA)
            q_ta, k_ta, g_ta, ds_av = _key_tile(
                q_bh,
                k_bh,
                g_bh,
                dh0_bh,
                rows_t,
                cols_a,
                cols_v,
                N,
                K,
                V,
                stride_qn,
                stride_qk,
                stride_kn,
                stride_kk,
                stride_gn,
                stride_gk,
            )
            k_end = (k_ta * tl.exp(_to_end(g_ta))).to(dt)
            dv_tv += tl.dot(k_end, ds_av.to(dt), input_precision=DOT_PREC)
            a_tt += _block_part(q_ta, k_ta, g_ta, offs_t, BT)
        tl.debug_barrier()  # every read of dS is done before it is stored again
        dv_tv += tl.dot(tl.trans(a_tt.to(dt)), d_tv, input_precision=DOT_PREC)
        tl.store(
            dv_bh + rows_t[:, None] * V + cols_v[None, :],
            dv_tv.to(dv_ptr.dtype.element_ty),
            mask=(rows_t < N)[:, None] & (cols_v < V)[None, :],
        )
        # the state's gradient at the chunk's start (a product over the chunk's tokens)
        q_tk = _tile(q_bh, rows_t, cols_k, stride_qn, stride_qk, N, K).to(tl.float32)
        g_tk = _tile(g_bh, rows_t, cols_k, stride_gn, stride_gk, N, K).to(tl.float32)
        q_start = (q_tk * tl.exp(tl.cumsum(g_tk, 0))).to(dt)
        ds_kv = ds_kv * tl.exp(tl.sum(g_tk, 0))[:, None]
        ds_kv += tl.dot(tl.trans(q_start), d_tv, input_precision=DOT_PREC)
    tl.store(dh0_bh + state_kv, ds_kv, mask=in_kv)
