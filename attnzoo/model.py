"""One MetaFormer block with ablation switches, and the model built from a stack of them.

    h = x + mixer(norm1(x))      # residual none: h = mixer(norm1(x))
    y = h + mlp(norm2(h))        # mlp off: y = h;  residual none: y = mlp(norm2(h))

The `+` is `model.residual`, a family of variants (attnzoo.residual): none, add, scaled, rezero,
layerscale and deepnorm act on each branch; denseformer and attnres mix block (or sublayer)
outputs across depth in the model's forward. With residual none, MLP off and norm "none" the
block is exactly its mixer: the pure attention ("SAN") of Dong, Cordonnier & Loukas (2021).
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from attnzoo import residual as res
from attnzoo.mixers import build_mixer, mixer_options
from attnzoo.residual import AttnresForm, Residual, RezeroAlpha

# The std of the normal init of token embeddings and learned positions (GPT-2's).
EMBED_STD = 0.02

Norm = Literal["layernorm", "rmsnorm", "none"]
NormPosition = Literal["pre", "post"]
PosEmb = Literal["learned", "sinusoidal", "none"]
Head = Literal["lm", "classify", "token"]
NORMS, NORM_POSITIONS = typing.get_args(Norm), typing.get_args(NormPosition)
POS_EMBS, HEADS = typing.get_args(PosEmb), typing.get_args(Head)


@dataclass
class ModelConfig:
    """Everything that defines the network, and the one place its defaults are written: the
    trainer's `model.*` keys are these fields (its structured config is derived from them), less
    the four that are set elsewhere: `mixer` and `mixer_options` by the `mixer` group, `causal` by
    the task, `impl` by the top-level `impl` key."""

    dim: int = 64  # width of every token's vector
    depth: int = 4  # blocks
    heads: int = 4
    mixer: str = "scaled_dot"  # a name in attnzoo.mixers.MIXERS, or a class's path (pkg.mod.Class)
    mixer_options: dict = field(default_factory=dict)  # the mixer's own keyword arguments
    residual: Residual = "add"  # the skip connection's variant (attnzoo.residual, docs/block.md)
    residual_alpha: float | None = None  # scaled: α (null: 1/√(2·depth)); layerscale: initial λ;
    # lambda: the skip's λ (null: 1)
    rezero_alpha: RezeroAlpha = "shared"  # rezero: one α per block (the authors') | per_branch
    attnres_form: AttnresForm = "full"  # attnres: full | block (the paper's) | per_block
    attnres_block_size: int | None = None  # attnres_form=block: S (null: the paper's ≈8 blocks)
    mlp: bool = True
    mlp_ratio: float = 4.0  # the MLP's hidden width over dim
    norm: Norm = "layernorm"
    norm_position: NormPosition = "pre"
    dropout: float = 0.0  # on the embedding and on both residual branches
    pos_emb: PosEmb = "learned"
    share_blocks: bool = False  # one block applied `depth` times (the paper's recurrent model)
    causal: bool = False  # each token sees only those before it (language models)
    impl: str = "auto"  # kernels: auto | torch | triton (attnzoo.config.Impl)


def make_norm(kind: str, dim: int) -> nn.Module:
    if kind == "layernorm":
        return nn.LayerNorm(dim)
    if kind == "rmsnorm":
        return nn.RMSNorm(dim)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"norm={kind!r} is not one of {NORMS}")


class MLP(nn.Module):
    def __init__(self, dim: int, ratio: float, dropout: float) -> None:
        super().__init__()
        hidden = int(round(dim * ratio))
        self.fc = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.proj = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x_bnd: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(self.act(self.fc(x_bnd))))


class Block(nn.Module):
    """A MetaFormer block: token mixer and MLP, each behind a norm and a residual connection.

    `residual` is one of the per-branch variants of attnzoo.residual (none, add, scaled, rezero,
    layerscale, deepnorm, lambda) and `residual_alpha` its number (scaled's α, layerscale's
    initial λ, deepnorm's skip gain, lambda's λ; None: the default for `depth`, the model's depth,
    which also sets DeepNet's init gain); `rezero_alpha` says whether rezero's two branches share
    one α (the authors') or have one each. Pre-norm: the block adds g·x + scale(f(norm(x)));
    post-norm: norm(g·x + scale(f(x))); g = 1, DeepNet's α, lambda's λ, or no skip (none).
    """

    def __init__(
        self,
        dim: int,
        mixer: nn.Module,
        residual: str = ModelConfig.residual,
        residual_alpha: float | None = ModelConfig.residual_alpha,
        rezero_alpha: RezeroAlpha = ModelConfig.rezero_alpha,
        mlp: bool = ModelConfig.mlp,
        mlp_ratio: float = ModelConfig.mlp_ratio,
        norm: Norm = ModelConfig.norm,
        norm_position: NormPosition = ModelConfig.norm_position,
        dropout: float = ModelConfig.dropout,
        depth: int = ModelConfig.depth,
    ) -> None:
        super().__init__()
        if norm_position not in NORM_POSITIONS:
            raise ValueError(f"norm_position={norm_position!r} is not one of {NORM_POSITIONS}")
        if residual not in res.BRANCH_RESIDUALS:
            raise ValueError(
                f"a Block's residual={residual!r} is not one of {res.BRANCH_RESIDUALS} "
                f"({res.DEPTH_RESIDUALS} mix blocks across depth: build them with Model)"
            )
        if rezero_alpha not in res.REZERO_ALPHAS:
            raise ValueError(f"rezero_alpha={rezero_alpha!r} is not one of {res.REZERO_ALPHAS}")
        if residual_alpha is None:
            residual_alpha = res.default_alpha(residual, depth)
        self.gain, self.pre_norm = res.skip_gain(residual, residual_alpha), norm_position == "pre"
        self.mixer = mixer
        self.norm1 = make_norm(norm, dim)
        self.scale1 = res.branch_scale(residual, dim, residual_alpha)
        self.drop1 = nn.Dropout(dropout)
        self.mlp = MLP(dim, mlp_ratio, dropout) if mlp else None
        if self.mlp is not None:
            self.norm2 = make_norm(norm, dim)
            shared = self.scale1 if rezero_alpha == "shared" else None
            self.scale2 = res.branch_scale(residual, dim, residual_alpha, shared_with=shared)
        if residual == "deepnorm":
            res.deepnet_init_(self.mixer, self.mlp, beta=res.deepnorm_constants(depth)[1])

    def _skip(self, x_bnd: torch.Tensor, out_bnd: torch.Tensor) -> torch.Tensor:
        if self.gain is None:
            return out_bnd
        return x_bnd + out_bnd if self.gain == 1.0 else self.gain * x_bnd + out_bnd

    def _branch(self, x_bnd, f, norm, scale, drop=None):
        """One residual branch, pre- or post-norm."""
        out = scale(f(norm(x_bnd) if self.pre_norm else x_bnd))
        out = drop(out) if drop is not None else out
        return self._skip(x_bnd, out) if self.pre_norm else norm(self._skip(x_bnd, out))

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        h_bnd = self._branch(
            x_bnd, lambda t: self.mixer(t, key_padding_mask), self.norm1, self.scale1, self.drop1
        )
        if self.mlp is None:
            return h_bnd
        return self._branch(h_bnd, self.mlp, self.norm2, self.scale2)

    def update(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """f(x) = forward(x) − x of a pre-norm `add` block, computed as a + m with
        a = mixer(norm1(x)), m = mlp(norm2(x + a)): what `attnres_form=per_block` aggregates."""
        a_bnd = self.mixer_update(x_bnd, key_padding_mask)
        if self.mlp is None:
            return a_bnd
        return a_bnd + self.mlp_update(x_bnd + a_bnd)

    def mixer_update(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The mixer sublayer's output a = mixer(norm1(x)) of a pre-norm block, before the skip:
        a sublayer output fᵢ(hᵢ) of Attention Residuals."""
        self._check_pre_norm_with_skip()
        return self.drop1(self.scale1(self.mixer(self.norm1(x_bnd), key_padding_mask)))

    def mlp_update(self, x_bnd: torch.Tensor) -> torch.Tensor:
        """The MLP sublayer's output m = mlp(norm2(x)) of a pre-norm block, before the skip."""
        self._check_pre_norm_with_skip()
        if self.mlp is None:
            raise ValueError("Block.mlp_update needs a block with an MLP (model.mlp=true)")
        return self.scale2(self.mlp(self.norm2(x_bnd)))

    def _check_pre_norm_with_skip(self) -> None:
        if not self.pre_norm or self.gain != 1.0:
            raise ValueError("a Block's update is that of a pre-norm block with a skip")


def sinusoidal_positions(max_len: int, dim: int) -> torch.Tensor:
    pos_n1 = torch.arange(max_len, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table_nd = torch.zeros(max_len, dim)
    table_nd[:, 0::2] = torch.sin(pos_n1 * freq)
    table_nd[:, 1::2] = torch.cos(pos_n1 * freq[: dim // 2])
    return table_nd


class Model(nn.Module):
    """Embedding, `depth` MetaFormer blocks, a final norm and a task head.

    Inputs are token ids (B, N) when `vocab_size` is given, or feature vectors (B, N, in_features)
    otherwise (e.g. points in the plane). Heads: "lm" and "token" give (B, N, out_features) logits,
    "classify" gives (B, out_features) from the mean over real (unpadded) tokens.
    """

    def __init__(
        self,
        config: ModelConfig,
        out_features: int,
        max_len: int,
        vocab_size: int | None = None,
        in_features: int | None = None,
        head: Head = "lm",
    ) -> None:
        super().__init__()
        c = config
        if (vocab_size is None) == (in_features is None):
            raise ValueError("give exactly one of vocab_size (token ids) or in_features (vectors)")
        if head not in HEADS:
            raise ValueError(f"head={head!r} is not one of {HEADS}")
        if c.pos_emb not in POS_EMBS:
            raise ValueError(f"pos_emb={c.pos_emb!r} is not one of {POS_EMBS}")
        if not isinstance(c.depth, int) or c.depth < 1:
            raise ValueError(f"depth must be a positive int, got {c.depth!r}")
        self.config, self.head_kind, self.max_len = c, head, max_len
        self.residual = res.resolve(c)
        per_branch = self.residual.kind in res.BRANCH_RESIDUALS
        if vocab_size is not None:
            self.embed = nn.Embedding(vocab_size, c.dim)
        else:
            self.embed = nn.Linear(in_features, c.dim)
        if c.pos_emb == "learned":
            self.pos = nn.Parameter(torch.zeros(max_len, c.dim))
        else:
            table = sinusoidal_positions(max_len, c.dim) if c.pos_emb == "sinusoidal" else None
            self.register_buffer("pos", table, persistent=False)
        self.drop = nn.Dropout(c.dropout)

        # A mixer with a `max_len` option (token_mlp) mixes the positions the model has: left at
        # None it gets them, and one set shorter could not run the sequences the model takes.
        mixer_opts = dict(c.mixer_options)
        if "max_len" in mixer_options(c.mixer):
            own = mixer_opts.get("max_len")
            if own is None:
                mixer_opts["max_len"] = max_len
            elif isinstance(own, int) and own < max_len:
                raise ValueError(
                    f"{c.mixer} mixes at most max_len={own} tokens, but the model takes "
                    f"sequences of up to {max_len}; allowed: max_len >= {max_len}, or null (the "
                    "model's)"
                )

        # A mixer with a `layer_index` option (diff_attention's λ_init by depth) is told which
        # block it is, from 1, unless its options fix one; shared blocks are all block 1.
        takes_index = "layer_index" in mixer_options(c.mixer)

        def new_block(index: int) -> Block:
            opts = dict(mixer_opts)
            if takes_index and opts.get("layer_index") is None:
                opts["layer_index"] = index
            mixer = build_mixer(
                c.mixer, dim=c.dim, heads=c.heads, causal=c.causal, impl=c.impl, **opts
            )
            return Block(
                c.dim,
                mixer,
                residual=self.residual.kind if per_branch else "add",
                residual_alpha=self.residual.alpha,
                rezero_alpha=c.rezero_alpha,
                mlp=c.mlp,
                mlp_ratio=c.mlp_ratio,
                norm=c.norm,
                norm_position=c.norm_position,
                dropout=c.dropout,
                depth=c.depth,
            )

        shared = new_block(1) if c.share_blocks else None
        self.blocks = nn.ModuleList([shared or new_block(i + 1) for i in range(c.depth)])
        # denseformer, attnres: the module that runs the blocks, keeping every earlier output
        self.depth_mixing = res.depth_mixing(self.residual, c.depth, c.dim, c.mlp)
        self.norm = make_norm(c.norm, c.dim)
        self.head = nn.Linear(c.dim, out_features)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=EMBED_STD)
        elif isinstance(module, Model) and isinstance(module.pos, nn.Parameter):
            nn.init.normal_(module.pos, std=EMBED_STD)

    def forward(
        self,
        inputs: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        return_hidden: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits, and with `return_hidden` the depth+1 hidden states (B, N, D): the input to the
        first block and the state after each block (its output; with denseformer or attnres the
        depth-mixed state the next block's first sublayer, or the head, reads)."""
        n = inputs.shape[1]
        if n > self.max_len:
            raise ValueError(f"sequence of {n} tokens is longer than max_len={self.max_len}")
        x_bnd = self.embed(inputs)
        if self.pos is not None:
            x_bnd = x_bnd + self.pos[:n].to(x_bnd.dtype)
        x_bnd = self.drop(x_bnd)
        if self.depth_mixing is not None:
            hidden = self.depth_mixing(self.blocks, x_bnd, key_padding_mask)
        else:
            hidden = [x_bnd]
            for block in self.blocks:
                hidden.append(block(hidden[-1], key_padding_mask))
        x_bnd = self.norm(hidden[-1])
        if self.head_kind == "classify":
            if key_padding_mask is None:
                x_bd = x_bnd.mean(dim=1)
            else:
                keep_bn1 = (~key_padding_mask)[..., None].to(x_bnd.dtype)
                x_bd = (x_bnd * keep_bn1).sum(1) / keep_bn1.sum(1).clamp_min(1.0)
            logits = self.head(x_bd)
        else:
            logits = self.head(x_bnd)
        return (logits, hidden) if return_hidden else logits

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
