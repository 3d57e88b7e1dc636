"""MLP-Mixer's token-mixing MLP: a learned MLP across the token axis, shared by the channels.
docs/mixers.md gives its formula, paper, options and where attnzoo departs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnzoo.kernels._checks import check_dropout
from attnzoo.mixers.base import _check_input, _positive
from attnzoo.mixers.registry import register


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
