"""The path-length study's text on the results pages (scripts/path_length.py's committed
tables, path_length.csv and path_length.json): the results page's measured paragraph and table,
and the README's headline. Which paths score lowest is read from the table; with one seed and no
interval, no difference between lengths is claimed."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from attnzoo.pages.words import fmt, wrap

FOLDER = Path("scripts/results/path_length")
TASKS = {"sort": "sorting", "convex_hull": "convex hull"}


class Study:
    """The committed tables of the path-length study under `root`."""

    def __init__(self, root: Path) -> None:
        folder = root / FOLDER
        self.header = json.loads((folder / "path_length.json").read_text(encoding="utf-8"))
        with (folder / "path_length.csv").open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        self.tasks = list(dict.fromkeys(r["task"] for r in rows))
        self.full = {r["task"]: float(r["metric"]) for r in rows if r["k"] == "full"}
        self.by_k = {
            task: {int(r["k"]): r for r in rows if r["task"] == task and r["k"] != "full"}
            for task in self.tasks
        }

    def accuracy(self, task: str, k: int) -> float:
        return float(self.by_k[task][k]["metric"])

    def worst(self, task: str) -> int:
        return min(self.by_k[task], key=lambda k: self.accuracy(task, k))

    def longest(self, task: str) -> int:
        return max(self.by_k[task])

    def shape(self) -> str:
        h = self.header
        return (
            f"depth {h['depth']}, {h['heads']} heads, width {h['dim']}, {h['steps']:,} steps of "
            f"batch {h['batch_size']} at lr {h['lr']:g}"
        )


def _finding(study: Study, task: str) -> str:
    """What the table says of one task: the single-head paths, the longest, the lowest."""
    one, longest, worst = study.by_k[task][1], study.longest(task), study.worst(task)
    words = [
        f"the {one['paths_total']} single-head paths alone reach "
        f"{fmt(study.accuracy(task, 1), '.2f')} (the full model "
        f"{fmt(study.full[task], '.2f')}), the longest paths "
        f"{fmt(study.accuracy(task, longest), '.2f')}"
    ]
    if worst == longest:
        words.append("the longest paths score lowest")
    else:
        words.append(
            f"the paths of length {worst} score lowest ({fmt(study.accuracy(task, worst), '.2f')})"
        )
    return f"on {TASKS.get(task, task)}, " + ", and ".join(words)


def results_section(root: Path) -> str:
    """docs/results.md's measured part of the path-length study."""
    study = Study(root)
    h = study.header
    ks = sorted({k for task in study.tasks for k in study.by_k[task]})
    lines = [
        wrap(
            f"**Measured {h['started'][:10]}** on {h['machine'].split(';')[0]}, one seed "
            f"({h['seed']}): {h['mixer']} blocks with the skip, {study.shape()}; then the "
            f"trained model restricted to paths of length k, summing {h['n_paths']} random paths "
            f"per k (all of them when there are fewer), on {h['eval_samples']} validation "
            "samples."
        ),
        "",
        "| task | full model | " + " | ".join(f"k={k}" for k in ks) + " |",
        "|---|---|" + "---|" * len(ks),
    ]
    for task in study.tasks:
        cells = [fmt(study.accuracy(task, k), ".3f") for k in ks]
        lines.append(
            f"| {task} (accuracy) | {fmt(study.full[task], '.3f')} | " + " | ".join(cells) + " |"
        )
    findings = "; ".join(_finding(study, task) for task in study.tasks)
    lines += ["", wrap(findings[0].upper() + findings[1:] + ".")]
    return "\n".join(lines) + "\n"


def headline(root: Path) -> str:
    """README's Results line for the path-length study: its first task."""
    study = Study(root)
    task, h = study.tasks[0], study.header
    one, longest = study.accuracy(task, 1), study.accuracy(task, study.longest(task))
    return (
        wrap(
            f"**Path length**: the {study.by_k[task][1]['paths_total']} single-head paths of a "
            f"{h['depth']}-layer {TASKS.get(task, task)} model reach {fmt(one, '.2f')} accuracy "
            f"(the full model {fmt(study.full[task], '.2f')}), the longest paths "
            f"{fmt(longest, '.2f')} (one seed, no interval). "
            "[Path length](docs/results.md#path-length-dong-et-al-2021-sorting-and-convex-hull)",
            bullet=True,
        )
        + "\n"
    )
