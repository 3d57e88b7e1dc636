"""The trained rank-collapse sweep's text on the results pages (scripts/rank_ablation.py's
committed tables, rank_ablation.csv and rank_ablation.json): the results page's scope, rule and
verdict summary, and the README's headline. The verdicts are the table's (kept, partial,
collapsed: attnzoo.analysis.verdicts); the words here only count and group them, and the losses
are the table's means over the seeds, with no comparison between them (the sweep makes none)."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

from attnzoo.pages.rank_collapse import name as stack_name
from attnzoo.pages.words import fmt, listed, read_rows, seed_list, span, wrap

FOLDER = Path("scripts/results/rank_ablation")
MEASURES = ("relative_residual", "effective_rank", "stable_rank", "token_similarity")
SHOWN = {
    "relative_residual": "the relative residual",
    "effective_rank": "effective rank",
    "stable_rank": "stable rank",
    "token_similarity": "token similarity",
}
VERDICTS = ("kept", "partial", "collapsed")
LISTED = 4  # a verdict held by at most this many configurations names them; more are counted
WORDS = {2: "two", 3: "three", 4: "four"}
TASKS = {"shakespeare_char": "Tiny Shakespeare characters"}
ANCHOR = "docs/results.md#rank-collapse-during-training-the-rank_ablation-sweep"


def name(mixer: str) -> str:
    return "local attention" if mixer == "local" else stack_name(mixer)


class Config:
    """One row of rank_ablation.csv: a mixer, residual, MLP and norm over its seeds."""

    def __init__(self, row: dict[str, str]) -> None:
        self.row = row
        self.mixer, self.residual, self.norm = row["mixer"], row["residual"], row["norm"]
        self.mlp = row["mlp"] == "True"
        self.loss = float(row["val_loss_mean"])

    @property
    def attention(self) -> bool:
        """Whether the mixer has attention weights computed from its input (the table has its
        attention entropy)."""
        return not math.isnan(float(self.row["init_attention_entropy_last_mean"] or "nan"))

    def verdict(self, measure: str, when: str = "trained") -> str:
        return self.row[f"{when}_{measure}_verdict"]

    def verdicts(self, when: str = "trained") -> tuple[str, ...]:
        return tuple(self.verdict(m, when) for m in MEASURES)

    def loss_interval(self) -> str:
        r = self.row
        low, high = float(r["val_loss_ci_low"]), float(r["val_loss_ci_high"])
        return f"{fmt(self.loss, '.2f')} [{fmt(low, '.2f')}, {fmt(high, '.2f')}]"

    def label(self) -> str:
        return f"{name(self.mixer)} with {self.residual}"


class Study:
    """The committed tables of the trained sweep under `root`."""

    def __init__(self, root: Path) -> None:
        folder = root / FOLDER
        header = json.loads((folder / "rank_ablation.json").read_text(encoding="utf-8"))
        self.header = {k: v for k, v in header.items() if k != "configurations"}
        self.configs = [Config(r) for r in read_rows(folder / "rank_ablation.csv")]
        self.mixers = list(dict.fromkeys(c.mixer for c in self.configs))
        self.residuals = [r for r in dict.fromkeys(c.residual for c in self.configs) if r != "none"]

    def where(
        self, mlp: bool, norm: str = "layernorm", residual: bool | None = None
    ) -> list[Config]:
        """The configurations with the MLP `mlp` and `norm`; with or without a residual when
        `residual` says which."""
        return [
            c
            for c in self.configs
            if c.mlp == mlp
            and c.norm == norm
            and (residual is None or (c.residual != "none") == residual)
        ]

    def runs(self) -> int:
        return sum(int(c.row["n_seeds"]) for c in self.configs)

    def task(self) -> str:
        task = self.header["scope"]["task"]
        return TASKS.get(task, task)

    def at_a_time(self) -> str:
        """ ", two at a time" from the command's --parallel; empty when it ran one at a time."""
        parallel = re.search(r"--parallel[ =](\d+)", self.header["command"])
        n = int(parallel[1]) if parallel else 1
        return "" if n == 1 else f", {WORDS.get(n, str(n))} at a time"


def scope(study: Study) -> str:
    """The sweep's size and budget, as the table's header records them."""
    s = study.header["scope"]
    return (
        f"width {s['dim']}, depth {s['depth']}, {s['heads']} heads, context {s['seq_len']}, "
        f"batch {s['batch_size']}, {s['max_steps']:,} AdamW steps at lr {s['lr']:g} (one "
        f"learning rate for every configuration, not tuned), seeds {seed_list(study.header['seeds'])}"
    )


def who(configs: list[Config]) -> str:
    """The configurations named, grouped by mixer: "the token MLP (add, denseformer)"."""
    by: dict[str, list[str]] = {}
    for c in configs:
        by.setdefault(c.mixer, []).append(c.residual)
    return listed([f"{name(m)} ({', '.join(residuals)})" for m, residuals in by.items()])


def per_mixer(configs: list[Config]) -> str:
    """How many of `configs` each mixer has: "pooling 6, identity 8"."""
    counts = Counter(c.mixer for c in configs)
    return ", ".join(f"{name(m)} {n}" for m, n in counts.items())


def measure_line(configs: list[Config], measure: str, when: str = "trained") -> str:
    """What `configs` (one MLP and norm setting, each with a residual) do to one measure, as a
    sentence: the verdict most of them share, then the others, named when few and counted (per
    mixer) when many."""
    by = {v: [c for c in configs if c.verdict(measure, when) == v] for v in VERDICTS}
    by = {v: cs for v, cs in by.items() if cs}
    common = max(by, key=lambda v: len(by[v]))
    shown = SHOWN[measure][0].upper() + SHOWN[measure][1:]
    if len(by) == 1:
        return f"{shown}: {common} in all {len(configs)}."
    others = [
        f"{v} in {who(cs)}" if len(cs) <= LISTED else f"{v} in {len(cs)} ({per_mixer(cs)})"
        for v, cs in by.items()
        if v != common
    ]
    return f"{shown}: {common} in {len(by[common])} of {len(configs)}, " + ", ".join(others) + "."


def verdict_words(verdicts: tuple[str, ...]) -> str:
    """A configuration's four verdicts, the measures grouped by verdict: "collapsed by all four
    measures", or "the relative residual and token similarity kept, stable rank partial"."""
    if len(set(verdicts)) == 1:
        return f"{verdicts[0]} by all four measures"
    return ", ".join(
        f"{listed([SHOWN[m] for m, got in zip(MEASURES, verdicts, strict=True) if got == v])} {v}"
        for v in VERDICTS
        if v in verdicts
    )


def by_verdicts(configs: list[Config]) -> list[tuple[list[Config], str]]:
    """`configs` grouped by their four trained verdicts, each group with its words."""
    groups: dict[tuple[str, ...], list[Config]] = {}
    for c in configs:
        groups.setdefault(c.verdicts(), []).append(c)
    return [(cs, verdict_words(v)) for v, cs in groups.items()]


def no_residual_line(configs: list[Config]) -> str:
    """The configurations without a residual grouped by their four verdicts: "scaled-dot and
    local attention: collapsed by all four measures (val loss 3.33); ..."."""
    return "; ".join(
        f"{listed([name(c.mixer) for c in cs])}: {said} (val loss "
        f"{span([c.loss for c in cs], '.2f')})"
        for cs, said in by_verdicts(configs)
    )


def setting(study: Study, mlp: bool, norm: str = "layernorm") -> str:
    """One bullet: the trained verdicts of one MLP and norm setting, without and with a
    residual, and the losses."""
    on = "on" if mlp else "off"
    norm_words = "LayerNorm (pre-norm)" if norm == "layernorm" else "no norm"
    none = study.where(mlp, norm, residual=False)
    some = study.where(mlp, norm, residual=True)
    variants = list(dict.fromkeys(c.residual for c in some))
    attention = [c.loss for c in some if c.attention]
    text = f"**Trained, MLP {on}, {norm_words}.** Without a residual: {no_residual_line(none)}."
    text += f" With a residual ({listed(variants)}; {len(some)} configurations). " + " ".join(
        measure_line(some, m) for m in MEASURES
    )
    if attention:
        text += f" The attention mixers' val loss with a residual: {span(attention, '.2f')}."
    return wrap(text, bullet=True)


def init_line(study: Study) -> str:
    """At init, with LayerNorm and the MLP on: what each residual variant keeps, the variants
    that keep alike said together."""
    some = study.where(True, residual=True)
    said: dict[str, list[str]] = {}
    for res in study.residuals:
        cs = [c for c in some if c.residual == res]
        if not cs:
            continue
        if all(v == "kept" for c in cs for v in c.verdicts("init")):
            words = "every mixer keeps all four measures"
        else:
            stable = Counter(c.verdict("stable_rank", "init") for c in cs if c.attention)
            words = f"the attention mixers' stable rank is {_counted(stable)}"
        said.setdefault(words, []).append(res)
    parts = [f"with {listed(residuals)} {words}" for words, residuals in said.items()]
    return wrap(
        "**At init** (LayerNorm, MLP on; the weights before any step): " + "; ".join(parts) + ".",
        bullet=True,
    )


def _counted(counts: Counter) -> str:
    """ "collapsed in all 6" or "collapsed in 4 of 6, partial in 2"."""
    total = sum(counts.values())
    (first, n), *rest = counts.most_common()
    if not rest:
        return f"{first} in all {total}"
    return f"{first} in {n} of {total}, " + ", ".join(f"{v} in {k}" for v, k in rest)


def _some(n: int) -> str:
    return "none" if n == 0 else str(n)


def token_mlp_line(study: Study) -> str:
    """The token MLP's val loss per residual variant (MLP on, LayerNorm): where it learns at
    this one learning rate."""
    cs = [c for c in study.where(True) if c.mixer == "token_mlp"]
    if not cs:
        return ""
    losses = ", ".join(f"{c.residual} {c.loss_interval()}" for c in cs)
    return wrap(
        f"**The token MLP's val loss** (MLP on, LayerNorm) per residual variant: {losses}.",
        bullet=True,
    )


def results_section(root: Path) -> str:
    """docs/results.md's measured part of the trained sweep: scope, rule and verdicts."""
    study = Study(root)
    h = study.header
    confidence = round(100 * h.get("confidence", 0.95))
    n_seeds = len(h["seeds"])
    lines = [
        wrap(
            f"**Measured {h['started'][:10]}** on {h['machine'].split(';')[0]}: "
            f"{len(study.mixers)} mixers ({listed([name(m) for m in study.mixers])}) × "
            f"`model.residual` (none, {listed(study.residuals)}) × MLP on/off, and residual "
            f"{listed(sorted({c.residual for c in study.configs if c.norm == 'none'}, reverse=True))} "
            f"without a norm, on {study.task()}: {scope(study)}. {study.runs()} runs, "
            f"{h['wall_s']:,.0f} s wall{study.at_a_time()}."
        ),
        "",
        wrap(
            "The verdict rule (`attnzoo.analysis.verdicts`): per measure, the share of layer 0's "
            "distance from that measure's collapse value that the last block keeps, "
            "(m_last − c) / (m_0 − c) with c = 0 for the relative residual and c = 1 for "
            "effective rank, stable rank and token similarity, so a last layer at rank one has "
            f"share 0 whatever the embedding's rank; **kept** when its {confidence}% interval over "
            f"the {n_seeds} seeds lies at or above {h['thresholds']['kept']:g}, **collapsed** "
            f"when it lies at or below {h['thresholds']['collapsed']:g}, **partial** otherwise."
        ),
        "",
        wrap(
            "What the verdicts show (each measure's verdict of the last block; the losses are "
            "means over the seeds):"
        ),
        "",
        setting(study, True),
        setting(study, False),
        setting(study, True, "none"),
        setting(study, False, "none"),
        init_line(study),
    ]
    token = token_mlp_line(study)
    if token:
        lines.append(token)
    return "\n".join(lines) + "\n"


def headline(root: Path) -> str:
    """README's Results line for the trained sweep: LayerNorm and the MLP on without and with a
    residual, and stable rank with the MLP on and off."""
    study = Study(root)
    s = study.header["scope"]
    none = [c for c in study.where(True, residual=False) if c.attention]
    some_on, some_off = study.where(True, residual=True), study.where(False, residual=True)
    groups = by_verdicts(none)
    residual = span([c.loss for c in some_on if c.attention], ".2f")
    if len(groups) == 1:
        cs, said = groups[0]
        without = (
            f"the {len(cs)} mixers with attention weights are {said} without a residual (val "
            f"loss {span([c.loss for c in cs], '.2f')}, against {residual} with one)"
        )
    else:
        without = (
            f"without a residual the mixers with attention weights read {no_residual_line(none)} "
            f"(val loss {residual} with one)"
        )
    text = (
        f"**Trained, the residual decides it** ({study.task()}, {len(study.mixers)} mixers, "
        f"depth {s['depth']}, {len(study.header['seeds'])} seeds, {s['max_steps']:,} steps at "
        f"one untuned learning rate): with LayerNorm and the MLP on, {without}. "
    )
    losing: dict[tuple[str, ...], list[str]] = {}  # the mixers not keeping a measure -> it
    for m in ("relative_residual", "token_similarity"):
        mixers = tuple(dict.fromkeys(c.mixer for c in some_on if c.verdict(m) != "kept"))
        losing.setdefault(mixers, []).append(SHOWN[m])
    for mixers, measures in losing.items():
        if len(mixers) <= 2:
            but = f" but {listed([name(x) for x in mixers])}" if mixers else ""
            text += f"Every residual variant keeps {listed(measures)} for every mixer{but}. "
    kept = [sum(c.verdict("stable_rank") == "kept" for c in some) for some in (some_on, some_off)]
    text += (
        f"Stable rank is kept by {_some(kept[0])} of the {len(some_on)} configurations with a "
        f"residual and the MLP on, by {_some(kept[1])} of the {len(some_off)} with the MLP off. "
        f"[The `rank_ablation` sweep]({ANCHOR})"
    )
    return wrap(text, bullet=True) + "\n"
