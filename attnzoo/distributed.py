"""Data-parallel training under `torchrun`: the process group, and who writes what.

`torchrun --nproc_per_node=N -m attnzoo.train ...` starts N copies of the trainer with RANK,
LOCAL_RANK and WORLD_SIZE set. Each copy draws its own training batches (a per-rank stream), DDP
averages the gradients, and only rank 0 writes: metrics.jsonl, checkpoints, figures,
summary.json and the W&B run. Gloo on CPU, NCCL on GPUs (one GPU per process, by LOCAL_RANK).
Without torchrun (WORLD_SIZE unset or 1) every function here is a no-op.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", 0))


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", 1))


def is_main() -> bool:
    """True on the one process that logs and writes files."""
    return rank() == 0


def setup(device: torch.device) -> torch.device:
    """Join the process group torchrun set up the environment for; return this rank's device."""
    if world_size() <= 1:
        return device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return device


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """The model to train with: DDP around it under torchrun, the model itself otherwise."""
    if not dist.is_initialized():
        return model
    ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def broadcast(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (e.g. the run folder, so all ranks agree on it)."""
    if not dist.is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_finite(finite: torch.Tensor) -> torch.Tensor:
    """`finite` (a 0-d bool tensor) and-ed over every rank, so that ranks skip the same steps;
    an all-reduce on the device, with no host synchronisation."""
    if not dist.is_initialized():
        return finite
    flag = finite.to(torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return flag.bool()


def stream_seed(seed: int, step: int = 0) -> int:
    """The seed of this rank's training-batch stream: rank 0 keeps `seed` (a one-process run is
    unchanged); other ranks get their own, re-drawn from the step when a run resumes, since a
    checkpoint holds rank 0's generator only."""
    r = rank()
    return seed if r == 0 else seed + 1_000_003 * r + step


class Discard:
    """Stands in for the metrics file on ranks other than 0."""

    def write(self, record: Any) -> None:
        pass

    def merge(self, record: Any) -> None:
        pass

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass
