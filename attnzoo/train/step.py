"""One training step, the code both `python -m attnzoo.train` and scripts/bench_train.py run:
the optimiser (AdamW, weight decay on matrices), the LR schedule (linear warmup, cosine decay),
and `TrainStep` (forward, loss, backward, clipping, update), whose hot path never waits for the
device on CUDA.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
from torch import nn

from attnzoo import distributed
from attnzoo.config import TrainConfig, enum_value
from attnzoo.tasks import Batch, Task


def lr_factor(
    step: int,
    warmup: int,
    total: int,
    min_ratio: float,
    decay_from: tuple[int, float] | None = None,
) -> float:
    """Linear warmup over `warmup` steps, then cosine from 1 down to `min_ratio` at `total`. A run
    extended at step `s` with the factor `f` there (`decay_from=(s, f)`, `train.extend`) goes on
    from `f` along a cosine down to `min_ratio` at its new `total`: no jump, and a run that had
    reached its floor trains on at it."""
    if decay_from is not None and step >= decay_from[0]:
        start, factor = decay_from
        progress = min(1.0, (step - start) / max(1, total - start))
        return min_ratio + (factor - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    if step < warmup:
        return (step + 1) / (warmup + 1)
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA; full precision on CPU."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def checks_on_device(device: torch.device) -> bool:
    """Whether non-finite steps are detected on the device and read by the host only at log,
    evaluation and checkpoint steps (CUDA: no per-step synchronisation), rather than after every
    step (CPU, where reading a number costs nothing)."""
    return device.type == "cuda"


def build_optimizer(model: nn.Module, train: TrainConfig, fused: bool) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only; `fused` (CUDA) gives it the `found_inf` input
    that lets a non-finite step be skipped on the device."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": float(train.weight_decay)},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=float(train.lr),
        betas=(float(train.beta1), float(train.beta2)),
        fused=True if fused else None,
    )


def train_generator(seed: int) -> torch.Generator:
    """The generator training batches are drawn from (one stream per data-parallel rank)."""
    return torch.Generator().manual_seed(distributed.stream_seed(seed))


def next_batch(
    task: Task, batch_size: int, generator: torch.Generator, device: torch.device
) -> Batch:
    """A training batch on `device`; on CUDA copied from pinned memory, asynchronously."""
    batch = task.batch("train", batch_size, generator)
    if device.type == "cuda":
        batch = batch.pin_memory()
    return batch.to(device)


class StepStats:
    """What the host reports about the steps since the last log line, kept on the device so that
    a step never waits for the host: the summed loss and count of the applied steps, the last
    gradient norm, and the non-finite steps (how many, the first one's step, loss and gradient
    norm). `read()` is the one synchronisation, at log steps."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.halted = torch.zeros((), dtype=torch.bool, device=device)  # stop: nothing more applies
        self.reset_interval()
        self.reset_nonfinite()

    def reset_interval(self) -> None:
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.applied = torch.zeros((), dtype=torch.int64, device=self.device)
        self.grad_norm = torch.full((), math.nan, dtype=torch.float64, device=self.device)

    def reset_nonfinite(self) -> None:
        self.bad = torch.zeros((), dtype=torch.int64, device=self.device)
        self.first_bad = torch.full((), -1, dtype=torch.int64, device=self.device)
        self.first_loss = torch.zeros((), dtype=torch.float64, device=self.device)
        self.first_grad = torch.zeros((), dtype=torch.float64, device=self.device)

    def add(
        self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor, finite: torch.Tensor
    ) -> torch.Tensor:
        """Record step `step` (1-based) and return whether its update may be applied (a 0-d bool
        tensor): finite, and in stop mode no non-finite step before it."""
        loss64, norm64 = loss.detach().double(), grad_norm.detach().double()
        applied = finite & ~self.halted
        self.loss_sum += torch.where(applied, loss64, 0.0)
        self.applied += applied
        self.grad_norm = torch.where(applied, norm64, math.nan)
        first = ~finite & (self.first_bad < 0)
        self.first_bad = torch.where(first, step, self.first_bad)
        self.first_loss = torch.where(first, loss64, self.first_loss)
        self.first_grad = torch.where(first, norm64, self.first_grad)
        self.bad += ~finite
        return applied

    def read(self) -> dict[str, float]:
        keys = ("loss_sum", "applied", "grad_norm", "bad", "first_bad", "first_loss", "first_grad")
        values = torch.stack([getattr(self, k).double() for k in keys]).tolist()
        return dict(zip(keys, values, strict=True))


class TrainStep:
    """Forward, loss, backward, clipping, AdamW and the schedule for one batch, for any model that
    maps `(inputs, key_padding_mask)` to logits. `train` is the `train.*` config: lr, betas,
    weight decay, warmup, decay floor, clipping, `compile` and `on_nonfinite`.

    A non-finite loss or gradient norm never reaches the weights: the update is skipped (on CUDA
    by the fused AdamW's `found_inf`, on the device), and with `on_nonfinite=stop` so is every
    later one until the host reads `stats` and stops the run."""

    def __init__(
        self, model: nn.Module, task: Task, train: TrainConfig, device: torch.device
    ) -> None:
        self.model, self.task, self.device = model, task, device
        self.on_device = checks_on_device(device)
        self.optimizer = build_optimizer(model, train, fused=self.on_device)
        warmup, floor = int(train.warmup_steps), float(train.min_lr_ratio)
        self.warmup = warmup
        self.total_steps = int(train.max_steps)  # the schedule's length; a budget may set it
        self.decay_from: tuple[int, float] | None = None  # where an extended run's decay starts
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: lr_factor(s, warmup, self.total_steps, floor, self.decay_from),
        )
        compiled = torch.compile(model) if train.compile else model
        self.forward = distributed.wrap(compiled, device)  # DDP under torchrun
        self.clip = float(train.grad_clip) if train.grad_clip > 0 else math.inf
        self.halt_on_nonfinite = enum_value(train.on_nonfinite) == "stop"
        self.stats = StepStats(device)

    def __call__(self, batch: Batch, step: int) -> tuple[torch.Tensor, bool | None]:
        """Train on `batch` as step `step` (1-based). Returns the loss (on the device, unread)
        and, on CPU, whether the update was applied; None on CUDA, where nothing here waits."""
        with autocast(self.device):
            logits = self.forward(batch.inputs, batch.key_padding_mask)
        loss = self.task.loss(logits, batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        finite = distributed.all_finite(torch.isfinite(loss) & torch.isfinite(grad_norm))
        applied = self.stats.add(step, loss, grad_norm, finite)
        ok: bool | None = None
        if self.on_device:
            self.optimizer.found_inf = (~applied).float()  # type: ignore[attr-defined]
            self.optimizer.step()
        else:
            ok = bool(applied)
            if ok:
                self.optimizer.step()
        if self.halt_on_nonfinite:
            self.stats.halted |= ~finite
        self.scheduler.step()
        return loss.detach(), ok

    def extend(self, step: int) -> None:
        """The schedule of a run extended at `step` (`train.extend`): from the learning rate it
        has there down to the floor at the new `total_steps` (`lr_factor`). During warmup the
        schedule needs no change: warmup does not depend on the step count."""
        if step >= self.warmup:
            factor = self.scheduler.get_last_lr()[0] / self.scheduler.base_lrs[0]
            self.decay_from = (step, factor)

    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "decay_from": self.decay_from,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        decay_from = state.get("decay_from")
        self.decay_from = (int(decay_from[0]), float(decay_from[1])) if decay_from else None
