"""One MetaFormer block with ablation switches, and the model built from a stack of them.

    h = x + mixer(norm1(x))      # skip off: h = mixer(norm1(x))
    y = h + mlp(norm2(h))        # mlp off: y = h;  skip off: y = mlp(norm2(h))

With skip off, MLP off and norm "none" the block is exactly its mixer: the pure attention ("SAN")
of Dong, Cordonnier & Loukas (2021).
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from attnzoo.mixers import build_mixer

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
    mixer: str = "scaled_dot"  # a name in attnzoo.mixers.MIXERS
    mixer_options: dict = field(default_factory=dict)  # the mixer's own keyword arguments
    skip: bool = True  # the residual connections around the mixer and the MLP
    mlp: bool = True
    mlp_ratio: float = 4.0  # the MLP's hidden width over dim
    norm: Norm = "layernorm"
    norm_position: NormPosition = "pre"
    layer_scale: float | None = None  # LayerScale's initial value on both branches; None: off
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


class LayerScale(nn.Module):
    def __init__(self, dim: int, init: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x_bnd: torch.Tensor) -> torch.Tensor:
        return x_bnd * self.gamma


class Block(nn.Module):
    """A MetaFormer block: token mixer and MLP, each behind a norm and a skip connection."""

    def __init__(
        self,
        dim: int,
        mixer: nn.Module,
        skip: bool = ModelConfig.skip,
        mlp: bool = ModelConfig.mlp,
        mlp_ratio: float = ModelConfig.mlp_ratio,
        norm: Norm = ModelConfig.norm,
        norm_position: NormPosition = ModelConfig.norm_position,
        layer_scale: float | None = ModelConfig.layer_scale,
        dropout: float = ModelConfig.dropout,
    ) -> None:
        super().__init__()
        if norm_position not in NORM_POSITIONS:
            raise ValueError(f"norm_position={norm_position!r} is not one of {NORM_POSITIONS}")
        self.skip, self.pre_norm = skip, norm_position == "pre"
        self.mixer = mixer
        self.norm1 = make_norm(norm, dim)
        self.scale1 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()
        self.drop1 = nn.Dropout(dropout)
        self.mlp = MLP(dim, mlp_ratio, dropout) if mlp else None
        if self.mlp is not None:
            self.norm2 = make_norm(norm, dim)
            self.scale2 = LayerScale(dim, layer_scale) if layer_scale is not None else nn.Identity()

    def _branch(self, x_bnd, f, norm, scale, drop=None):
        """One residual branch, pre- or post-norm, with or without the skip connection."""
        if self.pre_norm:
            out = scale(f(norm(x_bnd)))
            out = drop(out) if drop is not None else out
            return x_bnd + out if self.skip else out
        out = scale(f(x_bnd))
        out = drop(out) if drop is not None else out
        return norm(x_bnd + out if self.skip else out)

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        h_bnd = self._branch(
            x_bnd, lambda t: self.mixer(t, key_padding_mask), self.norm1, self.scale1, self.drop1
        )
        if self.mlp is None:
            return h_bnd
        return self._branch(h_bnd, self.mlp, self.norm2, self.scale2)


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

        def new_block() -> Block:
            mixer = build_mixer(
                c.mixer, dim=c.dim, heads=c.heads, causal=c.causal, impl=c.impl, **c.mixer_options
            )
            return Block(
                c.dim,
                mixer,
                skip=c.skip,
                mlp=c.mlp,
                mlp_ratio=c.mlp_ratio,
                norm=c.norm,
                norm_position=c.norm_position,
                layer_scale=c.layer_scale,
                dropout=c.dropout,
            )

        shared = new_block() if c.share_blocks else None
        self.blocks = nn.ModuleList([shared or new_block() for _ in range(c.depth)])
        self.norm = make_norm(c.norm, c.dim)
        self.head = nn.Linear(c.dim, out_features)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        elif isinstance(module, Model) and isinstance(module.pos, nn.Parameter):
            nn.init.normal_(module.pos, std=0.02)

    def forward(
        self,
        inputs: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        return_hidden: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits, and with `return_hidden` the depth+1 hidden states (B, N, D): the input to the
        first block and the output of each block."""
        n = inputs.shape[1]
        if n > self.max_len:
            raise ValueError(f"sequence of {n} tokens is longer than max_len={self.max_len}")
        x_bnd = self.embed(inputs)
        if self.pos is not None:
            x_bnd = x_bnd + self.pos[:n].to(x_bnd.dtype)
        x_bnd = self.drop(x_bnd)
        hidden = [x_bnd]
        for block in self.blocks:
            x_bnd = block(x_bnd, key_padding_mask)
            hidden.append(x_bnd)
        x_bnd = self.norm(x_bnd)
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
