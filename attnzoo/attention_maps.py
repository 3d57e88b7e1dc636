"""What the attention mixers attend to, and what they learned, as pictures for W&B.

Attention probabilities are read through the mixers' own ops, with the identity matrix as the
values: softmax(scores) @ I is the probability matrix itself, so the maps are exactly what the
mixer computes (same scale, same masks) without a second copy of any score formula. The metric
mixer is scaled-dot attention with q = p M and k = p (see ARCHITECTURE.md), which is how its maps
are read.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from einops import rearrange  # noqa: E402
from torch import nn  # noqa: E402

from attnzoo import kernels  # noqa: E402

ATTENTION_MIXERS = ("scaled_dot", "quadratic", "metric")


def _probs(mixer: nn.Module, x_bnd: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor | None:
    """(B, H, N, N) attention probabilities of `mixer` on its input `x_bnd`, or None."""
    name = getattr(mixer, "mixer_name", None)
    if name not in ATTENTION_MIXERS:
        return None
    b, n, _ = x_bnd.shape
    eye_bhnn = torch.eye(n, dtype=x_bnd.dtype, device=x_bnd.device).expand(b, mixer.heads, n, n)
    if name == "scaled_dot":
        q_bhnk, k_bhnk, _ = rearrange(
            mixer.qkv(x_bnd), "b n (three h k) -> three b h n k", three=3, h=mixer.heads
        )
        return kernels.scaled_dot_attention(
            q_bhnk, k_bhnk, eye_bhnn, mixer.causal, mask, impl="torch"
        )
    if name == "quadratic":
        u_hdd = mixer.u.to(x_bnd.dtype)
        return kernels.quadratic_attention(x_bnd, u_hdd, eye_bhnn, mixer.causal, mask, impl="torch")
    p_bhnk = rearrange(mixer.p(x_bnd), "b n (h k) -> b h n k", h=mixer.heads)
    q_bhnk = p_bhnk @ mixer.metric().to(x_bnd.dtype)[None]
    return kernels.scaled_dot_attention(q_bhnk, p_bhnk, eye_bhnn, mixer.causal, mask, impl="torch")


@torch.no_grad()
def attention_maps(
    model: nn.Module, inputs: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> list[torch.Tensor]:
    """For the first example of `inputs`: one (H, N, N) probability matrix per attention layer
    application, in order (a shared block applied `depth` times gives `depth` maps). Empty for
    mixers without attention."""
    inputs = inputs[:1]
    mask = None if key_padding_mask is None else key_padding_mask[:1]
    captured: list[torch.Tensor] = []

    def hook(module: nn.Module, args: tuple) -> None:
        probs = _probs(module, args[0].float(), mask)
        if probs is not None:
            captured.append(probs[0].cpu())

    mixers = {id(b.mixer): b.mixer for b in model.blocks}.values()
    handles = [m.register_forward_pre_hook(hook) for m in mixers]
    was_training = model.training
    model.eval()
    try:
        model(inputs, mask)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    return captured


def learned_matrices(model: nn.Module) -> dict[str, torch.Tensor]:
    """The learned U (quadratic, (H, D, D)) or M (metric, (H, dk, dk)) of every distinct block."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for i, block in enumerate(model.blocks):
        m = block.mixer
        if id(m) in seen:
            continue
        seen.add(id(m))
        name = getattr(m, "mixer_name", None)
        if name == "quadratic":
            out[f"layer_{i + 1}/U"] = m.u.detach().float().cpu()
        elif name == "metric":
            out[f"layer_{i + 1}/M"] = m.metric().detach().float().cpu()
    return out


def _grid(panels: list[list[torch.Tensor]], row_names: list[str], cmap: str, symmetric: bool):
    """The panels as one mosaic image on one axes (rows of panels, a blank line between them),
    heads named above and rows on the left. One image instead of an axes per panel: a
    matplotlib axes costs tens of milliseconds to build and lay out, and a figure has dozens."""
    import numpy as np

    rows, cols = len(panels), max(len(r) for r in panels)
    h = max(int(p.shape[0]) for row in panels for p in row)
    w = max(int(p.shape[1]) for row in panels for p in row)
    gap = max(1, h // 16)
    mosaic = np.full((rows * (h + gap) - gap, cols * (w + gap) - gap), np.nan, dtype=np.float32)
    for r, row in enumerate(panels):
        for c, panel in enumerate(row):
            mat = panel.numpy().astype(np.float32)
            if symmetric:  # each panel on its own scale, 0 in the middle of the colour map
                mat = mat / (float(abs(mat).max()) or 1.0)
            y, x = r * (h + gap), c * (w + gap)
            mosaic[y : y + mat.shape[0], x : x + mat.shape[1]] = mat
    fig = plt.figure(figsize=(1.8 * cols + 0.6, 1.8 * rows + 0.5))
    ax = fig.add_axes((0.6 / (1.8 * cols + 0.6), 0.02, 1 - 0.65 / (1.8 * cols + 0.6), 0.9))
    colours = plt.get_cmap(cmap).with_extremes(bad="white")  # the gaps between panels
    lo, hi = (-1.0, 1.0) if symmetric else (0.0, 1.0)
    ax.imshow(mosaic, cmap=colours, vmin=lo, vmax=hi, interpolation="nearest", aspect="equal")
    ax.set_axis_off()
    for c in range(cols):
        ax.text(c * (w + gap) + w / 2, -gap, f"head {c}", ha="center", va="bottom", fontsize=8)
    for r, name in enumerate(row_names):
        y = r * (h + gap) + h / 2
        ax.text(-gap, y, name, ha="right", va="center", fontsize=8, rotation=90)
    return fig


def maps_figure(maps: list[torch.Tensor], step: int) -> plt.Figure:
    """Rows: layers; columns: heads; each panel a (query × key) probability matrix."""
    fig = _grid(
        [list(m) for m in maps], [f"layer {i + 1}" for i in range(len(maps))], "viridis", False
    )
    fig.suptitle(f"attention maps, first probe example, step {step}", fontsize=9)
    return fig


def matrices_figure(mats: dict[str, torch.Tensor], step: int) -> plt.Figure:
    """Rows: layers; columns: heads; each panel a learned U or M (diverging colours, 0 = white)."""
    fig = _grid([list(m) for m in mats.values()], list(mats), "RdBu_r", True)
    fig.suptitle(f"learned matrices, step {step}", fontsize=9)
    return fig
