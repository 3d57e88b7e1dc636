"""Checkpoints that survive a crash at any moment.

A checkpoint is written to a temporary file in the same folder, flushed and fsync'd, and only then
renamed over `last.pt` (the previous `last.pt` first becomes `prev.pt`), so at every instant the
folder holds at least one complete checkpoint. Each file carries a SHA-256 of its payload; loading
checks it, so a truncated or corrupt file is detected (with a message saying which file and why)
and the previous good one is used.

File layout: a `torch.save` payload followed by the trailer `\\nATTNZOO-SHA256 <hex of the
payload's SHA-256>\\n`; zip readers ignore trailing bytes, so `torch.load(path, weights_only=False)`
still opens it, and `read_checkpoint(path)` opens it with the check.
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
from pathlib import Path
from typing import Any

import torch

TRAILER = b"\nATTNZOO-SHA256 "
TRAILER_LEN = len(TRAILER) + 64 + 1
LAST, PREV = "last.pt", "prev.pt"


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be used (truncated, corrupt, or not a checkpoint)."""


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(state: dict[str, Any], folder: Path) -> Path:
    """Write `state` atomically as `folder/last.pt`, keeping the previous one as `prev.pt`."""
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    digest = hashlib.sha256(payload).hexdigest().encode()
    tmp = folder / f".{LAST}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(payload)
        f.write(TRAILER + digest + b"\n")
        f.flush()
        os.fsync(f.fileno())
    last = folder / LAST
    if last.exists():
        # Only a checkpoint that reads back whole may become the fallback.
        try:
            read_checkpoint(last)
            os.replace(last, folder / PREV)
        except CheckpointError:
            last.unlink()
    os.replace(tmp, last)
    _fsync_dir(folder)
    for stale in folder.glob(f".{LAST}.tmp-*"):  # left by a process killed while writing
        stale.unlink(missing_ok=True)
    return last


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The state saved in `path`, after checking its SHA-256 trailer; CheckpointError if the file
    is truncated, corrupt or not an attnzoo checkpoint."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise CheckpointError(f"cannot read checkpoint {path}: {err}") from err
    trailer = data[-TRAILER_LEN:]
    if len(data) <= TRAILER_LEN or not trailer.startswith(TRAILER) or not trailer.endswith(b"\n"):
        raise CheckpointError(
            f"{path} is truncated or not an attnzoo checkpoint ({len(data)} bytes, no "
            "integrity trailer at the end)"
        )
    expected = trailer[len(TRAILER) : -1].decode(errors="replace")
    payload = data[:-TRAILER_LEN]
    actual = hashlib.sha256(payload).hexdigest()
    if actual != expected:
        raise CheckpointError(
            f"{path} is corrupt: the SHA-256 of its {len(payload)} payload bytes is "
            f"{actual[:12]}…, its trailer says {expected[:12]}…"
        )
    try:
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=False)
    except Exception as err:  # a payload that hashes right but does not unpickle
        raise CheckpointError(f"{path} could not be loaded: {err}") from err


def load_checkpoint(folder: Path) -> tuple[dict[str, Any], Path] | None:
    """The newest usable checkpoint in `folder` and its path (`last.pt`, else `prev.pt` with a
    warning naming what was wrong with `last.pt`); None if the folder has no checkpoint at all.
    Raises CheckpointError if checkpoints exist but none is usable."""
    problems = []
    for name in (LAST, PREV):
        path = folder / name
        if not path.exists():
            continue
        try:
            state = read_checkpoint(path)
        except CheckpointError as err:
            problems.append(str(err))
            continue
        if problems:
            warnings.warn(
                f"{problems[0]}; resuming from the previous good checkpoint {path} "
                f"(step {state.get('step')})",
                stacklevel=2,
            )
        return state, path
    if problems:
        raise CheckpointError("no usable checkpoint: " + "; ".join(problems))
    return None
