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
SEEDS = 3  # fresh seeds per mixer
FAMILY = 15  # hypotheses: five comparisons, each its two-sided, margin and TOST test
SOLVED = 0.99  # test accuracy a seed needs to count as recalling
# The plateau: a model that answers a query with one of the sequence's 8 values, chosen without
# the key, scores 1/8; below PLATEAU a seed has not left it, at LEFT or above it has.
PLATEAU = 0.2
LEFT = 0.5


def accuracies(t: Tables, mixer: str) -> list[float]:
    """The fresh seeds' test accuracies of `mixer`."""
    return [float(r["final_test_metric"]) for r in t.rows(RUNS, mixer=mixer)]


def replicated(t: Tables, mixers: Sequence[str]) -> Problems:
    for m in mixers:
        n = len(accuracies(t, m))
        yield from expect(n == SEEDS, f"{m}: {n} fresh seeds in {RUNS}, expected {SEEDS}")


def every_seed(t: Tables, mixers: Sequence[str], bound: float, at_least: bool) -> Problems:
    """Every fresh seed of each mixer at or above `bound` (`at_least`), or below it."""
    yield from replicated(t, mixers)
    for m in mixers:
        if not (values := accuracies(t, m)):
            continue  # replicated() said so
        worst = min(values) if at_least else max(values)
        ok = worst >= bound if at_least else worst < bound
        yield from expect(
            ok, f"{m}: a seed at {worst:.3f}, {'below' if at_least else 'not below'} {bound}"
        )


def recall(t: Tables, mixers: Sequence[str]) -> Problems:
    return every_seed(t, mixers, SOLVED, True)


def off_the_plateau(t: Tables, mixers: Sequence[str]) -> Problems:
    return every_seed(t, mixers, LEFT, True)


def on_the_plateau(t: Tables, mixers: Sequence[str]) -> Problems:
    return every_seed(t, mixers, PLATEAU, False)


def verdict(t: Tables, mixer: str) -> dict[str, str]:
    rows = [r for r in t.rows(COMPARISONS) if r["config"].split(" ")[0] == mixer]
    if len(rows) != 1:
        raise LookupError(f"{COMPARISONS}: {len(rows)} rows for {mixer}")
    return rows[0]


def verdicts(t: Tables, mixers: Sequence[str], want: str) -> Problems:
    """Each mixer's verdict against scaled-dot is `want`, from one Holm family over 3 seeds."""
    for m in mixers:
        r = verdict(t, m)
        yield from expect(r["verdict"] == want, f"{m}: {r['verdict']!r}, not {want!r}")
        yield from expect(
            (r["correction"], int(r["tests"]), int(r["n"])) == ("holm", FAMILY, SEEDS),
            f"{m}: {r['correction']} over {r['tests']} tests, {r['n']} seeds",
        )


def accuracy_span(t: Tables, mixers: Sequence[str], spec: str = ".2f") -> str:
    return span((a for m in mixers for a in accuracies(t, m)), spec)


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
        },  # fmt: skip
    ),
    Claim(
        "recall-plateau",
        README,
        "linear attention, retention and GLA stay on the plateau of guessing among the sequence's "
        "8 values in every seed ({acc}; 1/8 = 0.125)",
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


def row_fields(mixer: str) -> Callable[[Tables], dict[str, str]]:
    """One row of the results page's table: the study's interval (recall.json) and every seed's
    test accuracy in seed order (runs.csv)."""

    def fields(t: Tables) -> dict[str, str]:
        (cell,) = t.json(STUDY)["cells"]
        (g,) = [g for g in cell["groups"] if g["mixer"] == mixer]
        runs = sorted(t.rows(RUNS, mixer=mixer), key=lambda r: int(r["seed"]))
        return {
            "lr": fmt(g["train.lr"], "g"),
            "interval": " ".join(
                [
                    fmt(g["test_metric_mean"], ".3f"),
                    f"[{fmt(g['test_metric_ci_low'], '.3f')},",
                    f"{fmt(g['test_metric_ci_high'], '.3f')}]",
                ]
            ),  # fmt: skip
            "seeds": listed((float(r["final_test_metric"]) for r in runs), ".3f"),
        }

    return fields


RECALL += [
    Claim(
        f"recall-table-{mixer}",
        RESULTS_PAGE,
        f"| {mixer} | {{lr}} | {{interval}} | {{seeds}} |",
        (RUNS, STUDY),
        lambda t, m=mixer: replicated(t, [m]),
        row_fields(mixer),
    )
    for mixer in ("scaled_dot", *COMPARED)
]
