"""The claims of the recall study (scripts/recall.py): see attnzoo.claims."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attnzoo.claims.base import (
    README,
    RESULTS_PAGE,
    Claim,
    Problems,
    Tables,
    expect,
    fmt,
    listed,
    span,
)

RUNS = "recall/runs.csv"  # every fresh-seed run: its mixer, width, seed and test accuracy
COMPARISONS = "recall/comparisons.csv"  # each mixer against scaled-dot, one Holm family
STUDY = "recall/recall.json"  # per mixer: the chosen learning rate and the test interval
CURVES = "recall/curves.csv"  # the fresh seeds' sampled val accuracy at every evaluation
SEEDS = 3  # fresh seeds per mixer
FAMILY = 60  # hypotheses: five comparisons in each of four cells, each three tests
WIDTH = 64  # the cell the first claims are about (depth 2 in every cell committed)
SOLVED = 0.99  # test accuracy a seed needs to count as recalling
# The plateau: a model that answers a query with one of the sequence's 8 values, chosen without
# the key, scores 1/8; below PLATEAU a seed has not left it, at LEFT or above it has.
PLATEAU = 0.2
LEFT = 0.5


def accuracies(t: Tables, mixer: str, width: int = WIDTH, depth: int = 2) -> list[float]:
    """The fresh seeds' test accuracies of `mixer` at `width` and `depth`."""
    rows = t.rows(RUNS, mixer=mixer, width=str(width), depth=str(depth))
    return [float(r["final_test_metric"]) for r in rows]


def replicated(t: Tables, mixers: Sequence[str], width: int = WIDTH) -> Problems:
    for m in mixers:
        n = len(accuracies(t, m, width))
        yield from expect(
            n == SEEDS, f"{m}: {n} fresh seeds at width {width} in {RUNS}, expected {SEEDS}"
        )


def every_seed(
    t: Tables, mixers: Sequence[str], bound: float, at_least: bool, width: int = WIDTH
) -> Problems:
    """Every fresh seed of each mixer at `width` at or above `bound` (`at_least`), or below."""
    yield from replicated(t, mixers, width)
    for m in mixers:
        if not (values := accuracies(t, m, width)):
            continue  # replicated() said so
        worst = min(values) if at_least else max(values)
        ok = worst >= bound if at_least else worst < bound
        yield from expect(
            ok, f"{m}: a seed at {worst:.3f}, {'below' if at_least else 'not below'} {bound}"
        )


def recall(t: Tables, mixers: Sequence[str], width: int = WIDTH) -> Problems:
    return every_seed(t, mixers, SOLVED, True, width)


def off_the_plateau(t: Tables, mixers: Sequence[str], width: int = WIDTH) -> Problems:
    return every_seed(t, mixers, LEFT, True, width)


def on_the_plateau(t: Tables, mixers: Sequence[str], width: int = WIDTH) -> Problems:
    return every_seed(t, mixers, PLATEAU, False, width)


def verdict(t: Tables, mixer: str, width: int = WIDTH) -> dict[str, str]:
    rows = [
        r
        for r in t.rows(COMPARISONS, width=str(width), depth="2")
        if r["config"].split(" ")[0] == mixer
    ]
    if len(rows) != 1:
        raise LookupError(f"{COMPARISONS}: {len(rows)} rows for {mixer} at width {width}")
    return rows[0]


def verdicts(t: Tables, mixers: Sequence[str], want: str, width: int = WIDTH) -> Problems:
    """Each mixer's verdict against scaled-dot at `width` is `want`, from one Holm family over
    both cells, 3 seeds."""
    for m in mixers:
        r = verdict(t, m, width)
        yield from expect(r["verdict"] == want, f"{m}: {r['verdict']!r}, not {want!r}")
        yield from expect(
            (r["correction"], int(r["tests"]), int(r["n"])) == ("holm", FAMILY, SEEDS),
            f"{m}: {r['correction']} over {r['tests']} tests, {r['n']} seeds",
        )


def accuracy_span(t: Tables, mixers: Sequence[str], spec: str = ".2f", width: int = WIDTH) -> str:
    return span((a for m in mixers for a in accuracies(t, m, width)), spec)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


PLATEAU_MIXERS = ("linear", "retention", "gla")


def reference_split(t: Tables) -> Problems:
    """scaled-dot: two fresh seeds leave the plateau, the third stays on it."""
    yield from replicated(t, ["scaled_dot"])
    values = sorted(accuracies(t, "scaled_dot"))
    yield from expect(
        values[0] < PLATEAU and min(values[1:]) >= LEFT,
        f"scaled_dot's seeds {values}: not one on the plateau and two off it",
    )


def reference_fields(t: Tables) -> dict[str, str]:
    values = sorted(accuracies(t, "scaled_dot"))
    return {"recalled": span(values[1:], ".2f"), "stuck": fmt(values[0], ".2f")}


COMPARED = ("linear", "retention", "mamba2", "gla", "deltanet")

RECALL = [
    Claim(
        "recall-deltanet",
        README,
        "DeltaNet recalls in every fresh seed (test accuracy {acc}), Mamba-2 leaves the plateau "
        "in every seed ({mamba2})",
        (RUNS,),
        lambda t: [*recall(t, ["deltanet"]), *off_the_plateau(t, ["mamba2"])],
        lambda t: {
            "acc": accuracy_span(t, ["deltanet"], ".3f"),
            "mamba2": accuracy_span(t, ["mamba2"]),
        },
    ),
    Claim(
        "recall-plateau",
        README,
        "linear attention, retention and GLA stay on the plateau of guessing among the 8 values "
        "in every seed ({acc}; 1/8 = 0.125)",
        (RUNS,),
        lambda t: on_the_plateau(t, PLATEAU_MIXERS),
        lambda t: {"acc": accuracy_span(t, PLATEAU_MIXERS)},
    ),
    Claim(
        "recall-scaled-dot",
        README,
        "scaled-dot leaves it in two of its three seeds ({recalled}) and not in the third "
        "({stuck}), so against it no difference is resolved with 3 seeds",
        (RUNS, COMPARISONS),
        lambda t: [*reference_split(t), *verdicts(t, COMPARED, "not resolved")],
        reference_fields,
    ),
]


NARROW = 32  # the second width
WIDE = 128  # the third


def falls(t: Tables) -> Problems:
    """At the narrow width scaled-dot stays on the plateau in every seed, each DeltaNet seed is
    below each of its seeds at the wide width, Mamba-2's mean is lower and a seed of it is back
    on the plateau."""
    yield from on_the_plateau(t, ["scaled_dot"], NARROW)
    yield from replicated(t, ["deltanet", "mamba2"], NARROW)
    narrow, wide = accuracies(t, "deltanet", NARROW), accuracies(t, "deltanet")
    yield from expect(
        max(narrow, default=1) < min(wide, default=0),
        f"deltanet at width {NARROW} {narrow} not all below width {WIDTH} {wide}",
    )
    narrow, wide = accuracies(t, "mamba2", NARROW), accuracies(t, "mamba2")
    yield from expect(
        bool(narrow) and bool(wide) and mean(narrow) < mean(wide) and min(narrow) < PLATEAU,
        f"mamba2 at width {NARROW} {narrow}: mean not below width {WIDTH}'s or no seed on the plateau",
    )


def falls_fields(t: Tables) -> dict[str, str]:
    return {
        "scaled": accuracy_span(t, ["scaled_dot"], ".2f", NARROW),
        "delta": accuracy_span(t, ["deltanet"], ".2f", NARROW),
        "delta_wide": accuracy_span(t, ["deltanet"], ".3f"),
        "mamba": accuracy_span(t, ["mamba2"], ".2f", NARROW),
        "mamba_mean": fmt(mean(accuracies(t, "mamba2", NARROW)), ".2f"),
        "mamba_wide": fmt(mean(accuracies(t, "mamba2")), ".2f"),
    }


def narrow_verdicts(t: Tables) -> Problems:
    """No mixer resolved better or worse than scaled-dot at any width at depth 2; at the narrow
    one linear attention and GLA within the margin of it, the other three not resolved."""
    for width in (NARROW, WIDTH, WIDE):
        for m in COMPARED:
            v = verdict(t, m, width)["verdict"]
            yield from expect(
                v in ("not resolved", "within margin"), f"{m} at width {width}: {v!r}"
            )
    yield from verdicts(t, ["linear", "gla"], "within margin", NARROW)
    yield from verdicts(t, ["retention", "mamba2", "deltanet"], "not resolved", NARROW)
    yield from on_the_plateau(t, ["scaled_dot", *PLATEAU_MIXERS], NARROW)


RECALL += [
    Claim(
        "recall-narrow-page",
        RESULTS_PAGE,
        "At width 32 scaled-dot stays on the plateau in every seed, each DeltaNet seed ({delta}) "
        "ends below each of its width-64 seeds, and Mamba-2's mean is {mamba_mean} against "
        "{mamba_wide} at width 64, one seed back on the plateau ({mamba_low}); retention ends "
        "below the plateau ({retention}). These describe the seeds, not an effect of width: no "
        "difference between widths is tested",
        (RUNS,),
        lambda t: [*falls(t), *every_seed(t, ["retention"], 1 / 8, False, NARROW)],
        lambda t: (
            falls_fields(t)
            | {
                "mamba_low": fmt(min(accuracies(t, "mamba2", NARROW)), ".2f"),
                "retention": accuracy_span(t, ["retention"], ".2f", NARROW),
            }
        ),
    ),
    Claim(
        "recall-narrow-verdicts",
        RESULTS_PAGE,
        "At depth 2 no mixer is resolved better or worse than scaled-dot at any width ("
        f"{FAMILY} hypotheses in one Holm family, 3 seeds); at width 32 linear attention and GLA "
        "are within ±0.05 of it, all three on the plateau ({plateau})",
        (RUNS, COMPARISONS),
        narrow_verdicts,
        lambda t: {"plateau": accuracy_span(t, ["scaled_dot", "linear", "gla"], ".2f", NARROW)},
    ),
]


def wide(t: Tables) -> Problems:
    """Width 128, depth 2: DeltaNet recalls in every seed; scaled-dot leaves the plateau in every
    seed; Mamba-2's mean below its mean at width 64; linear attention, retention and GLA on the
    plateau in every seed at every width; against scaled-dot nothing resolved."""
    yield from recall(t, ["deltanet"], WIDE)
    yield from off_the_plateau(t, ["scaled_dot"], WIDE)
    yield from replicated(t, ["mamba2"], WIDE)
    here, before = accuracies(t, "mamba2", WIDE), accuracies(t, "mamba2")
    yield from expect(
        bool(here) and bool(before) and mean(here) < mean(before),
        f"mamba2's mean at width {WIDE} {here} not below width {WIDTH}'s {before}",
    )
    for width in (NARROW, WIDTH, WIDE):
        yield from on_the_plateau(t, PLATEAU_MIXERS, width)
    yield from verdicts(t, COMPARED, "not resolved", WIDE)


def wide_fields(t: Tables) -> dict[str, str]:
    means = [fmt(mean(accuracies(t, "mamba2", w)), ".2f") for w in (NARROW, WIDTH, WIDE)]
    return {
        "delta": accuracy_span(t, ["deltanet"], ".3f", WIDE),
        "scaled": accuracy_span(t, ["scaled_dot"], ".2f", WIDE),
        "mamba": accuracy_span(t, ["mamba2"], ".2f", WIDE),
        "means": ", ".join(means),
        "mamba_mean": means[-1],
        "before": " and ".join(means[:-1]),
        "plateau": span(
            (
                a
                for w in (NARROW, WIDTH, WIDE)
                for a in (x for m in PLATEAU_MIXERS for x in accuracies(t, m, w))
            ),
            ".2f",
        ),
    }


RECALL += [
    Claim(
        "recall-wide",
        README,
        "at width 128 DeltaNet recalls in every seed ({delta}), scaled-dot leaves the plateau in "
        "every seed ({scaled}), Mamba-2's mean is {mamba_mean} (against {before} at widths 32 and "
        "64; every width-128 Mamba-2 seed, and scaled-dot's lowest, still rising at step 1000), "
        "and linear attention, retention and GLA stay on the plateau at all three widths "
        "({plateau})",
        (RUNS, COMPARISONS, CURVES),
        lambda t: [*wide(t), *still_rising(t)],
        wide_fields,
    ),
    Claim(
        "recall-wide-page",
        RESULTS_PAGE,
        "At width 128 DeltaNet recalls in every seed ({delta}) and scaled-dot leaves the plateau "
        "in every seed ({scaled}); Mamba-2's seeds spread over {mamba}, its means are {means} at "
        "widths 32, 64 and 128 (no trend with width is tested); linear attention, retention and "
        "GLA stay on the plateau in every seed at every width ({plateau})",
        (RUNS, COMPARISONS),
        wide,
        wide_fields,
    ),
]


def last_evaluations(t: Tables, mixer: str, seed: str, n: int = 3) -> list[float]:
    """The last `n` sampled val accuracies of a fresh seed at width 128, depth 2 (curves.csv)."""
    rows = t.rows(CURVES, mixer=mixer, seed=seed, width=str(WIDE), depth="2")
    return [float(r["val_accuracy"]) for r in sorted(rows, key=lambda r: float(r["step"]))][-n:]


def still_rising(t: Tables) -> Problems:
    """Every Mamba-2 seed at width 128, and scaled-dot's seed that had not recalled, higher at
    each of the last two evaluations than at the one before."""
    low = min(
        t.rows(RUNS, mixer="scaled_dot", width=str(WIDE), depth="2"),
        key=lambda r: float(r["final_test_metric"]),
    )
    for mixer, seed in [*(("mamba2", s) for s in "012"), ("scaled_dot", low["seed"])]:
        last = last_evaluations(t, mixer, seed)
        yield from expect(
            len(last) == 3 and last[0] < last[1] < last[2],
            f"{mixer} seed {seed}: last evaluations {last}, not rising",
        )


RECALL.append(
    Claim(
        "recall-wide-rising",
        RESULTS_PAGE,
        "at step 1000 the validation accuracy of every Mamba-2 seed and of scaled-dot's third "
        "seed was still rising (higher at each of the last two evaluations; `curves.csv`)",
        (RUNS, CURVES),
        still_rising,
        lambda t: {},
    )
)

SHALLOW = ("scaled_dot", "linear", "retention", "gla")  # the mixers on the plateau in one block


def one_block(t: Tables) -> Problems:
    """Depth 1, width 64: DeltaNet recalls in every seed and is resolved better than scaled-dot
    by more than the margin; scaled-dot, linear, retention and GLA stay on the plateau in every
    seed; Mamba-2 leaves it in two seeds and not in the third."""
    for m in ("deltanet", "mamba2", *SHALLOW):
        n = len(accuracies(t, m, WIDTH, 1))
        yield from expect(n == SEEDS, f"{m} at depth 1: {n} fresh seeds, expected {SEEDS}")
    delta = accuracies(t, "deltanet", WIDTH, 1)
    yield from expect(bool(delta) and min(delta) >= SOLVED, f"deltanet at depth 1: {delta}")
    high = max((a for m in SHALLOW for a in accuracies(t, m, WIDTH, 1)), default=1)
    yield from expect(high < PLATEAU, f"a seed of {SHALLOW} at depth 1 at {high:.3f}")
    mamba = sorted(accuracies(t, "mamba2", WIDTH, 1))
    yield from expect(
        len(mamba) == 3 and mamba[0] < PLATEAU and mamba[1] >= LEFT,
        f"mamba2 at depth 1: {mamba}, not one seed on the plateau and two off",
    )
    rows = [
        r
        for r in t.rows(COMPARISONS, width=str(WIDTH), depth="1")
        if r["config"].startswith("deltanet ")
    ]
    got = [(r["verdict"], int(r["tests"])) for r in rows]
    yield from expect(got == [("better by more than the margin", FAMILY)], f"deltanet: {got}")


RECALL.append(
    Claim(
        "recall-one-block",
        RESULTS_PAGE,
        "With one block (width 64) DeltaNet recalls in every seed ({delta}) and is resolved better "
        "than scaled-dot by more than the margin; scaled-dot, linear attention, retention and GLA "
        "stay on the plateau in every seed ({plateau}); Mamba-2 leaves it in two of three seeds "
        "({mamba_off}) and not in the third ({mamba_on})",
        (RUNS, COMPARISONS),
        one_block,
        lambda t: {
            "delta": span(accuracies(t, "deltanet", WIDTH, 1), ".3f"),
            "plateau": span((a for m in SHALLOW for a in accuracies(t, m, WIDTH, 1)), ".2f"),
            "mamba_off": span(sorted(accuracies(t, "mamba2", WIDTH, 1))[1:], ".2f"),
            "mamba_on": fmt(min(accuracies(t, "mamba2", WIDTH, 1)), ".2f"),
        },
    )
)


def row_fields(mixer: str, width: int) -> Callable[[Tables], dict[str, str]]:
    """One row of the results page's table: the study's interval (recall.json) and every seed's
    test accuracy in seed order (runs.csv), at `width`."""

    def fields(t: Tables) -> dict[str, str]:
        (cell,) = [c for c in t.json(STUDY)["cells"] if (c["width"], c["depth"]) == (width, 2)]
        (g,) = [g for g in cell["groups"] if g["mixer"] == mixer]
        runs = t.rows(RUNS, mixer=mixer, width=str(width), depth="2")
        runs = sorted(runs, key=lambda r: int(r["seed"]))
        return {
            "lr": fmt(g["train.lr"], "g"),
            "interval": " ".join(
                [
                    fmt(g["test_metric_mean"], ".3f"),
                    f"[{fmt(g['test_metric_ci_low'], '.3f')},",
                    f"{fmt(g['test_metric_ci_high'], '.3f')}]",
                ]
            ),
            "seeds": listed((float(r["final_test_metric"]) for r in runs), ".3f"),
        }

    return fields


RECALL += [
    Claim(
        f"recall-table-{mixer}" + ("" if width == WIDTH else f"-{width}"),
        RESULTS_PAGE,
        f"| {width} | {mixer} | {{lr}} | {{interval}} | {{seeds}} |",
        (RUNS, STUDY),
        lambda t, m=mixer, w=width: replicated(t, [m], w),
        row_fields(mixer, width),
    )
    for width in (NARROW, WIDTH, WIDE)
    for mixer in ("scaled_dot", *COMPARED)
]
