"""softpick_attention: attention whose weights are softpick's rectified, unnormalised softmax
(Zuhri et al. 2025, arXiv 2504.20966).

attnzoo has no Triton kernel of softpick: the op runs the PyTorch path of naive.py (the full
score matrix, autograd backward) for impl "auto" and "torch", and refuses "triton".
"""

from __future__ import annotations

import math

from torch import Tensor

from .. import _op
from .._checks import check_attention, check_causal, real_number
from . import naive

IMPLS = ("auto", "torch")
EPS = 1e-8  # the authors' naive softpick's ε (their Triton kernel hard-codes 1e-6)


def check_eps(eps: float) -> float:
    """ε, added to every row's (max-shifted) sum: a finite real number > 0 (with 0 a row of
    all-zero or all-masked scores would divide 0 by 0)."""
    if not real_number(eps) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a finite real number > 0 (a Python float), got {eps!r}")
    return float(eps)


def softpick_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    *,
    scale: float | None = None,
    eps: float = EPS,
    impl: str = "auto",
) -> Tensor:
    """Softpick attention (Zuhri et al. 2025, arXiv 2504.20966): y_i = Σ_j w_ij v_j with

        w_ij = ReLU(exp(s_ij) − 1) / (Σ_j' |exp(s_ij') − 1| + ε),    s_ij = scale · q_i·k_j

    over the keys query i may see (causal, padding: a masked key adds to neither sum), in the
    authors' max-shifted form with ε added to the shifted sum (kernels/softpick/naive.py says
    exactly). A row's weights are ≥ 0 and sum to at most 1, and to 0 where every visible score
    is ≤ 0 or no key is visible. q, k: (B, H, N, dk); v: (B, H, N, dv) -> (B, H, N, dv).
    `scale` defaults to 1/sqrt(dk); `eps` to the authors' 1e-8. q, k and v follow the dtype
    policy of kernels/_op.py; scores and weights are computed in fp32 (fp64 for fp64 inputs).
    impl: "auto" and "torch" run the PyTorch path; attnzoo has no Triton kernel of softpick, so
    "triton" is refused."""
    (q, k, v), _ = _op.apply_dtype_policy((q, k, v))
    check_attention(q, k, v, key_padding_mask)
    check_causal(causal)
    if impl not in IMPLS:
        raise ValueError(
            f"impl={impl!r}: softpick_attention takes one of {IMPLS} (attnzoo has no Triton "
            "kernel of softpick attention yet: both run the PyTorch path)"
        )
    scale, eps = _op.default_scale(scale, q.shape[-1]), check_eps(eps)
    with _op.autocast_off(q):
        return naive.softpick_attention(q, k, v, causal, key_padding_mask, scale, eps)
