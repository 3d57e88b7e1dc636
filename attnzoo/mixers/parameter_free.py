"""The parameter-free mixers: PoolFormer's pooling, the identity (no mixing) and FNet's Fourier
mixing. None has scores: for the path decomposition each is one head (`_OneHead`)."""

from __future__ import annotations

import torch

from attnzoo import kernels
from attnzoo.kernels._checks import check_dropout
from attnzoo.mixers.base import _check_input, _OneHead, _refuse_causal
from attnzoo.mixers.registry import register


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


@register("fourier")
class Fourier(_OneHead):
    """FNet's mixer (Lee-Thorp et al. 2021, arXiv 2105.03824): y = Re(FFT_seq(FFT_hidden(x))),
    a 2-D discrete Fourier transform over tokens and channels keeping the real part; no
    parameters. Padding tokens are set to zero before the transform, so that real outputs do not
    depend on their values (they still count in the sequence length N the transform runs over).
    Computed in float32 at least (the FFT has no half-precision CPU path). Not causal: every
    output mixes every token.
    """

    supports_causal = False

    def __init__(
        self, dim: int, heads: int, causal: bool, impl: str, attn_dropout: float = 0.0
    ) -> None:
        super().__init__()
        _refuse_causal(type(self), causal)
        self.dim = dim
        check_dropout(attn_dropout, "attn_dropout")  # accepted, see _OneHead

    @staticmethod
    def flops_per_token(
        dim: int, heads: int, seq_len: int, causal: bool, **options: object
    ) -> float:
        """0 by the matmul convention of attnzoo.flops, as pooling's additions: the FFT is no
        matmul (it costs about 5 log₂(N D) real operations per channel and token)."""
        return 0.0

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        _check_input(x_bnd, self.dim)
        if key_padding_mask is not None:
            x_bnd = x_bnd.masked_fill(key_padding_mask[..., None], 0.0)
        compute = torch.promote_types(x_bnd.dtype, torch.float32)
        y_bnd = torch.fft.fft2(x_bnd.to(compute), dim=(-2, -1)).real
        return y_bnd.to(x_bnd.dtype)
