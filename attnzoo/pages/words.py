"""How the generated regions write numbers and sentences: one rounding (the tables' values
rounded once, with the true minus sign), ranges, lists and Markdown paragraphs wrapped as the
hand-written text around them is."""

from __future__ import annotations

import csv
import textwrap
from pathlib import Path

from attnzoo.analysis.tables import fmt as table_fmt

WIDTH = 100  # the pages' line length


def fmt(value: float, spec: str) -> str:
    """`value` rounded once by `spec` (".3f", "+.2f", ...), its minus sign written "−"."""
    return table_fmt(value, spec, minus="−")


def span(values: list[float], spec: str) -> str:
    """ "low to high" through `fmt`, or one number when both ends round alike ("to", not a dash,
    which would read as a minus sign before a negative end)."""
    low, high = fmt(min(values), spec), fmt(max(values), spec)
    return low if low == high else f"{low} to {high}"


def listed(words: list[str]) -> str:
    """ "a, b and c"."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def wrap(text: str, bullet: bool = False) -> str:
    """`text` as a Markdown paragraph of WIDTH-character lines, or as a list item (`bullet`)
    whose continuation lines are indented by two spaces."""
    return "\n".join(
        textwrap.wrap(
            text,
            WIDTH,
            initial_indent="- " if bullet else "",
            subsequent_indent="  " if bullet else "",
            break_on_hyphens=False,
            break_long_words=False,
        )
    )


def read_rows(path: Path) -> list[dict[str, str]]:
    """A committed csv table's rows."""
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def seed_list(seeds: list[int]) -> str:
    """ "0-4" for a run of three or more consecutive seeds, else "100 and 101"."""
    run = seeds == list(range(seeds[0], seeds[0] + len(seeds)))
    return f"{seeds[0]}-{seeds[-1]}" if run and len(seeds) > 2 else listed(map(str, seeds))
