"""Reading what an offline W&B run wrote, for tests: no network, no W&B server."""

from __future__ import annotations

import struct
import time
from pathlib import Path


def run_record(run_dir: Path):
    """The RunRecord (group, job type, tags, config) of the one offline W&B run under
    `run_dir/wandb`. Waits up to 10 s, since W&B's writer process may still be flushing."""
    (run_file,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    for _ in range(100):
        record = _first_run_record(run_file.read_bytes())
        if record is not None:
            return record
        time.sleep(0.1)
    raise AssertionError(f"no run record in {run_file}")


def _first_run_record(data: bytes):
    """The `.wandb` file is a LevelDB-style log of protobuf records: a 7-byte file header, 32 KiB
    blocks, and a 7-byte header per chunk (crc32, length, type)."""
    from wandb.proto import wandb_internal_pb2 as pb

    pos, chunk = 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = pb.Record()
            record.ParseFromString(chunk)
            if record.WhichOneof("record_type") == "run":
                return record.run
            chunk = b""
    return None
