"""Tasks: where batches come from, what the model's input and head look like, and how a run is
scored. Each task is a class registered by name; its constructor's keyword arguments are its
options (the trainer's `task.*` keys). A new task is one module here that uses `@register_task`
and one YAML under conf/task/.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch

TASKS: dict[str, type[Task]] = {}


@dataclass
class Batch:
    inputs: torch.Tensor  # (B, N) token ids, or (B, N, F) feature vectors
    targets: torch.Tensor  # (B, N) per-token labels or (B,) per-sequence labels
    key_padding_mask: torch.Tensor | None = None  # (B, N) bool, True marks padding

    def to(self, device: torch.device | str) -> Batch:
        mask = self.key_padding_mask
        return Batch(
            self.inputs.to(device, non_blocking=True),
            self.targets.to(device, non_blocking=True),
            None if mask is None else mask.to(device, non_blocking=True),
        )


class Task(ABC):
    """What the trainer needs to know about a task.

    Subclasses set, in their constructor, the attributes below the model is built from.
    """

    vocab_size: int | None = None  # token-id inputs ...
    in_features: int | None = None  # ... or feature-vector inputs
    out_features: int  # logits per position (lm/token) or per sequence (classify)
    max_len: int  # longest input the model will see
    head: str  # "lm", "classify" or "token"
    causal: bool = False
    metric: str = "accuracy"  # name of the task's main validation metric (higher is better)

    @abstractmethod
    def batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        """A batch from split "train" or "val", drawn with `generator` (deterministic)."""

    def loss(self, logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean cross-entropy over labelled positions; targets of -100 are ignored."""
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(),
            batch.targets.reshape(-1),
            ignore_index=-100,
        )

    def metrics(self, logits: torch.Tensor, batch: Batch) -> dict[str, float]:
        """The task's metrics on one batch; by default accuracy over labelled positions."""
        labelled = batch.targets != -100
        correct = (logits.argmax(-1) == batch.targets) & labelled
        return {"accuracy": (correct.sum() / labelled.sum().clamp_min(1)).item()}


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    def add(cls: type[Task]) -> type[Task]:
        if name in TASKS:
            raise ValueError(f"task {name!r} is registered twice")
        TASKS[name] = cls
        cls.task_name = name
        return cls

    return add


def task_options(name: str) -> dict[str, object]:
    """The options of task `name` with their defaults."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; registered tasks: {sorted(TASKS)}")
    params = inspect.signature(TASKS[name].__init__).parameters
    return {k: p.default for k, p in params.items() if k != "self"}


def build_task(name: str, **options: object) -> Task:
    allowed = task_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"task {name!r} has no option(s) {unknown}; its options are {sorted(allowed)}"
        )
    return TASKS[name](**options)
