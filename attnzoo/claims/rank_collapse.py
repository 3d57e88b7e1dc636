"""The claims of rank collapse at init: see attnzoo.claims."""

from __future__ import annotations

import math
from collections.abc import Sequence

from attnzoo.claims.base import (
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


def k_span(t: Tables, mixers: Sequence[str], column: str = "k") -> str:
    return span((num(t.one(RATE, mixer=m), column) for m in mixers), ".2f")


def nystrom_is_scaled_dot(t: Tables) -> Problems:
    a, b = t.one(RATE, mixer="nystrom"), t.one(RATE, mixer="scaled_dot")
    for key in ("verdict", "k", "k_low", "k_high", "paper_k"):
        yield from expect(
            a[key] == b[key], f"nystrom's {key} {a[key]} is not scaled_dot's {b[key]}"
        )


def skip_shares(t: Tables) -> dict[tuple[str, str, str], list[float]]:
    """r_L / r_0 per seed, for every skip stack of a mixer at its defaults (not the option rows,
    whose names say their option in parentheses): (mixer, variant, norm) -> shares."""
    curves: dict[tuple[str, str, str, str], dict[int, float]] = {}
    for r in t.rows(SEEDS):
        if "skip" in r["variant"] and "(" not in r["mixer"]:
            key = (r["mixer"], r["variant"], r["norm"], r["seed"])
            curves.setdefault(key, {})[int(r["depth"])] = num(r, "relative_residual")
    shares: dict[tuple[str, str, str], list[float]] = {}
    for (mixer, variant, norm, _), curve in sorted(curves.items()):
        shares.setdefault((mixer, variant, norm), []).append(curve[max(curve)] / curve[0])
    return shares


# the one mixer at its defaults a skip alone does not keep: its per-head RMSNorm rescales the
# attention's output to unit size whatever the skip carries
SKIP_EXCEPTION = "diff_attention"


def skip_alone(shares: dict) -> dict:
    return {
        k: v for k, v in shares.items() if k[1:] == ("+skip", "none") and k[0] != SKIP_EXCEPTION
    }


def skip_with_more(shares: dict) -> dict:
    return {k: v for k, v in shares.items() if k[1:] != ("+skip", "none")}


def skip_keeps(t: Tables) -> Problems:
    from attnzoo.stats import mean_interval

    for key, shares in skip_alone(skip_shares(t)).items():
        low = mean_interval(shares).low
        yield from expect(low >= KEPT, f"{key}: r_L / r_0 interval starts at {low:.3g} < {KEPT}")
    high = mean_interval(skip_alone_shares(t, SKIP_EXCEPTION)).high
    yield from expect(high <= COLLAPSED, f"{SKIP_EXCEPTION} with a skip alone ends at {high:.3g}")


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
        "diff": fmt(mean_skip_share(t, SKIP_EXCEPTION), ".2f"),
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


LAMBDA = "rank_collapse/lambda_skip.csv"
VANISHES = "state vanishes (rank undefined)"
NOT_ROW_STOCHASTIC = ("sigmoid", "scaled_dot (sink learned)", "scaled_dot (sink zero_kv)")


def collapses(t: Tables, mixers: Sequence[str]) -> Problems:
    """Collapsed by the rule's share (r_L / r_0 interval ≤ 0.2), whatever its rate."""
    for m in mixers:
        got = t.one(RATE, mixer=m)["verdict"]
        yield from expect(got.startswith("collapses"), f"{m}: {got!r}, not a collapse")


def sink_at_init_is_zero_kv(t: Tables) -> Problems:
    """A learned sink starts at logit 0: at init its stacks are zero_kv's, number for number."""
    a = t.rows(SEEDS, mixer="scaled_dot (sink learned)")
    b = t.rows(SEEDS, mixer="scaled_dot (sink zero_kv)")
    yield from expect(len(a) == len(b) > 0, f"{len(a)} and {len(b)} rows")
    for x, y in zip(a, b, strict=False):
        same = all(x[k] == y[k] for k in x if k != "mixer")
        yield from expect(same, f"{x['variant']} {x['norm']} seed {x['seed']} depth {x['depth']}")


def lambda_rows(t: Tables, mixer: str, norm: str) -> dict[float, dict[str, str]]:
    return {float(r["lambda"]): r for r in t.rows(LAMBDA, mixer=mixer, norm=norm)}


def causal_softmax_needs_lambda_one(t: Tables) -> Problems:
    """Causal scaled-dot's pure stack collapses, and keeps collapsing with λ up to 0.3; λ = 1 and
    λ = −1 keep rank, with no norm and with post-LN."""
    yield from collapses(t, ("scaled_dot (causal)",))
    for norm in ("none", "post-LN"):
        rows = lambda_rows(t, "scaled_dot (causal)", norm)
        for lam, r in rows.items():
            want = lam in (-1.0, 1.0)
            got = r["verdict"] == NO_COLLAPSE
            yield from expect(got == want, f"λ={lam} {norm}: {r['verdict']}")
            if not want:
                yield from expect(r["verdict"].startswith("collapses"), f"λ={lam}: {r['verdict']}")


def lambda_fields(t: Tables) -> dict[str, str]:
    r = lambda_rows(t, "scaled_dot (causal)", "none")
    return {
        "share_03": fmt(num(r[0.3], "kept_share"), ".2f"),
        "share_1": fmt(num(r[1.0], "kept_share"), ".2f"),
    }


def skip_alone_shares(t: Tables, mixer: str) -> list[float]:
    """r_L / r_0 per seed of `mixer` with a skip alone (no norm, no MLP)."""
    curves: dict[str, dict[int, float]] = {}
    for r in t.rows(SEEDS, mixer=mixer, variant="+skip", norm="none"):
        curves.setdefault(r["seed"], {})[int(r["depth"])] = num(r, "relative_residual")
    return [c[max(c)] / c[0] for c in curves.values()]


def sigmoid_bias_zero_collapses_with_skip(t: Tables) -> Problems:
    from attnzoo.stats import mean_interval

    high = mean_interval(skip_alone_shares(t, "sigmoid (bias 0)")).high
    yield from expect(high <= COLLAPSED, f"r_L / r_0 interval ends at {high:.3g} > {COLLAPSED}")
    low = mean_interval(skip_alone_shares(t, "sigmoid")).low
    yield from expect(low >= KEPT, f"sigmoid at -log N: interval starts at {low:.3g} < {KEPT}")


def mean_skip_share(t: Tables, mixer: str) -> float:
    shares = skip_alone_shares(t, mixer)
    return sum(shares) / len(shares)


def say_no_verdicts(t: Tables) -> Problems:
    """The gates collapse, their rate not resolved (the plain float64 forward: no split rule
    carries a gate; the rate moves with the floor); ssmax and diff_attention collapse (rate not
    resolved); softpick's state vanishes; stick-breaking and forgetting keep rank."""
    gates = ("scaled_dot (gate headwise)", "scaled_dot (gate elementwise)")
    yield from verdicts_are(t, gates, "collapses, rate not resolved")
    for mixer in gates:
        if (measured := t.one(RATE, mixer=mixer)["measured"]) != "float64":
            yield f"{mixer}: measured by {measured!r}, not the plain float64 forward"
    yield from collapses(t, ("ssmax", "diff_attention"))
    yield from verdicts_are(t, ("softpick",), VANISHES)
    yield from verdicts_are(t, ("stick_breaking", "forgetting"), NO_COLLAPSE)


def k_interval(t: Tables, mixer: str) -> str:
    r = t.one(RATE, mixer=mixer)
    return (
        f"{fmt(num(r, 'k'), '.2f')} [{fmt(num(r, 'k_low'), '.2f')}, {fmt(num(r, 'k_high'), '.2f')}]"
    )


NEW_MIXERS = [
    Claim(
        "collapse-lambda",
        RESULTS_PAGE,
        "keeps collapsing up to λ = 0.3 (r_L / r_0 = {share_03}) and stops at λ = 1 ({share_1})",
        (RATE, LAMBDA),
        causal_softmax_needs_lambda_one,
        lambda_fields,
    ),
    Claim(
        "collapse-sigmoid-bias-zero",
        RESULTS_PAGE,
        "at bias 0 even a skip does not save it: r_L / r_0 = {share}",
        (SEEDS,),
        sigmoid_bias_zero_collapses_with_skip,
        lambda t: {"share": fmt(mean_skip_share(t, "sigmoid (bias 0)"), ".2g")},
    ),
    Claim(
        "collapse-sink-init-docs",
        RESULTS_PAGE,
        "a learned sink starts at logit 0, so at init its stacks are zero_kv's, number for number",
        (SEEDS,),
        sink_at_init_is_zero_kv,
    ),
]


RANK_COLLAPSE = [
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
        "A skip alone (no norm, no MLP) keeps the residual of every mixer but differential "
        "attention: r_L / r_0 between {alone_low} and {alone_high} (means over {seeds} seeds), "
        "differential attention's {diff}. With LayerNorm or an MLP beside "
        "the skip it does not always: {collapsed} of the {stacks} skip stacks with either end at "
        "r_L / r_0 ≤ 0.2 by their means",
        (SEEDS,),
        skip_keeps,
        skip_fields,
    ),
    *NEW_MIXERS,
    Claim(
        "collapse-say-no",
        RESULTS_PAGE,
        "scaled-dot with the output gate, headwise or elementwise, collapses too, its rate not "
        "resolved: no split rule carries a gate, and over the five layers above float64's floor "
        "its decrement ratio (k = {headwise} and {elementwise}, against the ungated 3.0) reads "
        "singly exponential at that floor and not resolved at 100× it; scalable softmax and "
        "differential attention collapse too, rate not resolved past float64's floor; softpick's "
        "pure stack loses its state itself (its rows sum to less than 1); stick-breaking and "
        "forgetting attention, both causal, keep rank",
        (RATE,),
        say_no_verdicts,
        lambda t: {
            "headwise": k_interval(t, "scaled_dot (gate headwise)"),
            "elementwise": k_interval(t, "scaled_dot (gate elementwise)"),
        },
    ),
]
