"""attnzoo's Gated DeltaNet layer against flash-linear-attention's, weight for weight.

fla's `GatedDeltaNet` layer (fla/layers/gated_deltanet.py, in the flash-linear-attention
distribution, not in fla-core) runs Triton kernels that need a GPU, so here it is composed, in its
order, from fla-core's own PyTorch pieces: the projections and short convolutions of its layer
(nn.Linear, and the depthwise causal convolution its `ShortConvolution` is), SiLU, q and k
L2-normalised, β = σ(x W_b), the decay `naive_gdn_gate` (−exp(A_log) · softplus(x W_a + dt_bias)),
the recurrence `naive_recurrent_gated_delta_rule`, and its output norm with the output gate
(`use_gate=True`, its default): `rms_norm_ref(o, w, z=x W_g)` = RMSNorm(o) ⊙ SiLU(x W_g), the
reference of its `FusedRMSNormGated`; then o_proj. A truth attnzoo did not write, at fla's
`expand_v=1` and `head_dim = dim / heads` (attnzoo's value width).

fla-core is the optional extra `[fla]`; without it the module skips, with the reason.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange

from attnzoo import build_mixer

pytest.importorskip("fla", reason="fla-core (the [fla] extra) is not installed")
with warnings.catch_warnings():  # fla warns, on a machine without a GPU, that it runs on CPU
    warnings.simplefilter("ignore", UserWarning)
    from fla.modules.norm.layernorm_gated import rms_norm_ref
    from fla.ops.gated_delta_rule.gate import naive_gdn_gate
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

B, N, D, H = 2, 13, 16, 2  # N past fla's short-convolution window, odd
DK = D // H


def fla_gated_deltanet(mixer, x_btd: torch.Tensor, use_gate: bool = True) -> torch.Tensor:
    """fla's GatedDeltaNet.forward (causal, no cache, no padding) with attnzoo's weights: q_proj,
    k_proj, v_proj are the rows of attnzoo's qkv, the three short convolutions its one, a_proj
    its decay, b_proj its β, g_proj its gate, o_norm its norm, o_proj its proj."""
    w = {k: v.detach().float() for k, v in mixer.state_dict().items()}
    w_q, w_k, w_v = w["qkv.weight"].chunk(3, dim=0)
    conv_q, conv_k, conv_v = w["conv.weight"].chunk(3, dim=0)
    x = x_btd.float()
    taps = conv_q.shape[-1]

    def short_conv(proj_w: torch.Tensor, conv_w: torch.Tensor) -> torch.Tensor:
        """ShortConvolution(activation='silu'): a depthwise causal Conv1d, then SiLU."""
        h_bdt = (x @ proj_w.T).transpose(1, 2)
        out = F.conv1d(F.pad(h_bdt, (taps - 1, 0)), conv_w, groups=conv_w.shape[0])
        return F.silu(out).transpose(1, 2)

    q, k, v = (
        rearrange(short_conv(pw, cw), "b t (h d) -> b t h d", d=DK)
        for pw, cw in ((w_q, conv_q), (w_k, conv_k), (w_v, conv_v))
    )
    q, k = F.normalize(q, p=2, dim=-1), F.normalize(k, p=2, dim=-1)  # use_qk_l2norm_in_kernel
    beta = torch.sigmoid(x @ w["beta.weight"].T)  # use_beta_sigmoid_in_kernel
    g = naive_gdn_gate(x @ w["decay.weight"].T, w["A_log"], w["dt_bias"])  # use_gate_in_kernel
    o, _ = naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale=DK**-0.5)
    if use_gate:
        gate = rearrange(x @ w["gate.weight"].T, "b t (h d) -> b t h d", d=DK)
        o = rms_norm_ref(o, w["norm.weight"], None, z=gate, eps=1e-5)
    else:  # fla's RMSNorm without a gate (use_gate=False)
        o = rms_norm_ref(o, w["norm.weight"], None, eps=1e-5)
    return rearrange(o, "b t h d -> b t (h d)") @ w["proj.weight"].T


def gated_deltanet(seed: int = 0):
    torch.manual_seed(seed)
    return build_mixer("deltanet", dim=D, heads=H, causal=True, impl="torch", gated=True).eval()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def test_gated_deltanet_matches_flas_layer_with_its_output_gate():
    """The output matches fla's layer (gate on) to fp32 rounding; without attnzoo's gate (its
    output before the gate was added: out(RMSNorm(o))) it is far from it, and it matches fla's
    `use_gate=False` layer instead."""
    mixer = gated_deltanet()
    x = torch.randn(B, N, D)
    with torch.no_grad():
        ours, theirs = mixer(x), fla_gated_deltanet(mixer, x)
        o = mixer.mixing(x)
        ungated = mixer.proj(
            rearrange(mixer.norm(rearrange(o, "b h n v -> b n h v")), "b n h v -> b n (h v)")
        )
        theirs_ungated = fla_gated_deltanet(mixer, x, use_gate=False)
    assert rel(ours, theirs) < 2e-5, rel(ours, theirs)
    assert rel(ungated, theirs) > 0.3, rel(ungated, theirs)  # the gate is no small correction
    assert rel(ungated, theirs_ungated) < 2e-5, rel(ungated, theirs_ungated)


def test_gated_deltanet_with_right_padding_matches_fla_on_each_sequence_alone():
    """fla unpads a padded batch (its cu_seqlens); attnzoo masks: on the real tokens of each
    sequence the two agree, the gate included."""
    mixer = gated_deltanet(seed=1)
    x = torch.randn(B, N, D)
    lengths = [N, N - 4]
    mask = torch.arange(N)[None, :] >= torch.tensor(lengths)[:, None]  # True at padding
    with torch.no_grad():
        ours = mixer(x, mask)
        for b, n in enumerate(lengths):
            theirs = fla_gated_deltanet(mixer, x[b : b + 1, :n])
            assert rel(ours[b : b + 1, :n], theirs) < 2e-5, (b, rel(ours[b : b + 1, :n], theirs))
