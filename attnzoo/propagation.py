"""Signal propagation at init: what a stack does to its tokens and to its gradients before training,
the probes the collapse atlas's figures need beside attnzoo.rank's measures.

    token_spread(h)            µ(X) = ‖X − 1·meanᵀ‖_F per sample            (Wu et al. 2024)
    relative_token_spread(h)   µ(X) / ‖X‖_F, the same with the scale taken out
    hidden_states(model, x)    every hidden state of an attnzoo model, eval mode, float64 copy
    qkv_gradient_norms(model, x, targets)
                               ‖∂L/∂W_Q‖_F, ‖∂L/∂W_K‖_F, ‖∂L/∂W_V‖_F per block for a
                               cross-entropy loss L of the model's logits   (Noci et al. 2022)

The spread is not scale-free: a stack whose every layer shrinks its tokens by a constant (a
value projection at PyTorch's default init does, by about 1/√3 per linear map) sees µ fall
exponentially with no change in the tokens' directions. `relative_token_spread` is the same
quantity divided by the state's size, comparable across layers.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from attnzoo.rank import _tokens

QKV = ("query", "key", "value")


def token_spread(h_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Wu, Ajorlou, Wang, Jegelka & Jadbabaie (2024), "On the role of attention masks and
    LayerNorm in transformers" (arXiv 2405.18781): µ(X) = ‖X − 1γ_Xᵀ‖_F with γ_X the mean token,
    the distance of the state from the rank-one states whose tokens are all equal. (batch,)
    float64; padding tokens are left out of the mean and of the norm."""
    h_bnd, keep_bn1 = _tokens(h_bnd, key_padding_mask)
    mean_b1d = h_bnd.sum(dim=1, keepdim=True) / keep_bn1.sum(dim=1, keepdim=True).clamp_min(1)
    return ((h_bnd - mean_b1d) * keep_bn1).pow(2).sum(dim=(1, 2)).sqrt()


def relative_token_spread(
    h_bnd: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """µ(X) / ‖X‖_F per sample, (batch,) float64: in [0, 1], 0 when every token is the same
    vector, NaN for an all-zero sample."""
    h64, _ = _tokens(h_bnd, key_padding_mask)
    whole = h64.pow(2).sum(dim=(1, 2)).sqrt()
    spread = token_spread(h_bnd, key_padding_mask)
    return (spread / whole.clamp_min(torch.finfo(torch.float64).tiny)).where(whole > 0, torch.nan)


@torch.no_grad()
def hidden_states(
    model: nn.Module,
    inputs: torch.Tensor,
    key_padding_mask: torch.Tensor | None = None,
    dtype: torch.dtype | None = torch.float64,
) -> list[torch.Tensor]:
    """The depth + 1 hidden states of an attnzoo Model (the first block's input, then every
    block's output) of one eval-mode forward; with `dtype` (default float64) on a copy of the
    model in that dtype, so that small residuals are not float32's rounding."""
    if dtype is not None:
        model = copy.deepcopy(model).to(dtype)
    was_training = model.training
    model.eval()
    try:
        _, states = model(inputs, key_padding_mask, return_hidden=True)
    finally:
        model.train(was_training)
    return states


def qkv_weights(mixer: nn.Module) -> dict[str, torch.Tensor]:
    """The query, key and value projection weights of a mixer with one fused `qkv` projection
    (scaled_dot, local and the others built on attnzoo.mixers.base._QKVHeads), as views of its
    (3·D, D) weight; ValueError for a mixer without one."""
    qkv = getattr(mixer, "qkv", None)
    if not isinstance(qkv, nn.Linear) or qkv.out_features != 3 * qkv.in_features:
        raise ValueError(
            f"{type(mixer).__name__} has no fused (3·D, D) `qkv` projection; the query/key/value "
            "gradient probe reads mixers built on attnzoo.mixers.base._QKVHeads (scaled_dot, "
            "local, …)"
        )
    return dict(zip(QKV, qkv.weight.chunk(3, dim=0), strict=True))


def qkv_gradient_norms(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    dtype: torch.dtype | None = torch.float64,
) -> list[dict[str, float]]:
    """Noci et al. (2022), "Signal propagation in transformers: theoretical perspectives and the
    role of rank collapse" (arXiv 2206.03126), section 3: the Frobenius norms of the gradients of
    the loss with respect to each block's W_Q, W_K and W_V, one {"query", "key", "value"} dict
    per block. The loss is the mean cross-entropy of the model's logits (batch, tokens, classes)
    against `targets` (batch, tokens), as a language model's at init on random targets. Run in
    eval mode (no dropout) on a copy of the model in `dtype` (default float64); the model itself
    is left untouched, its gradients included."""
    for block in model.blocks:
        qkv_weights(block.mixer)  # refuses, with its message, before anything runs
    model = copy.deepcopy(model)
    if dtype is not None:
        model = model.to(dtype)
    model.eval()
    model.zero_grad(set_to_none=True)
    logits = model(inputs)
    loss = F.cross_entropy(logits.flatten(0, -2), targets.flatten())
    loss.backward()
    out = []
    for block in model.blocks:
        parts = block.mixer.qkv.weight.grad.chunk(3, dim=0)
        out.append({name: float(g.norm()) for name, g in zip(QKV, parts, strict=True)})
    return out
