"""delta_rule: a linear-attention state written by error correction (DeltaNet, Gated DeltaNet).

attnzoo has no Triton kernel of the delta rule: the op runs the chunked PyTorch path of naive.py
(the WY/UT form, autograd backward), or flash-linear-attention's chunked kernels with
`impl="fla"` where the optional `fla-core` is installed.
"""

from __future__ import annotations

import inspect

from torch import Tensor

from .. import _op
from .._checks import FLOAT_DTYPES, check_attention
from . import naive


def check_delta(
    q_bhnk: Tensor,
    k_bhnk: Tensor,
    v_bhnv: Tensor,
    beta: Tensor,
    log_decay: Tensor | None,
) -> None:
    """delta_rule's arguments: q, k (batch, heads, tokens, K) and v (batch, heads, tokens, V) as
    for attention; beta and log_decay (None, or a tensor) (batch, heads, tokens) of any float
    dtype on q's device."""
    check_attention(q_bhnk, k_bhnk, v_bhnv, None)
    b, h, n, _ = q_bhnk.shape
    for name, t in (("beta", beta), ("log_decay", log_decay)):
        if t is None and name == "log_decay":
            continue
        if not isinstance(t, Tensor) or t.dtype not in FLOAT_DTYPES:
            got = t.dtype if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a float tensor, got {got}")
        if tuple(t.shape) != (b, h, n):
            raise ValueError(
                f"{name} must have shape (batch, heads, tokens) = {(b, h, n)}, got {tuple(t.shape)}"
            )
        if t.device != q_bhnk.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q_bhnk.device}")


IMPLS = ("auto", "torch", "fla")


def delta_rule(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_decay: Tensor | None = None,
    scale: float | None = None,
    impl: str = "auto",
) -> Tensor:
    """Linear attention whose state is written by error correction (the delta rule):

        S_t = exp(log_decay_t) · (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,    o_t = scale · S_tᵀ q_t

    q, k: (B, H, N, K); v: (B, H, N, V) -> o (B, H, N, V); `beta` (B, H, N), the write strength
    (in (0, 1) for a contraction when ‖k_t‖ = 1; DeltaNet normalises k); `log_decay` (B, H, N)
    ≤ 0 or None (no decay: DeltaNet; with it, Gated DeltaNet). Causal by nature; `scale`
    defaults to 1/sqrt(K). q, k and v follow the dtype policy; beta, log_decay and the state are
    computed in fp32 (fp64 for fp64 inputs). impl: "auto" and "torch" run the chunked
    PyTorch path (kernels/delta/naive.py: the WY/UT form, chunks of 64, autograd backward);
    attnzoo has no Triton kernel of the delta rule, so "triton" is refused; "fla" calls
    flash-linear-attention's chunk_delta_rule / chunk_gated_delta_rule (CUDA, with the optional
    `fla-core` installed)."""
    (q, k, v), _ = _op.apply_dtype_policy((q, k, v))
    check_delta(q, k, v, beta, log_decay)
    if impl not in IMPLS:
        raise ValueError(
            f"impl={impl!r}: delta_rule takes one of {IMPLS} (attnzoo has no Triton kernel "
            "of the delta rule; 'fla' runs flash-linear-attention's where fla-core is installed)"
        )
    scale = _op.default_scale(scale, q.shape[-1])
    ct = _op.accumulate_dtype(q)
    beta = beta.to(ct)
    log_decay = None if log_decay is None else log_decay.to(ct)
    with _op.autocast_off(q):
        if impl == "fla":
            return _fla_delta_rule(q, k, v, beta, log_decay, scale)
        return naive.chunked(q, k, v, beta, log_decay, scale)[0]


def _fla_delta_rule(q, k, v, beta, log_decay, scale) -> Tensor:
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
