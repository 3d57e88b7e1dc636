"""The claims of rank collapse at init: see attnzoo.claims."""

from __future__ import annotations

import math
from collections.abc import Sequence

from attnzoo.claims.base import (
    README,
    RESULTS_PAGE,
    Claim,
    Problems,
    Tables,
    expect,
    fmt,
    num,
    span,
)

# ---- rank collapse at init (scripts/rank_collapse.py) -------------------------------------------

RATE = "rank_collapse/collapse_rate.csv"
SEEDS = "rank_collapse/rank_collapse_seeds.csv"
CUBIC = "rank_collapse/cubic_rate.csv"
COLLAPSE = "rank_collapse/rank_collapse.csv"
SOFTMAX = ("scaled_dot", "quadratic", "metric")
KEEP_RANK = ("pooling", "identity", "fourier", "token_mlp")
DOUBLY, SINGLY, NO_COLLAPSE = (
    "collapses doubly exponentially",
    "collapses singly exponentially",
    "no collapse",
)
KEPT, COLLAPSED = 0.5, 0.2  # attnzoo.analysis.verdicts' thresholds on r_L / r_0


def verdicts_are(t: Tables, mixers: Sequence[str], kind: str) -> Problems:
    for m in mixers:
        got = t.one(RATE, mixer=m)["verdict"]
        yield from expect(got == kind, f"{m}: {got!r}, not {kind!r}")


def cubic(t: Tables, mixers: Sequence[str]) -> Problems:
    """Doubly exponential at the paper's rate: k's interval inside [2.9, 3.1], over blocks 1–5."""
    yield from verdicts_are(t, mixers, DOUBLY)
    for m in mixers:
        r = t.one(RATE, mixer=m)
        yield from expect(r["layers_fitted"] == "1–5", f"{m}: k from layers {r['layers_fitted']}")
        yield from expect(
            num(r, "k_low") >= 2.9 and num(r, "k_high") <= 3.1,
            f"{m}: k [{r['k_low']}, {r['k_high']}] not within [2.9, 3.1]",
        )


def k_span(t: Tables, mixers: Sequence[str]) -> str:
    return span((num(t.one(RATE, mixer=m), "k") for m in mixers), ".2f")


def nystrom_is_scaled_dot(t: Tables) -> Problems:
    a, b = t.one(RATE, mixer="nystrom"), t.one(RATE, mixer="scaled_dot")
    for key in ("verdict", "k", "k_low", "k_high", "paper_k"):
        yield from expect(
            a[key] == b[key], f"nystrom's {key} {a[key]} is not scaled_dot's {b[key]}"
        )


def skip_shares(t: Tables) -> dict[tuple[str, str, str], list[float]]:
    """r_L / r_0 per seed, for every skip stack: (mixer, variant, norm) -> shares."""
    curves: dict[tuple[str, str, str, str], dict[int, float]] = {}
    for r in t.rows(SEEDS):
        if "skip" in r["variant"]:
            key = (r["mixer"], r["variant"], r["norm"], r["seed"])
            curves.setdefault(key, {})[int(r["depth"])] = num(r, "relative_residual")
    shares: dict[tuple[str, str, str], list[float]] = {}
    for (mixer, variant, norm, _), curve in sorted(curves.items()):
        shares.setdefault((mixer, variant, norm), []).append(curve[max(curve)] / curve[0])
    return shares


def skip_alone(shares: dict) -> dict:
    return {k: v for k, v in shares.items() if k[1:] == ("+skip", "none")}


def skip_with_more(shares: dict) -> dict:
    return {k: v for k, v in shares.items() if k[1:] != ("+skip", "none")}


def skip_keeps(t: Tables) -> Problems:
    from attnzoo.stats import mean_interval

    for key, shares in skip_alone(skip_shares(t)).items():
        low = mean_interval(shares).low
        yield from expect(low >= KEPT, f"{key}: r_L / r_0 interval starts at {low:.3g} < {KEPT}")


def skip_fields(t: Tables) -> dict[str, str]:
    shares = skip_shares(t)
    alone = [sum(v) / len(v) for v in skip_alone(shares).values()]
    more = [sum(v) / len(v) for v in skip_with_more(shares).values()]
    seeds = {len(v) for v in shares.values()}
    return {
        "alone_low": fmt(min(alone), ".2f"),
        "alone_high": fmt(max(alone), ".2f"),
        "collapsed": str(sum(m <= COLLAPSED for m in more)),
        "stacks": str(len(more)),
        "seeds": "/".join(map(str, sorted(seeds))),
    }


def log10_after(t: Tables, mixer: str, depth: int, spec: str) -> str:
    """log10 r after `depth` blocks, mean [95% interval] over the seeds."""
    from attnzoo.stats import mean_interval

    rows = t.rows(CUBIC, mixer=mixer, depth=str(depth))
    i = mean_interval([math.log10(num(r, "residual")) for r in rows])
    return f"{fmt(i.mean, spec)} [{fmt(i.low, spec)}, {fmt(i.high, spec)}]"


def float64_floor_by_block_3(t: Tables) -> Problems:
    for m in SOFTMAX:
        r = t.one(COLLAPSE, mixer=m, variant="pure", norm="none", depth="3")
        yield from expect(num(r, "residual_mean") < 1e-14, f"{m}: float64 r_3 above 1e-14")


RANK_COLLAPSE = [
    Claim(
        "collapse-softmax-cubic",
        README,
        "the three softmax mixers' per-layer exponent is {k} over blocks 1–5 (the paper's "
        "bound: 3)",
        (RATE,),
        lambda t: cubic(t, SOFTMAX),
        lambda t: {"k": k_span(t, SOFTMAX)},
    ),
    Claim(
        "collapse-eps",
        README,
        "linear attention and FAVOR+ are cubic too with eps = 0, but the eps = 1e-6 of their "
        "normaliser turns their collapse singly exponential once the residual is small",
        (RATE,),
        lambda t: [
            *cubic(t, ("linear (eps 0)", "favor (eps 0)")),
            *verdicts_are(t, ("linear", "favor"), SINGLY),
        ],
    ),
    Claim(
        "collapse-nystrom",
        README,
        "Nyström, exact softmax attention at these 32 tokens, is scaled-dot's",
        (RATE,),
        nystrom_is_scaled_dot,
    ),
    Claim(
        "collapse-local-control",
        README,
        "a local window decays singly exponentially, as a frozen random stochastic control does",
        (RATE,),
        lambda t: verdicts_are(t, ("local", "frozen random row-stochastic (control)"), SINGLY),
    ),
    Claim(
        "collapse-keep-rank",
        README,
        "pooling, identity, Fourier and the token MLP keep rank",
        (RATE,),
        lambda t: verdicts_are(t, KEEP_RANK, NO_COLLAPSE),
    ),
    Claim(
        "collapse-skip",
        README,
        "a skip alone keeps every mixer's residual, but with LayerNorm or an MLP beside it "
        "{collapsed} of {stacks} stacks still end at a fifth or less of it (means over {seeds} "
        "seeds; rates with 95% intervals)",
        (SEEDS,),
        skip_keeps,
        skip_fields,
    ),
    Claim(
        "collapse-softmax-cubic-docs",
        RESULTS_PAGE,
        "each layer's log-residual is three times the last one's (k = {k}). A plain float64 "
        "probe reaches its floor by block 3 in these stacks",
        (RATE, COLLAPSE),
        lambda t: [*cubic(t, SOFTMAX), *float64_floor_by_block_3(t)],
        lambda t: {"k": k_span(t, SOFTMAX)},
    ),
    Claim(
        "collapse-eps-docs",
        RESULTS_PAGE,
        "With eps = 0 both are doubly exponential with k = {linear} and {favor}",
        (RATE,),
        lambda t: cubic(t, ("linear (eps 0)", "favor (eps 0)")),
        lambda t: {
            "linear": fmt(num(t.one(RATE, mixer="linear (eps 0)"), "k"), ".2f"),
            "favor": fmt(num(t.one(RATE, mixer="favor (eps 0)"), "k"), ".2f"),
        },
    ),
    Claim(
        "collapse-nystrom-docs",
        RESULTS_PAGE,
        "so its stack is scaled-dot's, number for number: k = {k}",
        (RATE,),
        nystrom_is_scaled_dot,
        lambda t: {"k": fmt(num(t.one(RATE, mixer="nystrom"), "k"), ".2f")},
    ),
    Claim(
        "collapse-control-local-docs",
        RESULTS_PAGE,
        "decays singly exponentially (k = {control}); a local window decays more slowly than "
        "full attention (log10 r after 3 layers: {local} against {scaled_dot})",
        (RATE, CUBIC),
        lambda t: verdicts_are(t, ("local", "frozen random row-stochastic (control)"), SINGLY),
        lambda t: {
            "control": fmt(
                num(t.one(RATE, mixer="frozen random row-stochastic (control)"), "k"), ".2f"
            ),
            "local": log10_after(t, "local", 3, ".2f"),
            "scaled_dot": log10_after(t, "scaled_dot", 3, ".1f"),
        },
    ),
    Claim(
        "collapse-skip-docs",
        RESULTS_PAGE,
        "A skip alone (no norm, no MLP) keeps the residual of every mixer: r_L / r_0 between "
        "{alone_low} and {alone_high} (means over {seeds} seeds). With LayerNorm or an MLP beside "
        "the skip it does not always: {collapsed} of the {stacks} skip stacks with either end at "
        "r_L / r_0 ≤ 0.2 by their means",
        (SEEDS,),
        skip_keeps,
        skip_fields,
    ),
]
