"""The recurrent ops against flash-linear-attention's own PyTorch references.

A truth attnzoo did not write: fla-core's naive recurrences (`fla.ops.*.naive`: plain PyTorch,
one token at a time, fp32) for simple GLA (one log decay per head and token: RetNet, Mamba-2),
GLA (one per key dimension), the delta rule and the gated delta rule. Their layouts are fla's,
(B, T, H, ·) except the delta rule's (B, H, T, ·); attnzoo's are (B, H, N, ·). Every impl
attnzoo has on this machine is compared: the PyTorch path, and for gated_linear_attention the
Triton kernels (in the interpreter on CPU, tests/conftest.py).

fla-core is the optional extra `[fla]`; without it the module skips, with the reason.
"""

from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch

from attnzoo import kernels

pytest.importorskip("fla", reason="fla-core (the [fla] extra) is not installed")
with warnings.catch_warnings():  # fla warns, on a machine without a GPU, that it runs on CPU
    warnings.simplefilter("ignore", UserWarning)
    from fla.ops.delta_rule.naive import delta_rule_recurrence
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule
    from fla.ops.gla.naive import naive_recurrent_gla
    from fla.ops.simple_gla.naive import naive_recurrent_simple_gla

B, H, N, K, V = 2, 3, 37, 16, 8  # N odd and past one chunk of every impl


def btH(t: torch.Tensor) -> torch.Tensor:
    """attnzoo's (B, H, N, ·) or (B, H, N) as fla's (B, T, H, ·) or (B, T, H)."""
    return t.transpose(1, 2).contiguous()


NO_TRITON = importlib.util.find_spec("triton") is None
GATED_IMPLS = [
    "torch",
    pytest.param("triton", marks=pytest.mark.skipif(NO_TRITON, reason="no triton")),
]


def assert_close(got: torch.Tensor, want: torch.Tensor, tol: float = 2e-5) -> None:
    err = (got.double() - want.double()).abs().max().item()
    assert err <= tol * (1 + want.abs().max().item()), f"max error {err:.3g}"


# the decay forms: one log decay per head and token (RetNet, Mamba-2: fla's simple GLA), or one
# per key dimension too (GLA)
DECAYS = {
    "per head": ((B, H, N), naive_recurrent_simple_gla),
    "per key": ((B, H, N, K), naive_recurrent_gla),
}


@pytest.mark.parametrize("impl", GATED_IMPLS)
@pytest.mark.parametrize("decay", list(DECAYS))
def test_gated_linear_attention_matches_fla_for_either_decay_form(decay, impl):
    shape, fla_naive = DECAYS[decay]
    torch.manual_seed(0)
    q, k = torch.randn(B, H, N, K), torch.randn(B, H, N, K)
    v, s0 = torch.randn(B, H, N, V), torch.randn(B, H, K, V)
    g = -torch.nn.functional.softplus(torch.randn(shape) - 1)  # log α in about (−3, 0)
    out, final = kernels.gated_linear_attention(
        q, k, v, g, initial_state=s0, output_final_state=True, impl=impl
    )
    want, want_final = fla_naive(
        btH(q), btH(k), btH(v), btH(g), initial_state=s0, output_final_state=True
    )
    assert_close(out, want.transpose(1, 2))
    assert_close(final, want_final)


def unit_keys(seed: int) -> tuple[torch.Tensor, ...]:
    """q, k (L2-normalised, as DeltaNet's are), v and β in (0, 1)."""
    torch.manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(B, H, N, K), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, H, N, K), dim=-1)
    return q, k, torch.randn(B, H, N, V), torch.rand(B, H, N)


def test_delta_rule_matches_fla_delta_rule_recurrence():
    q, k, v, beta = unit_keys(2)
    out = kernels.delta_rule(q, k, v, beta, impl="torch")
    want, _ = delta_rule_recurrence(q, k, v, beta)  # fla's delta rule takes (B, H, T, ·)
    assert_close(out, want)


def test_gated_delta_rule_matches_fla_gated_delta_rule_recurrence():
    q, k, v, beta = unit_keys(3)
    g = -torch.nn.functional.softplus(torch.randn(B, H, N) - 1)
    out = kernels.delta_rule(q, k, v, beta, log_decay=g, impl="torch")
    want, _ = naive_recurrent_gated_delta_rule(btH(q), btH(k), btH(v), btH(beta), btH(g))
    assert_close(out, want.transpose(1, 2))
