"""How the analysis writes numbers: table cells (4 significant digits to read, 10 in csv files),
a mean with its interval, csv files and markdown tables."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

CSV_DIGITS = 10


def fmt(value: Any, digits: int = 4) -> str:
    """A table cell: 4 significant digits for reading (markdown), more for csv files."""
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.{digits}g}"
    return str(value)


def ci_text(mean: Any, low: Any, high: Any) -> str:
    """`mean [low, high]`, `mean (1 seed)` without an interval, empty without a mean."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    if isinstance(low, float) and math.isnan(low):
        return f"{mean:.4g} (1 seed)"
    return f"{mean:.4g} [{low:.4g}, {high:.4g}]"


def write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    """`rows` under `columns` (other keys ignored), cells at CSV_DIGITS digits."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: fmt(r.get(k), CSV_DIGITS) for k in columns} for r in rows)


def md_table(columns: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """The lines of a markdown table of `rows` under `columns`."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c)).replace("|", "/") for c in columns) + " |")
    return lines
