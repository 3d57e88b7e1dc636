"""What a tuned study is: its arms, its presets, its cells and the `Spec` that names them, as
attnzoo.engine runs them."""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# How selected.sh calls the summary, from where a study runs.
SUMMARIZE = shlex.quote(
    os.path.relpath(Path(__file__).resolve().parents[2] / "scripts" / "summarize.py")
)
# What a quantity's margin is in: a loss in nats, an accuracy in its fraction.
KIND = {"test_loss": "loss", "test_metric": "accuracy", "val_loss": "loss", "metric": "accuracy"}
# The sampled validation curve of what a learning rate is chosen on (metrics.jsonl key, and the
# column curves.csv names it by).
CURVE = {"val_loss": ("val/loss", "val_loss"), "metric": ("val/accuracy", "val_accuracy")}
# How a report names a fresh-seed measure (the table's columns; a group_row key prefix).
SHOWN = {
    "test_loss": "test loss",
    "test_metric": "test accuracy",
    "val_loss": "val loss",
    "metric": "val accuracy",
}


@dataclass(frozen=True)
class Arm:
    """One configuration a study compares: `mixer` with `options` (trainer overrides), called
    `name` in the report (the mixer's name where it has no options), `about` what it is in
    words (for the report; "" where the name says it)."""

    name: str
    mixer: str
    options: tuple[str, ...] = ()
    about: str = ""


@dataclass(frozen=True)
class Preset:
    """A study's sizes: what every run trains (`overrides`), the default learning-rate grid and
    the seconds a run takes, with where that figure comes from (for --dry-run)."""

    overrides: tuple[str, ...]
    lrs: tuple[float, ...]
    seconds: float
    basis: str


@dataclass(frozen=True)
class Choice:
    """What the learning rate is chosen on: a summary key of the whole validation split
    (`val_loss`, `metric`), whether higher is better, and how the report says it."""

    by: str
    maximize: bool
    text: str


LOSS = Choice("val_loss", False, "whole-split val loss (min)")
ACCURACY = Choice("metric", True, "whole-split val accuracy (max)")


@dataclass(frozen=True)
class Cell:
    """Runs that share their overrides: its folder under --out (`name`, "" for --out itself),
    the columns its rows get (`where`, which also title its report section), its arms, its
    overrides (after the preset's), what its learning rate is chosen on, what its arms are
    compared on (held-out test), its seconds per run for the price (None: the preset's) and how
    they were had, and a sentence for its section (what was left out). A cell with `skipped`
    does not run: it says why."""

    name: str
    where: dict[str, Any]
    arms: tuple[Arm, ...]
    overrides: tuple[str, ...] = ()
    choice: Choice = LOSS
    measures: tuple[str, ...] = ("test_loss",)
    seconds: tuple[float, str] | None = None
    note: str = ""
    skipped: str = ""

    @property
    def title(self) -> str:
        return title(self.where)


def title(where: dict[str, Any]) -> str:
    """A cell's name in the report: its one column's value (a task: `imdb`), or its columns
    (`Width 64, depth 2`); "" for a study of one cell."""
    if len(where) == 1:
        return str(next(iter(where.values())))
    return ", ".join(f"{k} {v}" for k, v in where.items()).capitalize()


@dataclass
class Spec:
    """A tuned study. `arms`: every arm it may run, by name (`default_arms` run when not told;
    `arms_flag`, the option that picks them: --mixers or --arms); `reference`: the arm every
    other is compared with, fixed up front; `cells(args)`: its cells for the parsed options;
    `margins`: the default equivalence margin per kind (loss, accuracy) and why; `shown`: the
    fresh-seed table's test measures; `success`: whether --success may replace the means by
    success rates; `needs_reference`: whether every run must include the reference (False where
    a run of some arms is joined to the study's runs later, as the mixer study's reanalysis
    does). The hooks add what is the study's own: `options(parser)` its options,
    `check(args)` why they cannot run (None when they can), `header(args)` a sentence for the
    report's head, `cell_lines(cell, args)` lines after a cell's verdicts, `report(cells, args)`
    lines after the cells (its own tables, written to --out), `figure(cells, args)`."""

    name: str
    title: str
    doc: str
    presets: dict[str, Preset]
    arms: dict[str, Arm]
    default_arms: list[str]
    reference: str
    cells: Callable[[argparse.Namespace], list[Cell]]
    margins: dict[str, float]
    margin_reason: str
    smoke: tuple[str, ...]
    smoke_job_s: tuple[float, str]
    shown: tuple[str, ...] = ("test_loss",)
    arms_flag: str = "arms"
    seeds: tuple[int, ...] = (0, 1, 2)
    tune_seeds: tuple[int, ...] = (100, 101)
    max_extensions: int = 1
    smoke_lrs: tuple[float, ...] | None = None
    success: bool = False
    needs_reference: bool = True  # False: a run of some arms, to be joined to its study later
    options: Callable[[argparse.ArgumentParser], None] | None = None
    check: Callable[[argparse.Namespace], str | None] | None = None
    header: Callable[[argparse.Namespace], str] | None = None
    cell_lines: Callable[[dict[str, Any], argparse.Namespace], list[str]] | None = None
    report: Callable[[list[dict[str, Any]], argparse.Namespace], list[str]] | None = None
    figure: Callable[[list[dict[str, Any]], argparse.Namespace], None] | None = None
    files: str = ""  # the spec's own outputs, named in the report's head
    corpora: bool = True  # whether its runs read corpora (--smoke writes toy ones)


def arm_text(arm: Arm) -> str:
    """`mixer=scaled_dot mixer.sink=learned: a learned sink logit per head`."""
    over = " ".join([f"mixer={arm.mixer}", *arm.options])
    return f"{over}: {arm.about}" if arm.about else over


def arms_text(spec: Spec, names: list[str]) -> str:
    if all(spec.arms[a].mixer == a and not spec.arms[a].options for a in names):
        return ", ".join(names)  # arms that are mixers
    return "; ".join(f"{a} ({arm_text(spec.arms[a])})" for a in names)
