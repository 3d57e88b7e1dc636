"""The sink study's text on the results pages (scripts/sinks.py's committed tables): the results
page's measured paragraphs and tables, and the README's headline, each from the tables and the
study's header (sinks.json) alone.

Whether an arm grows a first-token sink is read from the most sink-like head's first-token
excess at the end of training (attnzoo.rank.first_token_excess_max), calibrated on the
controls the study reads as it reads its runs (controls.csv: a planted sink near 1, its
negative near 0): a seed grows one when a head of any block ends at or above a cutoff, and the
page says which cutoffs between CUTOFFS' ends give the same verdict."""

from __future__ import annotations

import json
import math
from pathlib import Path

from attnzoo.pages.words import fmt, listed, read_rows, span, wrap
from attnzoo.studies import seeds_projection

FOLDER = Path("scripts/results/sinks")
CUTOFFS = (0.25, 0.5, 0.75)  # of the first-token excess: the controls read ~0 and ~1
POSITIVE, NEGATIVE = "planted BOS sink (positive)", "no BOS (negative)"
TASKS = {"shakespeare_char": "Tiny Shakespeare"}
RECIPES = {"cpu": "nanoGPT's CPU recipe", "gpu": "nanoGPT's GPU recipe"}


class Study:
    """The committed tables of the sink study under `root`."""

    def __init__(self, root: Path) -> None:
        folder = root / FOLDER
        self.folder = folder
        self.header = json.loads((folder / "sinks.json").read_text(encoding="utf-8"))
        self.runs = read_rows(folder / "runs.csv")
        self.tune_runs = read_rows(folder / "tune_runs.csv")
        self.family = read_rows(folder / "comparisons.csv")
        self.layers = read_rows(folder / "layers.csv")
        self.logits = read_rows(folder / "sink_logits.csv")
        self.controls = {
            (r["control"], r["stat"]): float(r["value"]) for r in read_rows(folder / "controls.csv")
        }
        self.reference = self.header["reference"]
        (self.cell,) = self.header["cells"]  # the study's one cell: every arm on one task
        self.arms = list(self.cell["chosen_lr"])
        self.seeds = sorted({int(r["seed"]) for r in self.runs})
        self.last = max(int(r["step"]) for r in self.layers)
        self.depth = max(int(r["layer"]) for r in self.layers)

    def losses(self, arm: str) -> list[float]:
        rows = sorted(
            (int(r["seed"]), float(r["final_test_loss"])) for r in self.runs if r["arm"] == arm
        )
        return [v for _, v in rows]

    def at(
        self, arm: str, stat: str, step: int | None = None, layer: int | None = None
    ) -> list[float]:
        """`stat` of every block (`layer` alone, if given) and seed of `arm`, at `step` (every
        evaluation when None)."""
        return [
            float(r[stat])
            for r in self.layers
            if r["arm"] == arm
            and (layer is None or int(r["layer"]) == layer)
            and (step is None or int(r["step"]) == step)
            and r[stat] != ""
            and not math.isnan(float(r[stat]))
        ]

    def group(self, arm: str) -> dict:
        (group,) = [g for g in self.cell["groups"] if g["arm"] == arm]
        return group

    def verdict(self, arm: str) -> dict[str, str]:
        (row,) = [r for r in self.family if r["config"] == arm and r["on"] == "test_loss"]
        return row

    def seeds_with_sink(self, arm: str, cutoff: float) -> int:
        """The fresh seeds of `arm` in which a head of some block ends training at a first-token
        excess of `cutoff` or more."""
        return len(
            {
                r["seed"]
                for r in self.layers
                if r["arm"] == arm
                and int(r["step"]) == self.last
                and r["first_token_excess_max"] != ""
                and float(r["first_token_excess_max"]) >= cutoff
            }
        )

    def scope(self) -> str:
        task = TASKS.get(self.runs[0]["task"], self.runs[0]["task"])
        tokens = float(self.runs[0]["tokens"])
        return (
            f"{task}, {RECIPES.get(self.header['preset'], self.header['preset'] + ' preset')}: "
            f"{self.depth} blocks, {self.last:,} steps ({_tokens(tokens)} tokens a run), "
            f"{len(self.seeds)} fresh seeds per arm"
        )


def _tokens(n: float) -> str:
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f}"


def _verdict_text(study: Study, arm: str) -> str:
    r = study.verdict(arm)
    v, margin = r["verdict"], float(r["margin"])
    diff = fmt(float(r["diff"]), "+.3f")
    if v == "not resolved":  # a table cell: its bars escaped
        could = fmt(float(r["resolvable"]), ".3f")
        return f"not resolved (Δ {diff}; could resolve \\|Δ\\| ≥ {could})"
    if v == "within margin":
        return f"within ±{margin:g} (Δ {diff})"
    return f"{v} (Δ {diff})"


def sink_sentence(study: Study, short: bool = False) -> str:
    """Whether each arm grows a first-token sink, at every cutoff of CUTOFFS, with the controls'
    readings (`short`: the positive control's only): the verdict words come from the counts."""
    counts = {a: [study.seeds_with_sink(a, c) for c in CUTOFFS] for a in study.arms}
    n = len(study.seeds)
    top = max(v for a in study.arms for v in study.at(a, "first_token_excess_max", study.last))
    positive = fmt(study.controls[(POSITIVE, "first_token_excess_max")], ".3f")
    negative = fmt(study.controls[(NEGATIVE, "first_token_excess_max")], ".3f")
    controls = f"a planted sink reads {positive}" + (
        "" if short else f" and its negative {negative}"
    )
    low, high = CUTOFFS[0], CUTOFFS[-1]
    if all(c == [0] * len(CUTOFFS) for c in counts.values()):
        if short:
            return (
                f"no arm grows a first-token sink (the largest first-token excess of a head at "
                f"the end: {fmt(top, '.3f')}; {controls})"
            )
        return (
            f"no arm grows a first-token sink: the most sink-like head of any block and seed ends "
            f"training at a first-token excess of {fmt(top, '.3f')} at most ({controls}), below "
            f"every cutoff from {low:g} to {high:g}"
        )
    parts = [
        f"{a} in {c[0]} of {n} seeds"
        if len(set(c)) == 1
        else f"{a} in {c[-1]} to {c[0]} of {n} seeds, depending on the cutoff"
        for a, c in counts.items()
        if any(c)
    ]
    none_grow = [a for a, c in counts.items() if not any(c)]
    return (
        "a first-token sink grows (a head of some block ends training at a first-token excess "
        f"at or above a cutoff from {low:g} to {high:g}) in "
        + "; ".join(parts)
        + (f"; in no seed of {listed(none_grow)}" if none_grow else "")
        + f" ({controls}; the largest at the end: {fmt(top, '.3f')})"
    )


def loss_sentence(study: Study, short: bool = False) -> str:
    """Each arm's verdict on test loss against the reference, grouped by verdict (attnzoo.
    analysis.compare's words); `short` leaves out the family."""
    by: dict[str, list[str]] = {}
    for arm in study.arms:
        if arm != study.reference:
            by.setdefault(study.verdict(arm)["verdict"], []).append(arm)
    first = study.verdict(next(a for a in study.arms if a != study.reference))
    margin, m = float(first["margin"]), int(first["tests"])
    parts = []
    for verdict, arms in by.items():
        side = verdict.split(" ")[0].rstrip(",")
        if verdict == "within margin":
            parts.append(f"{listed(arms)} within ±{margin:g} nats of it")
        elif verdict == "not resolved":
            could = [float(study.verdict(a)["resolvable"]) for a in arms]
            parts.append(
                f"{listed(arms)} not resolved from it with {len(study.seeds)} seeds (these could "
                f"resolve |Δ| ≥ {span(could, '.3f')})"
            )
        elif verdict.endswith("by more than the margin"):
            parts.append(f"{listed(arms)} {side} than it by more than ±{margin:g} nats")
        elif verdict.endswith("within margin"):
            parts.append(f"{listed(arms)} {side} than it, by less than ±{margin:g} nats")
        else:
            parts.append(f"{listed(arms)} {side} than it")
    family = f" (one {first['correction'].capitalize()} family of {m} hypotheses)"
    return f"on test loss against {study.reference}{'' if short else family}, " + "; ".join(parts)


def results_section(root: Path) -> str:
    """docs/results.md's measured part of the sink study."""
    study = Study(root)
    h = study.header
    summed = sum(float(r["wall_s"]) for r in study.runs + study.tune_runs if r["wall_s"])
    seeds = ", ".join(map(str, study.seeds))
    rel = "../" + FOLDER.as_posix()
    lines = [
        wrap(
            f"**Measured {h['started'][:10]}** on {h['machine'].split(';')[0]}: "
            f"{len(study.tune_runs)} tuning runs and {len(study.runs)} fresh-seed runs, "
            f"{summed:,.0f} s of runs summed ([`sinks.md`]({rel}/sinks.md); per seed "
            f"[`runs.csv`]({rel}/runs.csv), every evaluation of every block "
            f"[`layers.csv`]({rel}/layers.csv), the family `comparisons.csv`, the learned "
            f"logits `sink_logits.csv`, the controls `controls.csv`). {_projection(study, root)}"
        ),
        "",
        f"| arm | train.lr | test loss, mean [95% interval] | seeds {seeds} | "
        f"against {study.reference} |",
        "|---|---|---|---|---|",
    ]
    for arm in study.arms:
        g = study.group(arm)
        interval = (
            f"{fmt(g['test_loss_mean'], '.3f')} [{fmt(g['test_loss_ci_low'], '.3f')}, "
            f"{fmt(g['test_loss_ci_high'], '.3f')}]"
        )
        against = "the reference" if arm == study.reference else _verdict_text(study, arm)
        per_seed = ", ".join(fmt(v, ".3f") for v in study.losses(arm))
        lr = study.cell["chosen_lr"][arm]
        lines.append(f"| {arm} | {lr:g} | {interval} | {per_seed} | {against} |")
    lines += [
        "",
        "| arm | first-token excess at the end, heads' mean | most sink-like head at the end | "
        "sink share (> 0.3), largest at any evaluation | row sum at the end | last block's "
        "relative residual, init → end |",
        "|---|---|---|---|---|---|",
    ]
    for arm in study.arms:
        cells = [
            span(study.at(arm, "first_token_excess", study.last), ".3f"),
            span(study.at(arm, "first_token_excess_max", study.last), ".3f"),
            fmt(max(study.at(arm, "sink_share")), ".3f"),
            span(study.at(arm, "row_sum", study.last), ".2f"),
            f"{span(study.at(arm, 'relative_residual', 0, study.depth), '.2f')} → "
            f"{span(study.at(arm, 'relative_residual', study.last, study.depth), '.2f')}",
        ]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Ranges are over every block (the last block's for the relative residual) and fresh seed.",
        "",
        wrap(
            f"At this budget ({study.scope()}), {sink_sentence(study)}; {loss_sentence(study)}."
            + _logits(study)
        ),
    ]
    return "\n".join(lines) + "\n"


def _projection(study: Study, root: Path) -> str:
    h = study.header
    first = study.verdict(next(a for a in study.arms if a != study.reference))
    _, sentence = seeds_projection(
        root / FOLDER / "pilot" / "runs.csv",
        study.reference,
        study.arms,
        "final_test_loss",
        h["margin"],
        h["confidence"],
        int(first["tests"]),
        study.seeds,
    )
    return sentence


def _logits(study: Study) -> str:
    if not study.logits:
        return ""
    values = [float(r["logit"]) for r in study.logits]
    return (
        f" The learned sink logits end between {fmt(min(values), '+.2f')} and "
        f"{fmt(max(values), '+.2f')} (0 at init, zero_kv's fixed sink)."
    )


def headline(root: Path) -> str:
    """README's Results line for the sink study."""
    study = Study(root)
    others = listed([a for a in study.arms if a != study.reference])
    reference = study.header["arm_text"][study.reference].split(" (")[0]
    return (
        wrap(
            f"**Sinks** ({study.scope()}; {others} against {study.reference}, {reference}; "
            "learning rate tuned per arm, held-out test): at this budget "
            f"{sink_sentence(study, short=True)}; {loss_sentence(study, short=True)}. "
            "[Sinks](docs/results.md#sinks-attention-that-may-put-its-weight-nowhere)",
            bullet=True,
        )
        + "\n"
    )
