"""A run's `metrics.jsonl` and the names of its rank keys: the one reader of the file and the one
encoder and decoder of `rank/layer_<k>` and `rank/<measure>/layer_<k>`, shared by the trainer
(its rank probe writes the keys, its report reads the file), attnzoo.tracking and the analysis.

The keys: `rank/layer_<k>` is the relative residual of hidden state k (0: the embedding, k: the
output of block k), logged at every evaluation whatever the measures chosen; `rank/<measure>/
layer_<k>` is measure `<measure>` of attnzoo.rank.MEASURES at the same state, logged when the
run chose it and left out where it is n/a.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

RANK_PREFIX = "rank"
_RANK_KEY = re.compile(rf"^{RANK_PREFIX}/(?:(\w+)/)?layer_(\d+)$")


def read_records(path: Path | str) -> tuple[list[dict[str, Any]], int]:
    """Every record of a `metrics.jsonl` and how many of its lines could not be read (a line torn
    by a kill, or one that is not a JSON object): those are skipped, never an exception."""
    records, bad = [], 0
    for line in Path(path).read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            bad += 1
    return records, bad


def read_metrics(path: Path | str) -> list[dict[str, Any]]:
    """Every readable record of a `metrics.jsonl`, in order."""
    return read_records(path)[0]


def last_values(path: Path | str) -> dict[str, Any]:
    """The latest value of every numeric key in `metrics.jsonl` but `step` (what summary.json
    calls final); empty when there is no file."""
    final: dict[str, Any] = {}
    if not Path(path).exists():
        return final
    for record in read_metrics(path):
        final |= {k: v for k, v in record.items() if k != "step" and isinstance(v, (int, float))}
    return final


def last_record(path: Path | str) -> dict[str, Any]:
    """The last readable record of a `metrics.jsonl` ({} when there is none)."""
    records = read_metrics(path) if Path(path).exists() else []
    return records[-1] if records else {}


def rank_key(layer: int, measure: str | None = None, prefix: str = RANK_PREFIX) -> str:
    """`rank/layer_<layer>` (measure None: the relative residual the probe always logs) or
    `rank/<measure>/layer_<layer>`."""
    return f"{prefix}/layer_{layer}" if measure is None else f"{prefix}/{measure}/layer_{layer}"


def parse_rank_key(key: str) -> tuple[str | None, int] | None:
    """(measure, layer) of a rank key (measure None for `rank/layer_<k>`); None for any other key."""
    m = _RANK_KEY.match(key)
    return (m[1], int(m[2])) if m else None


def rank_layers(keys: Iterable[str], measure: str | None = None) -> list[int]:
    """The layers at which `keys` hold `measure` (None: `rank/layer_<k>`), in order."""
    found = {p[1] for k in keys if (p := parse_rank_key(k)) is not None and p[0] == measure}
    return sorted(found)


def _number(value: Any) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else math.nan


def rank_values(
    record: Mapping[str, Any], measure: str | None = None, depth: int | None = None
) -> list[float] | None:
    """`measure` (None: `rank/layer_<k>`) at layers 0..depth - 1 of one record, NaN where a layer
    is missing or n/a; without `depth`, up to the last layer the record holds, and None when it
    holds none."""
    if depth is None:
        layers = rank_layers(record, measure)
        if not layers:
            return None
        depth = layers[-1] + 1
    return [_number(record.get(rank_key(k, measure))) for k in range(depth)]
