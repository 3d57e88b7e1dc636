"""The training benchmark's reference, outside attnzoo's model: a plain nanoGPT-style GPT.

It has the shape of attnzoo's `Model` with the scaled_dot mixer (tests/test_corpora_bench.py
checks parameter for parameter) and goes through the trainer's step on the same batches, so that
the benchmark's time ratios compare attnzoo against what a user would write by hand.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class PlainGPT(nn.Module):
    """The reference, not an attnzoo model: a nanoGPT-style transformer of the same shape as
    attnzoo's Model with scaled_dot (trained by the same step, on the same batches): pre-norm
    blocks, fused qkv without bias, SDPA, GELU MLP of width 4D, learned positions, untied head.
    For classification it mean-pools the real tokens, as Model does."""

    class Block(nn.Module):
        def __init__(
            self, dim: int, heads: int, causal: bool, dropout: float, attn_dropout: float
        ) -> None:
            super().__init__()
            self.heads, self.causal, self.attn_dropout = heads, causal, attn_dropout
            self.ln_1 = nn.LayerNorm(dim)
            self.c_attn = nn.Linear(dim, 3 * dim, bias=False)
            self.c_proj = nn.Linear(dim, dim, bias=False)
            self.ln_2 = nn.LayerNorm(dim)
            self.mlp = nn.Sequential(
                nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout)
            )
            self.drop = nn.Dropout(dropout)

        def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
            b, n, d = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
            q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
            p = self.attn_dropout if self.training else 0.0
            if key_padding_mask is None:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal)
            else:  # non-causal with padding (IMDB); a review always has one real token
                y = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=~key_padding_mask[:, None, None], dropout_p=p
                )
            x = x + self.drop(self.c_proj(y.transpose(1, 2).reshape(b, n, d)))
            return x + self.mlp(self.ln_2(x))

    def __init__(
        self,
        vocab: int,
        out: int,
        max_len: int,
        dim: int,
        depth: int,
        heads: int,
        head: str,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.head_kind = head
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Parameter(torch.zeros(max_len, dim))
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            [PlainGPT.Block(dim, heads, head == "lm", dropout, attn_dropout) for _ in range(depth)]
        )
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, out)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = (
                    0.02 / math.sqrt(2 * depth)
                    if name.endswith(("c_proj.weight", "2.weight"))
                    else 0.02
                )
                nn.init.normal_(p, std=std)

    def forward(self, idx, key_padding_mask=None, return_hidden=False):
        x = self.drop(self.wte(idx) + self.wpe[: idx.shape[1]])
        hidden = [x]
        for block in self.blocks:
            x = block(x, key_padding_mask)
            hidden.append(x)
        x = self.ln_f(x)
        if self.head_kind == "classify":
            keep = (~key_padding_mask)[..., None].to(x.dtype)
            x = (x * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        logits = self.head(x)
        return (logits, hidden) if return_hidden else logits

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
