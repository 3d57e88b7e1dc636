"""What the mixers of the package share: input checks, the head/projection bases (per-head
attention followed by an output projection, with each head's share of the output for the path
decomposition; the q, k, v projections of the softmax and kernelized attention mixers; a mixer
without scores that counts as one head), and the keys a query meets, on average, for the FLOP
convention of attnzoo.flops."""

from __future__ import annotations

import torch
from einops import rearrange
from torch import nn

from attnzoo.kernels._checks import check_dropout


def keys_per_query(seq_len: int, causal: bool) -> float:
    """Keys per query, on average: N, or (N + 1) / 2 under a causal mask."""
    return (seq_len + 1) / 2 if causal else float(seq_len)


def _check_heads(dim: int, heads: int) -> None:
    if not isinstance(heads, int) or heads < 1:
        raise ValueError(f"heads must be a positive int, got {heads!r}")
    if dim % heads != 0:
        raise ValueError(f"dim={dim} must be divisible by heads={heads} (dim % heads == 0)")


def _check_input(x_bnd: torch.Tensor, dim: int) -> None:
    if x_bnd.dim() != 3 or x_bnd.shape[-1] != dim:
        raise ValueError(
            f"mixer input must have shape (batch, tokens, {dim}), got {tuple(x_bnd.shape)}"
        )


def _eye_values(x_bnd: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, H, N, N) identity matrices: attention with these as values returns its probabilities
    themselves, computed by the mixer's own op (same scale, same masks)."""
    b, n, _ = x_bnd.shape
    return torch.eye(n, dtype=x_bnd.dtype, device=x_bnd.device).expand(b, heads, n, n)


def _per_head_projection(out_bhnk: torch.Tensor, proj: nn.Linear) -> torch.Tensor:
    """Each head's share of proj(concat_h out_h): (B, H, N, D); the sum over heads is the output."""
    w_hkd = rearrange(proj.weight, "d (h k) -> h k d", h=out_bhnk.shape[1])
    return torch.einsum("bhnk,hkd->bhnd", out_bhnk, w_hkd.to(out_bhnk.dtype))


SINKS = ("none", "learned", "zero_kv")  # the softmax mixers' `sink` option
OUTPUT_GATES = ("none", "headwise", "elementwise")  # the softmax mixers' `gate` option


def gate_flops(dim: int, heads: int, gate: object = "none") -> float:
    """Forward FLOPs per token of the `gate` option's projection x W_g: 2 D H (headwise), 2 D²
    (elementwise), 0 without it (the sigmoid and the product are elementwise, not counted)."""
    return {"headwise": 2.0 * dim * heads, "elementwise": 2.0 * dim * dim}.get(str(gate), 0.0)


class _HeadsThenProjection(nn.Module):
    """An attention mixer given by `attend` (per-head outputs, (B, H, N, dk)) and `proj`: the
    output is proj(concat over heads), and each head's share of it is the path decomposition's
    unit (attnzoo.paths)."""

    proj: nn.Linear
    attn_dropout: float
    # the `gate` option (`_init_gate`), named apart from a subclass's own gates; a class that
    # does not opt in has none
    output_gate: str = "none"

    def _init_gate(self, gate: str, dim: int, heads: int) -> None:
        """The `gate` option (OUTPUT_GATES): the output of each head multiplied by σ(x W_g)
        before the output projection (Qiu et al. 2025, "Gated Attention for Large Language
        Models", arXiv 2505.06708, position G1). `headwise`: one gate per head and token, W_g:
        D → H; `elementwise`: one per head dimension, W_g: D → D; `none`: no gate and no
        parameter. x is the mixer's input, the one that gives q; W_g has no bias and
        PyTorch's default init, as the q projection (the authors' gate is extra rows of
        q_proj)."""
        if gate not in OUTPUT_GATES:
            raise ValueError(f"gate must be one of {OUTPUT_GATES}, got {gate!r}")
        self.output_gate = gate
        if gate != "none":
            self.gate_proj = nn.Linear(dim, heads if gate == "headwise" else dim, bias=False)

    def gate_values(self, x_bnd: torch.Tensor) -> torch.Tensor | None:
        """The output gate σ(x W_g) on input x: (B, H, N) headwise, (B, H, N, dk) elementwise;
        None without a gate. `attention_probs` stays the weights before it."""
        if self.output_gate == "none":
            return None
        g_bnc = torch.sigmoid(self.gate_proj(x_bnd))
        if self.output_gate == "headwise":
            return rearrange(g_bnc, "b n h -> b h n")
        return rearrange(g_bnc, "b n (h k) -> b h n k", h=self.heads)

    def _gated(self, out_bhnk: torch.Tensor, x_bnd: torch.Tensor) -> torch.Tensor:
        """The per-head outputs times the output gate from `x_bnd` (unchanged without one)."""
        if self.output_gate == "none":
            return out_bhnk
        g = self.gate_values(x_bnd)
        return out_bhnk * (g[..., None] if self.output_gate == "headwise" else g)

    def _deepnet_init_gate_(self) -> None:
        """DeepNet's init of W_g: Xavier-normal, gain 1, as the queries (and as retention's and
        GLA's gates)."""
        if self.output_gate != "none":
            nn.init.xavier_normal_(self.gate_proj.weight, gain=1.0)

    def _init_sink(self, sink: str, heads: int) -> None:
        """The `sink` option (SINKS): `none`; `learned`, a logit per head in every row's softmax
        whose value is zero (GPT-OSS's sink; init 0); `zero_kv`, one extra all-zero key and
        value ("softmax + 1": a fixed logit 0). With a sink a row's weights on the tokens sum to
        less than 1, so they are not distributions (the entropy reads n/a, the row sums say how
        much the sink takes)."""
        if sink not in SINKS:
            raise ValueError(f"sink must be one of {SINKS}, got {sink!r}")
        self.sink, self.rows_are_distributions = sink, sink == "none"
        if sink == "learned":
            self.sink_logit = nn.Parameter(torch.zeros(heads))
        elif sink == "zero_kv":
            self.register_buffer("sink_logit", torch.zeros(heads), persistent=False)
        else:
            self.sink_logit = None

    def dropout_p(self) -> float:
        """Attention-probability dropout for this call: `attn_dropout` in training, 0 in eval."""
        return self.attn_dropout if self.training else 0.0

    def attend(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        raise NotImplementedError

    def forward(
        self, x_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        out_bhnk = self._gated(self.attend(x_bnd, key_padding_mask), x_bnd)
        return self.proj(rearrange(out_bhnk, "b h n k -> b n (h k)"))

    def head_outputs(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Each head's contribution, (B, H, N, D); scores from `scores_from` (default x), and the
        output gate with them: with both frozen the head is linear in x."""
        out_bhnk = self.attend(x_bnd, key_padding_mask, scores_from)
        out_bhnk = self._gated(out_bhnk, x_bnd if scores_from is None else scores_from)
        return _per_head_projection(out_bhnk, self.proj)


class _QKVHeads(_HeadsThenProjection):
    """q, k, v projections per head and an output projection, 4 D² parameters, as scaled_dot."""

    def _init_qkv(self, dim: int, heads: int, causal: bool, impl: str, attn_dropout: float):
        _check_heads(dim, heads)
        self.dim, self.heads, self.causal, self.impl = dim, heads, causal, impl
        self.dk = dim // heads
        self.attn_dropout = check_dropout(attn_dropout, "attn_dropout")
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)

    def _qkv(self, x_bnd: torch.Tensor, scores_from: torch.Tensor | None = None):
        _check_input(x_bnd, self.dim)
        q_bhnk, k_bhnk, v_bhnk = rearrange(
            self.qkv(x_bnd), "b n (three h k) -> three b h n k", three=3, h=self.heads
        )
        if scores_from is not None:
            q_bhnk, k_bhnk, _ = rearrange(
                self.qkv(scores_from), "b n (three h k) -> three b h n k", three=3, h=self.heads
            )
        return q_bhnk, k_bhnk, v_bhnk

    def deepnet_init_(self, beta: float) -> None:
        """DeepNet's init (model.residual=deepnorm): Xavier-normal, gain 1 on Wq and Wk, gain
        `beta` on Wv and the output projection."""
        w_q, w_k, w_v = self.qkv.weight.data.chunk(3, dim=0)
        for w, gain in ((w_q, 1.0), (w_k, 1.0), (w_v, beta), (self.proj.weight.data, beta)):
            nn.init.xavier_normal_(w, gain=gain)
        self._deepnet_init_gate_()


class _OneHead(nn.Module):
    """A mixer without scores: for the path decomposition the whole mixer is one head, and since
    it is linear in x, `scores_from` plays no part.

    Such mixers accept `attn_dropout` and do nothing with it (there are no attention
    probabilities to drop), so that one preset (e.g. nanoGPT's recipe, `experiment=
    shakespeare_char_gpu`) can set it for every mixer of a sweep."""

    heads = 1

    def head_outputs(
        self,
        x_bnd: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        scores_from: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The output as one head, (B, 1, N, D)."""
        return self(x_bnd, key_padding_mask)[:, None]


def _refuse_causal(cls: type, causal: bool) -> None:
    if causal:
        raise ValueError(
            f"mixer {cls.mixer_name!r} cannot be causal (every output mixes every token); "
            "use it on a non-causal task, or a causal mixer (e.g. linear, local, scaled_dot)"
        )


def _positive(value: object, name: str, kind: type = int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise ValueError(f"{name} must be a positive {kind.__name__}, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
