"""The token mixers, each an nn.Module mapping (B, N, D) -> (B, N, D), and their registry (five
here, six more in attnzoo.mixers_zoo, all in `MIXERS`).

A mixer is a class: an `nn.Module` whose constructor takes `dim, heads, causal, impl` (what the
block gives every mixer) and its own options as keyword arguments, and whose
`forward(x_bnd, key_padding_mask=None)` maps (B, N, D) to (B, N, D). It is named in one of three
ways, all resolved by `mixer_class`: by the name it is registered under (`@register("name")`,
`MIXERS`), by its import path (`package.module.Class`, what a YAML's `_target_` holds; a mixer in
the user's own code needs nothing else), or by the class itself. `build_mixer(mixer, dim=...,
heads=..., causal=..., impl=..., **options)` builds one and rejects an option its constructor does
not take.

What a feature needs from a mixer is an optional method of its class; a mixer without it still
trains and is measured, and the feature says "not available for this mixer":

    attention_probs(x_bnd, key_padding_mask=None) -> (B, H, N, N)
        the softmax attention probabilities the mixer computes on its input: the attention-entropy
        rank measure (attnzoo.rank) and the attention maps (attnzoo.attention_maps) read them
    flops_per_token(dim, heads, seq_len, causal, **options) -> float   (a staticmethod)
        forward matmul FLOPs per token, by the convention of attnzoo.flops (train.max_flops and
        the compute a run records use it)
    learned_matrices() -> {label: (H, a, b) tensor}
        matrices worth a picture (quadratic's U, metric's M), drawn beside the attention maps
    heads, head_outputs(x_bnd, key_padding_mask, scores_from) -> (B, H, N, D)
        each head's contribution to the output, with the attention weights computed from
        `scores_from` while the values come from `x`: what the path decomposition of Dong et al.
        (2021) needs (attnzoo.paths). With the attention frozen at the full network's, a block is
        linear in its input, and the output of a skip+attention network is the sum of its paths.
        Mixers without scores (pooling, identity) are linear already and count as one head.
    deepnet_init_(beta)
        which weights are queries/keys and which values/outputs: DeepNet's init, which
        `model.residual=deepnorm` applies (attnzoo.residual); needed by a mixer with weights
    supports_causal = False   (a class attribute; True when absent)
        the mixer cannot be causal: its constructor refuses `causal=True`, and the trainer
        refuses it with a causal task before any work (attnzoo.config.validate)
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
from collections.abc import Callable, Mapping

import torch
from einops import rearrange
from torch import nn

from attnzoo import kernels
from attnzoo.flops import keys_per_query
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


def class_path(cls: type) -> str:
    """`package.module.Class`: how a YAML's `_target_` names the class."""
    return f"{cls.__module__}.{cls.__qualname__}"


def registered_name(cls: type) -> str | None:
    """The name `cls` is registered under in MIXERS (not one inherited from a registered class)."""
    name = getattr(cls, "mixer_name", None)
    return name if name is not None and MIXERS.get(name) is cls else None


def name_of_target(target: str) -> str:
    """A mixer's name from its import path when its config gives none: the class name in
    snake case (`shiftmix.Shift` -> `shift`, `pkg.MyMixer` -> `my_mixer`)."""
    cls_name = str(target).rsplit(".", 1)[-1]
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", cls_name).lower()


def name_in_config(node: Mapping[str, object]) -> str | None:
    """The name a mixer's config node gives it: `name`, else the class name of its `_target_` in
    snake case; read from the config alone (no import), so that the trainer and a reader of a
    sweep's folders call a run's mixer the same."""
    if node.get("name"):
        return str(node["name"])
    return name_of_target(str(node["_target_"])) if node.get("_target_") else None


def without_implied_target(node: Mapping[str, object]) -> dict[str, object]:
    """A mixer's config node without its `_target_` where its `name` already says which class it
    is (a registered mixer, whose `_target_` is that class): so that a configuration is the same
    configuration, for a resumed run and a W&B group, as one saved before YAMLs named the class."""
    name, target = node.get("name"), node.get("_target_")
    if isinstance(name, str) and name in MIXERS and target == class_path(MIXERS[name]):
        return {k: v for k, v in node.items() if k != "_target_"}
    return dict(node)


def _import(path: str) -> object:
    """The object at `package.module.Attr[.Attr...]`: the longest importable module prefix, then
    attributes."""
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name is not None and not (module_name + ".").startswith(err.name + "."):
                raise  # the module exists and fails to import something of its own
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(f"no module {parts[0]!r}")


def mixer_class(mixer: str | type[nn.Module]) -> type[nn.Module]:
    """The class a mixer is named by: a name registered in MIXERS, an import path
    `package.module.Class` (a mixer in the user's own code, on PYTHONPATH), or the class itself."""
    if isinstance(mixer, str) and mixer in MIXERS:
        return MIXERS[mixer]
    if isinstance(mixer, str) and "." in mixer:
        try:
            cls = _import(mixer)
        except (ImportError, AttributeError) as err:
            raise ValueError(
                f"mixer class {mixer!r} cannot be imported ({type(err).__name__}: {err}); is "
                "its module on PYTHONPATH?"
            ) from err
    elif isinstance(mixer, type):
        cls = mixer
    else:
        raise ValueError(
            f"unknown mixer {mixer!r}; registered mixers: {sorted(MIXERS)}, or a mixer class by "
            "its import path (package.module.Class)"
        )
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ValueError(f"mixer {mixer!r} is {cls!r}, not an nn.Module class")
    return cls


def causal_mixers() -> list[str]:
    """The registered mixers that can run a causal task (language modelling), in registry order:
    those without `supports_causal = False`."""
    return [name for name, cls in MIXERS.items() if getattr(cls, "supports_causal", True)]


def mixer_options(mixer: str | type[nn.Module]) -> dict[str, object]:
    """The mixer-specific options of a mixer's constructor with their defaults
    (`inspect.Parameter.empty` for one without a default); a `**kwargs` is left out."""
    params = inspect.signature(mixer_class(mixer).__init__).parameters
    return {
        k: p.default
        for k, p in params.items()
        if k != "self" and k not in COMMON_ARGS and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }


def unknown_options(mixer: str | type[nn.Module], options: Mapping[str, object]) -> list[str]:
    """The keys of `options` the mixer's constructor does not take (none if it takes `**kwargs`)."""
    cls = mixer_class(mixer)
    params = inspect.signature(cls.__init__).parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return []
    return sorted(set(options) - set(mixer_options(cls)))


def check_options(mixer: str | type[nn.Module], options: Mapping[str, object]) -> None:
    """ValueError naming the options the mixer's constructor does not take, or the ones it needs
    that are not given."""
    cls = mixer_class(mixer)
    label = repr(registered_name(cls) or class_path(cls))
    params = inspect.signature(cls.__init__).parameters
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        lacking = [a for a in COMMON_ARGS if a not in params]
        if lacking:
            raise ValueError(
                f"mixer {label}'s constructor must take {', '.join(COMMON_ARGS)} (what the block "
                f"gives every mixer); it does not take {lacking}"
            )
    allowed = mixer_options(cls)
    unknown = unknown_options(cls, options)
    if unknown:
        raise ValueError(
            f"mixer {label} has no option(s) {unknown}; its options are {sorted(allowed) or 'none'}"
        )
    empty = inspect.Parameter.empty
    missing = sorted(k for k, d in allowed.items() if d is empty and k not in options)
    if missing:
        raise ValueError(f"mixer {label} needs the option(s) {missing}, which have no default")


def build_mixer(
    mixer: str | type[nn.Module],
    dim: int,
    heads: int = 1,
    causal: bool = False,
    impl: str = "auto",
    **options: object,
) -> nn.Module:
    """The mixer `mixer` (a registered name, an import path or a class) with its `options`."""
    cls = mixer_class(mixer)
    check_options(cls, options)
    return cls(dim=dim, heads=heads, causal=causal, impl=impl, **options)


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


def _eye_values(x_bnd: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, H, N, N) identity matrices: attention with these as values returns its probabilities
    themselves, computed by the mixer's own op (same scale, same masks)."""
    b, n, _ = x_bnd.shape
    return torch.eye(n, dtype=x_bnd.dtype, device=x_bnd.device).expand(b, heads, n, n)


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

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """q, k, v and output projections 8 D²; scores q·k and weights·v 4 D Nₑ."""
        return 8 * dim * dim + 4 * dim * keys_per_query(seq_len, causal)

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """softmax(q kᵀ / sqrt(dk)) per head, (B, H, N, N)."""
        _check_input(x_bnd, self.dim)
        q_bhnk, k_bhnk, _ = rearrange(
            self.qkv(x_bnd), "b n (three h k) -> three b h n k", three=3, h=self.heads
        )
        eye_bhnn = _eye_values(x_bnd, self.heads)
        return kernels.scaled_dot_attention(
            q_bhnk, k_bhnk, eye_bhnn, self.causal, key_padding_mask, impl="torch"
        )

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

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """v and output projections 4 D²; x U⁽ʰ⁾ per head 2 H D²; scores (x U)·x 2 H D Nₑ;
        weights·v 2 D Nₑ."""
        d, h, n = dim, heads, keys_per_query(seq_len, causal)
        return 4 * d * d + 2 * h * d * d + 2 * h * d * n + 2 * d * n

    def attention_probs(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """softmax of the scores x U⁽ʰ⁾ x' per head, (B, H, N, N)."""
        _check_input(x_bnd, self.dim)
        u_hdd = self.u.to(x_bnd.dtype)
        eye_bhnn = _eye_values(x_bnd, self.heads)
        return kernels.quadratic_attention(
            x_bnd, u_hdd, eye_bhnn, self.causal, key_padding_mask, impl="torch"
        )

    def learned_matrices(self) -> dict[str, torch.Tensor]:
        """{"U": (H, D, D)}."""
        return {"U": self.u.detach()}

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

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """p and output projections 4 D²; p M⁽ʰ⁾ per head 2 D dk; scores (p M)·p and weights·p
        4 D Nₑ (every metric_param: M is applied as a matrix)."""
        d, dk = dim, dim // heads
        return 4 * d * d + 2 * d * dk + 4 * d * keys_per_query(seq_len, causal)

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
            q_bhnk, p_bhnk, eye_bhnn, self.causal, key_padding_mask, impl="torch"
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

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """0: the window means are additions, which the convention does not count."""
        return 0.0

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

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """0: no mixing, no matmul."""
        return 0.0

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        _check_input(x_bnd, self.dim)
        return x_bnd


# The further mixers live in their own module and register into MIXERS above.
from attnzoo import mixers_zoo  # noqa: E402, F401
