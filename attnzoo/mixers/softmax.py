"""The softmax attention mixers: scaled-dot attention, quadratic-form and metric-tensor scores,
and sliding-window (local) attention. Each computes softmax-normalised scores per head, attends
through an attnzoo.kernels op and projects the concatenated heads back to the width. Each takes
the options `sink` (a logit per head in the softmax) and `gate` (an output gate σ(x W_g) on each
head before the projection), both off by default (attnzoo.mixers.base)."""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import nn

from attnzoo import kernels
from attnzoo.kernels._checks import check_dropout
from attnzoo.mixers.base import (
    _check_heads,
    _check_input,
    _eye_values,
    _HeadsThenProjection,
    _QKVHeads,
    gate_flops,
    keys_per_query,
)
from attnzoo.mixers.registry import register


@register("scaled_dot")
class ScaledDotAttention(_QKVHeads):
    """softmax(q kᵀ / sqrt(dk)) v with q, k, v linear in x; 4 D² parameters. Every query sees
    every key: LocalAttention is this within a window."""

    window: int | None = None  # keys each side a query sees; None: all of them

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        attn_dropout: float = 0.0,
        sink: str = "none",
        gate: str = "none",
    ) -> None:
        super().__init__()
        self._init_qkv(dim, heads, causal, impl, attn_dropout)
        self._init_sink(sink, heads)
        self._init_gate(gate, dim, heads)

    def reach(self) -> tuple[int, int] | None:
        """The keys query i sees, (left, right) of it, as the op's `window` takes them."""
        if self.window is None:
            return None
        return (self.window, 0 if self.causal else self.window)

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """q, k, v and output projections 8 D²; scores q·k and weights·v 4 D Nₑ; with `gate`,
        its projection (`gate_flops`)."""
        gate = gate_flops(dim, heads, options.get("gate", "none"))
        return 8 * dim * dim + 4 * dim * keys_per_query(seq_len, causal) + gate

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """softmax(q kᵀ / sqrt(dk)) per head, (B, H, N, N)."""
        q_bhnk, k_bhnk, _ = self._qkv(x_bnd)
        return kernels.scaled_dot_attention(
            q_bhnk,
            k_bhnk,
            _eye_values(x_bnd, self.heads),
            self.causal,
            key_padding_mask,
            impl="torch",
            window=self.reach(),
            sink=self.sink_logit,
        )

    def attend(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-head outputs before the output projection, (B, H, N, dk); values from x, scores
        from `scores_from` (default x)."""
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
            sink=self.sink_logit,
        )


@register("quadratic")
class QuadraticFormAttention(_HeadsThenProjection):
    """Scores xᵀ U⁽ʰ⁾ x' with a full D×D matrix per head; H D² + 2 D² parameters.

    U is initialised so that the scores have the same spread as scaled-dot's at init (variance
    about 1/9 for unit-variance inputs), which keeps the two comparable from step 0.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        attn_dropout: float = 0.0,
        sink: str = "none",
        gate: str = "none",
    ) -> None:
        super().__init__()
        _check_heads(dim, heads)
        self.dim, self.heads, self.causal, self.impl = dim, heads, causal, impl
        self.attn_dropout = check_dropout(attn_dropout, "attn_dropout")
        self._init_sink(sink, heads)
        self.u = nn.Parameter(torch.randn(heads, dim, dim) / (3 * math.sqrt(dim)))
        self.value = nn.Linear(dim, dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self._init_gate(gate, dim, heads)

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """v and output projections 4 D²; x U⁽ʰ⁾ per head 2 H D²; scores (x U)·x 2 H D Nₑ;
        weights·v 2 D Nₑ; with `gate`, its projection (`gate_flops`)."""
        d, h, n = dim, heads, keys_per_query(seq_len, causal)
        gate = gate_flops(dim, heads, options.get("gate", "none"))
        return 4 * d * d + 2 * h * d * d + 2 * h * d * n + 2 * d * n + gate

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """softmax of the scores x U⁽ʰ⁾ x' per head, (B, H, N, N)."""
        _check_input(x_bnd, self.dim)
        u_hdd = self.u.to(x_bnd.dtype)
        eye_bhnn = _eye_values(x_bnd, self.heads)
        return kernels.quadratic_attention(
            x_bnd,
            u_hdd,
            eye_bhnn,
            self.causal,
            key_padding_mask,
            impl="torch",
            sink=self.sink_logit,
        )

    def learned_matrices(self) -> dict[str, torch.Tensor]:
        """{"U": (H, D, D)}."""
        return {"U": self.u.detach()}

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init (model.residual=deepnorm): Xavier-normal with gain `beta` on Wv and the
        output projection; U, which plays the query/key part, keeps its own init; the output
        gate's W_g gain 1."""
        nn.init.xavier_normal_(self.value.weight, gain=beta)
        nn.init.xavier_normal_(self.proj.weight, gain=beta)
        self._deepnet_init_gate_()

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
            sink=self.sink_logit,
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
        sink: str = "none",
        gate: str = "none",
    ) -> None:
        super().__init__()
        _check_heads(dim, heads)
        self._init_sink(sink, heads)
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
        self._init_gate(gate, dim, heads)

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init (model.residual=deepnorm): Xavier-normal with gain `beta` on the output
        projection. P gives queries, keys and values at once; it is initialised as DeepNet does
        queries and keys (Xavier-normal, gain 1), since scaling it would also scale the scores
        (by beta squared). M keeps its own init; the output gate's W_g gain 1."""
        nn.init.xavier_normal_(self.p.weight, gain=1.0)
        nn.init.xavier_normal_(self.proj.weight, gain=beta)
        self._deepnet_init_gate_()

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """p and output projections 4 D²; p M⁽ʰ⁾ per head 2 D dk; scores (p M)·p and weights·p
        4 D Nₑ (every metric_param: M is applied as a matrix); with `gate`, its projection
        (`gate_flops`)."""
        d, dk = dim, dim // heads
        gate = gate_flops(dim, heads, options.get("gate", "none"))
        return 4 * d * d + 2 * d * dk + 4 * d * keys_per_query(seq_len, causal) + gate

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """softmax of the scores p M⁽ʰ⁾ p' per head, (B, H, N, N): scaled-dot attention with
        q = p M and k = p, as `attend` computes it."""
        _check_input(x_bnd, self.dim)
        p_bhnk = rearrange(self.p(x_bnd), "b n (h k) -> b h n k", h=self.heads)
        q_bhnk = p_bhnk @ self.metric().to(x_bnd.dtype)[None]
        eye_bhnn = _eye_values(x_bnd, self.heads)
        return kernels.scaled_dot_attention(
            q_bhnk,
            p_bhnk,
            eye_bhnn,
            self.causal,
            key_padding_mask,
            impl="torch",
            sink=self.sink_logit,
        )

    def learned_matrices(self) -> dict[str, torch.Tensor]:
        """{"M": (H, dk, dk)}."""
        return {"M": self.metric().detach()}

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
                sink=self.sink_logit,
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
            sink=self.sink_logit,
        )


def _window_keys(seq_len: int, window: int, causal: bool) -> float:
    """Keys per query on average under a sliding window of reach `window` each side."""
    n, w = seq_len, window
    counts = (min(i, w) + 1 if causal else min(n - 1, i + w) - max(0, i - w) + 1 for i in range(n))
    return sum(counts) / n


@register("local")
class LocalAttention(ScaledDotAttention):
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
        sink: str = "none",
        gate: str = "none",
    ) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise ValueError(f"local window must be an int >= 0 (keys each side), got {window!r}")
        super().__init__(dim, heads, causal, impl, attn_dropout, sink, gate)
        self.window = window

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """q, k, v and output projections 8 D²; scores and weights·v 4 D Nₑ over the keys in
        the window; with `gate`, its projection (`gate_flops`)."""
        window = int(options.get("window", 16))
        gate = gate_flops(dim, heads, options.get("gate", "none"))
        return 8 * dim * dim + 4 * dim * _window_keys(seq_len, window, causal) + gate
