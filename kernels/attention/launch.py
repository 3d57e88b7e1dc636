"""The attention launchers: the kernels' own limits, the outputs, the grid.

The arguments arrive checked (shapes, dtypes, devices, mask, scale) by the public op (ops.py);
what is checked here are the limits of these kernels: head widths, unit feature strides, int32 row
offsets, the dropout counter. `_Problem` gathers what the three kernels share for one call;
`attention_forward` and `attention_backward` launch them; the six `*_forward` / `*_backward`
functions at the end are what the custom ops in ops.py run."""

from __future__ import annotations

import functools

import torch

from .._host import INTERPRET, cdiv
from ._jit import MAX_HEAD, _attn_bwd_delta, _keep_mask_kernel
from .tuning import DELTA_TILE, autotuned, dot_precision, head_width, n_bucket, qk_tile_width

LOG2E = 1.4426950408889634

# Tests set this to True: outputs are then allocated full of NaN, so an element the kernel never
# writes shows up as NaN instead of as whatever memory held before.
POISON_OUTPUTS = False

_fwd = autotuned("attn_fwd")
_bwd_dkdv = autotuned("attn_bwd_dkdv")
_bwd_dq = autotuned("attn_bwd_dq")


def _unit_feature_stride(t: torch.Tensor) -> torch.Tensor:
    """The kernels read features contiguously; anything else is copied once, here."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _check_reach(name: str, t: torch.Tensor) -> None:
    """The kernels read features contiguously and index rows within a head in int32."""
    stride = t.stride()
    if stride[-1] != 1 and t.numel() > 0:
        raise ValueError(
            f"{name} must have unit stride in its last (feature) dim, got strides {stride}; "
            "call .contiguous()"
        )
    reach = sum((n - 1) * s for n, s in zip(t.shape, stride, strict=True))
    if reach >= 2**31:
        raise ValueError(f"{name} spans {reach} elements; the kernels index rows with int32")


def _alloc(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if POISON_OUTPUTS:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


@functools.cache
def _placeholder(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A one-element tensor passed where a kernel argument is switched off (no padding mask, no
    dropout seed): the kernel never reads it. Made once per device, not per call."""
    return torch.zeros(1, dtype=dtype, device=device)


class _Problem:
    """Everything the three kernels share for one call: operands, sizes, flags, mask, dropout,
    the sink (one logit per head, fp32), the key bias (one logit per key, (B·H, N) fp32) and,
    for sigmoid attention, the bias (`sigmoid`; None: the softmax)."""

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        m: torch.Tensor | None,
        causal: bool,
        mask: torch.Tensor | None,
        scale: float,
        dropout_p: float = 0.0,
        seed: torch.Tensor | None = None,
        window: tuple[int, int] | None = None,
        sink: torch.Tensor | None = None,
        sigmoid: float | None = None,
        key_bias: torch.Tensor | None = None,
    ) -> None:
        b, h, n, d_qk = q.shape
        d_v = v.shape[-1]
        if d_v > MAX_HEAD or d_v < 1:
            raise ValueError(f"v's head dim is {d_v}; the kernels take 1..{MAX_HEAD}")
        for name, t in (("q", q), ("k", k), ("v", v), ("m", m)):
            if t is not None:
                _check_reach(name, t)
        _check_dropout(dropout_p, seed, n, q)
        self.q, self.k, self.v, self.m = q, k, v, m
        self.b, self.h, self.n, self.d_qk, self.d_v = b, h, n, d_qk, d_v
        self.head = head_width(d_v)
        self.n_chunks = cdiv(d_qk, self.head)
        self.qk_head = qk_tile_width(d_qk, self.head)  # the backward's q/k tile
        self.scale = scale
        self.causal, self.window = causal, window is not None
        self.left, self.right = _window_reach(window, causal, n)
        if self.window:
            self.causal = False  # folded into the window: its right reach is 0
        self.metric = m is not None
        self.has_mask = mask is not None
        if mask is None:
            self.mask_i8 = _placeholder(q.device, torch.int8)
        else:  # a bool is one byte: read it in place unless its tokens are strided
            self.mask_i8 = mask.view(torch.int8)
            if self.mask_i8.stride(1) != 1:
                self.mask_i8 = self.mask_i8.contiguous()
        self.dropout_p = float(dropout_p)
        self.n_bucket = n_bucket(n)
        self.seed = seed if dropout_p > 0.0 else _placeholder(q.device, torch.int64)
        self.m_or_q = m if m is not None else q
        self.m_strides = (m.stride(0), m.stride(1)) if m is not None else (0, 0)
        if sigmoid is not None and (sink is not None or self.dropout_p > 0.0 or m is not None):
            raise ValueError(
                "sigmoid attention has no sink, no dropout and no metric prologue in these "
                f"kernels; got sink={sink is not None}, dropout_p={self.dropout_p}, "
                f"metric={m is not None}"
            )
        if key_bias is not None and (sigmoid is not None or m is not None):
            raise ValueError(
                "a key bias comes with scaled-dot attention's softmax only in these kernels; got "
                f"sigmoid={sigmoid is not None}, metric={m is not None}"
            )
        self.sigmoid = sigmoid is not None
        self.bias2 = 0.0 if sigmoid is None else float(sigmoid) * LOG2E
        # the sink's logits in base 2, as the forward's running max reads them
        self.sink = sink
        self.sink2 = None if sink is None else (sink.detach().float() * LOG2E).contiguous()
        # the key bias in base 2, (B·H, N) contiguous fp32, as the kernels index it
        self.key_bias = key_bias
        self.kb2 = (
            None
            if key_bias is None
            else (key_bias.detach().float() * LOG2E).reshape(b * h, n).contiguous()
        )

    def key_bias_arg(self) -> torch.Tensor:
        """The key bias's kernel argument (a placeholder without one: the kernels never read it)."""
        return self.kb2 if self.kb2 is not None else _placeholder(self.q.device, torch.float32)

    def inputs(self) -> tuple:
        return (self.q, self.k, self.v, self.m_or_q)

    def strides(self) -> tuple[int, ...]:
        q, k, v = self.q, self.k, self.v
        return (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *self.m_strides)

    def sizes(self) -> tuple:
        return (self.h, self.n, self.d_qk, self.d_v, self.n_chunks)

    def flags(self) -> dict:
        return {
            "METRIC": self.metric,
            "HEAD": self.head,
            "CHUNKED": self.n_chunks > 1,
            "DROPOUT": self.dropout_p > 0.0,
            "HAS_MASK": self.has_mask,
            "CAUSAL": self.causal,
            "WINDOW": self.window,
            "SIGMOID": self.sigmoid,
            "KEY_BIAS": self.kb2 is not None,
            "DOT_PREC": dot_precision(self.q.dtype),
        }

    def backward_flags(self) -> dict:
        """The forward's flags plus the backward's q/k tile: one tile (not chunked) when the
        q/k width fits in QK_HEAD."""
        return {**self.flags(), "QK_HEAD": self.qk_head, "CHUNKED": self.backward_chunks() > 1}

    def backward_chunks(self) -> int:
        """The backward grid's feature-chunk axis: one program per QK_HEAD-wide chunk."""
        return cdiv(self.d_qk, self.qk_head)


def _window_reach(window: tuple[int, int] | None, causal: bool, n: int) -> tuple[int, int]:
    """The kernels' (left, right): a causal window reaches no key after the query (right = 0),
    and a reach beyond the sequence is clipped to N, which sees the same keys and keeps the
    kernels' tile arithmetic within int32. (0, 0) without a window: the kernels never read it."""
    if window is None:
        return 0, 0
    left, right = window
    return min(left, n), 0 if causal else min(right, n)


def _check_dropout(dropout_p: float, seed: torch.Tensor | None, n: int, like: torch.Tensor) -> None:
    """The seed a dropout call needs, and the int32 reach of its Philox counter."""
    if dropout_p == 0.0:
        return
    if not (isinstance(seed, torch.Tensor) and seed.dtype == torch.int64 and seed.numel() == 1):
        raise ValueError("dropout needs `seed`, a one-element int64 tensor (the Philox key)")
    if seed.device != like.device:
        raise ValueError(f"seed is on {seed.device}, expected {like.device}")
    if n * n >= 2**31:
        raise ValueError(
            f"attention dropout draws one int32 counter per (query, key): N = {n} tokens exceed "
            "46340; use dropout_p=0 for such lengths"
        )


def _check_interpretable(p: _Problem) -> None:
    if INTERPRET and p.q.dtype == torch.bfloat16:
        raise ValueError(
            "the attention kernels take no bfloat16 under TRITON_INTERPRET=1: the "
            "interpreter's tl.dot on bf16 tiles is wrong (relative errors ~1e9); use "
            "float16 or float32 there, or impl='torch'"
        )


def attention_forward(p: _Problem) -> tuple[torch.Tensor, torch.Tensor | None]:
    """out (B, H, N, dv) in the input dtype, and the base-2 log-sum-exp (B·H, N) in fp32 (with
    a sink, the sink is in it); sigmoid attention has no log-sum-exp (None)."""
    _check_interpretable(p)
    out = _alloc((p.b, p.h, p.n, p.d_v), p.q.dtype, p.q.device)
    if p.sigmoid:
        lse, lse_arg = None, _placeholder(p.q.device, torch.float32)
    else:
        lse = lse_arg = _alloc((p.b * p.h, p.n), torch.float32, p.q.device)
    if p.n == 0 or p.b * p.h == 0:
        return out, lse
    sink = p.sink2 if p.sink2 is not None else _placeholder(p.q.device, torch.float32)
    grid = lambda meta: (cdiv(p.n, meta["BLOCK_M"]), p.b * p.h)
    _fwd[grid](
        *p.inputs(),
        out,
        lse_arg,
        p.mask_i8,
        p.seed,
        sink,
        p.key_bias_arg(),
        *p.strides(),
        *out.stride()[:3],
        p.mask_i8.stride(0) if p.has_mask else 0,
        *p.sizes(),
        p.scale * LOG2E,
        p.bias2,
        p.dropout_p,
        p.n_bucket,
        p.left,
        p.right,
        **p.flags(),
        SINK=p.sink2 is not None,
    )
    return out, lse


def attention_backward(
    p: _Problem,
    out: torch.Tensor | None,
    lse: torch.Tensor | None,
    d_out: torch.Tensor,
    grad_dtype: torch.dtype,
) -> tuple[
    torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None
]:
    """dq and dk (B, H, N, dk) and dv (B, H, N, dv) in `grad_dtype`, the sink's gradient (H,)
    and the key bias's (B, H, N), each in its own dtype (None without one); for metric dv is
    None and dk holds the key and value roles' sum. Sigmoid attention needs neither `out` nor
    `lse` (None)."""
    _check_interpretable(p)
    d_out = _unit_feature_stride(d_out)
    _check_reach("d_out", d_out)
    dq = _alloc((p.b, p.h, p.n, p.d_qk), grad_dtype, p.q.device)
    dk = _alloc((p.b, p.h, p.n, p.d_qk), grad_dtype, p.q.device)
    dv = None if p.metric else _alloc((p.b, p.h, p.n, p.d_v), grad_dtype, p.q.device)
    dkb = None if p.kb2 is None else _alloc((p.b * p.h, p.n), torch.float32, p.q.device)
    if p.n == 0 or p.b * p.h == 0:
        dsink = None if p.sink is None else torch.zeros_like(p.sink)
        d_key_bias = None if p.key_bias is None else p.key_bias.new_zeros(p.key_bias.shape)
        return dq, dk, dv, dsink, d_key_bias
    dv_arg = dk if dv is None else dv
    smb = p.mask_i8.stride(0) if p.has_mask else 0
    common = (
        *p.sizes(),
        p.scale * LOG2E,
        p.scale,
        p.bias2,
        p.dropout_p,
        p.n_bucket,
        p.left,
        p.right,
    )
    chunks = p.backward_chunks()
    if p.sigmoid:  # the weights are elementwise: no row statistics to read
        lse = delta = _placeholder(p.q.device, torch.float32)
    else:
        assert out is not None and lse is not None
        out = _unit_feature_stride(out)
        _check_reach("out", out)
        delta = _alloc((p.b * p.h, p.n), torch.float32, p.q.device)
        rows = DELTA_TILE // p.head
        _attn_bwd_delta[(cdiv(p.n, rows), p.b * p.h)](
            out,
            d_out,
            delta,
            *out.stride()[:3],
            *d_out.stride()[:3],
            p.h,
            p.n,
            p.d_v,
            HEAD=p.head,
            BLOCK_M=rows,
            num_warps=4,
            num_stages=1,
        )
    grid_n = lambda meta: (cdiv(p.n, meta["BLOCK_N"]), p.b * p.h, chunks)
    # With a key bias the dq kernel runs first and leaves delta from its fp32 products, which
    # the dk/dv kernel uses (its d key_bias is a column sum of dS: _jit.py says why).
    delta_kv = delta
    if dkb is not None:
        delta_kv = _alloc((p.b * p.h, p.n), torch.float32, p.q.device)
        _launch_dq(p, d_out, lse, delta, dq, delta_kv, smb, common)
    _bwd_dkdv[grid_n](
        *p.inputs(),
        d_out,
        lse,
        delta_kv,
        dk,
        dv_arg,
        p.mask_i8,
        p.seed,
        p.key_bias_arg(),
        dkb if dkb is not None else p.key_bias_arg(),
        *p.strides(),
        *d_out.stride()[:3],
        *dk.stride()[:3],
        *dv_arg.stride()[:3],
        smb,
        *common,
        **p.backward_flags(),
    )
    if dkb is None:
        _launch_dq(p, d_out, lse, delta, dq, p.key_bias_arg(), smb, common)
    dsink = None if p.sink2 is None else _sink_gradient(p, lse, delta_kv)
    d_key_bias = None if dkb is None else dkb.view(p.b, p.h, p.n).to(p.key_bias.dtype)
    return dq, dk, dv, dsink, d_key_bias


def _launch_dq(p: _Problem, d_out, lse, delta, dq, delta_exact, smb: int, common: tuple) -> None:
    """The dq kernel over every query tile (and q/k chunk); with a key bias it also writes
    rowsum(P ∘ dP) into `delta_exact` (a placeholder without one: never written)."""
    grid_m = lambda meta: (cdiv(p.n, meta["BLOCK_M"]), p.b * p.h, p.backward_chunks())
    _bwd_dq[grid_m](
        *p.inputs(),
        d_out,
        lse,
        delta,
        dq,
        p.mask_i8,
        p.seed,
        p.key_bias_arg(),
        delta_exact,
        *p.strides(),
        *d_out.stride()[:3],
        *dq.stride()[:3],
        smb,
        *common,
        **p.backward_flags(),
    )


def _sink_gradient(p: _Problem, lse: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """dL/dsink_h = −Σ_{b,i} p_sink · delta over head h's rows: the sink's probability
    p_sink = exp2(sink_h · log2 e − lse) (lse includes the sink) times rowsum(dO ∘ O), since
    every probability of a row moves by −p_j · p_sink when the sink's logit grows. A row that
    sees no key has O = 0, so delta = 0: it adds nothing."""
    assert p.sink is not None and p.sink2 is not None
    p_sink_bhn = torch.exp2(p.sink2[None, :, None] - lse.view(p.b, p.h, p.n))
    return (-(p_sink_bhn * delta.view(p.b, p.h, p.n)).sum((0, 2))).to(p.sink.dtype)


# --------------------------------------------------------------------------------------------
# Forward and backward of each op: what the custom ops in ops.py run
# --------------------------------------------------------------------------------------------


def scaled_dot_forward(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: torch.Tensor | None,
    window: tuple[int, int] | None = None,
    sink: torch.Tensor | None = None,
    key_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ · scale + key_bias) v per head: (out (B, H, N, dv), lse (B·H, N) fp32 for
    the backward). `window` = (left, right): query i sees the keys i − left ..= i + right;
    `sink` (H,): one more logit per head in every row's softmax, of value zero; `key_bias`
    (B, H, N): a logit per key added to every row's scores."""
    q_bhnk, k_bhnk, v_bhnv = (_unit_feature_stride(t) for t in (q_bhnk, k_bhnk, v_bhnv))
    prob = _Problem(
        q_bhnk,
        k_bhnk,
        v_bhnv,
        None,
        causal,
        key_padding_mask,
        scale,
        dropout_p,
        seed,
        window,
        sink,
        key_bias=key_bias,
    )
    out, lse = attention_forward(prob)
    assert lse is not None
    return out, lse


def scaled_dot_backward(
    d_out: torch.Tensor,
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: torch.Tensor | None,
    window: tuple[int, int] | None = None,
    sink: torch.Tensor | None = None,
    key_bias: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """[dq, dk, dv], each like its input, then dsink (H,) when there is a sink and d key_bias
    (B, H, N) when there is a key bias; the dropout mask is drawn again from `seed`."""
    q_bhnk, k_bhnk, v_bhnv = (_unit_feature_stride(t) for t in (q_bhnk, k_bhnk, v_bhnv))
    prob = _Problem(
        q_bhnk,
        k_bhnk,
        v_bhnv,
        None,
        causal,
        key_padding_mask,
        scale,
        dropout_p,
        seed,
        window,
        sink,
        key_bias=key_bias,
    )
    dq, dk, dv, dsink, d_key_bias = attention_backward(prob, out, lse, d_out, q_bhnk.dtype)
    assert dv is not None
    return [dq, dk, dv] + [g for g in (dsink, d_key_bias) if g is not None]


def metric_forward(
    p_bhnk: torch.Tensor,
    m_hkk: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: torch.Tensor | None,
    sink: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores p[i] M[h] p[j] · scale with values p, from p and M alone (the fused prologue);
    `sink` as in `scaled_dot_forward`."""
    if p_bhnk.dim() == 4 and p_bhnk.shape[-1] > MAX_HEAD:
        raise ValueError(f"p's head dim is {p_bhnk.shape[-1]}; metric attention takes ≤ {MAX_HEAD}")
    p_bhnk, m_hkk = _unit_feature_stride(p_bhnk), _unit_feature_stride(m_hkk)
    prob = _Problem(
        p_bhnk, p_bhnk, p_bhnk, m_hkk, causal, key_padding_mask, scale, dropout_p, seed, sink=sink
    )
    out, lse = attention_forward(prob)
    assert lse is not None
    return out, lse


def metric_backward(
    d_out: torch.Tensor,
    p_bhnk: torch.Tensor,
    m_hkk: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    dropout_p: float,
    seed: torch.Tensor | None,
    sink: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """[dp, dM], and dsink (H,) when there is a sink. p plays three roles: q = p M (its
    gradient dq Mᵀ), and k and v (the kernel returns their sum)."""
    p_bhnk, m_hkk = _unit_feature_stride(p_bhnk), _unit_feature_stride(m_hkk)
    prob = _Problem(
        p_bhnk, p_bhnk, p_bhnk, m_hkk, causal, key_padding_mask, scale, dropout_p, seed, sink=sink
    )
    dq, dkv, _, dsink, _ = attention_backward(prob, out, lse, d_out, p_bhnk.dtype)
    # In the inputs' dtype, as PyTorch's autograd of q = p·M does: each product accumulates in
    # fp32 and rounds once, and dM sums the batch's (K, K) products (no fp32 copies of p or dq).
    dp = dkv.add_(dq @ m_hkk.mT)
    dm = (p_bhnk.mT @ dq).sum(0)
    return [dp, dm] + ([] if dsink is None else [dsink])


def sigmoid_forward(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    bias: float,
) -> torch.Tensor:
    """Σ_j σ(q kᵀ · scale + bias) v_j per head over the visible keys, (B, H, N, dv): the
    scaled-dot kernels with the softmax switched off. Nothing is saved beyond the inputs."""
    q_bhnk, k_bhnk, v_bhnv = (_unit_feature_stride(t) for t in (q_bhnk, k_bhnk, v_bhnv))
    prob = _Problem(q_bhnk, k_bhnk, v_bhnv, None, causal, key_padding_mask, scale, sigmoid=bias)
    return attention_forward(prob)[0]


def sigmoid_backward(
    d_out: torch.Tensor,
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    v_bhnv: torch.Tensor,
    key_padding_mask: torch.Tensor | None,
    causal: bool,
    scale: float,
    bias: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv), each like its input: the weights recomputed from q and k, dS = dP ∘ σ ∘
    (1 − σ)."""
    q_bhnk, k_bhnk, v_bhnv = (_unit_feature_stride(t) for t in (q_bhnk, k_bhnk, v_bhnv))
    prob = _Problem(q_bhnk, k_bhnk, v_bhnv, None, causal, key_padding_mask, scale, sigmoid=bias)
    dq, dk, dv, *_ = attention_backward(prob, None, None, d_out, q_bhnk.dtype)
    assert dv is not None
    return dq, dk, dv


def dropout_keep_mask(seed: torch.Tensor, b: int, h: int, n: int, dropout_p: float) -> torch.Tensor:
    """The keep mask (B, H, N, N), bool, that the attention kernels draw for `seed`: what the
    reference needs (`keep_bhnn`) to reproduce a Triton call with dropout exactly."""
    _check_dropout(dropout_p, seed, n, seed)
    keep = torch.empty((b, h, n, n), dtype=torch.int8, device=seed.device)
    if keep.numel():
        _keep_mask_kernel[(cdiv(n, 32), b * h)](seed, keep, n, dropout_p, BLOCK=32)
    return keep.bool()
