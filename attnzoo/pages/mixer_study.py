"""The mixer study's text on the results pages (scripts/mixer_ablation.py's committed tables): per
task the table and the verdicts of every mixer against the reference, the published claims read
off those verdicts, whether the curves had flattened, and the README's headline.

The numbers are the one-family reanalysis's (reanalysis/: the study's per-seed values, FAVOR+'s
rows from its rerun, every hypothesis in one Holm family). Each task's scope is its runs' own:
the config their recorded overrides compose to. Whether a mixer's curve had flattened is the
report's of the run its seeds come from (mixer_ablation.md beside each runs.csv)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from attnzoo.pages.rank_ablation import name
from attnzoo.pages.tables import composed
from attnzoo.pages.words import fmt, listed, read_rows, seed_list, span, wrap
from attnzoo.studies import MIXER_STUDY_CLAIMS

FOLDER = Path("scripts/results/mixer_ablation")
REANALYSIS = FOLDER / "reanalysis"
POINTS = 100.0  # an accuracy difference is written in points
# per task: what its verdicts are on first, the other measure, how the page names it
TASKS = {
    "shakespeare_char": ("test_loss", "test_metric", "Tiny Shakespeare"),
    "imdb": ("test_metric", "test_loss", "IMDB"),
}
ANCHOR = "docs/results.md#the-mixers-on-real-data"


def lr_text(lr: float) -> str:
    return f"{lr:.0e}".replace("e-0", "e-")


def _scope(overrides: tuple[str, ...]) -> dict:
    """The size and budget a run's recorded overrides compose to."""
    cfg = composed(overrides)
    return {
        "dim": cfg.model.dim,
        "depth": cfg.model.depth,
        "heads": cfg.model.heads,
        "seq_len": cfg.task.seq_len,
        "batch_size": cfg.train.batch_size,
        "max_steps": cfg.train.max_steps,
        "warmup_steps": cfg.train.warmup_steps,
    }


class Study:
    """The committed tables of the mixer study under `root`."""

    def __init__(self, root: Path) -> None:
        folder = root / REANALYSIS
        self.header = json.loads((folder / "reanalysis.json").read_text(encoding="utf-8"))
        self.groups = {
            t["task"]: {g["mixer"]: g for g in t["groups"]} for t in self.header["tasks"]
        }
        self.family = read_rows(folder / "comparisons.csv")
        self.runs = read_rows(folder / "runs.csv")
        self.flat = _flattened(root, self.header["command"])
        self.reference = self.family[0]["reference"].split(" ")[0]

    def tasks(self) -> list[str]:
        return list(self.groups)

    def row(self, task: str, mixer: str, on: str) -> dict[str, str]:
        (row,) = [
            r
            for r in self.family
            if r["task"] == task and r["on"] == on and r["config"].split(" ")[0] == mixer
        ]
        return row

    def margin(self, on: str) -> float:
        return self.header["margins"]["loss" if on == "test_loss" else "accuracy"]

    def scope(self, task: str) -> dict:
        """What the task's runs' recorded overrides compose to today, refused unless it is
        what the runs did: every run's tokens are its steps × batch × context."""
        runs = [r for r in self.runs if r["task"] == task]
        kept = [o for o in shlex.split(runs[0]["overrides"]) if not o.startswith("data_dir=")]
        s = _scope(tuple(kept))
        tokens = s["max_steps"] * s["batch_size"] * s["seq_len"]
        if {round(float(r["tokens"])) for r in runs} != {tokens}:
            raise ValueError(
                f"{task}: the runs' overrides now compose to {tokens:,} tokens a run, not the "
                f"runs' {sorted({r['tokens'] for r in runs})}: the preset changed since the runs"
            )
        return s

    def seeds(self) -> int:
        return int(self.family[0]["n"])

    def hypotheses(self) -> int:
        return int(self.family[0]["tests"])

    def ordered(self, task: str) -> list[str]:
        """The reference, then the mixers from the best to the worst against it."""
        on = TASKS[task][0]
        sign = 1 if on == "test_loss" else -1
        rest = [m for m in self.groups[task] if m != self.reference]
        return [
            self.reference,
            *sorted(rest, key=lambda m: sign * float(self.row(task, m, on)["diff"])),
        ]


def _flattened(root: Path, command: str) -> dict[tuple[str, str], bool]:
    """(task, mixer) -> whether its curve had flattened, from the report beside each runs.csv the
    reanalysis read, a later file's mixers replacing an earlier one's as the reanalysis does."""
    words = shlex.split(command)
    start = words.index("--reanalyse") + 1
    files = [w for w in words[start:] if w.endswith(".csv")]
    flat: dict[tuple[str, str], bool] = {}
    for f in files:
        report = (root / f).with_name("mixer_ablation.md").read_text(encoding="utf-8")
        task = None
        for line in report.splitlines():
            if line.startswith("## "):
                task = line[3:].strip()
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if task and len(cells) > 8 and cells[8] in ("yes", "no"):
                flat[(task, cells[0])] = cells[8] == "yes"
    return flat


def _diff(study: Study, r: dict[str, str], on: str, sign: float = 1.0) -> str:
    """'Δ [low, high]' with its unit: nats, or accuracy points (times `sign`: a worse
    accuracy as a positive gap)."""
    spec, scale = ("+.3f", 1.0) if on == "test_loss" else ("+.1f", POINTS)
    if sign < 0:
        spec = spec.lstrip("+")
    d, a, b = (sign * scale * float(r[k]) for k in ("diff", "diff_ci_low", "diff_ci_high"))
    low, high = sorted((a, b))
    unit = "nats" if on == "test_loss" else "points"
    return f"{fmt(d, spec)} {unit} [{fmt(low, spec)}, {fmt(high, spec)}]"


def _ps(study: Study, task: str, mixers: list[str], on: str, key: str) -> str:
    return ", ".join(fmt(float(study.row(task, m, on)[key]), "#.2g") for m in mixers)


def _margin_words(study: Study, on: str) -> str:
    m = study.margin(on)
    return f"±{m:g} nats" if on == "test_loss" else f"±{m * POINTS:g} points"


def table(study: Study, task: str) -> str:
    """The task's table: every mixer's chosen lr, test measures and its verdict."""
    on, other, _ = TASKS[task]
    cols = ("test loss", "test accuracy") if on == "test_loss" else ("test accuracy", "test loss")
    unit = "Δ nats" if on == "test_loss" else "Δ points"
    lines = [
        f"| mixer | chosen lr | {cols[0]} | {cols[1]} | vs {study.reference} on {cols[0]} "
        f"({unit} [95% interval]) |",
        "|---|---|---|---|---|",
    ]
    spec, scale = ("+.3f", 1.0) if on == "test_loss" else ("+.1f", POINTS)
    for m in study.ordered(task):
        g = study.groups[task][m]
        cells = [m, lr_text(g["train.lr"])]
        for key in (on, other):
            cells.append(
                f"{fmt(g[key + '_mean'], '.3f')} [{fmt(g[key + '_ci_low'], '.3f')}, "
                f"{fmt(g[key + '_ci_high'], '.3f')}]"
            )
        if m == study.reference:
            cells.append("reference")
        else:
            r = study.row(task, m, on)
            d, low, high = (
                fmt(scale * float(r[k]), spec) for k in ("diff", "diff_ci_low", "diff_ci_high")
            )
            margin = fmt(scale * study.margin(on), "g")
            verdict = r["verdict"].replace("the margin", margin).replace("margin", f"±{margin}")
            cells.append(f"{d} [{low}, {high}], {verdict}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def by_verdict(study: Study, task: str, on: str) -> dict[str, list[str]]:
    """The mixers other than the reference grouped by their verdict on `on`, best first."""
    by: dict[str, list[str]] = {}
    for m in study.ordered(task)[1:]:
        by.setdefault(study.row(task, m, on)["verdict"], []).append(m)
    return by


def verdict_words(study: Study, verdict: str, on: str) -> str:
    """A verdict with its margin written out: "within ±0.05 nats"."""
    margin = _margin_words(study, on)
    return verdict.replace("the margin", margin).replace("margin", margin)


def verdict_bullets(study: Study, task: str, on: str) -> list[str]:
    """One sentence per verdict on `on`: the mixers with it, their intervals and adjusted p."""
    by = by_verdict(study, task, on)
    margin = _margin_words(study, on)
    ref = name(study.reference)
    out = []
    for verdict, mixers in by.items():
        who = listed([name(m) for m in mixers])
        who = who[0].upper() + who[1:]
        one = len(mixers) == 1
        if verdict == "within margin":
            out.append(
                f"**{who} {'matches' if one else 'match'} {ref} within {margin}** (Holm-adjusted "
                f"TOST p = {_ps(study, task, mixers, on, 'p_tost_adjusted')})."
            )
        elif verdict == "not resolved":
            diffs = "; ".join(
                ("" if one else f"{name(m)} ") + _diff(study, study.row(task, m, on), on)
                for m in mixers
            )
            scale, unit = (1.0, "nats") if on == "test_loss" else (POINTS, "points")
            could = [scale * float(study.row(task, m, on)["resolvable"]) for m in mixers]
            out.append(
                f"**{who}: not resolved** ({diffs}; TOST adjusted p = "
                f"{_ps(study, task, mixers, on, 'p_tost_adjusted')}): in this family "
                f"{study.seeds()} seeds resolve only differences beyond "
                f"{span(could, '.2f' if on == 'test_loss' else '.1f')} {unit}."
            )
        else:  # better or worse: by more than the margin, or the margin not resolved
            side = verdict.split(" ")[0]
            sign = -1.0 if (on != "test_loss") == (side == "worse") else 1.0
            diffs = "; ".join(_diff(study, study.row(task, m, on), on, sign) for m in mixers)
            if verdict.endswith("by more than the margin"):
                out.append(
                    f"**{who} {'is' if one else 'are'} {side} by more than the margin** ({diffs}; "
                    "the test against the margin, two-sided: adjusted p = "
                    f"{_ps(study, task, mixers, on, 'p_margin_adjusted')})."
                )
                continue
            out.append(
                f"**{who} {'is' if one else 'are'} {verdict}** (two-sided, adjusted p = "
                f"{_ps(study, task, mixers, on, 'p_adjusted')}; {diffs}); that "
                f"{'it' if one else 'any of them'} is {verdict} by more than {margin} does not "
                "survive the correction (the test against the margin, two-sided: raw p = "
                f"{_ps(study, task, mixers, on, 'p_margin')}; adjusted "
                f"{_ps(study, task, mixers, on, 'p_margin_adjusted')})."
            )
    return out


def other_measure(study: Study, task: str) -> str:
    """The verdicts on the task's second measure, counted: "On test loss: within ±0.05 nats for
    quadratic, ...; worse for ..."."""
    _, other, _ = TASKS[task]
    parts = [
        f"{verdict_words(study, v, other)} for {listed([name(m) for m in ms])}"
        for v, ms in by_verdict(study, task, other).items()
    ]
    return (
        f"On {other.replace('_', ' ')} against {name(study.reference)}: " + "; ".join(parts) + "."
    )


def claims(study: Study, task: str) -> list[tuple[str, str, str, str]]:
    """Each published claim of `task` read off the verdicts: (quote, source, verdict, why). It
    holds for a mixer within the margin (or better), fails for one worse, and is open where the
    difference is not resolved."""
    out = []
    for claim_task, sentence, mixers, _, on in MIXER_STUDY_CLAIMS:
        if claim_task != task:
            continue
        verdicts = {m: study.row(task, m, on)["verdict"] for m in mixers}
        holds = [m for m, v in verdicts.items() if v == "within margin" or v.startswith("better")]
        fails = [m for m, v in verdicts.items() if v.startswith("worse")]
        open_ = [m for m, v in verdicts.items() if v == "not resolved"]
        sign = 1.0 if on == "test_loss" else -1.0
        why = []
        if fails:
            gaps = [
                f"{name(m)} by {_diff(study, study.row(task, m, on), on, sign).split(' [')[0]}"
                for m in fails
            ]
            why.append(f"worse for {', '.join(gaps)}")
        if open_:
            why.append(f"not resolved for {listed([name(m) for m in open_])}")
        if holds and not fails and not open_:
            verdict = "holds"
        elif holds:
            verdict = f"holds for {listed([name(m) for m in holds])} only"
        else:
            verdict = f"is not supported at {_margin_words(study, on)}"
        quote, source = sentence.rsplit(" (", 1)
        out.append((quote, source.split(",")[0], verdict, "; ".join(why)))
    return out


def claim_bullets(study: Study, task: str) -> list[str]:
    moving = any(not study.flat.get((task, m), True) for m in study.groups[task])
    return [
        f'**Claim ({source}): "{quote}."** {"At this budget" if moving else "Here"} it {verdict}'
        + (f" ({why})" if why else "")
        + "."
        for quote, source, verdict, why in claims(study, task)
    ]


def budget_bullet(study: Study, task: str) -> str:
    steps = study.scope(task)["max_steps"]
    moving = [m for m in study.ordered(task) if not study.flat.get((task, m), True)]
    if len(moving) == len(study.groups[task]):
        said = f"no mixer's sampled validation loss had flattened by step {steps:,}"
    elif moving:
        said = (
            f"the sampled validation loss of {listed([name(m) for m in moving])} had not "
            f"flattened by step {steps:,}"
        )
    else:
        return f"Every mixer's sampled validation loss had flattened by step {steps:,}."
    return (
        f"**At this budget**: {said} (it moved by more than the seed standard deviation over the "
        "last fifth of training), so these are comparisons at this budget, not at convergence."
    )


def scope_line(study: Study, task: str) -> str:
    s = study.scope(task)
    blocks = f"{s['depth']} block{'s' if s['depth'] > 1 else ''}"
    return (
        f"{blocks} of width {s['dim']} with {s['heads']} heads, context {s['seq_len']}, batch "
        f"{s['batch_size']}, {s['max_steps']:,} AdamW steps ({s['warmup_steps']} warmup); "
        f"{study.seeds()} fresh seeds per mixer"
    )


def task_section(root: Path, task: str) -> str:
    study = Study(root)
    on, _, _ = TASKS[task]
    bullets = verdict_bullets(study, task, on)
    if len(TASKS[task]) and on != "test_loss":
        bullets.append(other_measure(study, task))
    bullets += claim_bullets(study, task)
    bullets.append(budget_bullet(study, task))
    return (
        wrap(f"Each run: {scope_line(study, task)}.")
        + "\n\n"
        + table(study, task)
        + "\n\n"
        + "\n".join(wrap(b, bullet=True) for b in bullets)
        + "\n"
    )


def shakespeare(root: Path) -> str:
    return task_section(root, "shakespeare_char")


def imdb(root: Path) -> str:
    return task_section(root, "imdb")


def headline(root: Path) -> str:
    """README's Results line for the mixer study: each task's verdicts in a clause."""
    study = Study(root)
    clauses = []
    for task, (on, _, shown) in TASKS.items():
        parts = [
            f"{listed([name(m) for m in ms])} {verdict_words(study, v, on)}"
            for v, ms in by_verdict(study, task, on).items()
        ]
        depth = study.scope(task)["depth"]
        said = [
            f'{source}\'s "{quote}" {verdict}' for quote, source, verdict, _ in claims(study, task)
        ]
        clauses.append(
            f"on {shown} ({depth} block{'s' if depth > 1 else ''}, against {name(study.reference)}"
            f" on {on.replace('_', ' ').replace('metric', 'accuracy')}): "
            + "; ".join(parts)
            + (f", so {listed(said)}" if said else "")
        )
    moving = all(not f for f in study.flat.values())
    text = (
        f"**Every mixer on real data** (lr tuned per mixer on validation, {study.seeds()} fresh "
        f"seeds, held-out test, one {study.header['correction'].capitalize()} family): "
        + ". ".join(c[0].upper() + c[1:] for c in clauses)
        + "."
        + (" No curve had flattened: these hold at this budget." if moving else "")
        + f" [The mixers on real data]({ANCHOR})"
    )
    return wrap(text, bullet=True) + "\n"


# ---- the runs behind the study, the FAVOR+ rerun and the one family ----------------------------

RERUN = FOLDER / "favor_rerun"
SHORT = {  # a verdict as the family paragraph names it
    "within margin": '"within"',
    "not resolved": '"not resolved"',
    "worse": '"worse"',
    "better": '"better"',
    "worse by more than the margin": '"by more than {margin}"',
    "better by more than the margin": '"better by more than {margin}"',
}


WORDS = {1: "one", 2: "two", 3: "three"}


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _grid(study: dict, task: dict, mixer: str) -> list[float]:
    """The learning rates `mixer` was tuned over in `task`: the grid and its extensions."""
    return sorted({*study["lrs"], *(e["lr"] for e in task["extensions"] if mixer in e["mixers"])})


def _interior(study: dict) -> bool:
    return all(
        min(_grid(study, t, m)) < lr < max(_grid(study, t, m))
        for t in study["cells"]
        for m, lr in t["chosen_lr"].items()
    )


def runs_paragraph(root: Path) -> str:
    """Where and how the study ran: its runs per task and their summed time, the grid, the
    tuning seeds, and whether every choice is interior; then the FAVOR+ rerun's."""
    study = _json(root / FOLDER / "mixer_ablation.json")
    tune, fresh = read_rows(root / FOLDER / "tune_runs.csv"), read_rows(root / FOLDER / "runs.csv")
    per_task = []
    for t in study["cells"]:
        task = t["task"]
        n_tune = sum(r["task"] == task for r in tune)
        n_fresh = sum(r["task"] == task for r in fresh)
        summed = sum(float(r["wall_s"]) for r in tune + fresh if r["task"] == task)
        per_task.append(
            f"{TASKS[task][2]} {n_tune} tuning and {n_fresh} fresh-seed runs ({summed:,.0f} s)"
        )
    total = sum(float(r["wall_s"]) for r in tune + fresh)
    lrs = [lr_text(v) for v in study["lrs"]]
    interior = (
        " (every final choice is interior)" if _interior(study) else " (some choices at an edge)"
    )
    first = wrap(
        f"**Measured {study['started'][:10]}** on {study['machine'].split(';')[0]}: "
        f"{len(tune) + len(fresh)} runs, {total:,.0f} s of runs summed: {'; '.join(per_task)}. "
        f"Learning rates: the grid {lrs[0]} to {lrs[-1]} on tuning seeds "
        f"{listed([str(s) for s in study['tune_seeds']])}, fresh seeds {seed_list(study['seeds'])}, "
        "extended one step where a choice sat at "
        f"its edge{interior}."
    )
    return first + "\n\n" + favor_paragraph(root, study) + "\n"


def favor_paragraph(root: Path, study: dict) -> str:
    """The FAVOR+ rerun against the study's own FAVOR+ rows: its runs, choices and test loss."""
    rerun = _json(root / RERUN / "mixer_ablation.json")
    n_tune = len(read_rows(root / RERUN / "tune_runs.csv"))
    n_fresh = len(read_rows(root / RERUN / "runs.csv"))
    said = []
    for t in rerun["cells"]:
        (before,) = [x for x in study["cells"] if x["task"] == t["task"]]
        new, old = t["chosen_lr"]["favor"], before["chosen_lr"]["favor"]
        ext = [e for e in t["extensions"] if "favor" in e["mixers"]]
        grid = (
            f" (after {WORDS.get(len(ext), len(ext))} extension{'s' if len(ext) > 1 else ''} of the grid "
            f"{'downwards' if ext[0]['edge'] == 'low' else 'upwards'})"
            if ext
            else ""
        )
        choice = (
            f"it chose {lr_text(new)} again"
            if new == old
            else f"it chose {lr_text(new)}{grid}, where it had chosen {lr_text(old)}"
        )
        if t["task"] == "shakespeare_char":
            loss = lambda s: next(  # noqa: E731
                g for g in s["groups"] if g.get("mixer", "favor") == "favor"
            )["test_loss_mean"]
            choice += (
                f" and its test loss went from {fmt(loss(before), '.3f')} to {fmt(loss(t), '.3f')}"
            )
        said.append(f"on {TASKS[t['task']][2]} {choice}")
    return wrap(
        "**FAVOR+ rerun.** Those runs used FAVOR+'s earlier orthogonal random features, which were "
        "biased. FAVOR+ alone was rerun with the unbiased features, the same protocol and seeds "
        f"(`--mixers favor`, {n_tune} tuning and {n_fresh} fresh-seed runs, "
        f"[`favor_rerun/`](../{RERUN.as_posix()}/mixer_ablation.md)): " + "; ".join(said) + ". "
        "The numbers below take FAVOR+'s rows from the rerun."
    )


def family_paragraph(root: Path) -> str:
    """The one family: its size, what it holds per task, and which verdicts it changed from the
    study's own report (its families, one per kind of test)."""
    study = Study(root)
    before = read_rows(root / FOLDER / "comparisons.csv")
    per_task = []
    for task in study.tasks():
        ons = sorted({r["on"] for r in study.family if r["task"] == task})
        n = len({r["config"] for r in study.family if r["task"] == task})
        measures = " and ".join(o.replace("_", " ").replace("metric", "accuracy") for o in ons)
        per_task.append(f"{n} mixers × {measures} on {TASKS[task][2]}")
    old_verdict = {(r["task"], r["config"].split(" ")[0], r["on"]): r["verdict"] for r in before}
    changes = []
    for r in study.family:
        key = (r["task"], r["config"].split(" ")[0], r["on"])
        if key[1] != "favor" and old_verdict.get(key, r["verdict"]) != r["verdict"]:
            margin = _margin_words(study, key[2]).lstrip("±")
            was, now = (SHORT[v].format(margin=margin) for v in (old_verdict[key], r["verdict"]))
            what = (
                ""
                if key[2] == TASKS[key[0]][0] and key[0] != "imdb"
                else (" accuracy" if key[2] == "test_metric" else " loss")
            )
            changes.append(f"{name(key[1])} on {TASKS[key[0]][2]}{what} from {was} to {now}")
    old_m = sorted({int(r["tests"]) for r in before})
    changed = (
        "; the single family is stricter, so a verdict can only weaken: " + "; ".join(changes)
        if changes
        else "; no verdict changed"
    )
    return (
        wrap(
            f"The one family: **{study.header['correction'].capitalize()}, {study.hypotheses()} "
            f"hypotheses**, three for each of the {len(study.family)} comparisons "
            f"({listed(per_task)}). The study's own report corrected each kind of test over its "
            f"{'/'.join(map(str, old_m))} comparisons as a family of its own{changed}. The margins, "
            f"fixed before the runs: {_margin_words(study, 'test_loss')} and "
            f"{_margin_words(study, 'test_metric')} of accuracy ({study.header['margin_reason']});"
            " the intervals beside the verdicts are each comparison's own "
            f"{round(100 * study.header['confidence'])}% interval."
        )
        + "\n"
    )
