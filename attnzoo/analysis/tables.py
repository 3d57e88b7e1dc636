"""How the project writes numbers: `fmt`, the one rounding function of the tables, the reports
and the claims' sentences (4 significant digits to read, 10 in csv files), a mean with its
interval, csv files and markdown tables."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

CSV_SPEC = ".10g"  # a csv cell: 10 significant digits


def fmt(
    value: Any, spec: str = ".4g", scale: float = 1.0, nan: str = "nan", minus: str = "-"
) -> str:
    """A float `value · scale` rounded once by the format `spec` (".4g" to read, CSV_SPEC in csv
    files, ".3f", "+.1f", ...), `nan` for NaN, its minus sign written `minus` (the pages' "−");
    "" for None, anything else (an int, a word) as it is."""
    if value is None:
        return ""
    if not isinstance(value, float):
        return str(value)
    if math.isnan(value):
        return nan
    return format(value * scale, spec).replace("-", minus)


def ci_text(mean: Any, low: Any, high: Any) -> str:
    """`mean [low, high]`, `mean (1 seed)` without an interval, empty without a mean."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    if isinstance(low, float) and math.isnan(low):
        return f"{mean:.4g} (1 seed)"
    return f"{mean:.4g} [{low:.4g}, {high:.4g}]"


def write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    """`rows` under `columns` (other keys ignored), cells by CSV_SPEC."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: fmt(r.get(k), CSV_SPEC) for k in columns} for r in rows)


def md_table(columns: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """The lines of a markdown table of `rows` under `columns`."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c)).replace("|", "/") for c in columns) + " |")
    return lines
