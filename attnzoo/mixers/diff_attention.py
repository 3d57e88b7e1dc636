"""Differential attention (Ye et al. 2024, "Differential Transformer", arXiv 2410.05258): the
difference of two softmax attention maps, each computed through the op
`attnzoo.kernels.scaled_dot_attention`; docs/mixers.md gives its formula, options and where
attnzoo departs from the authors' `multihead_diffattn.py`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from attnzoo import kernels
from attnzoo.kernels._checks import check_dropout
from attnzoo.mixers.base import _check_heads, _check_input, _eye_values, keys_per_query
from attnzoo.mixers.registry import register

# lambda_init from the block's index l: the paper's 0.8 − 0.6 exp(−0.3 (l − 1))
LAMBDA_BY_DEPTH = "depth"
SUBLN_EPS = 1e-5  # the authors' per-head RMSNorm epsilon


def lambda_init_at(layer_index: int) -> float:
    """The paper's λ_init at layer l = `layer_index` (from 1): 0.8 − 0.6 exp(−0.3 (l − 1))."""
    return 0.8 - 0.6 * math.exp(-0.3 * (layer_index - 1))


def _check_lambda_init(lambda_init: float | str) -> None:
    if lambda_init == LAMBDA_BY_DEPTH:
        return
    if (
        isinstance(lambda_init, bool)
        or not isinstance(lambda_init, (int, float))
        or not 0.0 <= lambda_init < 1.0
    ):
        raise ValueError(
            f"lambda_init must be a number in [0, 1) (the output is scaled by 1 − lambda_init) "
            f"or {LAMBDA_BY_DEPTH!r} (the paper's 0.8 − 0.6·exp(−0.3·(l − 1)) at the block's "
            f"index l), got {lambda_init!r}"
        )


@register("diff_attention")
class DiffAttention(nn.Module):
    """Differential attention: per head h, with q and k split into halves (q₁, q₂), (k₁, k₂) of
    width d = D / (2H) and values of width 2d,

        o_h = (softmax(q₁k₁ᵀ/√d) − λ softmax(q₂k₂ᵀ/√d)) v,
        λ   = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init,
        y   = W_O concat_h (1 − λ_init) RMSNorm(o_h).

    `heads` are the authors' `num_heads`: differential heads, each holding two softmax maps (the
    paper compares H/2 of them with a Transformer of H heads). Parameters: 4 D² (q, k, v and the
    output projection, as scaled_dot), the four λ vectors of width d (normal(0, 0.1), one λ per
    layer shared by the heads) and the RMSNorm's weight of width 2d shared by the heads (ones).
    The weights A₁ − λA₂ have entries of either sign and rows that sum to 1 − λ, so they are not
    distributions (`rows_are_distributions = False`).

    `lambda_init`: a number in [0, 1), or "depth" (the paper's schedule at `layer_index`, the
    1-based index of the block; None: the model passes its block index, layer 1 when built alone).
    `attn_dropout`: dropout on each of the two softmax maps (independent masks), in training.

    No `head_outputs`: the per-head RMSNorm makes a head non-linear in its values even with the
    scores frozen, so the path decomposition (attnzoo.paths) does not apply.
    """

    rows_are_distributions = False

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        lambda_init: float | str = LAMBDA_BY_DEPTH,
        layer_index: int | None = None,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        _check_heads(dim, heads)
        if dim % (2 * heads) != 0:
            raise ValueError(
                f"diff_attention splits each head's q and k in two: dim={dim} must be divisible "
                f"by 2 * heads = {2 * heads}"
            )
        _check_lambda_init(lambda_init)
        if layer_index is not None and (
            isinstance(layer_index, bool) or not isinstance(layer_index, int) or layer_index < 1
        ):
            raise ValueError(
                f"layer_index must be a positive int (the block's index, from 1) or None, got "
                f"{layer_index!r}"
            )
        self.dim, self.heads, self.causal, self.impl = dim, heads, causal, impl
        self.dk = dim // (2 * heads)  # q₁, q₂, k₁, k₂ per head; values 2·dk
        self.attn_dropout = check_dropout(attn_dropout, "attn_dropout")
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)  # q, k, v as scaled_dot's (the authors')
        self.proj = nn.Linear(dim, dim, bias=False)
        self.layer_index = 1 if layer_index is None else layer_index
        self.lambda_init = (
            lambda_init_at(self.layer_index)
            if lambda_init == LAMBDA_BY_DEPTH
            else float(lambda_init)
        )
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(self.dk) * 0.1) for _ in range(4)
        )
        self.subln_weight = nn.Parameter(torch.ones(2 * self.dk))

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """q, k, v and output projections 8 D²; two score maps of width D/2 each, 2 D Nₑ; two
        weights·v of width D, 4 D Nₑ (the difference and the norm are not matmuls)."""
        return 8 * dim * dim + 6 * dim * keys_per_query(seq_len, causal)

    def dropout_p(self) -> float:
        """Dropout on each softmax map for this call: `attn_dropout` in training, 0 in eval."""
        return self.attn_dropout if self.training else 0.0

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init (model.residual=deepnorm): Xavier-normal, gain 1 on Wq and Wk, gain
        `beta` on Wv and the output projection (scaled_dot's); the λ vectors keep theirs."""
        w_q, w_k, w_v = self.qkv.weight.data.chunk(3, dim=0)
        for w, gain in ((w_q, 1.0), (w_k, 1.0), (w_v, beta), (self.proj.weight.data, beta)):
            nn.init.xavier_normal_(w, gain=gain)

    def lambda_full(self) -> torch.Tensor:
        """λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init, a 0-dim tensor shared by the heads."""
        first = torch.exp((self.lambda_q1 * self.lambda_k1).sum())
        second = torch.exp((self.lambda_q2 * self.lambda_k2).sum())
        return first - second + self.lambda_init

    def _halves(self, x_bnd: torch.Tensor):
        """(q₁, k₁), (q₂, k₂), each (B, H, N, d), and v (B, H, N, 2d): head h's q is the
        authors' q heads 2h and 2h+1 side by side (and so for k)."""
        _check_input(x_bnd, self.dim)
        q_bhnk, k_bhnk, v_bhnv = rearrange(
            self.qkv(x_bnd), "b n (three h k) -> three b h n k", three=3, h=self.heads
        )
        q1_bhnk, q2_bhnk = q_bhnk.chunk(2, dim=-1)
        k1_bhnk, k2_bhnk = k_bhnk.chunk(2, dim=-1)
        return (q1_bhnk, k1_bhnk), (q2_bhnk, k2_bhnk), v_bhnv

    def _subln(self, o_bhnv: torch.Tensor) -> torch.Tensor:
        """(1 − λ_init) · RMSNorm(o) per head (at least fp32 inside), in o's dtype."""
        wide = o_bhnv.to(torch.promote_types(o_bhnv.dtype, torch.float32))
        normed = F.rms_norm(wide, wide.shape[-1:], self.subln_weight.to(wide.dtype), SUBLN_EPS)
        return (normed * (1.0 - self.lambda_init)).to(o_bhnv.dtype)

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The signed weights A₁ − λA₂ per head, (B, H, N, N): 0 where masked."""
        (q1, k1), (q2, k2), _ = self._halves(x_bnd)
        eye_bhnn = _eye_values(x_bnd, self.heads)
        a1_bhnn, a2_bhnn = (
            kernels.scaled_dot_attention(
                q, k, eye_bhnn, self.causal, key_padding_mask, impl="torch"
            )
            for q, k in ((q1, k1), (q2, k2))
        )
        return a1_bhnn - self.lambda_full().to(a1_bhnn.dtype) * a2_bhnn

    def attend(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, 2d): (1 − λ_init) ·
        RMSNorm((A₁ − λA₂) v), A₁v and A₂v from two calls of the scaled-dot op."""
        (q1, k1), (q2, k2), v_bhnv = self._halves(x_bnd)
        o1_bhnv, o2_bhnv = (
            kernels.scaled_dot_attention(
                q,
                k,
                v_bhnv,
                self.causal,
                key_padding_mask,
                dropout_p=self.dropout_p(),
                impl=self.impl,
            )
            for q, k in ((q1, k1), (q2, k2))
        )
        return self._subln(o1_bhnv - self.lambda_full().to(o1_bhnv.dtype) * o2_bhnv)

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, N, D) -> (B, N, D): the output projection of the heads side by side."""
        return self.proj(rearrange(self.attend(x_bnd, key_padding_mask), "b h n v -> b n (h v)"))
