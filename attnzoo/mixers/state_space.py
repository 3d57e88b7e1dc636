"""Mamba-2's state-space mixer (SSD), run through the recurrent family's op and scan
(`attnzoo.mixers.recurrent`); docs/mixers.md gives its formula, options and where attnzoo departs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from attnzoo.mixers.base import _check_heads, _check_input, _positive
from attnzoo.mixers.recurrent import _Recurrent, scan_flops
from attnzoo.mixers.registry import register


@register("mamba2")
class Mamba2(_Recurrent):
    """Mamba-2 / SSD (Dao & Gu 2024, arXiv 2405.21060), per head h with A_h = −exp(A_log_h) a
    scalar times the identity:

        h_t = exp(Δ_t A) h_{t−1} + Δ_t B_t x_tᵀ,   y_t = C_tᵀ h_t + D x_t,
        Δ_t = softplus(x W_Δ + dt_bias),

    x, B and C (d_state, one group shared by the heads) through a short causal depthwise
    convolution and SiLU, then the gated RMSNorm RMSNorm(y ⊙ SiLU(z)) and the output projection.
    As the op: q = C, k = Δ B, v = x, log decay Δ A (one per token and head), scale 1. The inner
    width is `expand` · D in heads of `headdim` (null: expand · D / heads, so the model's heads).
    Init as the reference code: A_log = log U[1, 16], softplus(dt_bias) log-uniform in
    [1e-3, 1e-1], D = 1. `attn_dropout` is accepted and unused.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        d_state: int = 16,
        expand: int = 2,
        headdim: int | None = None,
        conv_kernel: int = 4,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        _check_heads(dim, heads)
        for value, name in ((d_state, "d_state"), (expand, "expand"), (conv_kernel, "conv_kernel")):
            _positive(value, name)
        inner = expand * dim
        headdim = inner // heads if headdim is None else headdim
        _positive(headdim, "headdim")
        if inner % headdim:
            raise ValueError(f"headdim={headdim} must divide expand * dim = {inner}")
        self._init_common(dim, inner // headdim, causal, impl)
        self.inner, self.headdim, self.d_state = inner, headdim, d_state
        conv_width = inner + 2 * d_state
        self.in_proj = nn.Linear(dim, inner + conv_width + self.heads, bias=False)
        self.conv = nn.Conv1d(conv_width, conv_width, conv_kernel, groups=conv_width)
        dt = torch.exp(torch.rand(self.heads) * math.log(100) + math.log(1e-3)).clamp_min(1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)
        self.A_log = nn.Parameter(torch.empty(self.heads).uniform_(1, 16).log())
        self.D = nn.Parameter(torch.ones(self.heads))
        self.norm_weight = nn.Parameter(torch.ones(inner))
        self.proj = nn.Linear(inner, dim, bias=False)

    @staticmethod
    def flops_per_token(
        dim: int,
        heads: int,
        seq_len: int,
        causal: bool,
        d_state: int = 16,
        expand: int = 2,
        headdim: int | None = None,
        conv_kernel: int = 4,
        **options: object,
    ) -> float:
        """With E = expand · D and N = d_state: the input projection 2 D (2 E + 2 N + H_E), the
        depthwise convolution 2 (E + 2 N) · conv_kernel, the output projection 2 E D; the scan
        (`scan_flops` over H_E = E / headdim heads, K_h = N, V_h = headdim)."""
        inner = expand * dim
        headdim = inner // heads if headdim is None else headdim
        n_heads = inner // headdim
        projections = 2 * dim * (2 * inner + 2 * d_state + n_heads) + 2 * inner * dim
        conv = 2 * (inner + 2 * d_state) * conv_kernel
        return projections + conv + scan_flops(n_heads, d_state, headdim, causal)

    def _parts(self, x_bnd, key_padding_mask):
        """z (B, N, E) and the op's q, k, v, log decay and scale."""
        _check_input(x_bnd, self.dim)
        x_bnd = self._masked(x_bnd, key_padding_mask)
        z, xbc, dt = self.in_proj(x_bnd).split([self.inner, self.conv.in_channels, self.heads], -1)
        pad = self.conv.kernel_size[0] - 1
        xbc = F.silu(self.conv(F.pad(xbc.transpose(1, 2), (pad, 0))).transpose(1, 2))
        xbc = self._masked(xbc, key_padding_mask)  # padding gives no B and no x
        x, b, c = xbc.split([self.inner, self.d_state, self.d_state], -1)
        delta = F.softplus(dt.to(torch.promote_types(dt.dtype, torch.float32)) + self.dt_bias)
        delta_bhn = rearrange(delta, "b n h -> b h n")
        q = c[:, None].expand(-1, self.heads, -1, -1)
        k = b[:, None] * delta_bhn[..., None].to(b.dtype)
        v = rearrange(x, "b n (h p) -> b h n p", h=self.heads)
        return z, (q, k, v, delta_bhn * -self.A_log.exp()[:, None], 1.0)

    def operands(self, x_bnd, key_padding_mask=None):
        return self._parts(x_bnd, key_padding_mask)[1]

    def forward(self, x_bnd, key_padding_mask=None):
        z, ops = self._parts(x_bnd, key_padding_mask)
        y = self._mix(*ops) + self.D[:, None, None].to(ops[2].dtype) * ops[2]
        y = rearrange(y, "b h n p -> b n (h p)") * F.silu(z)
        y = y.to(torch.promote_types(y.dtype, torch.float32))
        return self.proj(F.rms_norm(y, y.shape[-1:], self.norm_weight, 1e-5))

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init: gain 1 on the input projection, `beta` on the output."""
        nn.init.xavier_normal_(self.in_proj.weight.data, gain=1.0)
        nn.init.xavier_normal_(self.proj.weight.data, gain=beta)
