"""The kernelized attention mixers: linear attention with a feature map, and Performer's FAVOR+,
which estimates softmax attention with random features and runs it through linear attention.
docs/mixers.md gives each one's formula, paper, options and where attnzoo departs from the paper.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attnzoo import kernels
from attnzoo.mixers.base import _eye_values, _positive, _QKVHeads
from attnzoo.mixers.registry import register

FEATURE_MAPS = ("elu1", "relu", "identity")


def _linear_flops(dim: int, heads: int, features: int) -> float:
    """q, k, v and output projections 8 D²; Σ_j φ(k_j) v_jᵀ and φ(q_i)ᵀ S 4 H F dk; the
    normaliser φ(q_i)ᵀ z 2 H F (non-causal; the causal chunked form costs about as much)."""
    dk = dim // heads
    return 8 * dim * dim + 4 * heads * features * dk + 2 * heads * features


@register("linear")
class LinearAttention(_QKVHeads):
    """Linear attention (Katharopoulos et al. 2020, arXiv 2006.16236): per head

        y_i = φ(q_i)ᵀ S_i / (φ(q_i)ᵀ z_i + eps),  S_i = Σ_j φ(k_j) v_jᵀ,  z_i = Σ_j φ(k_j)

    over the visible keys j (causal: j ≤ i), with φ(x) = elu(x) + 1 (the paper's), relu, or the
    identity. The identity gives features of either sign, so the normaliser can vanish or turn
    negative: it is checked on every call and refused with a ValueError when a feature is
    negative (a host synchronisation; the other maps are non-negative by construction). 4 D²
    parameters; `attn_dropout` is accepted and unused (no probabilities are formed), as
    pooling's is.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        feature_map: str = "elu1",
        eps: float = 1e-6,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if feature_map not in FEATURE_MAPS:
            raise ValueError(f"feature_map={feature_map!r} is not one of {FEATURE_MAPS}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
            raise ValueError(f"eps must be a float >= 0, got {eps!r}")
        self._init_qkv(dim, heads, causal, impl, attn_dropout)
        self.feature_map, self.eps = feature_map, float(eps)

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """See `_linear_flops`, with F = dk."""
        return _linear_flops(dim, heads, dim // heads)

    drops_attention = False  # attn_dropout is accepted and unused: no probabilities to drop

    def dropout_p(self) -> float:
        return 0.0

    def features(self, t_bhnk: torch.Tensor) -> torch.Tensor:
        """φ(t), non-negative."""
        if self.feature_map == "elu1":
            return F.elu(t_bhnk) + 1
        if self.feature_map == "relu":
            return F.relu(t_bhnk)
        if t_bhnk.device.type != "meta" and bool((t_bhnk < 0).any()):
            raise ValueError(
                "linear attention with feature_map='identity' got a negative feature "
                f"(min {float(t_bhnk.detach().min()):.3g}): the normaliser φ(q)ᵀz needs non-negative "
                "features; use feature_map='elu1' or 'relu'"
            )
        return t_bhnk

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The normalised kernel weights φ(q_i)ᵀφ(k_j) / (φ(q_i)ᵀ z_i + eps), (B, H, N, N): each
        row a distribution over the visible keys (up to the eps in its normaliser)."""
        q_bhnk, k_bhnk, _ = self._qkv(x_bnd)
        return kernels.linear_attention(
            self.features(q_bhnk),
            self.features(k_bhnk),
            _eye_values(x_bnd, self.heads),
            self.causal,
            key_padding_mask,
            self.eps,
            impl="torch",
        )

    def attend(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk)."""
        q_bhnk, k_bhnk, v_bhnk = self._qkv(x_bnd, scores_from)
        return kernels.linear_attention(
            self.features(q_bhnk),
            self.features(k_bhnk),
            v_bhnk,
            self.causal,
            key_padding_mask,
            self.eps,
            impl=self.impl,
        )


def orthogonal_gaussian(m: int, d: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """(m, d) random features ω, FAVOR+'s orthogonal random features: blocks of d rows, each
    block a uniformly (Haar) distributed orthogonal matrix, its rows rescaled to norms distributed
    as a Gaussian vector's (chi with d degrees of freedom). Every row is then marginally N(0, I_d),
    so the estimate of the softmax kernel is unbiased, and rows within a block are orthogonal,
    which lowers its variance (Choromanski et al. 2021, section 3).

    The Q of a QR decomposition of a Gaussian matrix is Haar-distributed only after its columns are
    multiplied by the signs of diag(R) (Mezzadri 2007, arXiv math-ph/0609050): LAPACK's
    Householder QR ties those signs to the input, and without the correction row r of each block
    leans toward ±e_r and the kernel estimate is biased."""
    blocks = []
    for _ in range(math.ceil(m / d)):
        q_dd, r_dd = torch.linalg.qr(torch.randn(d, d, generator=generator))
        blocks.append((q_dd * r_dd.diagonal().sign()).T)  # Q diag(sign R_ii): Haar
    norms = torch.randn(m, d, generator=generator).norm(dim=1, keepdim=True)
    return torch.cat(blocks)[:m] * norms


@register("favor")
class Favor(_QKVHeads):
    """Performer's FAVOR+ (Choromanski et al. 2020, arXiv 2009.14794): softmax attention
    estimated with positive orthogonal random features, run through linear attention. With
    x = q / dk^¼ (or k / dk^¼),

        φ(x) = exp(ωᵀx − ‖x‖²/2) / √m,   E[φ(q)ᵀφ(k)] = exp(qᵀk / √dk),

    ω: m orthogonal Gaussian features (`orthogonal_gaussian`), one draw per layer shared by its
    heads, drawn at build from torch's generator (so the run's seed fixes it). For stability
    the features are computed in float32 at least, and each query's with its largest exponent
    subtracted (not differentiated): a factor per query, which cancels between its numerator
    and denominator. The keys' exponents need no data-dependent shift, which would couple a
    token to later ones under a causal mask: ωᵀk − ‖k‖²/2 ≤ ‖ω‖²/2 for every k, so they stay
    below max ‖ω‖²/2 (about dk/2). `redraw_every` > 0 draws new features every that many
    forward calls in training mode (a counter buffer `redraw_step` counts them; reading it is a
    host synchronisation, and a graph break under torch.compile). The default, 0, keeps the
    draw made at build: the estimate is unbiased over draws and the run's seed picks the draw,
    so the spread between draws shows up as spread between seeds, and a training step pays no
    synchronisation (performer-pytorch's Performer redraws every 1000 calls instead).
    4 D² parameters; `attn_dropout` accepted and unused, as linear's. No `flops_per_token`:
    the fixed projection ωᵀq takes no weight gradient, so training does not cost three
    forwards as the convention of attnzoo.flops has it.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        features: int | None = None,
        redraw_every: int = 0,
        eps: float = 1e-6,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self._init_qkv(dim, heads, causal, impl, attn_dropout)
        if features is None:
            features = max(2, round(self.dk * math.log(self.dk)))
            features += features % 2
        _positive(features, "features")
        if isinstance(redraw_every, bool) or not isinstance(redraw_every, int) or redraw_every < 0:
            raise ValueError(f"redraw_every must be an int >= 0, got {redraw_every!r}")
        self.features, self.redraw_every, self.eps = features, redraw_every, float(eps)
        self.register_buffer("omega_mk", orthogonal_gaussian(features, self.dk))
        self.register_buffer("redraw_step", torch.zeros((), dtype=torch.long))

    drops_attention = False  # attn_dropout is accepted and unused: no probabilities to drop

    def dropout_p(self) -> float:
        return 0.0

    def _maybe_redraw(self) -> None:
        if not (self.training and self.redraw_every):
            return
        step = int(self.redraw_step)
        if step and step % self.redraw_every == 0:
            omega = orthogonal_gaussian(self.features, self.dk)
            self.omega_mk.copy_(omega.to(self.omega_mk))
        self.redraw_step.add_(1)

    def feature_maps(
        self,
        q_bhnk: torch.Tensor,
        k_bhnk: torch.Tensor,
        key_padding_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """φ(q), φ(k), (B, H, N, m), in float32 at least; each query's with its largest
        exponent taken out (a factor per query, which cancels in its output)."""
        compute = torch.promote_types(q_bhnk.dtype, torch.float32)
        scale = self.dk**-0.25
        q_bhnk, k_bhnk = q_bhnk.to(compute) * scale, k_bhnk.to(compute) * scale
        omega_mk = self.omega_mk.to(compute)
        wq_bhnm = q_bhnk @ omega_mk.T - q_bhnk.pow(2).sum(-1, keepdim=True) / 2
        wk_bhnm = k_bhnk @ omega_mk.T - k_bhnk.pow(2).sum(-1, keepdim=True) / 2
        q_max = wq_bhnm.detach().amax(-1, keepdim=True)
        root_m = math.sqrt(self.features)
        return (wq_bhnm - q_max).exp() / root_m, wk_bhnm.exp() / root_m

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The normalised estimated weights φ(q_i)ᵀφ(k_j) / (φ(q_i)ᵀ z_i + eps), (B, H, N, N):
        each row a distribution over the visible keys (up to eps)."""
        q_bhnk, k_bhnk, _ = self._qkv(x_bnd)
        fq, fk = self.feature_maps(q_bhnk, k_bhnk, key_padding_mask)
        eye_bhnn = _eye_values(x_bnd, self.heads)
        return kernels.linear_attention(
            fq, fk, eye_bhnn, self.causal, key_padding_mask, self.eps, impl="torch"
        )

    def attend(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk)."""
        self._maybe_redraw()
        q_bhnk, k_bhnk, v_bhnk = self._qkv(x_bnd, scores_from)
        fq, fk = self.feature_maps(q_bhnk, k_bhnk, key_padding_mask)
        return kernels.linear_attention(
            fq, fk, v_bhnk, self.causal, key_padding_mask, self.eps, impl=self.impl
        )
