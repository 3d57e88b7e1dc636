"""Nyströmformer: softmax attention through segment-mean landmarks and an iterative
pseudo-inverse. docs/mixers.md gives its formula, paper, options and where attnzoo departs."""

from __future__ import annotations

import torch

from attnzoo import kernels
from attnzoo.mixers.base import _positive, _QKVHeads, _refuse_causal
from attnzoo.mixers.registry import register


def iterative_pinv(a_bhmm: torch.Tensor, iterations: int) -> torch.Tensor:
    """Moore-Penrose pseudo-inverse by Nyströmformer's iteration (Razavi et al. 2014):
    Z₀ = Aᵀ / (‖A‖₁ ‖A‖∞), Z ← ¼ Z (13 I − A Z (15 I − A Z (7 I − A Z))), with ‖A‖₁ the largest
    column sum and ‖A‖∞ the largest row sum of |A|. The norms are taken per matrix, where the
    authors' code takes the largest over the whole batch and every head: so that one sequence's
    output does not depend on the others in its batch."""
    eye = torch.eye(a_bhmm.shape[-1], dtype=a_bhmm.dtype, device=a_bhmm.device)
    norm_1 = a_bhmm.abs().sum(dim=-2).amax(dim=-1)  # largest column sum
    norm_inf = a_bhmm.abs().sum(dim=-1).amax(dim=-1)  # largest row sum
    z = a_bhmm.transpose(-1, -2) / (norm_1 * norm_inf)[..., None, None]
    for _ in range(iterations):
        az = a_bhmm @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


@register("nystrom")
class Nystrom(_QKVHeads):
    """Nyströmformer (Xiong et al. 2021, arXiv 2102.03902): softmax attention through m
    landmarks, the segment means q̃, k̃ of the queries and keys,

        y = softmax(q k̃ᵀ/√dk) · pinv(softmax(q̃ k̃ᵀ/√dk)) · softmax(q̃ kᵀ/√dk) v,

    with the pseudo-inverse by `pinv_iterations` steps of the paper's iteration from its init
    (`iterative_pinv`). A sequence of N ≤ `landmarks` tokens would get one landmark per token,
    where the formula is softmax attention itself up to the iteration's error (of order 1e-2 after
    the paper's 6 steps): there, as in the authors' code when the landmarks equal the length, the
    mixer computes exact softmax attention (`scaled_dot_attention`, padding keys masked). When m
    does not divide N the segments differ by one token in length (token n is in segment
    ⌊n m / N⌋) instead of the paper's padding. Padding tokens are left out of the segment means
    and masked as keys, so real outputs do not depend on them. Not causal: every landmark
    averages over the whole sequence. 4 D² parameters.
    """

    supports_causal = False

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        landmarks: int = 64,
        pinv_iterations: int = 6,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        _refuse_causal(type(self), causal)
        _positive(landmarks, "landmarks")
        _positive(pinv_iterations, "pinv_iterations")
        self._init_qkv(dim, heads, causal, impl, attn_dropout)
        self.landmarks, self.pinv_iterations = landmarks, pinv_iterations

    drops_attention = False  # attn_dropout is accepted and unused: no probabilities to drop

    def dropout_p(self) -> float:
        return 0.0

    def attend(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk)."""
        q_bhnk, k_bhnk, v_bhnk = self._qkv(x_bnd, scores_from)
        b, _, n, dk = q_bhnk.shape
        if n <= self.landmarks:  # a landmark per token: the approximation is attention itself
            return kernels.scaled_dot_attention(
                q_bhnk, k_bhnk, v_bhnk, False, key_padding_mask, impl=self.impl
            )
        m = self.landmarks
        segment_n = torch.arange(n, device=x_bnd.device) * m // n
        onehot_mn = segment_n[None, :] == torch.arange(m, device=x_bnd.device)[:, None]
        weight_bmn = onehot_mn[None].expand(b, m, n).to(q_bhnk.dtype)
        if key_padding_mask is not None:
            weight_bmn = weight_bmn * (~key_padding_mask)[:, None, :].to(q_bhnk.dtype)
        weight_bmn = weight_bmn / weight_bmn.sum(-1, keepdim=True).clamp_min(1.0)
        q_land_bhmk = torch.einsum("bmn,bhnk->bhmk", weight_bmn, q_bhnk)
        k_land_bhmk = torch.einsum("bmn,bhnk->bhmk", weight_bmn, k_bhnk)
        scale = dk**-0.5
        kernel1_bhnm = (q_bhnk @ k_land_bhmk.transpose(-1, -2) * scale).softmax(-1)
        kernel2_bhmm = (q_land_bhmk @ k_land_bhmk.transpose(-1, -2) * scale).softmax(-1)
        scores3_bhmn = q_land_bhmk @ k_bhnk.transpose(-1, -2) * scale
        if key_padding_mask is not None:
            scores3_bhmn = scores3_bhmn.masked_fill(key_padding_mask[:, None, None, :], -1e4)
        kernel3_bhmn = scores3_bhmn.softmax(-1)
        pinv_bhmm = iterative_pinv(kernel2_bhmm, self.pinv_iterations)
        return kernel1_bhnm @ (pinv_bhmm @ (kernel3_bhmn @ v_bhnk))
