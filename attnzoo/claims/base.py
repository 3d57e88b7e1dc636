"""The headline claims of README.md's Results and of docs/results.md, as data.

A claim is a sentence of a page, the committed tables under scripts/results/ it rests on, and a
predicate over those tables. `check` evaluates the predicate and looks the sentence up in its
page; the numbers a sentence quotes are fields of its text, filled from the tables through one
rounding function, `fmt`, so a number in the prose is the table's value rounded once, and a
table that changes changes the sentence a page must carry. The claims of each study are in
its module (`recall`, `sinks`); `CLAIMS` is all of
them. The tables and pages are read from a checkout of the repository.

    python scripts/claims.py            # every claim: holds / fails, and why

tests/test_claims.py runs every claim against the committed tables, and shows a claim failing
on a table altered by one number.
"""

from __future__ import annotations

import csv
import functools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from attnzoo.analysis import tables

ROOT = Path(__file__).resolve().parents[2]  # the checkout
RESULTS = Path("scripts/results")
README = "README.md"
RESULTS_PAGE = "docs/results.md"


# ---- the one rounding function ------------------------------------------------------------------


# `value · scale` rounded once, from the table's full precision, by the format `spec` (".3f",
# "+.1f", ".2g", ...): attnzoo.analysis.tables.fmt, with the true minus sign the pages write.
fmt = functools.partial(tables.fmt, minus="−")


def span(values: Iterable[float], spec: str, scale: float = 1.0) -> str:
    """'low–high' of `values` through `fmt`, or one number when both ends round alike."""
    values = list(values)
    low, high = fmt(min(values), spec, scale), fmt(max(values), spec, scale)
    return low if low == high else f"{low}–{high}"


def listed(values: Iterable[float], spec: str, scale: float = 1.0) -> str:
    """'a, b, c' through `fmt`."""
    return ", ".join(fmt(v, spec, scale) for v in values)


# ---- tables -------------------------------------------------------------------------------------


class Tables:
    """The committed tables under `root`/scripts/results, read only where a claim declares them."""

    def __init__(self, root: Path, declared: Sequence[str]) -> None:
        self.root, self.declared = Path(root), tuple(declared)
        self._read: dict[str, list[dict[str, str]]] = {}  # each csv read once per instance

    def path(self, name: str) -> Path:
        if name not in self.declared:
            raise KeyError(f"{name} is read but not among the claim's tables {self.declared}")
        return self.root / RESULTS / name

    def rows(self, name: str, **where: str) -> list[dict[str, str]]:
        if name not in self._read:
            with self.path(name).open(encoding="utf-8", newline="") as f:
                self._read[name] = list(csv.DictReader(f))
        return [dict(r) for r in self._read[name] if all(r[k] == v for k, v in where.items())]

    def one(self, name: str, **where: str) -> dict[str, str]:
        rows = self.rows(name, **where)
        if len(rows) != 1:
            raise LookupError(f"{name}: {len(rows)} rows where {where}, expected one")
        return rows[0]

    def json(self, name: str) -> dict:
        return json.loads(self.path(name).read_text(encoding="utf-8"))

    def markdown(self, name: str, header: str, section: str = "") -> list[dict[str, str]]:
        """The rows of every markdown table in `name` whose header row starts with `header`,
        below the heading line `section` (and above the next heading of its level) if given."""
        rows, columns, inside = [], None, not section
        level = section.split(" ")[0] + " " if section else ""
        for line in self.path(name).read_text(encoding="utf-8").splitlines():
            if section and line.startswith(level):
                inside = line == section
            if not inside or not line.startswith("|"):
                columns = None
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if columns is None:
                columns = cells if line.startswith(header) else []
            elif columns and not set("".join(cells)) <= set("-: "):
                rows.append(dict(zip(columns, cells, strict=True)))
        return rows


def num(row: dict[str, str], key: str) -> float:
    return float(row[key])


# ---- a claim ------------------------------------------------------------------------------------


Problems = Iterable[str]


@dataclass(frozen=True)
class Claim:
    """`text` is the sentence (or its key part) as `page` writes it, with `{field}`s for the
    numbers `fields` renders from the tables; `predicate` yields what does not hold (nothing
    when the claim holds). Both read only `tables` (paths under scripts/results)."""

    id: str
    page: str
    text: str
    tables: tuple[str, ...]
    predicate: Callable[[Tables], Problems]
    fields: Callable[[Tables], dict[str, str]] = field(default=lambda t: {})


def normalise(text: str) -> str:
    """A page as a reader sees it: no emphasis markers, line breaks and runs of spaces as one."""
    return re.sub(r"\s+", " ", text.replace("**", "")).strip()


def render(claim: Claim, root: Path = ROOT) -> str:
    return normalise(claim.text.format(**claim.fields(Tables(root, claim.tables))))


def check(claim: Claim, root: Path = ROOT) -> list[str]:
    """What is wrong with `claim` at `root`: its predicate's counterexamples, and its sentence
    (numbers from the tables) missing from its page. Empty when the claim holds."""
    missing = [t for t in claim.tables if not (root / RESULTS / t).is_file()]
    if missing:
        return [f"{claim.id}: table {t} is not committed" for t in missing]
    tables = Tables(root, claim.tables)
    problems = [f"{claim.id}: {p}" for p in claim.predicate(tables)]
    sentence = render(claim, root)
    if sentence not in normalise((root / claim.page).read_text(encoding="utf-8")):
        problems.append(f"{claim.id}: {claim.page} does not say, from the tables: {sentence!r}")
    return problems


def expect(ok: bool, what: str) -> Problems:
    return [] if ok else [what]
