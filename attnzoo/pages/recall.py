"""The recall study's text on the results pages (scripts/recall.py's committed tables, run with
--success): the results page's measured paragraphs and table, and the README's headline, each
from the tables, the study's header (recall.json) and its pilot (pilot/pilot.json) alone.

The outcome of a fresh seed is success, its held-out test accuracy at or above the threshold the
header fixed before the runs; a mixer's success rate is compared with the reference's by the
exact test in the report's one family (comparisons.csv). Whether a fresh seed had stopped moving
is read from its sampled validation curve (curves.csv) as the report reads it: a change of the
margin or more over the last fifth of training is "still moving"."""

from __future__ import annotations

import json
from pathlib import Path

from attnzoo.analysis.compare import successes
from attnzoo.analysis.convergence import still_moving
from attnzoo.pages.tables import composed
from attnzoo.pages.words import fmt, listed, read_rows, seed_list, span, wrap

FOLDER = Path("scripts/results/recall")
PILOT = FOLDER / "pilot"
# the overrides a run's cell, arm, rate and seed set: the rest is the scope every run shares
CELL_AND_ARM = ("model.dim=", "model.depth=", "mixer=", "train.lr=", "train.seed=")
TAIL = 0.2  # the last fifth of training, over which a curve that still moves is named
NAMES = {
    "scaled_dot": "scaled-dot",
    "mamba2": "Mamba-2",
    "deltanet": "DeltaNet",
    "linear": "linear attention",
    "retention": "retention",
    "gla": "GLA",
}


class RecallPageError(ValueError):
    """Committed tables the page cannot be written from (not a success-rate report, or runs
    whose recorded settings differ)."""


def _composed(overrides: tuple[str, ...]) -> dict:
    """The task, model and budget a run's recorded overrides compose to."""
    cfg = composed(overrides)
    return {
        "vocab_size": cfg.task.vocab_size,
        "seq_len": cfg.task.seq_len,
        "num_kv_pairs": cfg.task.num_kv_pairs,
        "mlp": cfg.model.mlp,
        "heads": cfg.model.heads,
        "max_steps": cfg.train.max_steps,
        "batch_size": cfg.train.batch_size,
    }


def name(mixer: str) -> str:
    return NAMES.get(mixer, mixer)


class Study:
    """The committed tables of the recall study under `root`."""

    def __init__(self, root: Path) -> None:
        folder = root / FOLDER
        self.header = json.loads((folder / "recall.json").read_text(encoding="utf-8"))
        if self.header.get("success") is None:
            raise RecallPageError(
                f"{FOLDER / 'recall.json'}: not a success-rate report (run with --success)"
            )
        self.pilot = json.loads((root / PILOT / "pilot.json").read_text(encoding="utf-8"))
        self.runs = read_rows(folder / "runs.csv")
        self.tune_runs = read_rows(folder / "tune_runs.csv")
        self.family = read_rows(folder / "comparisons.csv")
        self.curves = read_rows(folder / "curves.csv")
        self.threshold = float(self.header["success"])
        self.mixers = list(self.header["mixers"])
        self.reference = self.family[0]["reference"].split(" ")[0] if self.family else ""
        self.cells = sorted(self.header["cells"], key=lambda c: (c["depth"], c["width"]))
        self.seeds = sorted({int(r["seed"]) for r in self.runs})
        self.scope = self._scope()

    def _scope(self) -> dict:
        """What every fresh and tuning run trained, composed from its recorded overrides
        (without the cell's width and depth, the mixer, the rate and the seed); refused when
        the runs differ, or when the recorded tokens are not steps × batch × length."""
        scopes = {}
        for r in self.runs + self.tune_runs:
            kept = tuple(o for o in r["overrides"].split(" ") if not o.startswith(CELL_AND_ARM))
            scope = _composed(kept)
            tokens = scope["max_steps"] * scope["batch_size"] * scope["seq_len"]
            if r["status"] == "completed" and float(r["tokens"]) != tokens:
                raise RecallPageError(
                    f"{r['job']}: recorded {r['tokens']} tokens, but its overrides now compose "
                    f"to {tokens:,}: the preset has changed since the runs"
                )
            scopes[tuple(sorted(scope.items()))] = scope
        if len(scopes) != 1:
            raise RecallPageError(f"the runs trained {len(scopes)} different settings")
        return next(iter(scopes.values()))

    def values(self, cell: dict, mixer: str) -> list[float]:
        """Fresh seeds' test accuracies of `mixer` in `cell`, in seed order."""
        rows = [
            r
            for r in self.runs
            if r["mixer"] == mixer
            and (int(r["width"]), int(r["depth"])) == (cell["width"], cell["depth"])
            and r["status"] == "completed"
        ]
        return [float(r["final_test_metric"]) for r in sorted(rows, key=lambda r: int(r["seed"]))]

    def reached(self, cell: dict, mixer: str) -> tuple[int, int]:
        """(fresh seeds that reached the threshold, fresh seeds), as the report counts them."""
        return successes(dict(enumerate(self.values(cell, mixer))), self.threshold, False)

    def verdict(self, cell: dict, mixer: str) -> dict[str, str]:
        (row,) = [
            r
            for r in self.family
            if r["config"].split(" ")[0] == mixer
            and (int(r["width"]), int(r["depth"])) == (cell["width"], cell["depth"])
        ]
        return row

    def grid(self, cell: dict, mixer: str) -> list[float]:
        """The rates `mixer` was tuned over in `cell`: the grid and its extensions."""
        extra = [e["lr"] for e in cell["extensions"] if mixer in e["mixers"]]
        return sorted({*self.header["lrs"], *extra})

    def edges(self) -> list[str]:
        """The choices at an edge of their grid (after its extensions), in words."""
        out = []
        for cell in self.cells:
            for mixer, lr in cell["chosen_lr"].items():
                grid = self.grid(cell, mixer)
                if lr in (grid[0], grid[-1]):
                    out.append(f"{name(mixer)} ({lr:g}{where(self, cell)})")
        return out

    def moving(self, cell: dict) -> list[tuple[str, int, float]]:
        """(mixer, seed, change) of each fresh seed whose validation accuracy moved by the
        margin or more over the last fifth of training."""
        here = [
            r
            for r in self.curves
            if (int(r["width"]), int(r["depth"])) == (cell["width"], cell["depth"])
        ]
        return still_moving(here, float(self.header["margin"]), TAIL)

    def cell_words(self, cell: dict) -> str:
        return f"width {cell['width']}, depth {cell['depth']}"

    def scope_words(self) -> str:
        s = self.scope
        sizes = listed([self.cell_words(c) for c in self.cells])
        return (
            f"MQAR, {s['num_kv_pairs']} key–value pairs in {s['seq_len']} tokens from a "
            f"vocabulary of {s['vocab_size']:,}; {sizes}, {s['heads']} heads, "
            f"MLP {'on' if s['mlp'] else 'off'}; {s['max_steps']:,} steps of batch "
            f"{s['batch_size']}; {len(self.seeds)} fresh seeds per mixer"
        )


def where(study: Study, cell: dict) -> str:
    """ ", at width W, depth D" when the study has more than one cell."""
    return "" if len(study.cells) == 1 else f", {study.cell_words(cell)}"


def _rate_verdict(study: Study, cell: dict, mixer: str, table: bool = False) -> str:
    r = study.verdict(cell, mixer)
    diff = fmt(float(r["diff"]), "+.1f")
    p = fmt(float(r["p_adjusted"]), ".2g")
    bars = "\\|" if table else "|"
    if r["verdict"] == "not resolved":
        could = float(r["resolvable"])
        limit = (
            "no difference could be resolved with these seeds"
            if could == float("inf")
            else f"could resolve {bars}Δ{bars} ≥ {fmt(could, '.1f')}"
        )
        return f"not resolved (Δ rate {diff}, adjusted p = {p}; {limit})"
    return f"{r['verdict']} (Δ rate {diff}, adjusted p = {p})"


def _pilot_sentence(study: Study) -> str:
    p = study.pilot
    steps = {(f["arm"], f["lr"]): f["step"] for f in p["flat_from"]}
    best = [(b["arm"], b["lr"], steps[(b["arm"], b["lr"])]) for b in p["best"]]
    last = max(best, key=lambda b: b[2])
    lrs = ", ".join(format(lr, "g") for lr in p["lrs"])
    chosen = listed([f"{name(m)} {lr:g}" for m, lr, _ in best])
    moving = [
        f"{name(f['arm'])} at {f['lr']:g}"
        for f in p["flat_from"]
        if f["step"] is None and (f["arm"], f["lr"]) not in {(m, lr) for m, lr, _ in best}
    ]
    return (
        f"The budget, {int(p['budget']):,} steps, is its pilot's (`pilot/`: each mixer at each "
        f"learning rate of {lrs}, seed {p['pilot_seed']}, {p['pilot_steps']:,} steps, validation "
        f"data only): the step from which each mixer's best curve (the rate whose accuracy ends "
        f"highest: {chosen}) stays within a band narrower than ±{p['margin']:g} of accuracy, "
        f"seen over at least the pilot's last fifth; the last to settle was {name(last[0])}'s "
        f"(step {last[2]:,})"
        + (
            f". Still moving at the pilot's end, at a rate not its mixer's best: {listed(moving)}"
            if moving
            else ""
        )
        + "."
    )


def _tuning_sentence(study: Study) -> str:
    h = study.header
    chosen = "; ".join(
        f"{study.cell_words(c)}: "
        + ", ".join(f"{name(m)} {lr:g}" for m, lr in c["chosen_lr"].items())
        for c in study.cells
    )
    extended = [
        f"{lr['lr']:g} for {listed([name(m) for m in lr['mixers']])}"
        for c in study.cells
        for lr in c["extensions"]
    ]
    edges = study.edges()
    return (
        f"`train.lr` was chosen per mixer over {', '.join(format(x, 'g') for x in h['lrs'])} on "
        f"tuning seeds {seed_list(h['tune_seeds'])}, by how many of them reach "
        f"{study.threshold:g} on the whole validation split, then by their mean"
        + (f" (the grid extended to {'; '.join(extended)})" if extended else "")
        + f": {chosen}; "
        + (
            "every choice is inside its grid."
            if not edges
            else f"at an edge of its grid: {listed(edges)}."
        )
    )


def _moving_sentence(study: Study) -> str:
    moving = [(c, m) for c in study.cells for m in study.moving(c)]
    margin = float(study.header["margin"])
    if not moving:
        return (
            "Every fresh seed's validation accuracy moved by less than "
            f"±{margin:g} over the last fifth of its training."
        )
    by: dict[str, list[str]] = {}
    for c, (mixer, seed, change) in moving:
        by.setdefault(name(mixer), []).append(f"{seed} ({fmt(change, '+.2f')}{where(study, c)})")
    order = [name(m) for m in study.mixers]
    listed_ = "; ".join(
        f"{m} seed{'s' if len(v) > 1 else ''} {listed(v)}"
        for m, v in sorted(by.items(), key=lambda kv: order.index(kv[0]))
    )
    return (
        f"Still moving at the end (validation accuracy changed by ±{margin:g} or more over the "
        f"last fifth of training): {listed_}; for these the budget, not the mixer, may decide."
    )


def table(study: Study) -> str:
    seeds = ", ".join(map(str, study.seeds))
    several = len(study.cells) > 1
    lines = [
        ("| cell " if several else "")
        + f"| mixer | train.lr | test accuracy ≥ {study.threshold:g} | test accuracy, seeds "
        f"{seeds} | against {study.reference} |",
        ("|---" if several else "") + "|---|---|---|---|---|",
    ]
    for cell in study.cells:
        for mixer in study.mixers:
            k, n = study.reached(cell, mixer)
            against = (
                "the reference"
                if mixer == study.reference
                else _rate_verdict(study, cell, mixer, table=True)
            )
            per_seed = ", ".join(fmt(v, ".3f") for v in study.values(cell, mixer))
            lines.append(
                (f"| {study.cell_words(cell)} " if several else "")
                + f"| {mixer} | {cell['chosen_lr'][mixer]:g} | {k} of {n} | {per_seed} | "
                f"{against} |"
            )
    return "\n".join(lines)


def verdict_sentence(study: Study, short: bool = False) -> str:
    """Each mixer's successes per cell, then the exact tests' verdicts against the reference."""
    parts = []
    for cell in study.cells:
        counts = listed(
            [f"{name(m)} in {k} of {n}" for m in study.mixers for k, n in [study.reached(cell, m)]]
        )
        parts.append(f"{'' if len(study.cells) == 1 else study.cell_words(cell) + ': '}{counts}")
    first = study.family[0]
    family = (
        ""
        if short
        else f" (Boschloo's exact test, one {first['correction'].capitalize()} family of "
        f"{first['tests']})"
    )
    verdicts = "; ".join(
        f"{name(m)} {_rate_verdict(study, c, m)}{where(study, c)}"
        for c in study.cells
        for m in study.mixers
        if m != study.reference
    )
    return (
        f"test accuracy reaches {study.threshold:g} for {'; '.join(parts)} fresh seeds; "
        f"against {name(study.reference)}'s success rate{family}: {verdicts}"
    )


def others(study: Study) -> str:
    """Where the seeds that did not succeed ended: their test accuracies' range per mixer."""
    spans = []
    for cell in study.cells:
        for m in study.mixers:
            fails = [v for v in study.values(cell, m) if v < study.threshold]
            if fails:
                spans.append(f"{name(m)}'s {span(fails, '.2f')}{where(study, cell)}")
    return (
        f" The seeds below {study.threshold:g} end at {listed(spans)} (1/"
        f"{study.scope['num_kv_pairs']} = {1 / study.scope['num_kv_pairs']:.3f} is guessing "
        "among the sequence's values)."
        if spans
        else ""
    )


def results_section(root: Path) -> str:
    """docs/results.md's measured part of the recall study."""
    study = Study(root)
    h = study.header
    summed = sum(float(r["wall_s"]) for r in study.runs + study.tune_runs if r["wall_s"])
    rel = "../" + FOLDER.as_posix()
    lines = [
        wrap(
            f"**Measured {h['started'][:10]}** on {h['machine'].split(';')[0]}: "
            f"{len(study.tune_runs)} tuning runs and {len(study.runs)} fresh-seed runs, "
            f"{summed:,.0f} s of runs summed ([`recall.md`]({rel}/recall.md); per seed "
            f"[`runs.csv`]({rel}/runs.csv), every tuning run `tune_runs.csv`, the family "
            f"`comparisons.csv`, every fresh seed's validation curve `curves.csv`). "
            f"{_pilot_sentence(study)} {_tuning_sentence(study)}"
        ),
        "",
        table(study),
        "",
        wrap(
            f"At this budget ({study.scope_words()}), {verdict_sentence(study)}."
            + others(study)
            + f" {_moving_sentence(study)}"
        ),
    ]
    return "\n".join(lines) + "\n"


def headline(root: Path) -> str:
    """README's Results line for the recall study."""
    study = Study(root)
    return (
        wrap(
            f"**Recall** ({study.scope_words()}; learning rate tuned per mixer, held-out test; "
            f"success: test accuracy ≥ {study.threshold:g}, fixed before the runs): at this "
            f"budget {verdict_sentence(study, short=True)}. "
            "[Recall](docs/results.md#recall-multi-query-associative-recall-mqar)",
            bullet=True,
        )
        + "\n"
    )


SCREEN = FOLDER / "screen"


def screen_paragraph(root: Path) -> str:
    """Why the study runs the mixers it runs: the screen's best test accuracy per mixer it left
    out (screen/runs.csv: the defaults' protocol, every cell it ran)."""
    study = Study(root)
    screen = json.loads((root / SCREEN / "recall.json").read_text(encoding="utf-8"))
    runs = read_rows(root / SCREEN / "runs.csv")
    left = [m for m in screen["mixers"] if m not in study.mixers]
    cells = sorted({(int(r["width"]), int(r["depth"])) for r in runs}, key=lambda c: (c[1], c[0]))
    seeds = sorted({int(r["seed"]) for r in runs})
    steps = {o for r in runs for o in r["overrides"].split(" ") if o.startswith("train.max_steps=")}
    (steps,) = steps
    best = {
        m: max(
            float(r["final_test_metric"])
            for r in runs
            if r["mixer"] == m and r["status"] == "completed"
        )
        for m in screen["mixers"]
    }
    never = [m for m in left if best[m] < study.threshold]
    reached = [m for m in left if best[m] >= study.threshold]
    cell_words = listed([f"{w}×{d}" for w, d in cells])
    text = (
        f"The study runs {listed([name(m) for m in study.mixers])}. A screen of "
        f"{len(screen['mixers'])} mixers chose them (`screen/`, the script's defaults: "
        f"{len(seeds)} fresh seeds in each of {len(cells)} cells, width × depth {cell_words}, "
        f"{int(steps.split('=')[1]):,} steps, learning rate tuned per mixer and cell on {len(screen['tune_seeds'])} seeds)"
    )
    if never:
        text += (
            f": no fresh seed of {listed([name(m) for m in never])} reached "
            f"{study.threshold:g} test accuracy in any cell (the best: "
            + ", ".join(f"{name(m)} {fmt(best[m], '.3f')}" for m in never)
            + ")"
        )
    if reached:
        text += f"; {listed([name(m) for m in reached])}, left out too, reached it in some seed"
    return wrap(text + ".") + "\n"
