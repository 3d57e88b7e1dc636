"""Which runs are replicates of one configuration: the one definition the trainer (its W&B group)
and attnzoo.analysis (its groups of a sweep) share.

Two runs are replicates when their resolved configs are equal after dropping the replicate axis
(`train.seed`) and the keys that do not change what is trained or measured (`NON_SEMANTIC`: where
and how a run logs, checkpoints, resumes and threads), and any string value that holds the run's
own folder (an output path, not part of the configuration). `config_hash` fingerprints what is
left; `group_name` makes it readable for W&B, e.g. `sort-scaled_dot-residual_none-3f9a0c1e`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPLICATE_KEY = "train.seed"
# Resolved-config keys that do not make a different configuration: the replicate axis, where and
# how a run logs, checkpoints, resumes and threads. A key matches itself and everything under it.
NON_SEMANTIC = (
    REPLICATE_KEY,
    "logger",
    "data_dir",
    "hydra",
    "train.progress",
    "train.resume",
    "train.threads",
    "train.ckpt_every",
    "train.device",
    "_overrides",
)
# The block's ablation switches, named in a group's name and tags when they differ from the
# model's defaults (a key the model does not have is left out).
ABLATION_KEYS = ("residual", "mlp", "norm", "norm_position")
HASH_CHARS = 8


def flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"dim": 64}} -> {"model.dim": 64}; lists become tuples (hashable)."""
    flat: dict[str, Any] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat |= flatten(value, f"{name}.")
        else:
            flat[name] = tuple(value) if isinstance(value, list) else value
    return flat


def is_semantic(key: str) -> bool:
    """Whether a flat config key is part of the configuration (not NON_SEMANTIC)."""
    return not any(key == k or key.startswith(f"{k}.") for k in NON_SEMANTIC)


def run_folders(run_dir: Path) -> list[str]:
    """The run's folder and its parent (the sweep's), as given and resolved: a config string that
    holds one is an output path, not part of the configuration."""
    given = [str(p) for p in (run_dir, run_dir.parent) if os.sep in str(p)]  # not a bare "sw"
    return given + [str(run_dir.resolve()), str(run_dir.resolve().parent)]


def semantic_config(cfg: Mapping[str, Any], run_paths: Iterable[str] = ()) -> dict[str, Any]:
    """The flat config that defines the configuration: without NON_SEMANTIC keys and without
    string values that contain one of `run_paths` (the run's folder and its sweep's)."""
    paths = [p for p in run_paths if p]
    return {
        k: v
        for k, v in flatten(cfg).items()
        if is_semantic(k) and not (isinstance(v, str) and any(p in v for p in paths))
    }


def config_key(flat: Mapping[str, Any]) -> str:
    """A canonical string of a semantic flat config: equal for replicates, else different."""
    return json.dumps(sorted(flat.items()), default=str)


def config_hash(cfg: Mapping[str, Any], run_paths: Iterable[str] = ()) -> str:
    """A short fingerprint of the configuration (HASH_CHARS hex digits of its SHA-1)."""
    key = config_key(semantic_config(cfg, run_paths))
    return hashlib.sha1(key.encode()).hexdigest()[:HASH_CHARS]


def _choice(cfg: Mapping[str, Any], group: str) -> str | None:
    """A group's choice: its node's `name`; the mixer's as the trainer calls it
    (attnzoo.config.mixer_label: a mixer named by its class alone by the class name)."""
    node = cfg.get(group)
    if isinstance(node, Mapping) and group == "mixer":
        from attnzoo.config import mixer_label

        return mixer_label(node)
    if isinstance(node, Mapping):
        return node.get("name")
    return None if node is None else str(node)


def _model_defaults() -> dict[str, Any]:
    from attnzoo.model import ModelConfig

    return {f.name: f.default for f in dataclasses.fields(ModelConfig)}


def _word(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def ablation(cfg: Mapping[str, Any]) -> dict[str, str]:
    """The block switches (ABLATION_KEYS) whose value differs from the model's default, as words:
    {"residual": "none", "norm": "rmsnorm"}."""
    model = cfg.get("model") if isinstance(cfg.get("model"), Mapping) else {}
    defaults = _model_defaults()
    return {
        k: _word(model[k])
        for k in ABLATION_KEYS
        if k in model and (k not in defaults or model[k] != defaults[k])
    }


GROUP_NAME_CHARS = 128  # W&B's limit on a group's name


def group_name(
    cfg: Mapping[str, Any], run_paths: Iterable[str] = (), overrides: Iterable[str] = ()
) -> str:
    """`<task>-<mixer>[-<switch>_<value>...][-<key>_<value>...]-<hash>`: readable, and unique
    per configuration (the hash covers every semantic key, also those the name does not spell
    out). The block switches off their defaults come first, then the run's other semantic
    `overrides` by their last key (`lr_0.002`, `window_5`), so that the groups of a sweep over a
    learning rate differ by more than their hash; a name longer than W&B allows drops them from
    the end."""
    parts = [_choice(cfg, "task") or "task", _choice(cfg, "mixer") or "mixer"]
    parts += [f"{k}_{v}" for k, v in ablation(cfg).items()]
    spelled = {"task", "mixer", "experiment", *(f"model.{k}" for k in ABLATION_KEYS)}
    for override in overrides:
        key, _, value = str(override).lstrip("+~").partition("=")
        if value and key not in spelled and is_semantic(key) and not key.startswith("hydra"):
            parts.append(f"{key.rsplit('.', 1)[-1]}_{value}")
    digest = config_hash(cfg, run_paths)
    while len(parts) > 2 and len("-".join([*parts, digest])) > GROUP_NAME_CHARS:
        parts.pop()
    return "-".join([*parts, digest])


def tags(cfg: Mapping[str, Any]) -> list[str]:
    """W&B tags naming the task, the mixer and the ablation: `task:sort`, `mixer:metric`,
    `residual:none`, ... (`ablation:none` when every switch is at its default)."""
    out = [f"task:{_choice(cfg, 'task')}", f"mixer:{_choice(cfg, 'mixer')}"]
    switches = ablation(cfg)
    out += [f"{k}:{v}" for k, v in switches.items()] or ["ablation:none"]
    return out
