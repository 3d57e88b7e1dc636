"""The claims of the mixers on real data: see attnzoo.claims."""

from __future__ import annotations

from collections.abc import Sequence

from attnzoo.claims.base import (
    README,
    RESULTS_PAGE,
    Claim,
    Problems,
    Tables,
    expect,
    fmt,
    listed,
    num,
    span,
)

# ---- the mixers on real data (scripts/mixer_ablation.py) ----------------------------------------

STUDY = "mixer_ablation/mixer_ablation.json"
COMPARISONS = "mixer_ablation/comparisons.csv"
REPORT = "mixer_ablation/mixer_ablation.md"
SHAKESPEARE, IMDB = "shakespeare_char", "imdb"
FAMILY = 28  # comparisons in the report's one Holm family
ACCURACY_POINTS = 100.0
WITHIN_TOST_P = 0.02  # the docs' bound on the six IMDB equivalences' adjusted TOST p


def comparison(t: Tables, task: str, mixer: str, on: str) -> dict[str, str]:
    rows = [r for r in t.rows(COMPARISONS, task=task, on=on) if r["config"].split(" ")[0] == mixer]
    if len(rows) != 1:
        raise LookupError(f"{COMPARISONS}: {len(rows)} rows for {task} {mixer} on {on}")
    return rows[0]


def groups(t: Tables, task: str) -> dict[str, dict]:
    (study,) = [s for s in t.json(STUDY)["tasks"] if s["task"] == task]
    return {g["mixer"]: g for g in study["groups"]}


def verdicts(t: Tables, task: str, on: str, mixers: Sequence[str], want: str) -> Problems:
    for m in mixers:
        r = comparison(t, task, m, on)
        yield from expect(
            r["verdict"] == want, f"{task} {m} on {on}: {r['verdict']!r}, not {want!r}"
        )
        yield from expect(
            (r["correction"], int(r["tests"]), int(r["n"])) == ("holm", FAMILY, 5),
            f"{task} {m}: {r['correction']} over {r['tests']} tests, {r['n']} seeds",
        )


def ps(t: Tables, task: str, on: str, mixers: Sequence[str], key: str, spec: str = "#.2g") -> str:
    return listed((num(comparison(t, task, m, on), key) for m in mixers), spec)


def ci_of(r: dict[str, str], spec: str, scale: float = 1.0, sign: float = 1.0) -> str:
    """'Δ [low, high]' of a comparison, times `sign` (a worse accuracy as a positive gap)."""
    ends = sorted((sign * num(r, "diff_ci_low"), sign * num(r, "diff_ci_high")))
    d, low, high = (fmt(v, spec, scale) for v in (sign * num(r, "diff"), *ends))
    return f"{d} [{low}, {high}]"


VERDICT_WORDS = {
    "within margin": "within ±{margin}",
    "worse": "worse",
    "worse by more than the margin": "worse by more than {margin}",
}


def table_rows(t: Tables, task: str, first: str, second: str, on: str, margin: str) -> str:
    """The docs table of `task`, rows from the best to the worst against scaled-dot, every
    number from the study's groups and comparisons."""
    g = groups(t, task)
    loss_first = on == "test_loss"
    spec, scale = (".3f", 1.0) if loss_first else (".1f", ACCURACY_POINTS)
    rest = sorted(
        (m for m in g if m != "scaled_dot"),
        key=lambda m: num(comparison(t, task, m, on), "diff") * (1 if loss_first else -1),
    )
    lines = []
    for m in ["scaled_dot", *rest]:
        lr = f"{g[m]['train.lr']:.0e}".replace("e-0", "e-")
        cells = [m, lr]
        for key in (first, second):
            cells.append(
                f"{fmt(g[m][key + '_mean'], '.3f')} "
                f"[{fmt(g[m][key + '_ci_low'], '.3f')}, {fmt(g[m][key + '_ci_high'], '.3f')}]"
            )
        if m == "scaled_dot":
            cells.append("reference")
        else:
            r = comparison(t, task, m, on)
            words = VERDICT_WORDS[r["verdict"]].format(margin=margin)
            d = f"{fmt(num(r, 'diff'), '+' + spec, scale)}"
            low = fmt(num(r, "diff_ci_low"), "+" + spec, scale)
            high = fmt(num(r, "diff_ci_high"), "+" + spec, scale)
            cells.append(f"{d} [{low}, {high}], {words}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def family(t: Tables) -> Problems:
    rows = t.rows(COMPARISONS)
    yield from expect(len(rows) == FAMILY, f"{len(rows)} comparisons, not {FAMILY}")
    yield from expect({r["correction"] for r in rows} == {"holm"}, "not all Holm-corrected")


def not_flattened(t: Tables, task: str) -> Problems:
    rows = t.markdown(REPORT, "| mixer | train.lr |", f"## {task}")
    yield from expect(len(rows) == len(groups(t, task)), f"{task}: {len(rows)} report rows")
    for r in rows:
        yield from expect(
            r["flattened"] == "no", f"{task} {r['mixer']}: flattened {r['flattened']}"
        )


SH_WITHIN = ("pooling", "quadratic", "local")
SH_WORSE = ("metric", "linear", "token_mlp", "favor")
IMDB_WITHIN = ("quadratic", "metric", "nystrom", "favor", "local", "linear")


def imdb_within(t: Tables) -> Problems:
    yield from verdicts(t, IMDB, "test_metric", IMDB_WITHIN, "within margin")
    yield from verdicts(t, IMDB, "test_loss", IMDB_WITHIN, "within margin")
    for m in IMDB_WITHIN:
        p = num(comparison(t, IMDB, m, "test_metric"), "p_tost_adjusted")
        yield from expect(p <= WITHIN_TOST_P, f"{m}: adjusted TOST p {p:.3g}")


def worse_only(
    t: Tables, task: str, on: str, mixers: Sequence[str], alpha: float = 0.05
) -> Problems:
    """Worse (two-sided), and 'by more than the margin' not surviving the correction."""
    yield from verdicts(t, task, on, mixers, "worse")
    for m in mixers:
        p = num(comparison(t, task, m, on), "p_margin_adjusted")
        yield from expect(p >= alpha, f"{task} {m}: beyond the margin at adjusted p {p:.3g}")


MIXERS = [
    Claim(
        "mixers-readme",
        README,
        "on Tiny Shakespeare, pooling, quadratic and local attention are within ±0.05 nats of it; "
        "metric, linear, FAVOR+ (run with its earlier, biased random features) and the token MLP "
        "are worse by {worse} nats, so NLP-MetaFormer's "
        '"metric trains with not much difference from a transformer" is not supported. On IMDB '
        "(one block), six mixers are within ±2 points of scaled-dot's {reference} accuracy; "
        "pooling ({pooling} points) and the token MLP ({token_mlp}) score below it, identity and "
        "Fourier by more than 2 points",
        (COMPARISONS, STUDY),
        lambda t: [
            *verdicts(t, SHAKESPEARE, "test_loss", SH_WITHIN, "within margin"),
            *worse_only(t, SHAKESPEARE, "test_loss", SH_WORSE),
            *imdb_within(t),
            *verdicts(t, IMDB, "test_metric", ("pooling", "token_mlp"), "worse"),
            *verdicts(
                t, IMDB, "test_metric", ("identity", "fourier"), "worse by more than the margin"
            ),
        ],
        lambda t: {
            "worse": span(
                (num(comparison(t, SHAKESPEARE, m, "test_loss"), "diff") for m in SH_WORSE), ".2f"
            ),
            "reference": fmt(groups(t, IMDB)["scaled_dot"]["test_metric_mean"], ".3f"),
            "pooling": fmt(num(comparison(t, IMDB, "pooling", "test_metric"), "diff"), ".1f", 100),
            "token_mlp": fmt(
                num(comparison(t, IMDB, "token_mlp", "test_metric"), "diff"), ".1f", 100
            ),
        },
    ),
    Claim(
        "mixers-shakespeare-table",
        RESULTS_PAGE,
        "{rows}",
        (COMPARISONS, STUDY),
        family,
        lambda t: {
            "rows": table_rows(t, SHAKESPEARE, "test_loss", "test_metric", "test_loss", "0.05")
        },
    ),
    Claim(
        "mixers-imdb-table",
        RESULTS_PAGE,
        "{rows}",
        (COMPARISONS, STUDY),
        family,
        lambda t: {"rows": table_rows(t, IMDB, "test_metric", "test_loss", "test_metric", "2")},
    ),
    Claim(
        "mixers-shakespeare-within",
        RESULTS_PAGE,
        "Pooling, quadratic and local attention match scaled-dot within ±0.05 nats (Holm-adjusted "
        "TOST p = {p})",
        (COMPARISONS,),
        lambda t: verdicts(t, SHAKESPEARE, "test_loss", SH_WITHIN, "within margin"),
        lambda t: {"p": ps(t, SHAKESPEARE, "test_loss", SH_WITHIN, "p_tost_adjusted")},
    ),
    Claim(
        "mixers-shakespeare-worse",
        RESULTS_PAGE,
        "Metric, linear attention, the token MLP and FAVOR+ are worse (two-sided, adjusted p = "
        "{p}), by {worse} nats; whether any of them is worse by more than the 0.05 margin does "
        "not survive the correction (the test against the margin, two-sided: raw p = {raw}; "
        "adjusted {adjusted}).",
        (COMPARISONS,),
        lambda t: worse_only(t, SHAKESPEARE, "test_loss", SH_WORSE),
        lambda t: {
            "p": ps(t, SHAKESPEARE, "test_loss", SH_WORSE, "p_adjusted"),
            "worse": span(
                (num(comparison(t, SHAKESPEARE, m, "test_loss"), "diff") for m in SH_WORSE), ".2f"
            ),
            "raw": ps(t, SHAKESPEARE, "test_loss", SH_WORSE, "p_margin"),
            "adjusted": ps(t, SHAKESPEARE, "test_loss", SH_WORSE, "p_margin_adjusted"),
        },
    ),
    Claim(
        "mixers-shakespeare-identity",
        RESULTS_PAGE,
        "Identity is worse by more than the margin ({diff} nats)",
        (COMPARISONS,),
        lambda t: verdicts(
            t, SHAKESPEARE, "test_loss", ("identity",), "worse by more than the margin"
        ),
        lambda t: {
            "diff": fmt(num(comparison(t, SHAKESPEARE, "identity", "test_loss"), "diff"), ".2f")
        },
    ),
    Claim(
        "mixers-shakespeare-metric",
        RESULTS_PAGE,
        "Not supported at ±0.05 nats: metric's test loss is higher than scaled-dot's by {ci} "
        "(adjusted p = {p}), and whether that exceeds the margin is not resolved by five seeds.",
        (COMPARISONS,),
        lambda t: worse_only(t, SHAKESPEARE, "test_loss", ("metric",)),
        lambda t: {
            "ci": ci_of(comparison(t, SHAKESPEARE, "metric", "test_loss"), ".3f"),
            "p": ps(t, SHAKESPEARE, "test_loss", ("metric",), "p_adjusted"),
        },
    ),
    Claim(
        "mixers-shakespeare-budget",
        RESULTS_PAGE,
        "no mixer's sampled validation loss had flattened by step 2000",
        (REPORT, STUDY),
        lambda t: not_flattened(t, SHAKESPEARE),
    ),
    Claim(
        "mixers-imdb-within",
        RESULTS_PAGE,
        "Six mixers match scaled-dot within ±2 points: quadratic, metric, Nyström, FAVOR+, local "
        "and linear attention (Holm-adjusted TOST p ≤ 0.02), and within ±0.05 nats on test loss "
        "too.",
        (COMPARISONS,),
        imdb_within,
    ),
    Claim(
        "mixers-imdb-pooling",
        RESULTS_PAGE,
        'Pooling is worse by {ci} (two-sided, adjusted p = {p}); neither "by more than 2 points" '
        'nor "within 2 points" survives the correction. On test loss it is within ±0.05.',
        (COMPARISONS,),
        lambda t: [
            *verdicts(t, IMDB, "test_metric", ("pooling",), "worse"),
            *verdicts(t, IMDB, "test_loss", ("pooling",), "within margin"),
        ],
        lambda t: {
            "ci": ci_of(comparison(t, IMDB, "pooling", "test_metric"), ".2f", 100, -1).replace(
                " [", " points [", 1
            ),
            "p": ps(t, IMDB, "test_metric", ("pooling",), "p_adjusted"),
        },
    ),
    Claim(
        "mixers-imdb-token-mlp",
        RESULTS_PAGE,
        "The token MLP is worse by {diff} points (two-sided, adjusted p = {p}); that it is worse "
        "by more than 2 points does not survive the correction (the test against the margin, "
        "two-sided: raw p = {raw}, adjusted {adjusted}).",
        (COMPARISONS,),
        lambda t: worse_only(t, IMDB, "test_metric", ("token_mlp",)),
        lambda t: {
            "diff": fmt(-num(comparison(t, IMDB, "token_mlp", "test_metric"), "diff"), ".1f", 100),
            "p": ps(t, IMDB, "test_metric", ("token_mlp",), "p_adjusted"),
            "raw": ps(t, IMDB, "test_metric", ("token_mlp",), "p_margin"),
            "adjusted": ps(t, IMDB, "test_metric", ("token_mlp",), "p_margin_adjusted"),
        },
    ),
    Claim(
        "mixers-imdb-identity-fourier",
        RESULTS_PAGE,
        "Identity (no token mixing) is worse by more than 2 points ({identity}; the test against "
        "the margin, two-sided: adjusted p = {p}, just inside 0.05), and Fourier by far more "
        "({fourier})",
        (COMPARISONS,),
        lambda t: verdicts(
            t, IMDB, "test_metric", ("identity", "fourier"), "worse by more than the margin"
        ),
        lambda t: {
            "identity": ci_of(comparison(t, IMDB, "identity", "test_metric"), ".1f", 100, -1),
            "fourier": ci_of(comparison(t, IMDB, "fourier", "test_metric"), ".1f", 100, -1).replace(
                " [", " points [", 1
            ),
            "p": ps(t, IMDB, "test_metric", ("identity",), "p_margin_adjusted", ".3g"),
        },
    ),
    Claim(
        "mixers-imdb-metaformer",
        RESULTS_PAGE,
        "At this budget it holds for quadratic only: pooling's accuracy decreases (by {pooling} "
        "points) and identity's by more than the 2-point margin.",
        (COMPARISONS, REPORT, STUDY),
        lambda t: [
            *verdicts(t, IMDB, "test_metric", ("quadratic",), "within margin"),
            *verdicts(t, IMDB, "test_metric", ("pooling",), "worse"),
            *verdicts(t, IMDB, "test_metric", ("identity",), "worse by more than the margin"),
            *not_flattened(t, IMDB),
        ],
        lambda t: {
            "pooling": fmt(-num(comparison(t, IMDB, "pooling", "test_metric"), "diff"), ".1f", 100)
        },
    ),
    Claim(
        "mixers-imdb-budget",
        RESULTS_PAGE,
        "no mixer's validation loss had flattened by step 300",
        (REPORT, STUDY),
        lambda t: not_flattened(t, IMDB),
    ),
]
