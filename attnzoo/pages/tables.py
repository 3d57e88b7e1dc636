"""The committed tables under scripts/results/, as the pages read them: each csv read once per
`Tables`, its rows filtered by exact column values."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from attnzoo.pages.words import read_rows

RESULTS = Path("scripts/results")


class Tables:
    """The csv tables under `root`/scripts/results, each read once, when first asked for."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._read: dict[str, list[dict[str, str]]] = {}

    def rows(self, name: str, **where: str) -> list[dict[str, str]]:
        """The rows of `name` (a path under scripts/results) whose columns equal `where`."""
        if name not in self._read:
            self._read[name] = read_rows(self.root / RESULTS / name)
        return [dict(r) for r in self._read[name] if all(r[k] == v for k, v in where.items())]

    def one(self, name: str, **where: str) -> dict[str, str]:
        """The one row of `name` whose columns equal `where`; LookupError when not one."""
        rows = self.rows(name, **where)
        if len(rows) != 1:
            raise LookupError(f"{name}: {len(rows)} rows where {where}, expected one")
        return rows[0]


def num(row: dict[str, str], key: str) -> float:
    """A table cell as a number."""
    return float(row[key])


@functools.lru_cache(maxsize=8)
def composed(overrides: tuple[str, ...]) -> Any:
    """The trainer's config that a run's recorded overrides compose to today (cached: a page
    reads one recipe many times)."""
    from attnzoo.train.cli import compose

    return compose(list(overrides))
