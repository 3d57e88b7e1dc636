"""The residual connection as a family of variants: `model.residual`.

Seven variants act on each branch of a block (the mixer's and the MLP's), with f the branch
(norm, then mixer or MLP, in pre-norm) and x its input:

    none         f(x)
    add          x + f(x)
    scaled       x + α·f(x)            α fixed (default 1/√(2·depth))
    rezero       x + α·f(x)            α a learned scalar per block, shared by both branches,
                                       0 at init (`rezero_alpha=per_branch`: one per branch)
    layerscale   x + diag(λ)·f(x)      λ a learned vector per branch (CaiT's init)
    deepnorm     LN(α·x + f(x))        post-norm, α = (2N)^(1/4), DeepNet's init gain β
    lambda       λ·x + f(x)            λ fixed, any real (default 1, which is add; 0 is none):
                                       the λ-skip of Joseph et al. 2024

Two act across blocks and live in the model's forward, which keeps the list of earlier outputs
(the blocks themselves are `add` blocks):

    denseformer  after block i, a learned weighted average of the embedding and every block
                 output so far (DenseFormer's DWA), starting as the plain `add` model
    attnres      each sublayer's input (mixer or MLP) a softmax-weighted average over depth of
                 the embedding and the earlier sublayers' outputs (Attention Residuals, Full
                 AttnRes; `attnres_form=block`: Block AttnRes; `per_block`: one average per
                 block), starting as a uniform average

`resolve` turns a configuration into one variant and refuses contradictions. Each variant's formula, init and source are in the docstring of what
implements it, and in docs/block.md.
"""

from __future__ import annotations

import functools
import math
import typing
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
import torch.nn.functional as F
from torch import nn

Residual = Literal[
    "none", "add", "scaled", "rezero", "layerscale", "deepnorm", "lambda", "denseformer", "attnres"
]
RESIDUALS = typing.get_args(Residual)
# Variants applied to each branch inside a block, and those mixing block outputs across depth.
BRANCH_RESIDUALS = ("none", "add", "scaled", "rezero", "layerscale", "deepnorm", "lambda")
DEPTH_RESIDUALS = ("denseformer", "attnres")
# The variants whose number `residual_alpha` sets.
WITH_ALPHA = ("scaled", "layerscale", "lambda")
# rezero: one α per block for both branches (the authors' code), or one per branch.
RezeroAlpha = Literal["shared", "per_branch"]
REZERO_ALPHAS = typing.get_args(RezeroAlpha)
# attnres: the paper's Full or Block AttnRes over sublayers, or one average per block.
AttnresForm = Literal["full", "block", "per_block"]
ATTNRES_FORMS = typing.get_args(AttnresForm)
# Block AttnRes's default number of blocks N (the paper fixes N ≈ 8).
ATTNRES_BLOCKS = 8


class ResidualConfig(Protocol):
    """The fields of attnzoo.model.ModelConfig that `resolve` reads."""

    residual: str
    residual_alpha: float | None
    rezero_alpha: str
    attnres_form: str
    attnres_block_size: int | None
    depth: int
    mlp: bool
    norm: str
    norm_position: str


@dataclass(frozen=True)
class ResolvedResidual:
    """One variant and its number: scaled's α, layerscale's initial λ, rezero's initial α (0),
    deepnorm's skip gain α, lambda's λ; None for the others. `form` is rezero's `rezero_alpha` or
    attnres's `attnres_form`, `block_size` attnres's S, the sublayers per block (1 for Full
    AttnRes, the number of blocks for `per_block`); None for the others."""

    kind: str
    alpha: float | None = None
    form: str | None = None
    block_size: int | None = None


def scaled_alpha(depth: int) -> float:
    """`scaled`'s default α = 1/√(2·depth): the depth scaling of the branches that keeps tokens
    from aligning at init (Noci et al. 2022, "Signal propagation in transformers")."""
    return 1.0 / math.sqrt(2 * depth)


def layerscale_init(depth: int) -> float:
    """`layerscale`'s default initial λ, CaiT's rule (Touvron et al. 2021, "Going deeper with
    image transformers"): 0.1 up to depth 18, 1e-5 up to depth 24, 1e-6 deeper."""
    return 0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6


def deepnorm_constants(depth: int) -> tuple[float, float]:
    """DeepNet's (α, β) for an encoder-only or decoder-only model of N = depth layers (Wang et
    al. 2022, "DeepNet: Scaling transformers to 1,000 layers", table 1): α = (2N)^(1/4) scales
    the skip, β = (8N)^(-1/4) is the Xavier-normal init gain of the value and output
    projections and of both FFN weights."""
    return (2 * depth) ** 0.25, (8 * depth) ** -0.25


def resolve(c: ResidualConfig) -> ResolvedResidual:
    """The variant a configuration asks for, with its number; ValueError on a contradiction or a
    value out of range, naming the keys and what is allowed."""
    kind, alpha = c.residual, c.residual_alpha
    if kind not in RESIDUALS:
        raise ValueError(f"model.residual={kind!r} is not one of {RESIDUALS}")
    if alpha is not None and kind not in WITH_ALPHA:
        raise ValueError(
            f"model.residual_alpha={alpha!r} has no effect with model.residual={kind!r}; it sets "
            f"the fixed α of residual=scaled, the initial λ of residual=layerscale and the skip's "
            f"λ of residual=lambda "
            f"(allowed with {kind}: model.residual_alpha=null)"
        )
    if kind == "lambda" and alpha is not None and not math.isfinite(alpha):
        raise ValueError(f"model.residual_alpha={alpha!r} must be a finite number (or null: 1)")
    if kind != "lambda" and alpha is not None and not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"model.residual_alpha={alpha!r} must be a finite number > 0 (or null)")
    if kind == "deepnorm" and (c.norm_position != "post" or c.norm == "none"):
        raise ValueError(
            f"model.residual=deepnorm is the post-norm LN(α·x + f(x)); it needs "
            f"model.norm_position=post and model.norm=layernorm or rmsnorm (got "
            f"norm_position={c.norm_position!r}, norm={c.norm!r}); model=deepnorm sets both"
        )
    if kind == "attnres" and c.norm_position != "pre":
        raise ValueError(
            f"model.residual=attnres aggregates each block's update f(x), which a pre-norm block "
            f"has; it needs model.norm_position=pre (got {c.norm_position!r})"
        )
    form, block_size = _resolve_forms(c, kind)
    alpha = default_alpha(kind, c.depth) if alpha is None else alpha
    return ResolvedResidual(kind, alpha, form, block_size)


def _resolve_forms(c: ResidualConfig, kind: str) -> tuple[str | None, int | None]:
    """rezero's and attnres's form and attnres's block size S; ValueError on a value out of
    range, or on a block size for an attnres form other than `block`. The three keys are read
    by their own variant only, so that one sweep over `model.residual` may set them for all."""
    if c.rezero_alpha not in REZERO_ALPHAS:
        raise ValueError(f"model.rezero_alpha={c.rezero_alpha!r} is not one of {REZERO_ALPHAS}")
    if c.attnres_form not in ATTNRES_FORMS:
        raise ValueError(f"model.attnres_form={c.attnres_form!r} is not one of {ATTNRES_FORMS}")
    size = c.attnres_block_size
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ValueError(
            f"model.attnres_block_size={size!r} must be a positive int (sublayers per block) "
            f"or null"
        )
    if size is not None and kind == "attnres" and c.attnres_form != "block":
        raise ValueError(
            f"model.attnres_block_size={size!r} contradicts model.attnres_form="
            f"{c.attnres_form!r}: it sets Block AttnRes's sublayers per block; allowed: "
            f"model.attnres_form=block, or model.attnres_block_size=null"
        )
    if kind == "rezero":
        return c.rezero_alpha, None
    if kind != "attnres":
        return None, None
    if c.attnres_form == "per_block":
        return "per_block", None
    if c.attnres_form == "full":
        return "full", 1
    return "block", size if size is not None else attnres_block_size(c.depth, c.mlp)


def attnres_block_size(depth: int, mlp: bool) -> int:
    """Block AttnRes's default S, the sublayers per block: the paper's N ≈ 8 blocks over the
    model's sublayers (a mixer and an MLP per block), S = ⌈sublayers / 8⌉. A model of at most 8
    sublayers gets S = 1, which is Full AttnRes."""
    return max(1, math.ceil(depth * (2 if mlp else 1) / ATTNRES_BLOCKS))


def default_alpha(kind: str, depth: int) -> float | None:
    """A variant's number for a model of `depth` blocks when none is given: scaled's α,
    layerscale's initial λ, rezero's initial α, deepnorm's skip gain α, lambda's λ (1); None for
    the others."""
    if kind == "lambda":
        return 1.0
    if kind == "scaled":
        return scaled_alpha(depth)
    if kind == "layerscale":
        return layerscale_init(depth)
    if kind == "rezero":
        return 0.0
    if kind == "deepnorm":
        return deepnorm_constants(depth)[0]
    return None


# ---- per branch: the scale on f(x) -------------------------------------------------------------


class FixedScale(nn.Module):
    """`scaled`: x + α·f(x) with α a constant (no parameter). Default α = 1/√(2·depth) (Noci et
    al. 2022); α = 1 is exactly `add`."""

    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, x_bnd: torch.Tensor) -> torch.Tensor:
        return x_bnd * self.alpha

    def extra_repr(self) -> str:
        return f"alpha={self.alpha:g}"


class ReZero(nn.Module):
    """`rezero`: x + α·f(x) with α a learned scalar initialised to 0, so that at init every
    block is the identity (Bachlechner et al. 2020, "ReZero is all you need: fast convergence
    at large depth", arXiv 2003.04887, eq. 1: x_{i+1} = x_i + α_i·F(x_i), α_i = 0 at init).

    The authors' Transformer layer (majumderb/rezero, rezero/transformer/rztx.py,
    `RZTXEncoderLayer.resweight`) has one α per layer that multiplies both sublayers, the
    attention and the feed-forward: that is `rezero_alpha=shared`, the default, where the MLP
    branch's ReZero is built with the mixer branch's α (`alpha`, tied as nanoGPT ties its
    embedding and head, so the model has one parameter per block). `rezero_alpha=per_branch`
    gives each branch its own α (two per block). The paper also drops the norms; here
    `model.norm` stays its own switch (with `model.norm_position=post` the block at init is
    norm(x), not x)."""

    def __init__(self, alpha: nn.Parameter | None = None) -> None:
        super().__init__()
        self.tied = alpha is not None
        self.alpha = nn.Parameter(torch.zeros(())) if alpha is None else alpha

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: typing.Any) -> None:
        """A tied α loads after the one it is tied to (the mixer branch's): a checkpoint whose
        MLP-branch α differs holds an α per branch, which one shared α cannot represent."""
        key, error_msgs = prefix + "alpha", args[-1]
        value = state_dict.get(key)
        if self.tied and value is not None and not torch.equal(value.to(self.alpha), self.alpha):
            error_msgs.append(
                f"{key}={value.item():g} differs from the mixer branch's α "
                f"({self.alpha.item():g}): the checkpoint has one α per branch; load it with "
                f"model.rezero_alpha=per_branch"
            )
            return
        super()._load_from_state_dict(state_dict, prefix, *args)

    def forward(self, x_bnd: torch.Tensor) -> torch.Tensor:
        return x_bnd * self.alpha


class LayerScale(nn.Module):
    """`layerscale`: x + diag(λ)·f(x) with λ a learned per-channel vector, every entry
    initialised to `init` (Touvron et al. 2021, CaiT; default init by CaiT's depth rule, see
    `layerscale_init`)."""

    def __init__(self, dim: int, init: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x_bnd: torch.Tensor) -> torch.Tensor:
        return x_bnd * self.gamma


def branch_scale(
    kind: str, dim: int, alpha: float | None, shared_with: nn.Module | None = None
) -> nn.Module:
    """The module applied to a branch's output f(x) before it meets the skip; `shared_with`,
    the mixer branch's ReZero, gives the MLP branch the same α (`rezero_alpha=shared`)."""
    if kind == "scaled":
        return FixedScale(alpha)
    if kind == "rezero":
        return ReZero(shared_with.alpha if isinstance(shared_with, ReZero) else None)
    if kind == "layerscale":
        return LayerScale(dim, alpha)
    return nn.Identity()


def skip_gain(kind: str, alpha: float | None) -> float | None:
    """What multiplies the skip x: None for `none` (no skip), DeepNet's α for `deepnorm`, λ for
    `lambda`, else 1."""
    if kind == "none":
        return None
    return float(alpha) if kind in ("deepnorm", "lambda") else 1.0


def deepnet_init_(mixer: nn.Module, mlp: nn.Module | None, beta: float) -> None:
    """DeepNet's init (Wang et al. 2022, figure 2): Xavier-normal with gain β on the value and
    output projections and on both FFN weights, gain 1 on the query and key projections. The
    mixer says which of its weights are which (`deepnet_init_(beta)`); a parameter-free mixer
    needs nothing. Biases keep their init."""
    if any(True for _ in mixer.parameters()):
        init = getattr(mixer, "deepnet_init_", None)
        if init is None:
            raise ValueError(
                f"model.residual=deepnorm needs to know which of the {type(mixer).__name__} "
                f"mixer's weights are queries/keys and which values/outputs; it has no "
                f"deepnet_init_(beta) method"
            )
        init(beta)
    if mlp is not None:
        nn.init.xavier_normal_(mlp.fc.weight, gain=beta)
        nn.init.xavier_normal_(mlp.proj.weight, gain=beta)


# ---- across blocks: the model's forward with the earlier outputs --------------------------------


class BlockLike(Protocol):
    """What the depth-mixing residuals call on attnzoo.model.Block."""

    def __call__(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None
    ) -> torch.Tensor: ...

    mlp: nn.Module | None

    def update(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None
    ) -> torch.Tensor: ...

    def mixer_update(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None
    ) -> torch.Tensor: ...

    def mlp_update(self, x_bnd: torch.Tensor) -> torch.Tensor: ...


class DenseFormer(nn.Module):
    """`denseformer`: Depth-Weighted Averages (Pagliardini et al. 2024, "DenseFormer: enhancing
    information flow in transformers via depth weighted averaging"). With x₀ the
    embedding and xⱼ = Bⱼ(yⱼ₋₁) the output of block j (an `add` block),

        yᵢ = Σⱼ₌₀..ᵢ aᵢⱼ · xⱼ      (the input of block i+1, and after the last block the output)

    with one learned weight per (i, j). Init as in the paper: aᵢᵢ = 1 and aᵢⱼ = 0 for j < i, so
    yᵢ = xᵢ and the model starts as the plain residual (`add`) model, exactly. This is the
    1×1 DenseFormer: a DWA after every block over every earlier output (no dilation or period).
    The hidden states reported after each block are the yᵢ.
    """

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.weights = nn.ParameterList(
            nn.Parameter(torch.eye(i + 2)[-1].clone()) for i in range(depth)
        )  # weights[i]: over x₀ .. x_{i+1}, one-hot on the newest

    def forward(
        self,
        blocks: typing.Sequence[BlockLike],
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> list[torch.Tensor]:
        outputs, hidden = [x_bnd], [x_bnd]
        for block, a_s in zip(blocks, self.weights, strict=True):
            outputs.append(block(hidden[-1], key_padding_mask))
            y_bnd = a_s[0] * outputs[0]
            for a, out_bnd in zip(a_s[1:], outputs[1:], strict=True):
                y_bnd = y_bnd + a * out_bnd
            hidden.append(y_bnd)
        return hidden


def _rms_keys(value_bnd: torch.Tensor) -> torch.Tensor:
    """RMSNorm(v) without a gain, in float32: the key an Attention Residual scores v by."""
    return F.rms_norm(value_bnd.float(), value_bnd.shape[-1:])


def _softmax_average(
    values: list[torch.Tensor], keys: list[torch.Tensor], w_d: torch.Tensor
) -> torch.Tensor:
    """Σᵢ αᵢ·vᵢ with αᵢ = softmaxᵢ(w · kᵢ), per token; logits, softmax and sum in float32."""
    logits_sbn = torch.stack([(k_bnd * w_d).sum(-1) for k_bnd in keys])
    alpha_sbn = logits_sbn.softmax(dim=0)
    h_bnd = alpha_sbn[0, ..., None] * values[0]
    for a_bn, value_bnd in zip(alpha_sbn[1:], values[1:], strict=True):
        h_bnd = h_bnd + a_bn[..., None] * value_bnd
    return h_bnd


class AttentionResiduals(nn.Module):
    """`attnres` (`attnres_form=full` or `block`): Attention Residuals as their authors define
    them (Kimi Team 2026, "Attention Residuals", arXiv 2603.15031, §3; reference pseudocode in
    the paper's figure 2 and in MoonshotAI/Attention-Residuals, README.md, `block_attn_res` and
    the layer's `forward`). A *layer* is a sublayer: each mixer and each MLP (the paper's L
    counts both, `L_b = L/2` Transformer blocks). With h₁ the embedding and f_l the l-th
    sublayer's branch (its pre-norm, then the mixer or MLP), Full AttnRes (eq. 2–4) gives

        h_l = Σᵢ₌₀..ₗ₋₁ α_{i→l} · vᵢ,   v₀ = h₁,  vᵢ = fᵢ(hᵢ)                       (eq. 4)
        α_{i→l} = softmaxᵢ( w_lᵀ · RMSNorm(vᵢ) )                                    (eq. 2, 3)

    per token, with one learned pseudo-query w_l ∈ R^D per sublayer, initialised to 0 ("all
    pseudo-query vectors must be initialized to zero", §5), so that at init every input is the
    uniform average of its sources. The head reads one more such average over every vᵢ,
    before the final norm ("the final output layer aggregates all … representations", §3.2).
    Block AttnRes (§3.2) sums the sublayer outputs within blocks of S sublayers,
    bₙ = Σ_{j∈Bₙ} f_j(h_j), and attends over [b₀ = h₁, b₁, …, bₙ₋₁] and the partial sum bₙⁱ of
    the current block; S = 1 is Full AttnRes.

    RMSNorm is the paper's, "one RMSNorm and one pseudo-query vector per layer" (§5), with a
    learned gain g_l (init 1): the logit is (g_l ⊙ w_l)ᵀ·RMSNorm₀(vᵢ), RMSNorm₀ without gain.
    Logits, softmax and the weighted sum run in float32 under autocast. The first sublayer's
    input is h₁ alone (a softmax over one source), so it has no query: the model has one query
    and one gain per sublayer after the first and one for the head, as many as it has
    sublayers. The hidden state reported after block i is the input of block i+1's mixer (for
    the last block, the head's input).
    """

    def __init__(self, sublayers: int, dim: int, block_size: int = 1) -> None:
        super().__init__()
        self.block_size = int(block_size)
        # w_l for the inputs of sublayers 2.. and of the head; vectors, so that the trainer
        # does not weight-decay them (it decays matrices only), like the norms' gains
        self.queries = nn.ParameterList(nn.Parameter(torch.zeros(dim)) for _ in range(sublayers))
        self.gains = nn.ParameterList(nn.Parameter(torch.ones(dim)) for _ in range(sublayers))

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}"

    def forward(
        self,
        blocks: typing.Sequence[BlockLike],
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> list[torch.Tensor]:
        done, keys = [x_bnd], [_rms_keys(x_bnd)]  # b₀ = h₁ and the completed blocks b₁, …
        partial_bnd: torch.Tensor | None = None  # bₙⁱ, the current block's partial sum
        hidden, h_bnd = [x_bnd], x_bnd  # the first sublayer reads the embedding
        for ran, (first_in_block, sublayer) in enumerate(_sublayers(blocks, key_padding_mask)):
            if ran > 0:  # `ran` sublayers so far: this one reads their average, by query ran−1
                h_bnd = self._average(ran - 1, done, keys, partial_bnd)
                if first_in_block:
                    hidden.append(h_bnd)
            out_bnd = sublayer(h_bnd)
            partial_bnd = out_bnd if partial_bnd is None else partial_bnd + out_bnd
            if (ran + 1) % self.block_size == 0:
                done.append(partial_bnd)
                keys.append(_rms_keys(partial_bnd))
                partial_bnd = None
        hidden.append(self._average(len(self.queries) - 1, done, keys, partial_bnd))
        return hidden

    def _average(
        self,
        query: int,
        done: list[torch.Tensor],
        keys: list[torch.Tensor],
        partial_bnd: torch.Tensor | None,
    ) -> torch.Tensor:
        """The softmax average of the completed blocks and the partial sum, by query `query`."""
        if partial_bnd is not None:
            done, keys = [*done, partial_bnd], [*keys, _rms_keys(partial_bnd)]
        return _softmax_average(done, keys, self.queries[query] * self.gains[query])


def _sublayers(
    blocks: typing.Sequence[BlockLike], key_padding_mask: torch.Tensor | None
) -> typing.Iterator[tuple[bool, typing.Callable[[torch.Tensor], torch.Tensor]]]:
    """Each block's mixer and MLP sublayers in order, with whether it is the block's first."""
    for block in blocks:
        yield True, functools.partial(block.mixer_update, key_padding_mask=key_padding_mask)
        if block.mlp is not None:
            yield False, block.mlp_update


class PerBlockAttentionResiduals(nn.Module):
    """`attnres` with `attnres_form=per_block`: attnzoo's own reading of Attention
    Residuals (Kimi Team 2026, arXiv 2603.15031), one average per block rather than per
    sublayer. Each block's input is Σᵢ αᵢ·vᵢ over the embedding v₀ and the earlier blocks'
    updates vᵢ, with

        αᵢ = softmaxᵢ( wᵀ · RMSNorm(vᵢ) )      per token, one learned pseudo-query w per block

    and w initialised to 0, so that at init every input is the uniform average of the vᵢ.
    vᵢ is the block's update f(x) = y − x, the `add` block's output less its input (computed as
    a + m, mixer branch plus MLP branch), so that fixed unit weights would give the plain
    residual stream; block 1's input is v₀ alone, and one more query forms the output fed to
    the final norm and head, so there are `depth` queries; RMSNorm here has no learned gain.
    With the MLP on this is neither of the paper's forms (the MLP reads x + a, not an average,
    and the average's sources are whole blocks); with `model.mlp=false` it is Full AttnRes
    without the RMSNorm gain. Logits, softmax and the sum run in float32 under autocast. The
    hidden state reported after block i is the aggregate that block i+1 (or the head) reads.
    """

    def __init__(self, depth: int, dim: int) -> None:
        super().__init__()
        # w for the inputs of blocks 2..depth and of the head (vectors: not weight-decayed)
        self.queries = nn.ParameterList(nn.Parameter(torch.zeros(dim)) for _ in range(depth))

    def forward(
        self,
        blocks: typing.Sequence[BlockLike],
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
    ) -> list[torch.Tensor]:
        values, keys, hidden = [x_bnd], [_rms_keys(x_bnd)], [x_bnd]
        for block, w_d in zip(blocks, self.queries, strict=True):
            v_bnd = block.update(hidden[-1], key_padding_mask)
            values.append(v_bnd)
            keys.append(_rms_keys(v_bnd))
            hidden.append(_softmax_average(values, keys, w_d))
        return hidden


def depth_mixing(
    residual: ResolvedResidual, depth: int, dim: int, mlp: bool = True
) -> nn.Module | None:
    """The module that runs the blocks for a depth-mixing residual; None for per-branch ones."""
    if residual.kind == "denseformer":
        return DenseFormer(depth)
    if residual.kind == "attnres" and residual.form == "per_block":
        return PerBlockAttentionResiduals(depth, dim)
    if residual.kind == "attnres":
        sublayers = depth * (2 if mlp else 1)
        return AttentionResiduals(sublayers, dim, residual.block_size or 1)
    return None
