"""The delta-rule mixer: DeltaNet and Gated DeltaNet on the op `attnzoo.kernels.delta_rule`
(a state written by error correction, not by accumulation); docs/mixers.md gives its formula,
options and where attnzoo departs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from attnzoo import kernels
from attnzoo.kernels._op import autocast_off
from attnzoo.mixers.base import _check_input, _positive
from attnzoo.mixers.recurrent import _HeadNorm, _Recurrent, scan_flops, segment_sums
from attnzoo.mixers.registry import register


def delta_hidden_attention(
    q_bhnk: torch.Tensor,
    k_bhnk: torch.Tensor,
    beta_bhn: torch.Tensor,
    log_decay_bhn: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """The causal hidden attention matrix of the delta rule, (B, H, N, N), from its UT form over
    the whole sequence: M = scale · (Q Kᵀ ⊙ D) (I + A)⁻¹ diag(β), with D_ti = exp(Σ_{i<u≤t} g_u)
    for i ≤ t (0 above) and A_ti = β_t D_ti k_tᵀ k_i for i < t, so that M·V is the op's output.
    For N small enough to materialise."""
    compute = torch.promote_types(q_bhnk.dtype, torch.float32)
    q, k = q_bhnk.to(compute), k_bhnk.to(compute)
    beta, decay = beta_bhn.to(compute), segment_sums(log_decay_bhn.to(compute)).exp()
    n = q.shape[-2]
    eye = torch.eye(n, dtype=compute, device=q.device)
    a = (beta[..., None] * decay * (k @ k.transpose(-1, -2))).tril(-1)
    t_beta = torch.linalg.solve_triangular(
        eye + a, torch.diag_embed(beta), upper=False, unitriangular=True
    )
    return scale * ((q @ k.transpose(-1, -2)) * decay) @ t_beta


@register("deltanet")
class DeltaNet(_Recurrent):
    """DeltaNet (Schlag et al. 2021; Yang et al. 2024, arXiv 2406.06484) and, with `gated`,
    Gated DeltaNet (Yang et al. 2024, arXiv 2412.06464), per head:

        S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,    o_t = S_tᵀ q_t / √dk,

    q, k, v from x through a short causal depthwise convolution (`conv_kernel`, FLA's default 4)
    and SiLU, q and k L2-normalised per head; β_t = σ(x_t W_β) per head; α_t = 1 (DeltaNet) or,
    gated, α_t = exp(−exp(A_log) · softplus(x_t W_α + dt_bias)) per head, Mamba-2's decay and
    init. Then an RMSNorm per head and the output projection: out(RMSNorm(o)) for DeltaNet (no
    output gate, flash-linear-attention's DeltaNet default); gated, with Gated DeltaNet's output
    gate, out(RMSNorm(o) ⊙ SiLU(x W_g)), W_g: D → D (flash-linear-attention's GatedDeltaNet
    default, `use_gate=True`, and Qwen3-Next's). `impl="triton"` runs the op's PyTorch path: the
    delta rule has no Triton kernel in attnzoo. `attn_dropout` is accepted and unused.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        causal: bool,
        impl: str,
        gated: bool = False,
        conv_kernel: int = 4,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self._init_common(dim, heads, causal, impl)
        _positive(conv_kernel, "conv_kernel")
        if not isinstance(gated, bool):
            raise ValueError(f"gated must be true or false, got {gated!r}")
        self.dk, self.gated = dim // heads, gated
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.conv = nn.Conv1d(3 * dim, 3 * dim, conv_kernel, groups=3 * dim, bias=False)
        self.beta = nn.Linear(dim, heads, bias=False)
        if gated:
            self.decay = nn.Linear(dim, heads, bias=False)
            dt = torch.exp(torch.rand(heads) * math.log(100) + math.log(1e-3)).clamp_min(1e-4)
            self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus⁻¹(dt)
            self.A_log = nn.Parameter(torch.empty(heads).uniform_(1, 16).log())
        self.norm = _HeadNorm(heads, self.dk, rms=True)
        self.proj = nn.Linear(dim, dim, bias=False)
        if gated:  # the output gate, W_g (made last: the other weights are DeltaNet's at a seed)
            self.gate = nn.Linear(dim, dim, bias=False)

    @staticmethod
    def flops_per_token(
        dim: int,
        heads: int,
        seq_len: int,
        causal: bool,
        gated: bool = False,
        conv_kernel: int = 4,
        **options: object,
    ) -> float:
        """q, k, v and output projections 8 D², β's (and gated, α's) projection 2 D H each,
        gated the output gate's 2 D², the depthwise convolution 6 D · conv_kernel; the scan in
        its recurrent form, three state products per head and token (the prediction S̃ᵀk_t, the
        write k_t u_tᵀ, the read-out S_tᵀq_t), 2 · dk² FLOPs each: 1.5 × `scan_flops`, whose
        form has two."""
        projections = 8 * dim * dim + 2 * dim * heads * (2 if gated else 1)
        projections += 2 * dim * dim if gated else 0
        conv = 6 * dim * conv_kernel
        return projections + conv + 1.5 * scan_flops(heads, dim // heads, dim // heads, causal)

    def operands(self, x_bnd, key_padding_mask=None):
        """q, k, v (B, H, N, dk), (β, log decay) (B, H, N) each, and the scale: the recurrent
        family's operands with β beside the decay (`_mix` flips the pair for the reverse scan)."""
        _check_input(x_bnd, self.dim)
        x_bnd = self._masked(x_bnd, key_padding_mask)
        pad = self.conv.kernel_size[0] - 1
        compute = torch.promote_types(x_bnd.dtype, torch.float32)
        qkv = self.qkv(x_bnd).transpose(1, 2).to(compute)
        with autocast_off(x_bnd):  # the short convolution and the norms in fp32
            qkv = F.conv1d(F.pad(qkv, (pad, 0)), self.conv.weight.to(compute), groups=qkv.shape[1])
        qkv = self._masked(F.silu(qkv).transpose(1, 2), key_padding_mask)
        q, k, v = rearrange(qkv, "b n (three h k) -> three b h n k", three=3, h=self.heads)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        beta = torch.sigmoid(self.beta(x_bnd).to(compute))
        if key_padding_mask is not None:  # padding writes nothing
            beta = beta.masked_fill(key_padding_mask[..., None].to(torch.bool), 0.0)
        if self.gated:
            dt = F.softplus(self.decay(x_bnd).to(compute) + self.dt_bias)
            log_decay = -self.A_log.exp() * dt
        else:
            log_decay = torch.zeros_like(beta)
        to_heads = lambda t: rearrange(t, "b n h -> b h n")
        return q, k, v, (to_heads(beta), to_heads(log_decay)), self.dk**-0.5

    def _scan(self, q, k, v, beta_decay, scale) -> torch.Tensor:
        beta, log_decay = beta_decay
        impl = "torch" if self.impl == "triton" else self.impl
        return kernels.delta_rule(q, k, v, beta, log_decay if self.gated else None, scale, impl)

    def attention_probs(self, x_bnd, key_padding_mask=None) -> torch.Tensor:
        """The hidden attention matrix M, (B, H, N, N), with M·v = `mixing` (`delta_hidden_
        attention`; when not causal, plus the reversed scan's upper-triangular one)."""
        q, k, _, (beta, g), scale = self.operands(x_bnd, key_padding_mask)
        m = delta_hidden_attention(q, k, beta, g, scale)
        if not self.causal:
            flip = lambda t: t.flip(2)
            m = m + delta_hidden_attention(flip(q), flip(k), flip(beta), flip(g), scale).flip(2, 3)
        return m

    def finish(self, o_bhnv, x_bnd, key_padding_mask=None):
        """out(RMSNorm(o)), gated out(RMSNorm(o) ⊙ SiLU(x W_g)) (fla's FusedRMSNormGated)."""
        o_bnhv = self.norm(rearrange(o_bhnv, "b h n v -> b n h v"))
        o_bnc = rearrange(o_bnhv, "b n h v -> b n (h v)")
        if self.gated:
            o_bnc = o_bnc * F.silu(self.gate(x_bnd).to(o_bnc.dtype))
        return self.proj(o_bnc.to(x_bnd.dtype))

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init: gain 1 on Wq, Wk (and gated, the output gate's W_g, as retention's and
        GLA's gates), `beta` on Wv and the output."""
        w_q, w_k, w_v = self.qkv.weight.data.chunk(3, dim=0)
        gate = [(self.gate.weight.data, 1.0)] if self.gated else []
        for w, gain in ((w_q, 1.0), (w_k, 1.0), (w_v, beta), (self.proj.weight.data, beta), *gate):
            nn.init.xavier_normal_(w, gain=gain)
