"""The five token mixers, each an nn.Module mapping (B, N, D) -> (B, N, D), and their registry.

A mixer is built by name with `build_mixer(name, dim=..., heads=..., causal=..., impl=..., **options)`.
Every mixer class declares its own options as keyword arguments of its constructor; a new mixer
is one class decorated with `@register("name")` and one YAML under conf/mixer/.

Every mixer also has `heads` and `head_outputs(x, key_padding_mask, scores_from)`: each head's
contribution to the output (through the output projection), with the attention weights computed
from `scores_from` while the values come from `x`. It is what the path decomposition of Dong et al.
(2021) needs (attnzoo/paths.py): with the attention frozen at the full network's, a block is linear
in its input, and the output of a skip+attention network is the sum of its paths. Mixers without
scores (pooling, identity) are linear already and count as one head.

A mixer with weights also says which are queries/keys and which values/outputs, in
`deepnet_init_(beta)`: DeepNet's init, which `model.residual=deepnorm` applies (attnzoo.residual).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import torch
from einops import rearrange
from torch import nn

from attnzoo import kernels
from attnzoo.kernels._checks import check_dropout

MIXERS: dict[str, type[nn.Module]] = {}

# Arguments every mixer receives from the block; everything else is a mixer-specific option.
COMMON_ARGS = ("dim", "heads", "causal", "impl")


def register(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    def add(cls: type[nn.Module]) -> type[nn.Module]:
        if name in MIXERS:
            raise ValueError(f"mixer {name!r} is registered twice")
        MIXERS[name] = cls
        cls.mixer_name = name
        return cls

    return add


def mixer_options(name: str) -> dict[str, object]:
    """The mixer-specific options of `name` with their defaults."""
    params = inspect.signature(mixer_class(name).__init__).parameters
    return {k: p.default for k, p in params.items() if k != "self" and k not in COMMON_ARGS}


def mixer_class(name: str) -> type[nn.Module]:
    if name not in MIXERS:
        raise ValueError(f"unknown mixer {name!r}; registered mixers: {sorted(MIXERS)}")
    return MIXERS[name]


def build_mixer(
    name: str,
    dim: int,
    heads: int = 1,
    causal: bool = False,
    impl: str = "auto",
    **options: object,
) -> nn.Module:
    allowed = mixer_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"mixer {name!r} has no option(s) {unknown}; its options are {sorted(allowed) or 'none'}"
        )
    return mixer_class(name)(dim=dim, heads=heads, causal=causal, impl=impl, **options)


def _check_heads(dim: int, heads: int) -> None:
    if not isinstance(heads, int) or heads < 1:
        raise ValueError(f"heads must be a positive int, got {heads!r}")
    if dim % heads != 0:
        raise ValueError(f"dim={dim} must be divisible by heads={heads} (dim % heads == 0)")


def _check_input(x_bnd: torch.Tensor, dim: int) -> None:
    if x_bnd.dim() != 3 or x_bnd.shape[-1] != dim:
        raise ValueError(
            f"mixer input must have shape (batch, tokens, {dim}), got {tuple(x_bnd.shape)}"
        )


def _per_head_projection(out_bhnk: torch.Tensor, proj: nn.Linear) -> torch.Tensor:
    """Each head's share of proj(concat_h out_h): (B, H, N, D); the sum over heads is the output."""
    w_hkd = rearrange(proj.weight, "d (h k) -> h k d", h=out_bhnk.shape[1])
    return torch.einsum("bhnk,hkd->bhnd", out_bhnk, w_hkd.to(out_bhnk.dtype))


class _HeadsThenProjection(nn.Module):
    """An attention mixer given by `attend` (per-head outputs, (B, H, N, dk)) and `proj`: the
    output is proj(concat over heads), and each head's share of it is the path decomposition's
    unit (attnzoo.paths)."""

    proj: nn.Linear
    attn_dropout: float

    def dropout_p(self) -> float:
        """Attention-probability dropout for this call: `attn_dropout` in training, 0 in eval."""
        return self.attn_dropout if self.training else 0.0

    def attend(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        raise NotImplementedError

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.proj(rearrange(self.attend(x_bnd, key_padding_mask), "b h n k -> b n (h k)"))

    def head_outputs(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Each head's contribution, (B, H, N, D); scores from `scores_from` (default x)."""
        return _per_head_projection(self.attend(x_bnd, key_padding_mask, scores_from), self.proj)


@register("scaled_dot")
class ScaledDotAttention(_HeadsThenProjection):
    """softmax(q kᵀ / sqrt(dk)) v with q, k, v linear in x; 4 D² parameters."""

    def __init__(
        self, dim: int, heads: int, causal: bool, impl: str, attn_dropout: float = 0.0
    ) -> None:
        super().__init__()
        _check_heads(dim, heads)
        self.dim, self.heads, self.causal, self.impl = dim, heads, causal, impl
        self.attn_dropout = check_dropout(attn_dropout, "attn_dropout")
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init (model.residual=deepnorm): Xavier-normal, gain 1 on Wq and Wk, gain
        `beta` on Wv and the output projection."""
        w_q, w_k, w_v = self.qkv.weight.data.chunk(3, dim=0)  # the layout attend reads
        for w, gain in ((w_q, 1.0), (w_k, 1.0), (w_v, beta), (self.proj.weight.data, beta)):
            nn.init.xavier_normal_(w, gain=gain)

    def attend(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk); values from x, scores
        from `scores_from` (default x)."""
        _check_input(x_bnd, self.dim)
        q_bhnk, k_bhnk, v_bhnk = rearrange(
            self.qkv(x_bnd), "b n (three h k) -> three b h n k", three=3, h=self.heads
        )
        if scores_from is not None:
            q_bhnk, k_bhnk, _ = rearrange(
                self.qkv(scores_from), "b n (three h k) -> three b h n k", three=3, h=self.heads
            )
        return kernels.scaled_dot_attention(
            q_bhnk,
            k_bhnk,
            v_bhnk,
            self.causal,
            key_padding_mask,
            dropout_p=self.dropout_p(),
            impl=self.impl,
        )


@register("quadratic")
class QuadraticFormAttention(_HeadsThenProjection):
    """Scores xᵀ U⁽ʰ⁾ x' with a full D×D matrix per head; H D² + 2 D² parameters.

    U is initialised so that the scores have the same spread as scaled-dot's at init (variance
    about 1/9 for unit-variance inputs), which keeps the two comparable from step 0.
    """

    def __init__(
        self, dim: int, heads: int, causal: bool, impl: str, attn_dropout: float = 0.0
    ) -> None:
        super().__init__()
        _check_heads(dim, heads)
        self.dim, self.heads, self.causal, self.impl = dim, heads, causal, impl
        self.attn_dropout = check_dropout(attn_dropout, "attn_dropout")
        self.u = nn.Parameter(torch.randn(heads, dim, dim) / (3 * math.sqrt(dim)))
        self.value = nn.Linear(dim, dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init (model.residual=deepnorm): Xavier-normal with gain `beta` on Wv and the
        output projection; U, which plays the query/key part, keeps its own init."""
        nn.init.xavier_normal_(self.value.weight, gain=beta)
        nn.init.xavier_normal_(self.proj.weight, gain=beta)

    def attend(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk); values from x, scores
        from `scores_from` (default x)."""
        _check_input(x_bnd, self.dim)
        s_bnd = x_bnd if scores_from is None else scores_from
        v_bhnk = rearrange(self.value(x_bnd), "b n (h k) -> b h n k", h=self.heads)
        return kernels.quadratic_attention(
            s_bnd,
            self.u,
            v_bhnk,
            self.causal,
            key_padding_mask,
            dropout_p=self.dropout_p(),
            impl=self.impl,
        )


METRIC_PARAMS = ("sym", "psd", "diag", "identity")


@register("metric")
class MetricTensorAttention(_HeadsThenProjection):
    """Scores pᵀ M⁽ʰ⁾ p' under a learned symmetric metric per head, values p; p = P x.

    `metric_param` picks how M is built from its free entries: `sym` = (C + Cᵀ)/2 from the upper
    triangle, `psd` = L Lᵀ from a lower triangle, `diag`, or the fixed `identity`. Parameters:
    2 D² + H dk(dk+1)/2 for `sym` and `psd`, 2 D² + H dk for `diag`, 2 D² for `identity`.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        metric_param: str = "sym",
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        _check_heads(dim, heads)
        if metric_param not in METRIC_PARAMS:
            raise ValueError(f"metric_param={metric_param!r} is not one of {METRIC_PARAMS}")
        self.dim, self.heads, self.causal, self.impl = dim, heads, causal, impl
        self.attn_dropout = check_dropout(attn_dropout, "attn_dropout")
        self.metric_param = metric_param
        dk = dim // heads
        self.dk = dk
        self.p = nn.Linear(dim, dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        rows, cols = torch.triu_indices(dk, dk)
        self.register_buffer("_rows", rows, persistent=False)
        self.register_buffer("_cols", cols, persistent=False)
        n_tri = rows.numel()
        # Init so that p M p' / sqrt(dk) spreads like scaled-dot's scores, with no bias towards
        # a token attending to itself (a zero-mean M) where the parametrisation allows it.
        if metric_param == "sym":
            self.m_free = nn.Parameter(torch.randn(heads, n_tri) / math.sqrt(dk))
        elif metric_param == "psd":
            self.m_free = nn.Parameter(torch.randn(heads, n_tri) * dk**-0.75)
        elif metric_param == "diag":
            self.m_free = nn.Parameter(torch.randn(heads, dk) / math.sqrt(dk))
        else:
            self.register_parameter("m_free", None)

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init (model.residual=deepnorm): Xavier-normal with gain `beta` on the output
        projection. P gives queries, keys and values at once; it is initialised as DeepNet does
        queries and keys (Xavier-normal, gain 1), since scaling it would also scale the scores
        (by beta squared). M keeps its own init."""
        nn.init.xavier_normal_(self.p.weight, gain=1.0)
        nn.init.xavier_normal_(self.proj.weight, gain=beta)

    def metric(self) -> torch.Tensor:
        """The metric tensors M, (H, dk, dk), symmetric."""
        h, dk = self.heads, self.dk
        if self.metric_param == "identity":
            return torch.eye(dk, device=self.p.weight.device).expand(h, dk, dk)
        if self.metric_param == "diag":
            return torch.diag_embed(self.m_free)
        tri_hkk = self.m_free.new_zeros(h, dk, dk)
        tri_hkk[:, self._rows, self._cols] = self.m_free
        if self.metric_param == "sym":
            return (
                tri_hkk
                + tri_hkk.transpose(1, 2)
                - torch.diag_embed(tri_hkk.diagonal(dim1=1, dim2=2))
            )
        lower_hkk = tri_hkk.transpose(1, 2)
        return lower_hkk @ lower_hkk.transpose(1, 2)

    def attend(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk).

        With scores from x itself this is the fused metric kernel, which reads one p. Scores
        (p_s M)·p_s with values p_x (the path decomposition's frozen scores) are scaled-dot
        attention with q = p_s M, k = p_s, v = p_x, at the same 1/sqrt(dk) scale.
        """
        _check_input(x_bnd, self.dim)
        m_hkk = self.metric()
        px_bhnk = rearrange(self.p(x_bnd), "b n (h k) -> b h n k", h=self.heads)
        if scores_from is None:
            return kernels.metric_attention(
                px_bhnk,
                m_hkk,
                self.causal,
                key_padding_mask,
                dropout_p=self.dropout_p(),
                impl=self.impl,
            )
        ps_bhnk = rearrange(self.p(scores_from), "b n (h k) -> b h n k", h=self.heads)
        return kernels.scaled_dot_attention(
            ps_bhnk @ m_hkk[None].to(ps_bhnk.dtype),
            ps_bhnk,
            px_bhnk,
            self.causal,
            key_padding_mask,
            dropout_p=self.dropout_p(),
            impl=self.impl,
        )


class _OneHead(nn.Module):
    """A mixer without scores: for the path decomposition the whole mixer is one head, and since
    it is linear in x, `scores_from` plays no part.

    Such mixers accept `attn_dropout` and do nothing with it (there are no attention
    probabilities to drop), so that one preset (e.g. nanoGPT's recipe, `experiment=
    shakespeare_char_gpu`) can set it for every mixer of a sweep."""

    heads = 1

    def head_outputs(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The output as one head, (B, 1, N, D)."""
        return self(x_bnd, key_padding_mask)[:, None]


@register("pooling")
class Pooling(_OneHead):
    """PoolFormer's mixer: mean over a window of tokens minus the token; no parameters."""

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        window: int = 3,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if isinstance(window, bool) or not isinstance(window, int) or window < 1 or window % 2 == 0:
            raise ValueError(f"pooling window must be a positive odd int, got {window!r}")
        self.dim, self.causal, self.impl, self.window = dim, causal, impl, window
        check_dropout(attn_dropout, "attn_dropout")  # accepted, see _OneHead

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        _check_input(x_bnd, self.dim)
        return kernels.pool_mix(x_bnd, self.window, self.causal, key_padding_mask, impl=self.impl)


@register("identity")
class Identity(_OneHead):
    """No mixing at all: the baseline that tells what the rest of the block does alone."""

    def __init__(
        self, dim: int, heads: int, causal: bool, impl: str, attn_dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.dim = dim
        check_dropout(attn_dropout, "attn_dropout")  # accepted, see _OneHead

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        _check_input(x_bnd, self.dim)
        return x_bnd
