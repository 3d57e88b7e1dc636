"""The rank-collapse-at-init study's headline on the README (scripts/rank_collapse.py's committed
tables): every stack's verdict, grouped by verdict, the softmax mixers' decrement ratio, what a
λ-skip does to the stacks that lose their state, and what a skip keeps. The verdicts are the
table's (attnzoo.analysis.verdicts read them from the curves); the words here only group them."""

from __future__ import annotations

import json
import math
from pathlib import Path

from attnzoo.pages.collapse_tables import (
    COLLAPSE,
    COLLAPSED,
    CUBIC,
    DOUBLY,
    HEADER,
    KEEP_RANK,
    KEPT,
    LAMBDA,
    NO_COLLAPSE,
    RATE,
    SEEDS,
    SINGLY,
    SOFTMAX,
    VANISHES,
    k_span,
    lambda_rows,
    log10_after,
    skip_alone_shares,
    skip_shares,
)
from attnzoo.pages.tables import Tables, num
from attnzoo.pages.words import fmt, listed, span, wrap

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
    t = Tables(root)
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


def scope(root: Path) -> str:
    """The results page's settings sentence: the study's header (rank_collapse.json), refused
    unless the per-seed tables hold its seeds and depth."""
    t = Tables(root)
    h = json.loads((root / "scripts/results" / HEADER).read_text(encoding="utf-8"))
    seeds = {int(r["seed"]) for r in t.rows(SEEDS)}
    depth = max(int(r["depth"]) for r in t.rows(SEEDS))
    rate_seeds = {int(r["seed"]) for r in t.rows(CUBIC)}
    if (len(seeds), depth, len(rate_seeds)) != (h["seeds"], h["depth"], h["rate_seeds"]):
        raise ValueError(
            f"{HEADER} says {h['seeds']} seeds, depth {h['depth']}, {h['rate_seeds']} rate "
            f"seeds; the tables hold {len(seeds)}, {depth} and {len(rate_seeds)}"
        )
    where, software = h["machine"].split("; ")[:2]
    return (
        wrap(
            f"Measured on {where} ({software}) by `{h['command']}`; **{h['seeds']} seeds** "
            f"(`--seeds`) for the variant table, **{h['rate_seeds']} seeds** (`--rate-seeds`) "
            f"for the kind of collapse below; width {h['dim']}, {h['heads']} heads, "
            f"{h['tokens']} tokens, depth {h['depth']}, float64 probe. Every interval is "
            "Student-t 95% over seeds with the sample standard deviation (ddof = 1)."
        )
        + "\n"
    )


# ---- the results page: what the rate table and the skip stacks show ---------------------------

EPS = ("linear", "favor")  # their default eps; the "(eps 0)" rows beside them
CONTROL = "frozen random row-stochastic (control)"
SAY_NO = (
    "scaled_dot (gate headwise)",
    "scaled_dot (gate elementwise)",
    "ssmax",
    "diff_attention",
    "softpick",
    "stick_breaking",
    "forgetting",
)
SETTINGS = {  # a skip stack's (variant, norm) in words
    ("+skip", "layernorm"): "with LayerNorm",
    ("+skip+mlp", "none"): "with the MLP and no norm",
    ("+skip+mlp", "layernorm"): "with the MLP and LayerNorm",
}
RATE_ROWS = (  # the first table: the row-stochastic mixers, their eps = 0 twins, the control
    *SOFTMAX,
    "linear",
    "linear (eps 0)",
    "favor",
    "favor (eps 0)",
    "nystrom",
    "local",
    CONTROL,
)


def _k(r: dict[str, str], column: str = "k") -> str:
    return (
        f"{fmt(num(r, column), '.2f')} [{fmt(num(r, column + '_low'), '.2f')}, "
        f"{fmt(num(r, column + '_high'), '.2f')}]"
    )


def rate_table(t: Tables) -> str:
    """The rate table: each collapsing row-stochastic stack's verdict and both k's, then the
    stacks that keep rank in one row with the least r_L / r_0 any of them keeps."""
    seeds = "/".join(sorted({r["seeds"] for r in t.rows(RATE)}))
    lines = [
        f"| mixer | collapse ({seeds} seeds) | decrement ratio k [95%], layers "
        f"{t.one(RATE, mixer=SOFTMAX[0])['layers_fitted']} | paper's k, log r₍ₗ₊₁₎ = "
        "k·log rₗ + log c [95%] |",
        "|---|---|---|---|",
    ]
    for mixer in RATE_ROWS:
        r = t.one(RATE, mixer=mixer)
        fitted = not math.isnan(num(r, "k"))
        cells = [mixer, r["verdict"].removeprefix("collapses ").removesuffix("ly")]
        cells += [_k(r), _k(r, "paper_k")] if fitted else ["–", "–"]
        lines.append("| " + " | ".join(cells) + " |")
    keep = [r for r in t.rows(RATE) if r["mixer"] in KEEP_RANK]
    least = min(num(r, "kept_share_low") for r in keep)
    lines.append(
        f"| {', '.join(r['mixer'] for r in keep)} | no collapse (r_L / r_0 ≥ "
        f"{fmt(least, '.2f')}) | – | – |"
    )
    return "\n".join(lines)


def _verdict_of(t: Tables, mixer: str) -> str:
    return t.one(RATE, mixer=mixer)["verdict"]


def _floor_by(t: Tables, mixer: str, floor: float = 1e-14) -> int | None:
    """The first block at which the plain float64 probe of `mixer`'s pure stack reads its
    floor (a relative residual below `floor`), or None."""
    rows = sorted(
        (int(r["depth"]), num(r, "residual_mean"))
        for r in t.rows(COLLAPSE, mixer=mixer, variant="pure", norm="none")
    )
    return next((d for d, v in rows if v < floor), None)


def softmax_finding(t: Tables) -> str:
    rows = [t.one(RATE, mixer=m) for m in SOFTMAX]
    kinds = {r["verdict"] for r in rows}
    words = kinds.pop() if len(kinds) == 1 else "collapse"
    floors = {_floor_by(t, m) for m in SOFTMAX}
    floor = (
        f"; the plain float64 probe reads each at its floor (below 1e-14) by block "
        f"{max(floors)} (`rank_collapse.md`'s columns), so an exponent it reads rests on the "
        "blocks before"
        if None not in floors
        else ""
    )
    return (
        f"**The softmax mixers** ({listed([name(m) for m in SOFTMAX])}) {words.replace('collapses', 'collapse')}"
        f": k = {k_span(t, SOFTMAX)} over blocks {rows[0]['layers_fitted']}, read past "
        f"float64's floor (the paper's least-squares k: {k_span(t, SOFTMAX, 'paper_k')}){floor}."
    )


def eps_finding(t: Tables) -> str:
    parts = []
    for label, mixers in (
        ("at their default eps", EPS),
        ("with eps = 0", [f"{m} (eps 0)" for m in EPS]),
    ):
        rows = [t.one(RATE, mixer=m) for m in mixers]
        kinds = {r["verdict"] for r in rows}
        k = " and ".join(fmt(num(r, "k"), ".2f") for r in rows)
        words = kinds.pop() if len(kinds) == 1 else "; ".join(r["verdict"] for r in rows)
        parts.append(f"{label} {words.replace('collapses', 'collapse')} (k = {k})")
    return f"**Linear attention and FAVOR+** {parts[0]}; {parts[1]}."


def nystrom_finding(t: Tables) -> str:
    a, b = t.one(RATE, mixer="nystrom"), t.one(RATE, mixer="scaled_dot")
    same = all(a[key] == b[key] for key in ("verdict", "k", "k_low", "k_high", "paper_k"))
    if same:
        return (
            f"**Nyström**'s row is scaled-dot's, number for number (k = {fmt(num(a, 'k'), '.2f')})."
        )
    return f"**Nyström** {a['verdict']} (k = {_k(a)}), not scaled-dot's row."


def control_finding(t: Tables) -> str:
    control, local = t.one(RATE, mixer=CONTROL), t.one(RATE, mixer="local")
    return (
        f"**The frozen random row-stochastic control** {control['verdict']} (k = "
        f"{fmt(num(control, 'k'), '.2f')}), **local attention** {local['verdict']} (k = "
        f"{fmt(num(local, 'k'), '.2f')}); after 3 blocks local attention's log10 r is "
        f"{log10_after(t, 'local', 3, '.2f')} against scaled-dot's "
        f"{log10_after(t, 'scaled_dot', 3, '.1f')} (mean [95%] over seeds, `cubic_rate.csv`)."
    )


def keep_finding(t: Tables) -> str:
    keep = [r for r in t.rows(RATE) if r["mixer"] in KEEP_RANK]
    verdicts = {r["verdict"] for r in keep}
    words = (
        verdicts.pop()
        if len(verdicts) == 1
        else "; ".join(f"{name(r['mixer'])}: {r['verdict']}" for r in keep)
    )
    who = listed([name(r["mixer"]) for r in keep])
    return f"**{who[0].upper() + who[1:]}**: {words} at init."


def skip_finding(t: Tables) -> str:
    """The skip sentence of the headline, and the stacks with a norm or an MLP beside the skip
    that end at a fifth or less, each mixer with the settings it does so in (mixers alike said
    together, in the rate table's order)."""
    shares = skip_shares(t)
    order = [r["mixer"] for r in t.rows(RATE)]
    settings: dict[str, list[str]] = {}
    for (mixer, variant, norm), v in shares.items():
        if (variant, norm) != ("+skip", "none") and sum(v) / len(v) <= COLLAPSED:
            settings.setdefault(mixer, []).append(
                SETTINGS.get((variant, norm), f"{variant} {norm}")
            )
    by: dict[tuple[str, ...], list[str]] = {}
    for mixer in sorted(settings, key=order.index):
        by.setdefault(tuple(sorted(settings[mixer], key=list(SETTINGS.values()).index)), []).append(
            name(mixer)
        )
    groups = "; ".join(f"{listed(ms)} {listed(list(where))}" for where, ms in by.items())
    never = [name(m) for m in order if any(k[0] == m for k in shares) and m not in settings]
    return (
        f"**Skips** (each mixer at its defaults). {skip_sentence(t)}: {groups}"
        + (f"; never {listed(never)}" if never else "")
        + "."
    )


def say_no_finding(t: Tables) -> str:
    by: dict[str, list[str]] = {}
    for mixer in SAY_NO:
        by.setdefault(_verdict_of(t, mixer), []).append(name(mixer))
    parts = [f"{listed(ms)}: {verdict}" for verdict, ms in by.items()]
    gates = [
        m
        for m in SAY_NO
        if m.startswith("scaled_dot (gate") and not math.isnan(num(t.one(RATE, mixer=m), "k"))
    ]
    gate_k = (
        "; over the blocks above float64's floor the output gates' decrement ratio is "
        + " and ".join(f"{_k(t.one(RATE, mixer=m))} ({name(m)})" for m in gates)
        + f", against the ungated {fmt(num(t.one(RATE, mixer='scaled_dot'), 'k'), '.2f')}"
        if gates
        else ""
    )
    return (
        "**The mixers that may put their weight nowhere or elsewhere**, pure at init: "
        + "; ".join(parts)
        + gate_k
        + "."
    )


def findings(root: Path) -> str:
    """docs/results.md's rate table and what it shows, for the row-stochastic mixers, the skip
    stacks and the mixers that may say no."""
    t = Tables(root)
    bullets = [
        softmax_finding(t),
        eps_finding(t),
        nystrom_finding(t),
        control_finding(t),
        keep_finding(t),
        skip_finding(t),
        say_no_finding(t),
    ]
    return rate_table(t) + "\n\n" + "\n".join(wrap(b, bullet=True) for b in bullets) + "\n"


# ---- the results page: the mixers that are not row-stochastic, the recurrent family, λ-skips ----

OPTION_ROWS = (  # the second table's stacks, in its order
    "sigmoid",
    "sigmoid (bias 0)",
    "scaled_dot (sink learned)",
    "scaled_dot (sink zero_kv)",
    "scaled_dot (causal)",
    "mamba2",
    "deltanet",
    "deltanet (gated)",
    "retention",
    "gla",
)
RECURRENT = ("retention", "gla", "mamba2", "deltanet")
CAUSAL = "scaled_dot (causal)"


def options_table(t: Tables) -> str:
    """The second table: each stack's verdict, stacks alike in one row."""
    by: dict[str, list[str]] = {}
    for mixer in OPTION_ROWS:
        by.setdefault(t.one(RATE, mixer=mixer)["verdict"], []).append(name(mixer))
    seeds = "/".join(sorted({t.one(RATE, mixer=m)["seeds"] for m in OPTION_ROWS}))
    lines = [f"| stack (pure, {seeds} seeds) | reading |", "|---|---|"]
    lines += [f"| {listed(ms)} | {verdict} |" for verdict, ms in by.items()]
    return "\n".join(lines)


def _skip_alone(t: Tables, mixer: str) -> str:
    from attnzoo.stats import mean_interval

    i = mean_interval(skip_alone_shares(t, mixer))
    return f"{fmt(i.mean, '.2g')} [{fmt(i.low, '.2g')}, {fmt(i.high, '.2g')}]"


def _same_stacks(t: Tables, a: str, b: str) -> bool:
    rows_a, rows_b = t.rows(SEEDS, mixer=a), t.rows(SEEDS, mixer=b)
    return len(rows_a) == len(rows_b) > 0 and all(
        all(x[k] == y[k] for k in x if k != "mixer") for x, y in zip(rows_a, rows_b, strict=True)
    )


def _lambdas(values: list[float]) -> str:
    return listed([fmt(v, "g") for v in sorted(values)])


def _lambda_outcome(rows: dict[float, dict[str, str]]) -> str:
    """What a stack does over the λ sweep: the λ it keeps rank at, and the verdict at the rest."""
    keeps = [lam for lam, r in rows.items() if r["verdict"] == NO_COLLAPSE]
    if len(keeps) == len(rows):
        return "rank kept at every λ of the sweep"
    others = {lam: r["verdict"] for lam, r in rows.items() if lam not in keeps}
    said = [
        f"{verdict.replace(', rate not resolved', ' (rate not resolved)')} at λ = "
        f"{_lambdas([lam for lam, v in others.items() if v == verdict])}"
        for verdict in dict.fromkeys(others.values())
    ]
    return ", ".join([f"rank kept at λ = {_lambdas(keeps)}", *said] if keeps else said)


def lambda_finding(t: Tables) -> str:
    """The stacks of the λ sweep grouped by what they do over it, each with its norms."""
    by: dict[str, dict[str, list[str]]] = {}
    for mixer in [*RECURRENT, CAUSAL]:
        for norm in ("none", "post-LN"):
            rows = lambda_rows(t, mixer, norm)
            if rows:
                outcome = _lambda_outcome(rows)
                by.setdefault(outcome, {}).setdefault(mixer, []).append(
                    "no norm" if norm == "none" else norm
                )
    parts = []
    for outcome, mixers in by.items():
        who: dict[tuple[str, ...], list[str]] = {}
        for mixer, norms in mixers.items():
            who.setdefault(tuple(norms), []).append(name(mixer))
        stacks = ", ".join(f"{listed(ms)} with {' or '.join(norms)}" for norms, ms in who.items())
        parts.append(f"{stacks[0].upper() + stacks[1:]}: {outcome}.")
    causal = lambda_rows(t, CAUSAL, "none")
    collapsing = [lam for lam, r in causal.items() if r["verdict"].startswith("collapses")]
    kept = [lam for lam, r in causal.items() if r["verdict"] == NO_COLLAPSE and lam > 0]
    edge = (
        f" Causal scaled-dot's r_L / r_0 (no norm) is "
        f"{fmt(num(causal[max(collapsing)], 'kept_share'), '.2f')} at λ = {max(collapsing):g} "
        f"and {fmt(num(causal[min(kept)], 'kept_share'), '.2f')} at λ = {min(kept):g}."
        if collapsing and kept
        else ""
    )
    return "**λ-skips.** " + " ".join(parts) + edge


def options(root: Path) -> str:
    """docs/results.md's table and findings for the stacks that are not row-stochastic, the
    recurrent ones and the λ-skips."""
    t = Tables(root)
    sinks = ("scaled_dot (sink learned)", "scaled_dot (sink zero_kv)")
    same = (
        f" At init a learned sink's stacks are {name(sinks[1])}'s, number for number."
        if _same_stacks(t, *sinks)
        else ""
    )
    bullets = [
        f"**Sigmoid attention** with a skip alone: r_L / r_0 = {_skip_alone(t, 'sigmoid')} at "
        f"its default bias −log N, {_skip_alone(t, 'sigmoid (bias 0)')} at bias 0 (mean [95%] "
        f"over seeds).{same}",
        lambda_finding(t),
    ]
    return options_table(t) + "\n\n" + "\n".join(wrap(b, bullet=True) for b in bullets) + "\n"
