"""stick_breaking_attention: causal attention whose weights break a stick, nearest key first.

attnzoo has no Triton kernel of stick-breaking attention: the op runs the PyTorch path of
naive.py (the weights in log space, materialised N × N, autograd backward) for impl "auto" and
"torch", and refuses "triton". There is no custom op either: the PyTorch path is made of
built-in ops, which autocast, torch.compile and autograd already know.
"""

from __future__ import annotations

from torch import Tensor

from .. import _op
from .._checks import check_attention
from . import naive

IMPLS = ("auto", "torch")
NO_TRITON = (
    "attnzoo has no Triton kernel of stick-breaking attention; the authors' Triton kernels are "
    "in their stickbreaking-attention package, and fla-core has parallel_stickbreaking_attn "
    "(CUDA). Use impl='auto' or 'torch' (the PyTorch path, O(N²) memory per head)"
)


def stick_breaking_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    *,
    scale: float | None = None,
    remainder: bool = True,
    impl: str = "auto",
) -> Tensor:
    """Stick-breaking attention (Tan et al. 2024, arXiv 2410.17980), causal by nature:

        A_ij = σ(z_ij) ∏_{j<l<i} (1 − σ(z_il)),  z_ij = scale · q_i·k_j  (keys j < i only),
        y_i = Σ_{j<i} A_ij v_j + rem_i v_i,      rem_i = 1 − Σ_{j<i} A_ij = ∏_{j<i} (1 − σ(z_ij)).

    q, k: (B, H, N, K); v: (B, H, N, V) -> y (B, H, N, V). A row of A sums to at most 1; with
    `remainder` (the default, as the authors' models) the stick no key took goes to the query's
    own value, so A + diag(rem) is row-stochastic on the real tokens; `remainder=False` gives
    A v alone (the first query then gets 0). `key_padding_mask` (B, N) bool, True marks
    padding: a padded key takes no share and does not break the stick, and a padded position
    drops its remainder (a padded value reaches no row, its own included). `scale` defaults to 1/sqrt(K). q, k and v follow the
    dtype policy of kernels/_op.py; the weights are computed in fp32 (fp64 for fp64 inputs) and
    the output has the activations' dtype. impl: "auto" and "torch" run the PyTorch path
    (kernels/stick_breaking/naive.py); "triton" is refused (there is no kernel)."""
    (q, k, v), _ = _op.apply_dtype_policy((q, k, v))
    check_attention(q, k, v, key_padding_mask)
    if not isinstance(remainder, bool):
        raise ValueError(f"remainder must be a bool, got {remainder!r}")
    if impl == "triton":
        raise ValueError(f"impl='triton' is not available: {NO_TRITON}")
    if impl not in IMPLS:
        raise ValueError(
            f"impl={impl!r}: stick_breaking_attention takes one of {IMPLS} (no 'triton': {NO_TRITON})"
        )
    scale = _op.default_scale(scale, q.shape[-1])
    ct = _op.accumulate_dtype(q)
    with _op.autocast_off(q):
        out = naive.stick_breaking_attention(
            q.to(ct), k.to(ct), v.to(ct), key_padding_mask, scale, remainder
        )
    return out.to(q.dtype)
