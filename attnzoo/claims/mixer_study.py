"""The claims of the mixers on real data that its hand-written paragraphs still quote (the FAVOR+
rerun and what one family changed): see attnzoo.claims. Its tables, verdicts and headline are
generated (attnzoo.pages.mixer_study)."""

from __future__ import annotations

from attnzoo.claims.base import (
    RESULTS_PAGE,
    Claim,
    Problems,
    Tables,
    expect,
    fmt,
)

# ---- the mixers on real data (scripts/mixer_ablation.py) ----------------------------------------

# The reanalysis: the study's per-seed values with FAVOR+'s rows from its rerun (unbiased
# features), every verdict from one Holm family (scripts/mixer_ablation.py --reanalyse).
COMPARISONS = "mixer_ablation/reanalysis/comparisons.csv"
SHAKESPEARE, IMDB = "shakespeare_char", "imdb"
ORIGINAL = "mixer_ablation/mixer_ablation.json"  # the study's own numbers (FAVOR+'s old features)
ORIGINAL_COMPARISONS = "mixer_ablation/comparisons.csv"  # its three families of 28
FAVOR_STUDY = "mixer_ablation/favor_rerun/mixer_ablation.json"
FAVOR_RUNS = "mixer_ablation/favor_rerun/runs.csv"
FAVOR_TUNE_RUNS = "mixer_ablation/favor_rerun/tune_runs.csv"


def favor_of(t: Tables, name: str, task: str) -> tuple[float, dict, list]:
    """FAVOR+'s chosen learning rate, its group and the grid's extensions in `name`'s `task`."""
    (study,) = [x for x in t.json(name)["tasks"] if x["task"] == task]
    # a study of one mixer varies no mixer: its one group has no mixer column
    (group,) = [g for g in study["groups"] if g.get("mixer", "favor") == "favor"]
    return float(study["chosen_lr"]["favor"]), group, study["extensions"]


def favor_rerun(t: Tables) -> Problems:
    lr_sh, _, ext_sh = favor_of(t, FAVOR_STUDY, SHAKESPEARE)
    lr_im, _, ext_im = favor_of(t, FAVOR_STUDY, IMDB)
    yield from expect(
        lr_sh == favor_of(t, ORIGINAL, SHAKESPEARE)[0] and not ext_sh,
        f"Shakespeare: chose {lr_sh}, extensions {ext_sh}",
    )
    yield from expect([e["edge"] for e in ext_im] == ["low"], f"IMDB extensions {ext_im}")
    yield from expect(lr_im != favor_of(t, ORIGINAL, IMDB)[0], f"IMDB chose {lr_im} again")


def lr_text(lr: float) -> str:
    return f"{lr:.0e}".replace("e-0", "e-")


def changed_verdicts(t: Tables) -> list[tuple[str, str, str, str, str]]:
    """(task, mixer, on, before, after) where the one-family reanalysis's verdict differs from
    the study's report, FAVOR+ (rerun) aside."""
    before = {
        (r["task"], r["config"].split(" ")[0], r["on"]): r["verdict"]
        for r in t.rows(ORIGINAL_COMPARISONS)
    }
    out = []
    for r in t.rows(COMPARISONS):
        key = (r["task"], r["config"].split(" ")[0], r["on"])
        if key[1] != "favor" and before[key] != r["verdict"]:
            out.append((*key, before[key], r["verdict"]))
    return out


EXPECTED_CHANGES = [
    (SHAKESPEARE, "quadratic", "test_loss", "within margin", "not resolved"),
    (IMDB, "identity", "test_metric", "worse by more than the margin", "worse"),
    (IMDB, "linear", "test_metric", "within margin", "not resolved"),
]


MIXERS = [
    Claim(
        "mixers-favor-rerun",
        RESULTS_PAGE,
        "(`--mixers favor`, {tune} tuning and {fresh} fresh-seed runs, [`favor_rerun/`](../"
        "scripts/results/mixer_ablation/favor_rerun/mixer_ablation.md)): on Tiny Shakespeare it "
        "chose {sh_lr} again and its test loss went from {before} to {after}; on IMDB it chose "
        "{im_lr} (after one extension of the grid downwards), where it had chosen {im_before}.",
        (ORIGINAL, FAVOR_STUDY, FAVOR_RUNS, FAVOR_TUNE_RUNS),
        favor_rerun,
        lambda t: {
            "tune": str(len(t.rows(FAVOR_TUNE_RUNS))),
            "fresh": str(len(t.rows(FAVOR_RUNS))),
            "sh_lr": lr_text(favor_of(t, FAVOR_STUDY, SHAKESPEARE)[0]),
            "before": fmt(favor_of(t, ORIGINAL, SHAKESPEARE)[1]["test_loss_mean"], ".3f"),
            "after": fmt(favor_of(t, FAVOR_STUDY, SHAKESPEARE)[1]["test_loss_mean"], ".3f"),
            "im_lr": lr_text(favor_of(t, FAVOR_STUDY, IMDB)[0]),
            "im_before": lr_text(favor_of(t, ORIGINAL, IMDB)[0]),
        },
    ),
    Claim(
        "mixers-one-family-changes",
        RESULTS_PAGE,
        "the single family is stricter, so a verdict can only weaken: quadratic on Tiny "
        'Shakespeare and linear attention\'s IMDB accuracy go from "within" to "not '
        'resolved", identity\'s IMDB accuracy from "by more than 2 points" to "worse".',
        (ORIGINAL_COMPARISONS, COMPARISONS),
        lambda t: expect(
            sorted(changed_verdicts(t)) == sorted(EXPECTED_CHANGES),
            f"verdicts that changed: {changed_verdicts(t)}",
        ),
    ),
]
