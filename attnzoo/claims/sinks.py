"""The claims of the sink study (scripts/sinks.py): see attnzoo.claims."""

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

RUNS = "sinks/runs.csv"  # every fresh-seed run: its arm, seed, test loss and final rank
COMPARISONS = "sinks/comparisons.csv"  # each arm against none, one Holm family
LAYERS = "sinks/layers.csv"  # every evaluation of every fresh seed, per block
LOGITS = "sinks/sink_logits.csv"  # the learned sink logits at the end
STUDY = "sinks/sinks.json"  # per arm: the chosen learning rate and the intervals
ARMS = ("none", "learned", "zero_kv", "sigmoid")
SINKS = ("learned", "zero_kv")
SEEDS = 3  # fresh seeds per arm
BLOCKS = 4
FAMILY = 12  # hypotheses: three arms on test loss (two-sided, margin, TOST) and on final rank
# "No first-token sink": Gu et al.'s share (heads whose mean weight on the first token exceeds
# 0.3) stays at or below this in every evaluation, block and seed: fewer than 1 in 20 heads (one
# head in one of the trainer's 16 probe sequences, of 4 heads, is 1/64 ≈ 0.016).
NO_SINK = 0.05
INIT_ROW_SUM = (0.93, 0.95)  # a sink at logit 0 over up to 64 causal keys, at init
SAME = 0.05  # learned and zero_kv end within this of each other's row sums (per block and seed)
NEAR = 0.5  # "near 0": |logit| at most this, a sink weight within e^0.5 ≈ 1.6× zero_kv's


def layer_rows(t: Tables, arm: str, when: str | None = None) -> list[dict[str, str]]:
    """`arm`'s rows of layers.csv; `when` "init" (step 0) or "end" (each seed's last step)."""
    rows = t.rows(LAYERS, arm=arm)
    if when == "init":
        return [r for r in rows if r["step"] == "0"]
    if when == "end":
        last = {s: max(int(r["step"]) for r in rows if r["seed"] == s) for s in seeds_of(rows)}
        return [r for r in rows if int(r["step"]) == last[r["seed"]]]
    return rows


def seeds_of(rows: list[dict[str, str]]) -> list[str]:
    return sorted({r["seed"] for r in rows}, key=int)


def values(rows: list[dict[str, str]], stat: str, blocks: Sequence[int] = ()) -> list[float]:
    return [float(r[stat]) for r in rows if not blocks or int(r["layer"]) in blocks]


def replicated(t: Tables, arms: Sequence[str]) -> Problems:
    """Each arm: SEEDS fresh seeds, each evaluated at init and at the end in every block."""
    for arm in arms:
        seeds = seeds_of(layer_rows(t, arm))
        yield from expect(len(seeds) == SEEDS, f"{arm}: seeds {seeds} in {LAYERS}")
        for when in ("init", "end"):
            n = len(layer_rows(t, arm, when))
            yield from expect(n == SEEDS * BLOCKS, f"{arm}: {n} {when} rows, not {SEEDS * BLOCKS}")


def no_first_token_sink(t: Tables) -> Problems:
    yield from replicated(t, ARMS)
    for arm in ARMS:
        top = max(values(layer_rows(t, arm), "sink_share"), default=1.0)
        yield from expect(top <= NO_SINK, f"{arm}: a sink share of {top:.3f} > {NO_SINK}")


def sink_share_max(t: Tables) -> dict[str, str]:
    return {"max": fmt(max(v for a in ARMS for v in values(layer_rows(t, a), "sink_share")), ".2f")}


DEEP = (2, 3, 4)  # the blocks whose rows a sink empties most


def sinks_used(t: Tables) -> Problems:
    """With a sink, every seed's row sums in blocks 2-4 end below where they started."""
    yield from replicated(t, SINKS)
    for arm in SINKS:
        start = {(r["seed"], r["layer"]): float(r["row_sum"]) for r in layer_rows(t, arm, "init")}
        low, high = INIT_ROW_SUM
        yield from expect(
            all(low <= v <= high for v in start.values()),
            f"{arm}: init row sums {sorted(start.values())} outside {INIT_ROW_SUM}",
        )
        for r in layer_rows(t, arm, "end"):
            if int(r["layer"]) in DEEP:
                before = start[(r["seed"], r["layer"])]
                yield from expect(
                    float(r["row_sum"]) < before,
                    f"{arm} seed {r['seed']} block {r['layer']}: row sum "
                    f"{float(r['row_sum']):.3f} not below {before:.3f}",
                )


def used_fields(t: Tables) -> dict[str, str]:
    end = [v for a in SINKS for v in values(layer_rows(t, a, "end"), "row_sum", DEEP)]
    first = [v for a in SINKS for v in values(layer_rows(t, a, "end"), "row_sum", (1,))]
    init = [v for a in SINKS for v in values(layer_rows(t, a, "init"), "row_sum")]
    return {"end": span(end, ".2f"), "init": span(init, ".2f"), "first": span(first, ".2f")}


def learned_is_zero_kv(t: Tables) -> Problems:
    """The learned logits end near their init, 0 (zero_kv's sink), and the two arms' row sums
    within SAME of each other in every block and seed."""
    yield from replicated(t, SINKS)
    logits = [float(r["logit"]) for r in t.rows(LOGITS, arm="learned")]
    n = SEEDS * BLOCKS * 4  # 4 heads a block
    yield from expect(len(logits) == n, f"{len(logits)} learned logits in {LOGITS}, not {n}")
    far = max((abs(x) for x in logits), default=0.0)
    yield from expect(far <= NEAR, f"a learned logit at {far:.3f} from 0, beyond {NEAR}")
    pairs = row_sum_gaps(t)
    yield from expect(
        bool(pairs) and max(pairs) <= SAME,
        f"learned and zero_kv row sums differ by up to {max(pairs, default=1):.3f}",
    )


def row_sum_gaps(t: Tables) -> list[float]:
    zero = {(r["seed"], r["layer"]): float(r["row_sum"]) for r in layer_rows(t, "zero_kv", "end")}
    return [
        abs(float(r["row_sum"]) - zero[(r["seed"], r["layer"])])
        for r in layer_rows(t, "learned", "end")
        if (r["seed"], r["layer"]) in zero
    ]


def logit_fields(t: Tables) -> dict[str, str]:
    logits = [float(r["logit"]) for r in t.rows(LOGITS, arm="learned")]
    return {
        "lo": fmt(min(logits), "+.2f"),
        "hi": fmt(max(logits), "+.2f"),
        "gap": fmt(max(row_sum_gaps(t)), ".2f"),
    }


def sigmoid_falls(t: Tables) -> Problems:
    """Sigmoid attention's rows: every block and seed ends below where it started."""
    yield from replicated(t, ["sigmoid"])
    start = {(r["seed"], r["layer"]): float(r["row_sum"]) for r in layer_rows(t, "sigmoid", "init")}
    for r in layer_rows(t, "sigmoid", "end"):
        before = start[(r["seed"], r["layer"])]
        yield from expect(
            float(r["row_sum"]) < before,
            f"sigmoid seed {r['seed']} block {r['layer']}: row sum "
            f"{float(r['row_sum']):.3f} not below {before:.3f}",
        )


def sigmoid_fields(t: Tables) -> dict[str, str]:
    return {w: span(values(layer_rows(t, "sigmoid", w), "row_sum"), ".2f") for w in ("init", "end")}


def last_block_rises(t: Tables) -> Problems:
    """Every arm's last block ends with a larger relative residual than at init, every seed."""
    yield from replicated(t, ARMS)
    for arm in ARMS:
        start = {
            r["seed"]: float(r["relative_residual"])
            for r in layer_rows(t, arm, "init")
            if int(r["layer"]) == BLOCKS
        }
        for r in layer_rows(t, arm, "end"):
            if int(r["layer"]) == BLOCKS:
                end = float(r["relative_residual"])
                yield from expect(
                    end > start[r["seed"]],
                    f"{arm} seed {r['seed']}: {end:.3f} ≤ {start[r['seed']]:.3f}",
                )


def last_block_fields(t: Tables) -> dict[str, str]:
    def at(when: str) -> str:
        return span(
            (
                v
                for a in ARMS
                for v in values(layer_rows(t, a, when), "relative_residual", (BLOCKS,))
            ),
            ".2f",
        )

    return {"init": at("init"), "end": at("end")}


def verdict(t: Tables, arm: str, on: str) -> dict[str, str]:
    return t.one(COMPARISONS, config=arm, on=on)


def verdicts(t: Tables, arms: Sequence[str], on: str, want: str) -> Problems:
    for arm in arms:
        r = verdict(t, arm, on)
        yield from expect(r["verdict"] == want, f"{arm} on {on}: {r['verdict']!r}, not {want!r}")
        yield from expect(
            (r["correction"], int(r["tests"]), int(r["n"])) == ("holm", FAMILY, SEEDS),
            f"{arm}: {r['correction']} over {r['tests']} tests, {r['n']} seeds",
        )


def none_resolved(t: Tables) -> Problems:
    """Every arm against none, on test loss and on final rank: not resolved."""
    yield from verdicts(t, ARMS[1:], "test_loss", "not resolved")
    yield from verdicts(t, ARMS[1:], "rank", "not resolved")


def diff_span(t: Tables, arms: Sequence[str], on: str, spec: str) -> str:
    """'from a to b': the smallest and largest difference from the reference (signed)."""
    diffs = [float(verdict(t, a, on)["diff"]) for a in arms]
    return f"from {fmt(min(diffs), spec)} to {fmt(max(diffs), spec)}"


def resolvable(t: Tables) -> list[float]:
    """The smallest test-loss difference each arm's comparison could resolve in the family."""
    return [float(verdict(t, a, "test_loss")["resolvable"]) for a in ARMS[1:]]


def row_fields(arm: str) -> Callable[[Tables], dict[str, str]]:
    """One row of the results page's table: the study's interval (sinks.json) and every seed's
    test loss and final rank in seed order (runs.csv)."""

    def fields(t: Tables) -> dict[str, str]:
        study = t.json(STUDY)["arms"][arm]
        (g,) = study["groups"]
        runs = sorted(t.rows(RUNS, arm=arm), key=lambda r: int(r["seed"]))
        low, high = fmt(g["test_loss_ci_low"], ".3f"), fmt(g["test_loss_ci_high"], ".3f")
        return {
            "lr": fmt(study["chosen_lr"], "g"),
            "interval": f"{fmt(g['test_loss_mean'], '.3f')} [{low}, {high}]",
            "seeds": listed((float(r["final_test_loss"]) for r in runs), ".3f"),
            "rank": listed((float(r["final_rank"]) for r in runs), ".2f"),
        }

    return fields


def seeded(t: Tables, arm: str) -> Problems:
    n = len(t.rows(RUNS, arm=arm))
    yield from expect(n == SEEDS, f"{arm}: {n} fresh seeds in {RUNS}, expected {SEEDS}")


def on_both_pages(id: str, text: str, tables: tuple[str, ...], predicate, fields) -> list[Claim]:
    """A headline the README and the results page both carry (the page's id ends in -page)."""
    return [
        Claim(id + suffix, page, text, tables, predicate, fields)
        for page, suffix in ((README, ""), (RESULTS_PAGE, "-page"))
    ]


SINK_CLAIMS = [
    *on_both_pages(
        "sinks-no-first-token",
        "no arm grows a first-token sink: at every evaluation of every block and seed at most "
        "{max} of the heads put a mean weight above 0.3 on the first token",
        (LAYERS,),
        no_first_token_sink,
        sink_share_max,
    ),
    Claim(
        "sinks-used",
        RESULTS_PAGE,
        "With a sink, learned or zero_kv, the rows of blocks 2–4 end summing to {end} (from "
        "{init} at init; block 1's to {first}): those heads send mass to the sink",
        (LAYERS,),
        sinks_used,
        used_fields,
    ),
    Claim(
        "sinks-learned-stays",
        RESULTS_PAGE,
        "The learned logits end between {lo} and {hi}, near their init 0, which is zero_kv's "
        "fixed sink, and the two arms' row sums end within {gap} of each other in every block "
        "and seed",
        (LAYERS, LOGITS),
        learned_is_zero_kv,
        logit_fields,
    ),
    Claim(
        "sinks-sigmoid",
        RESULTS_PAGE,
        "Sigmoid attention's rows sum to {init} at init (b = −log N) and to {end} at the end, "
        "lower in every block and seed",
        (LAYERS,),
        sigmoid_falls,
        sigmoid_fields,
    ),
    Claim(
        "sinks-not-resolved",
        RESULTS_PAGE,
        "no arm's test loss or final relative residual of the last block is resolved from the "
        "plain model's with 3 seeds (differences {loss} nats and {rank})",
        (COMPARISONS,),
        none_resolved,
        lambda t: {
            "loss": diff_span(t, ARMS[1:], "test_loss", "+.3f"),
            "rank": diff_span(t, ARMS[1:], "rank", "+.3f"),
        },
    ),
    Claim(  # the README's short form of the same verdicts
        "sinks-not-resolved-readme",
        README,
        "no arm's test loss or final relative residual of the last block is resolved from the "
        "plain model's with 3 seeds.",
        (COMPARISONS,),
        none_resolved,
    ),
    Claim(
        "sinks-resolvable",
        RESULTS_PAGE,
        "nor a difference of test loss smaller than these 3 seeds resolve in this family "
        "({lo}–{hi} nats)",
        (COMPARISONS,),
        lambda t: verdicts(t, ARMS[1:], "test_loss", "not resolved"),
        lambda t: {"lo": fmt(min(resolvable(t)), ".2f"), "hi": fmt(max(resolvable(t)), ".2f")},
    ),
    Claim(
        "sinks-no-collapse",
        RESULTS_PAGE,
        "the last block ends at a relative residual of {end} in every arm and seed, from {init} "
        "at init",
        (LAYERS,),
        last_block_rises,
        last_block_fields,
    ),
    *(
        Claim(
            f"sinks-table-{arm}",
            RESULTS_PAGE,
            f"| {arm} | {{lr}} | {{interval}} | {{seeds}} | {{rank}} |",
            (RUNS, STUDY),
            lambda t, a=arm: seeded(t, a),
            row_fields(arm),
        )
        for arm in ARMS
    ),
]
