"""Editing a committed table in a test's copy of it: the tests that show a page or a claim follow
its table change one number and read what follows."""

from __future__ import annotations

import csv
from pathlib import Path


def alter(path: Path, where: dict[str, str], column: str, value: str, every: bool = False) -> None:
    """Set `column` to `value` in the one row of the csv at `path` matching `where` (in every
    row matching it, at least one, with `every`)."""
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    hits = [r for r in rows if all(r[k] == v for k, v in where.items())]
    assert len(hits) >= 1 if every else len(hits) == 1, where
    for hit in hits:
        hit[column] = value
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
