"""Wu, Ajorlou, Wang, Jegelka & Jadbabaie (2024), "On the role of attention masks and LayerNorm in
transformers" (arXiv 2405.18781), figure 2: µ(X) = ‖X − 1·meanᵀ‖_F against depth, log-log, for
pure self-attention under a full, a causal and a sliding-window mask, with and without LayerNorm,
at random init.

The stacks are attnzoo's: `scaled_dot` (full; `causal=True` for the causal mask) and `local`
(bidirectional sliding window of `window` keys each side), residual none, no MLP; "with LayerNorm"
is the post-norm block with no skip, X ← LN(attention(X)), the paper's self-attention with
LayerNorm. Token embeddings and positions are drawn with std 1 (as dong2021-residual), the probe
is a float64 forward (attnzoo.propagation.hidden_states), and beside the paper's µ (which is not
scale-free: a value projection at PyTorch's default init shrinks every token by a constant factor
per layer) the figure plots µ(X)/‖X‖_F, the same distance with the state's size divided out.

The rate: per stack and seed, the least-squares slope of log µ/‖X‖_F against the layer, over the
layers where it lies between FIT_FLOOR and 0.5, read as a factor per layer (1: no collapse).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from attnzoo.atlas import gmean, select
from attnzoo.atlas._plot import panels, save, seed_lines

ID = "wu2024-masks"
PAPER = "Wu, Ajorlou, Wang, Jegelka & Jadbabaie 2024 (arXiv 2405.18781), figure 2"
PLOTS = (
    "µ(X) = ‖X − 1·mean‖_F and µ(X)/‖X‖_F against depth (log-log): pure self-attention with full, "
    "causal and sliding-window masks, with and without LayerNorm, at init"
)
SEEDS = 5
SECONDS = 130.0

MASKS = ("full", "causal", "sliding window")
NORMS = ("none", "LayerNorm")
FIT_FLOOR = 1e-13  # below this a float64 forward's µ/‖X‖ is rounding
COLORS = {"full": "C3", "causal": "C0", "sliding window": "C2"}


def _sizes(quick: bool) -> argparse.Namespace:
    if quick:
        return argparse.Namespace(dim=32, depth=24, heads=2, tokens=16, batch=4, vocab=64, window=1)
    return argparse.Namespace(dim=64, depth=128, heads=4, tokens=64, batch=4, vocab=64, window=4)


def _stack(mask: str, window: int):
    from attnzoo.analysis.stacks import Stack

    if mask == "full":
        return Stack("scaled_dot")
    if mask == "causal":
        return Stack("scaled_dot", causal=True)
    return Stack("local", {"window": window})


def radius(mask: str, tokens: int, window: int) -> int:
    """The paper's r for the mask's graph (token j → i when i attends to j): the fewest layers
    after which some token has reached every token, 1 for the full and the causal mask (the
    first token is seen by all), ⌈(N − 1)/2 / w⌉ from the middle token for a window of w keys
    each side."""
    if mask in ("full", "causal"):
        return 1
    return math.ceil((tokens - 1) / 2 / window)


def one_seed(seed: int, quick: bool) -> list[dict]:
    from attnzoo.analysis.stacks import build
    from attnzoo.propagation import hidden_states, relative_token_spread, token_spread

    args = _sizes(quick)
    rows = []
    for mask in MASKS:
        for norm in NORMS:
            position = "post" if norm == "LayerNorm" else "pre"
            model, tokens = build(
                _stack(mask, args.window),
                "none",
                False,
                "layernorm" if norm == "LayerNorm" else "none",
                args,
                seed,
                input_std=1.0,
                norm_position=position,
            )
            for d, h in enumerate(hidden_states(model, tokens)):
                rows.append(
                    {
                        "mask": mask,
                        "norm": norm,
                        "window": args.window if mask == "sliding window" else None,
                        "radius": radius(mask, args.tokens, args.window),
                        "tokens": args.tokens,
                        "seed": seed,
                        "layer": d,
                        "mu": float(token_spread(h).mean()),
                        "mu_relative": float(relative_token_spread(h).mean()),
                    }
                )
    return rows


def measure(seeds: int, quick: bool = False) -> list[dict]:
    rows = []
    for seed in range(seeds):
        rows += one_seed(seed, quick)
        print(f"  seed {seed + 1}/{seeds}", file=sys.stderr, flush=True)
    return rows


# ---- reading the rows --------------------------------------------------------------------------


def factor_per_layer(curve: dict[int, float]) -> float:
    """exp of the least-squares slope of log y against the layer over the layers ≥ 1 where
    FIT_FLOOR < y < 0.5; NaN with fewer than 3 such layers."""
    pts = [(d, math.log(v)) for d, v in curve.items() if d >= 1 and FIT_FLOOR < v < 0.5]
    if len(pts) < 3:
        return math.nan
    n = len(pts)
    mx = sum(d for d, _ in pts) / n
    my = sum(v for _, v in pts) / n
    sxx = sum((d - mx) ** 2 for d, _ in pts)
    return math.exp(sum((d - mx) * (v - my) for d, v in pts) / sxx)


def _curves(rows: list[dict], mask: str, norm: str, key: str) -> dict[int, dict[int, float]]:
    out: dict[int, dict[int, float]] = {}
    for r in select(rows, mask=mask, norm=norm):
        out.setdefault(r["seed"], {})[r["layer"]] = r[key]
    return out


def factors(rows: list[dict], mask: str, norm: str) -> list[float]:
    return [factor_per_layer(c) for c in _curves(rows, mask, norm, "mu_relative").values()]


def _at(rows, mask, norm, layer, key="mu_relative") -> float:
    return gmean([r[key] for r in select(rows, mask=mask, norm=norm, layer=layer)])


def _depth(rows: list[dict]) -> int:
    return max(r["layer"] for r in rows)


def draw(rows: list[dict], png: Path) -> None:
    depth, seeds = _depth(rows), len({r["seed"] for r in rows})
    tokens = rows[0]["tokens"]
    fig, axes = panels(
        2, f"{PAPER}: pure self-attention at init, {tokens} tokens, {seeds} seeds", 5.5, 4.5
    )
    for ax, key, name in (
        (axes[0], "mu", "µ(X) = ‖X − 1·mean‖_F (the paper's)"),
        (axes[1], "mu_relative", "µ(X) / ‖X‖_F"),
    ):
        for mask in MASKS:
            for norm in NORMS:
                sub = [
                    r
                    for r in select(rows, mask=mask, norm=norm)
                    if r["layer"] >= 1 and r[key] is not None and r[key] > 0
                ]
                window = sub[0]["window"] if sub and sub[0]["window"] else None
                label = f"{mask}{f' (w={window})' if window else ''}, " + (
                    "+LayerNorm" if norm == "LayerNorm" else "no norm"
                )
                style = "--" if norm == "LayerNorm" else "-"
                seed_lines(ax, sub, "layer", key, label, COLORS[mask], True, linestyle=style)
        if key == "mu_relative":
            ax.axhline(FIT_FLOOR, color="gray", ls=":", lw=1, label="float64 rounding")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(1, depth)
        ax.set_xlabel("layer t")
        ax.set_ylabel(name)
        ax.legend(fontsize=6)
    save(fig, png)


def _fmt(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "n/a"
    return f"{gmean(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def describe(rows: list[dict]) -> str:
    depth, seeds = _depth(rows), len({r["seed"] for r in rows})
    tokens = rows[0]["tokens"]
    window = next(r["window"] for r in rows if r["mask"] == "sliding window")
    rate = {(m, n): factors(rows, m, n) for m in MASKS for n in NORMS}
    last = {(m, n): _at(rows, m, n, depth) for m in MASKS for n in NORMS}
    first = {(m, n): _at(rows, m, n, 1) for m in MASKS for n in NORMS}
    radii = {m: select(rows, mask=m)[0]["radius"] for m in MASKS}
    pure_cells = "; ".join(
        f"{m} (r = {radii[m]}): per-layer factor {_fmt(rate[m, 'none'])}, "
        f"µ/‖X‖ {first[m, 'none']:.2g} at layer 1 → {last[m, 'none']:.2g} at layer {depth}"
        for m in MASKS
    )
    ln_cells = "; ".join(
        f"{m}: per-layer factor {_fmt(rate[m, 'LayerNorm'])}, µ/‖X‖ {first[m, 'LayerNorm']:.2g} "
        f"at layer 1 → {last[m, 'LayerNorm']:.2g}"
        for m in MASKS
    )
    mu_pure_window = _at(rows, "sliding window", "none", depth, "mu")
    mu_ln_window = _at(rows, "sliding window", "LayerNorm", depth, "mu")
    lines = [
        "**The paper's claim.** Pure self-attention under any mask whose graph is quasi-strongly "
        "connected (full, causal, sliding window) still collapses to rank one exponentially: "
        "µ(X⁽ᵗ⁾) ≤ C(1 − ε^r)^{t/r} with r the graph's radius, so a local (sliding-window) mask, "
        "with a larger r, provably slows the collapse. With LayerNorm the collapse is no longer "
        "universal: in randomly initialised models µ(X⁽ᵗ⁾) no longer converges to zero (their "
        "figure 2). (The bound's form is quoted from memory of the paper's theorem 1; the "
        "abstract and the figure's caption, which were checked, say exponential collapse for "
        "every mask, slower for local masks, and no convergence to zero with LayerNorm.)",
        "",
        f"**What attnzoo measures** ({seeds} seeds, {tokens} tokens, window w = {window} keys "
        f"each side, depth {depth}; factors: geometric mean [min, max] over seeds of the fitted "
        f"per-layer factor of µ/‖X‖, 1 = no collapse). Without norm: {pure_cells}. "
        f"With LayerNorm: {ln_cells}.",
    ]

    def collapses(m: str, n: str) -> bool:
        """Every seed's fitted factor below 1, or float64's rounding reached."""
        ok = [v for v in rate[m, n] if not math.isnan(v)]
        return last[m, n] < FIT_FLOOR or (len(ok) == len(rate[m, n]) and max(ok) < 1)

    pure_collapse = all(collapses(m, "none") for m in MASKS)
    ln_collapsed = [m for m in MASKS if last[m, "LayerNorm"] < 1e-3]
    g = {m: gmean([v for v in rate[m, "none"] if not math.isnan(v)]) for m in MASKS}
    window_slower = g["sliding window"] > max(
        (g[m] for m in ("full", "causal") if not math.isnan(g[m])), default=0
    )
    verdict = [
        "pure attention collapses under every mask (every seed's factor below 1, or float64's "
        "rounding reached)"
        if pure_collapse
        else "pure attention does not collapse under every mask here",
        "the sliding window, the mask with the largest radius, collapses slowest (its factor is "
        "the closest to 1)"
        if window_slower
        else "the sliding window does not collapse slowest here",
    ]
    agreement = "; ".join(verdict)
    lines += ["", f"**Agreement.** {agreement[0].upper()}{agreement[1:]}."]
    nan_full = all(math.isnan(v) for v in rate["full", "none"])
    notes = []
    if ln_collapsed:
        notes.append(
            f"LayerNorm does not stop the collapse here under the {' and '.join(ln_collapsed)} "
            f"mask{'s' if len(ln_collapsed) > 1 else ''} (µ/‖X‖ below 1e-3 at layer {depth}), "
            "against the paper's figure 2, where µ no longer converges to zero once LayerNorm is "
            "added. The paper proves the rescue only for suitably chosen value matrices (for "
            "other classes collapse stays exponential); attnzoo's random W_V at PyTorch's "
            "default init, on std-1 inputs, is not of that kind. The paper's own "
            "randomly initialised models (their init, inputs and LayerNorm form) could not be "
            "checked here."
        )
    else:
        notes.append("With LayerNorm µ/‖X‖ stays above 1e-3 under every mask, as in the paper.")
    if nan_full or (not math.isnan(g["full"]) and g["full"] < 0.05):
        notes.append(
            "Under the full mask the collapse is faster than any exponential: µ/‖X‖ reaches "
            "float64's rounding within a few layers (Dong et al.'s doubly exponential regime, "
            "which the exponential bound allows), so its fitted factor rests on few layers"
            + (" or none" if nan_full else "")
            + "."
        )
    notes.append(
        f"The paper's µ is not scale-free: without norm every layer also shrinks the tokens "
        f"(µ of the sliding-window stack is {mu_pure_window:.2g} at layer {depth}, against "
        f"{mu_ln_window:.2g} with LayerNorm), so its left panel mixes collapse with shrinkage; "
        "the right panel divides it out, and the verdicts above read that one."
    )
    lines += ["", "**Where attnzoo differs or adds.** " + " ".join(notes)]
    return "\n".join(lines)
