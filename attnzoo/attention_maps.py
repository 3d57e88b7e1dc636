"""What the attention mixers attend to, and what they learned, as pictures for W&B.

A mixer with softmax attention says what its probabilities are, `attention_probs(x, mask)`
(attnzoo.mixers): each of the package's reads them through its own op with the identity matrix as
the values (softmax(scores) @ I is the probability matrix itself), so the maps are exactly what the
mixer computes, same scale and masks, without a second copy of any score formula
(docs/kernels.md has the identities that make quadratic and metric attention such ops). A mixer
with matrices worth a picture gives them as `learned_matrices()`. A mixer without these methods
has no maps: "not available for this mixer".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    import matplotlib.pyplot as plt


def has_attention(mixer: nn.Module) -> bool:
    """Whether the mixer gives its attention probabilities (an `attention_probs` method)."""
    return callable(getattr(mixer, "attention_probs", None))


def mixers_of(model: nn.Module) -> list[nn.Module]:
    """The model's distinct mixers, in block order (a shared block's once)."""
    return list({id(b.mixer): b.mixer for b in model.blocks}.values())


@torch.no_grad()
def attention_maps(
    model: nn.Module, inputs: torch.Tensor, key_padding_mask: torch.Tensor | None = None
) -> list[torch.Tensor]:
    """For the first example of `inputs`: one (H, N, N) probability matrix per attention layer
    application, in order (a shared block applied `depth` times gives `depth` maps). Empty for
    mixers without attention probabilities (`has_attention`)."""
    inputs = inputs[:1]
    mask = None if key_padding_mask is None else key_padding_mask[:1]
    captured: list[torch.Tensor] = []

    def hook(module: nn.Module, args: tuple) -> None:
        captured.append(module.attention_probs(args[0].float(), mask)[0].cpu())

    handles = [m.register_forward_pre_hook(hook) for m in mixers_of(model) if has_attention(m)]
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
    """The matrices each distinct block's mixer gives as `learned_matrices()` (quadratic's U,
    (H, D, D); metric's M, (H, dk, dk)), as `layer_<i>/<label>`."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for i, block in enumerate(model.blocks):
        m: Any = block.mixer
        if id(m) in seen or not callable(getattr(m, "learned_matrices", None)):
            continue
        seen.add(id(m))
        for label, mat in m.learned_matrices().items():
            out[f"layer_{i + 1}/{label}"] = mat.detach().float().cpu()
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
    from attnzoo.tracking import pyplot

    plt = pyplot()
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
