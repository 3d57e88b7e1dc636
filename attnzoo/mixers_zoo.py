"""Six more token mixers, registered in the same `MIXERS` as the five of attnzoo.mixers: from
the efficient-attention literature linear attention, Performer's FAVOR+, Nyströmformer, FNet's
Fourier mixing and sliding-window attention, and MLP-Mixer's token-mixing MLP. docs/mixers.md
gives each one's formula, paper, options and where attnzoo departs from the paper.

A mixer that cannot be causal (its output at a token mixes every token by construction) says so
with `supports_causal = False`: its constructor refuses `causal=True`, and the trainer refuses a
causal task with it before any work (attnzoo.config.validate).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from attnzoo import kernels
from attnzoo.kernels._checks import check_dropout
from attnzoo.mixers import (
    _check_heads,
    _check_input,
    _eye_values,
    _HeadsThenProjection,
    _OneHead,
    register,
)

FEATURE_MAPS = ("elu1", "relu", "identity")


def _refuse_causal(cls: type, causal: bool) -> None:
    if causal:
        raise ValueError(
            f"mixer {cls.mixer_name!r} cannot be causal (every output mixes every token); "
            "use it on a non-causal task, or a causal mixer (e.g. linear, local, scaled_dot)"
        )


def _positive(value: object, name: str, kind: type = int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise ValueError(f"{name} must be a positive {kind.__name__}, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


class _QKVHeads(_HeadsThenProjection):
    """q, k, v projections per head and an output projection, 4 D² parameters, as scaled_dot."""

    def _init_qkv(self, dim: int, heads: int, causal: bool, impl: str, attn_dropout: float):
        _check_heads(dim, heads)
        self.dim, self.heads, self.causal, self.impl = dim, heads, causal, impl
        self.dk = dim // heads
        self.attn_dropout = check_dropout(attn_dropout, "attn_dropout")
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def _qkv(self, x_bnd: torch.Tensor, scores_from: torch.Tensor | None = None):
        _check_input(x_bnd, self.dim)
        q_bhnk, k_bhnk, v_bhnk = rearrange(
            self.qkv(x_bnd), "b n (three h k) -> three b h n k", three=3, h=self.heads
        )
        if scores_from is not None:
            q_bhnk, k_bhnk, _ = rearrange(
                self.qkv(scores_from), "b n (three h k) -> three b h n k", three=3, h=self.heads
            )
        return q_bhnk, k_bhnk, v_bhnk

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init (model.residual=deepnorm): Xavier-normal, gain 1 on Wq and Wk, gain
        `beta` on Wv and the output projection."""
        w_q, w_k, w_v = self.qkv.weight.data.chunk(3, dim=0)
        for w, gain in ((w_q, 1.0), (w_k, 1.0), (w_v, beta), (self.proj.weight.data, beta)):
            nn.init.xavier_normal_(w, gain=gain)


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


@register("fourier")
class Fourier(_OneHead):
    """FNet's mixer (Lee-Thorp et al. 2021, arXiv 2105.03824): y = Re(FFT_seq(FFT_hidden(x))),
    a 2-D discrete Fourier transform over tokens and channels keeping the real part; no
    parameters. Padding tokens are set to zero before the transform, so that real outputs do not
    depend on their values (they still count in the sequence length N the transform runs over).
    Computed in float32 at least (the FFT has no half-precision CPU path). Not causal: every
    output mixes every token.
    """

    supports_causal = False

    def __init__(
        self, dim: int, heads: int, causal: bool, impl: str, attn_dropout: float = 0.0
    ) -> None:
        super().__init__()
        _refuse_causal(type(self), causal)
        self.dim = dim
        check_dropout(attn_dropout, "attn_dropout")  # accepted, see _OneHead

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """0 by the matmul convention of attnzoo.flops, as pooling's additions: the FFT is no
        matmul (it costs about 5 log₂(N D) real operations per channel and token)."""
        return 0.0

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        _check_input(x_bnd, self.dim)
        if key_padding_mask is not None:
            x_bnd = x_bnd.masked_fill(key_padding_mask[..., None], 0.0)
        compute = torch.promote_types(x_bnd.dtype, torch.float32)
        y_bnd = torch.fft.fft2(x_bnd.to(compute), dim=(-2, -1)).real
        return y_bnd.to(x_bnd.dtype)


def _window_keys(seq_len: int, window: int, causal: bool) -> float:
    """Keys per query on average under a sliding window of reach `window` each side."""
    n, w = seq_len, window
    counts = (min(i, w) + 1 if causal else min(n - 1, i + w) - max(0, i - w) + 1 for i in range(n))
    return sum(counts) / n


@register("local")
class LocalAttention(_QKVHeads):
    """Sliding-window softmax attention (as in Longformer's local attention, arXiv 2004.05150):
    query i attends to the keys i − w ..= i + w (causal: i − w ..= i), softmax(q kᵀ/√dk) v
    within the window, through `scaled_dot_attention(..., window=(w, w))`. 4 D² parameters.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        window: int = 16,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise ValueError(f"local window must be an int >= 0 (keys each side), got {window!r}")
        self._init_qkv(dim, heads, causal, impl, attn_dropout)
        self.window = window

    def reach(self) -> tuple[int, int]:
        return (self.window, 0 if self.causal else self.window)

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """q, k, v and output projections 8 D²; scores and weights·v 4 D Nₑ over the keys in
        the window."""
        window = int(options.get("window", 16))
        return 8 * dim * dim + 4 * dim * _window_keys(seq_len, window, causal)

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """softmax(q kᵀ/√dk) within the window, per head, (B, H, N, N)."""
        q_bhnk, k_bhnk, _ = self._qkv(x_bnd)
        return kernels.scaled_dot_attention(
            q_bhnk,
            k_bhnk,
            _eye_values(x_bnd, self.heads),
            self.causal,
            key_padding_mask,
            impl="torch",
            window=self.reach(),
        )

    def attend(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk)."""
        q_bhnk, k_bhnk, v_bhnk = self._qkv(x_bnd, scores_from)
        return kernels.scaled_dot_attention(
            q_bhnk,
            k_bhnk,
            v_bhnk,
            self.causal,
            key_padding_mask,
            dropout_p=self.dropout_p(),
            impl=self.impl,
            window=self.reach(),
        )


@register("token_mlp")
class TokenMLP(nn.Module):
    """MLP-Mixer's token-mixing MLP (Tolstikhin et al. 2021, arXiv 2105.01601): per channel,
    across the token axis, shared by the channels,

        y[:, c] = W₂ gelu(W₁ x[:, c] + b₁) + b₂,   W₁: (hidden, L), W₂: (L, hidden),

    with L = `max_len` the longest sequence it mixes and hidden = round(`hidden_ratio` · L). A
    shorter input is zero-padded to L and its output cut back; padding tokens are zeroed before
    the mixing, so real outputs do not depend on their values. `max_len` left at None (the
    default) is the model's (`model.max_len`, else the task's context): attnzoo.model fills it
    in, and a mixer built on its own needs it given. (The option is not called `seq_len`, which
    `flops_per_token` already takes as the context a FLOP count is for.)

    Causal: hidden unit u is placed at token ⌊u L / hidden⌋; W₁ is masked so that a unit sees
    only the tokens up to its place, and W₂ so that token i reads only units placed at or
    before i: token i then depends on tokens j ≤ i only. Init: each weight N(0, 1/fan-in), with
    fan-in counted over the unmasked entries of its row.

    No `head_outputs`: the mixer is not linear in its input (the gelu), so the path
    decomposition, which needs a block linear in x, is not available for it.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        max_len: int | None = None,
        hidden_ratio: float = 1.0,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if max_len is None:
            raise ValueError(
                "token_mlp needs max_len, the longest sequence it mixes (a Model gives it its "
                "own max_len when the option is left at None)"
            )
        _positive(max_len, "max_len")
        seq_len = max_len
        _positive(hidden_ratio, "hidden_ratio", float)
        check_dropout(attn_dropout, "attn_dropout")  # accepted and unused, as pooling's
        self.dim, self.causal, self.seq_len = dim, causal, seq_len
        hidden = max(1, round(hidden_ratio * seq_len))
        self.hidden = hidden
        place_u = torch.arange(hidden) * seq_len // hidden
        tokens_l = torch.arange(seq_len)
        if causal:
            mask1_ul = tokens_l[None, :] <= place_u[:, None]
            mask2_lu = place_u[None, :] <= tokens_l[:, None]
        else:
            mask1_ul = torch.ones(hidden, seq_len, dtype=torch.bool)
            mask2_lu = torch.ones(seq_len, hidden, dtype=torch.bool)
        self.register_buffer("mask1_ul", mask1_ul, persistent=False)
        self.register_buffer("mask2_lu", mask2_lu, persistent=False)
        fan1 = mask1_ul.sum(1, keepdim=True).clamp_min(1).float()
        fan2 = mask2_lu.sum(1, keepdim=True).clamp_min(1).float()
        self.w1_ul = nn.Parameter(torch.randn(hidden, seq_len) / fan1.sqrt())
        self.b1_u = nn.Parameter(torch.zeros(hidden))
        self.w2_lu = nn.Parameter(torch.randn(seq_len, hidden) / fan2.sqrt())
        self.b2_l = nn.Parameter(torch.zeros(seq_len))

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init (model.residual=deepnorm) as for its FFN: Xavier-normal with gain
        `beta` on both token weights (the causal masks still apply on top)."""
        nn.init.xavier_normal_(self.w1_ul, gain=beta)
        nn.init.xavier_normal_(self.w2_lu, gain=beta)

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """The two token matmuls, 2 · 2 · hidden · L · D per sequence padded to L = max_len
        tokens (the masked entries are multiplied too), over its `seq_len` tokens."""
        length = options.get("max_len") or seq_len
        hidden = max(1, round(float(options.get("hidden_ratio", 1.0)) * int(length)))
        return 4 * hidden * int(length) * dim / seq_len

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        _check_input(x_bnd, self.dim)
        n = x_bnd.shape[1]
        if n > self.seq_len:
            raise ValueError(f"token_mlp mixes at most max_len={self.seq_len} tokens, got {n}")
        if key_padding_mask is not None:
            x_bnd = x_bnd.masked_fill(key_padding_mask[..., None], 0.0)
        x_bld = F.pad(x_bnd, (0, 0, 0, self.seq_len - n))
        w1_ul = (self.w1_ul * self.mask1_ul).to(x_bld.dtype)
        w2_lu = (self.w2_lu * self.mask2_lu).to(x_bld.dtype)
        h_bud = F.gelu(w1_ul @ x_bld + self.b1_u.to(x_bld.dtype)[:, None])
        y_bld = w2_lu @ h_bud + self.b2_l.to(x_bld.dtype)[:, None]
        return y_bld[:, :n]
