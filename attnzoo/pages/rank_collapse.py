"""The rank-collapse-at-init study's headline on the README (scripts/rank_collapse.py's committed
tables): every stack's verdict, grouped by verdict, the softmax mixers' decrement ratio, what a
λ-skip does to the stacks that lose their state, and what a skip keeps. The verdicts are the
table's (attnzoo.analysis.verdicts read them from the curves); the words here only group them."""

from __future__ import annotations

import math
from pathlib import Path

from attnzoo.claims.base import Tables, num
from attnzoo.claims.rank_collapse import (
    COLLAPSED,
    DOUBLY,
    KEPT,
    LAMBDA,
    NO_COLLAPSE,
    RATE,
    SEEDS,
    SINGLY,
    SOFTMAX,
    VANISHES,
    skip_shares,
)
from attnzoo.pages.words import listed, span, wrap

NOT_RESOLVED = "collapses, rate not resolved"
# a stack's name in the tables -> in prose; a name not here is written as the table has it
NAMES = {
    "scaled_dot": "scaled-dot",
    "quadratic": "quadratic",
    "metric": "metric",
    "pooling": "pooling",
    "identity": "identity",
    "linear": "linear attention",
    "favor": "FAVOR+",
    "nystrom": "Nyström",
    "fourier": "Fourier",
    "local": "a local window",
    "token_mlp": "the token MLP",
    "retention": "retention",
    "gla": "GLA",
    "mamba2": "Mamba-2",
    "deltanet": "DeltaNet",
    "sigmoid": "sigmoid attention",
    "softpick": "softpick",
    "stick_breaking": "stick-breaking",
    "diff_attention": "differential attention",
    "forgetting": "forgetting attention",
    "ssmax": "scalable softmax",
    "scaled_dot (causal)": "causal scaled-dot",
    "scaled_dot (sink learned)": "a learned sink",
    "scaled_dot (sink zero_kv)": "a zero_kv sink",
    "sigmoid (bias 0)": "sigmoid attention at bias 0",
    "deltanet (gated)": "Gated DeltaNet with its output gate",
    "scaled_dot (gate headwise)": "the headwise output gate",
    "scaled_dot (gate elementwise)": "the elementwise output gate",
    "linear (eps 0)": "linear attention with eps = 0",
    "favor (eps 0)": "FAVOR+ with eps = 0",
    "frozen random row-stochastic (control)": "a frozen random row-stochastic control",
}
# each verdict's words, in the order the headline gives them
GROUPS = {
    DOUBLY: "doubly exponential collapse",
    SINGLY: "singly exponential collapse",
    NOT_RESOLVED: "collapse, rate not resolved",
    VANISHES: "the state itself vanishes (rank undefined)",
    NO_COLLAPSE: "no collapse",
}


def name(row: str) -> str:
    return NAMES.get(row, row)


def cubic(t: Tables) -> bool:
    """The softmax mixers collapse doubly exponentially with k's interval inside [2.9, 3.1]:
    the paper's cubic rate."""
    rows = [t.one(RATE, mixer=m) for m in SOFTMAX]
    return all(
        r["verdict"] == DOUBLY and num(r, "k_low") >= 2.9 and num(r, "k_high") <= 3.1 for r in rows
    )


def groups(t: Tables) -> str:
    """Every stack of the table by its verdict, in GROUPS' order."""
    rows = t.rows(RATE)
    by: dict[str, list[str]] = {}
    for r in rows:
        by.setdefault(r["verdict"], []).append(name(r["mixer"]))
    parts = [f"{GROUPS.get(v, v)}: {listed(by[v])}" for v in [*GROUPS, *by] if v in by]
    return "; ".join(dict.fromkeys(parts))


def lambda_restores(t: Tables) -> str:
    """Which stacks that lose their state any λ ≠ 0 of the λ-skip sweep keeps, every norm."""
    vanish = [r["mixer"] for r in t.rows(RATE) if r["verdict"] == VANISHES]
    kept = []
    for mixer in vanish:
        rows = [r for r in t.rows(LAMBDA, mixer=mixer) if float(r["lambda"]) != 0]
        if rows and all(r["verdict"] == NO_COLLAPSE for r in rows):
            kept.append(name(mixer))
    if not kept:
        return ""
    return f"; any λ-skip of the sweep (λ ≠ 0) keeps {listed(kept)}"


def skip_sentence(t: Tables) -> str:
    """What a skip alone keeps (each stack's r_L / r_0 interval from KEPT up, or down to
    COLLAPSED), and how many stacks with a norm or an MLP beside the skip still end at a fifth
    or less by their means."""
    from attnzoo.stats import mean_interval

    shares = skip_shares(t)
    alone = {k: v for k, v in shares.items() if k[1:] == ("+skip", "none")}
    more = {k: v for k, v in shares.items() if k[1:] != ("+skip", "none")}
    lost = {k[0]: sum(v) / len(v) for k, v in alone.items() if mean_interval(v).high <= COLLAPSED}
    unresolved = [
        name(k[0]) for k, v in alone.items() if k[0] not in lost and mean_interval(v).low < KEPT
    ]
    seeds = "/".join(map(str, sorted({len(v) for v in shares.values()})))
    ended = sum(sum(v) / len(v) <= COLLAPSED for v in more.values())
    keeps = "every mixer's residual" + (
        " but " + listed([f"{name(m)}'s (r_L / r_0 = {span([s], '.2f')})" for m, s in lost.items()])
        if lost
        else ""
    )
    text = f"A skip alone keeps {keeps}"
    if unresolved:
        text += f" (not resolved for {listed(unresolved)})"
    return (
        f"{text}, and with LayerNorm or an MLP beside it {ended} of {len(more)} stacks still end at "
        f"a fifth or less of it (means over {seeds} seeds; rates with 95% intervals)"
    )


def headline(root: Path) -> str:
    """README's Results line for rank collapse at init."""
    t = Tables(root, (RATE, SEEDS, LAMBDA))
    first = t.one(RATE, mixer=SOFTMAX[0])
    k = span([num(t.one(RATE, mixer=m), "k") for m in SOFTMAX], ".2f")
    paper = span([num(t.one(RATE, mixer=m), "paper_k") for m in SOFTMAX], ".2f")
    seeds = sorted({int(r["seeds"]) for r in t.rows(RATE)})
    head = (
        "At init, pure softmax attention collapses doubly exponentially at the paper's cubic rate"
    )
    text = (
        f"**{head if cubic(t) else 'Rank collapse at init'}**: read past float64's floor with "
        "the token mean and residual propagated apart, the three softmax mixers' decrement ratio "
        f"k is {k} over blocks {first['layers_fitted']} (the paper's least-squares k, in "
        f"cubic_rate.png: {paper}; bound: 3). Every pure stack by its verdict "
        f"({'/'.join(map(str, seeds))} seeds) — {groups(t)}{lambda_restores(t)}. "
        f"{skip_sentence(t)}. "
        "[Rank collapse at init](docs/results.md#rank-collapse-at-init-every-mixer)"
    )
    assert not math.isnan(num(first, "k"))
    return wrap(text, bullet=True) + "\n"
