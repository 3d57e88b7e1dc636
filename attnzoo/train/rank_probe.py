"""The rank probe: the fixed validation batch the collapse measures are taken on, at init and at
every evaluation, and the record of them the trainer logs (`rank/layer_<k>`, `rank/last`,
`rank/<measure>/layer_<k>`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from omegaconf import DictConfig

from attnzoo.analysis.metrics import rank_key, rank_layers, rank_values
from attnzoo.rank import rank_profile
from attnzoo.tasks import Batch, Task


def probe_batch(task: Task, cfg: DictConfig, device: torch.device) -> Batch:
    """The fixed validation batch the rank profile is measured on."""
    gen = torch.Generator().manual_seed(int(cfg.train.seed) + 3)
    return task.batch("val", int(cfg.train.probe_batch_size), gen).to(device)


def rank_record(
    model: torch.nn.Module, probe: Batch, measures: Sequence[str] = ("relative_residual",)
) -> dict[str, float]:
    """The collapse measures on the fixed probe batch: `rank/layer_<i>` (the relative residual of
    every hidden state; 0: the embedding, i: the output of block i) and `rank/last`, always, and
    `rank/<measure>/layer_<i>` for each of `measures` (names of attnzoo.rank.MEASURES), n/a
    (NaN) entries left out. Attention measures hook the mixers, so a compiled model is probed
    through the module it wraps."""
    model = getattr(model, "_orig_mod", model)
    profile = rank_profile(model, probe.inputs, probe.key_padding_mask, measures=measures)
    out = {rank_key(i): float(r) for i, r in enumerate(profile.mean)}
    out["rank/last"] = float(profile.mean[-1])
    out.update(profile.log_dict())
    if "relative_residual" not in measures:
        out = {k: v for k, v in out.items() if not k.startswith("rank/relative_residual/")}
    return out


def by_depth(record: dict[str, Any], measures: Sequence[str]) -> dict[str, list[float]]:
    """{measure: its value at every depth} from a `rank_record` (NaN where n/a): the relative
    residual always, then `measures`."""
    depth = len(rank_layers(record))
    out = {"relative_residual": rank_values(record, depth=depth) or []}
    for name in measures:
        if name != "relative_residual":
            out[name] = rank_values(record, name, depth) or []
    return out
