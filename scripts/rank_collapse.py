"""Rank collapse at init for every mixer: the central result of Dong, Cordonnier & Loukas (2021).

For each mixer and each block variant (pure attention, +skip, +MLP, +skip+MLP, each with and
without LayerNorm) this builds models at init, probes them in float64, and records after every
block the relative residual ‖res(H)‖/‖H‖ and the other measures of attnzoo.rank (effective rank,
stable rank, token similarity, attention entropy). One depth-L model gives the curve for depths
1..L: at init the first l blocks of a depth-L model are distributed exactly like a depth-l model.

The paper's rate. For pure attention (no skip, no MLP, no norm) Dong et al. prove
res_{l+1} ≲ c·res_l³: the log-residual triples per layer, up to a weight-dependent constant. The
rate study fits, per seed, log r_{l+1} = k·log r_l + log c by least squares over the layers
where the residual has left the first block's input (r_l ≤ 0.75) and is above float64's floor
(r_{l+1} > 1e-14), and reports the per-layer exponent k as mean and Student-t 95% interval over
the seeds (--rate-seeds, at least 3). Its models are the study's, with token embeddings and
positions drawn with std 1 (--rate-input-std) instead of 0.02: at std 0.02 the attention is so
flat that one layer takes the residual from 1 to 1e-4 and the next to the floor, leaving no
layer to fit.

Outputs (in --out): rank_collapse.csv (every point, every measure), rank_collapse.md (tables at
the last depth, the exponent growth, and the rate), rank_collapse.png (log residual against
depth), rank_collapse_measures.png (every measure against depth, per mixer), cubic_rate.csv (the
rate study's residuals, per seed), cubic_rate.png (the measured residual of pure attention on a
log(−log) axis beside the cubic rate, and log r_{l+1} against log r_l beside slope 3),
path_counts.md (the share of paths of each length in a depth-L, H-head network,
C(L,k)·H^k / (1+H)^L).

    python scripts/rank_collapse.py                        # 2 shared CPU cores: 1-3 minutes
    python scripts/rank_collapse.py --depth 12 --seeds 10 --dim 128 --tokens 64   # full size
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attnzoo import MIXERS, Model, ModelConfig, RankProfile, rank_profile  # noqa: E402
from attnzoo.attention_maps import ATTENTION_MIXERS  # noqa: E402
from attnzoo.rank import MEASURES  # noqa: E402
from attnzoo.stats import mean_interval  # noqa: E402

VARIANTS = {  # name -> (skip, mlp)
    "pure": (False, False),
    "+skip": (True, False),
    "+mlp": (False, True),
    "+skip+mlp": (True, True),
}
NORMS = ("none", "layernorm")
# Below this the float64 probe is at its rounding floor and log-ratios stop meaning anything.
FLOOR = 1e-13
# The rate fit: a layer's residual enters the fit once it is below RATE_START (the first block's
# input, the embedding, sits near 1, outside the cubic regime) and while its successor is above
# RATE_FLOOR (about 50 times the float64 probe's floor of 2e-16).
RATE_START, RATE_FLOOR = 0.75, 1e-14
EMBED_STD = 0.02  # attnzoo.model's init of token embeddings and positions


def measure(
    mixer: str,
    skip: bool,
    mlp: bool,
    norm: str,
    args: argparse.Namespace,
    seed: int,
    input_std: float | None = None,
    measures: list[str] | None = None,
) -> RankProfile:
    """Every measure after every block of one model at init, probed in float64; `input_std`
    redraws the token embeddings and positions with that std."""
    torch.manual_seed(seed)
    cfg = ModelConfig(
        dim=args.dim, depth=args.depth, heads=args.heads, mixer=mixer, skip=skip, mlp=mlp, norm=norm
    )
    model = Model(cfg, out_features=2, max_len=args.tokens, vocab_size=args.vocab)
    if input_std is not None:
        with torch.no_grad():
            model.embed.weight.mul_(input_std / EMBED_STD)
            if isinstance(model.pos, torch.nn.Parameter):
                model.pos.mul_(input_std / EMBED_STD)
    tokens = torch.randint(0, args.vocab, (args.batch, args.tokens))
    return rank_profile(model, tokens, dtype=torch.float64, measures=measures)


def fit_rate(residuals: list[float]) -> float:
    """The least-squares slope k of log r_{l+1} = k·log r_l + log c over the pairs in the cubic
    regime (see RATE_START, RATE_FLOOR); NaN with fewer than two pairs."""
    pairs = rate_pairs(residuals)  # log10: the slope is the same in any base
    if len(pairs) < 2:
        return math.nan
    mx = sum(x for x, _ in pairs) / len(pairs)
    my = sum(y for _, y in pairs) / len(pairs)
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    return sum((x - mx) * (y - my) for x, y in pairs) / sxx


def exponent_growth(residuals: list[float]) -> float | None:
    """Median over layers of log r_{l+1} / log r_l, over the stretch where the residual is falling
    and still above float64's floor. Doubly exponential decay r_l ~ c^(3^l) gives 3."""
    ratios = [
        math.log(b) / math.log(a)
        for a, b in zip(residuals, residuals[1:], strict=False)
        if a < 0.5 and FLOOR < b < a
    ]
    return sorted(ratios)[len(ratios) // 2] if ratios else None


def path_counts(depth: int, heads: int) -> list[tuple[int, float]]:
    """Share of the (1+H)^L paths of a depth-L, H-head network that go through k attention heads."""
    total = (1 + heads) ** depth
    return [(k, math.comb(depth, k) * heads**k / total) for k in range(depth + 1)]


def fmt(value: float, spec: str) -> str:
    return "n/a" if math.isnan(value) else format(value, spec)


def rate_study(args: argparse.Namespace) -> dict[str, dict]:
    """Pure attention (no skip, MLP or norm) of each attention mixer over --rate-seeds seeds:
    the residual curves and the fitted per-layer exponent, per seed and as mean ± t-interval."""
    out: dict[str, dict] = {}
    for mixer in [m for m in args.mixers if m in ATTENTION_MIXERS]:
        curves = [
            measure(mixer, False, False, "none", args, 1000 + seed, args.rate_input_std, []).mean
            for seed in range(args.rate_seeds)
        ]
        slopes = [fit_rate(c) for c in curves]
        fit = mean_interval([k for k in slopes if not math.isnan(k)])  # seeds too short to fit: out
        mean, half = fit.mean, fit.half_width
        out[mixer] = {"curves": curves, "slopes": slopes, "mean": mean, "half": half,
                      "used": sum(not math.isnan(k) for k in slopes)}  # fmt: skip
    return out


def rate_pairs(curve: list[float]) -> list[tuple[float, float]]:
    """(log10 r_l, log10 r_{l+1}) over the layers the fit uses."""
    return [
        (math.log10(a), math.log10(b))
        for a, b in zip(curve, curve[1:], strict=False)
        if a <= RATE_START and RATE_FLOOR < b < a
    ]


def rate_figure(rate: dict[str, dict], args: argparse.Namespace) -> plt.Figure:
    """Left: −log10 r on a log axis (log(−log r): a rate r_{l+1} = r_l^k is a line of slope
    log k), each seed of each mixer, beside the cubic rate r_{l+1} = c·r_l³ (dashed; c fitted
    with the exponent held at 3) from the mixer's first layer. Right: log10 r_{l+1} against
    log10 r_l, the pairs the fit uses, beside the line of slope 3 through the same c."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.0))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (mixer, r) in enumerate(rate.items()):
        colour = colours[i % len(colours)]
        label = f"{mixer}: k = {fmt(r['mean'], '.2f')} ± {fmt(r['half'], '.2f')}"
        pairs_all = []
        for j, curve in enumerate(r["curves"]):
            pts = [(layer, -math.log10(v)) for layer, v in enumerate(curve) if v > RATE_FLOOR]
            left.plot(*zip(*pts, strict=True), marker="o", markersize=3, color=colour, alpha=0.6,
                      label=label if j == 0 else None)  # fmt: skip
            pairs = rate_pairs(curve)
            pairs_all += pairs
            if pairs:
                right.plot(*zip(*pairs, strict=True), marker="o", markersize=4, color=colour,
                           alpha=0.6, label=label if j == 0 else None)  # fmt: skip
        if not pairs_all:
            continue
        log_c = sum(y - 3 * x for x, y in pairs_all) / len(pairs_all)  # k held at 3
        first = [math.log10(c[1]) for c in r["curves"] if c[1] > RATE_FLOOR]
        ref = [(1, sum(first) / len(first))]
        while ref[-1][0] < args.depth and 3 * ref[-1][1] + log_c > math.log10(RATE_FLOOR):
            ref.append((ref[-1][0] + 1, 3 * ref[-1][1] + log_c))
        left.plot([x for x, _ in ref], [-y for _, y in ref], color=colour, linestyle="--",
                  linewidth=1)  # fmt: skip
        xs = [min(x for x, _ in pairs_all) - 0.3, max(x for x, _ in pairs_all) + 0.3]
        right.plot(xs, [3 * x + log_c for x in xs], color=colour, linestyle="--", linewidth=1)
    for ax in (left, right):
        ax.plot([], [], color="gray", linestyle="--", label="cubic rate r_{l+1} = c·r_l³")
    left.set_yscale("log")
    left.axhline(-math.log10(RATE_FLOOR), color="gray", linewidth=0.8, linestyle=":")
    left.set_xlabel("depth l")
    left.set_ylabel("−log10 relative residual (log axis)")
    left.set_title("pure attention: the residual beside the cubic rate")
    left.grid(alpha=0.3, which="both")
    left.legend(fontsize=7)
    right.set_xlabel("log10 r_l")
    right.set_ylabel("log10 r_{l+1}")
    right.set_title("per-layer exponent k: the slope")
    right.grid(alpha=0.3)
    right.legend(fontsize=7)
    fig.suptitle(
        f"Rate of rank collapse, pure attention at init, float64 probe ({args.rate_seeds} seeds, "
        f"dim {args.dim}, {args.heads} heads, {args.tokens} tokens, input std "
        f"{args.rate_input_std:g}); k: mean ± Student-t 95% over seeds",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def measures_figure(curves: dict, args: argparse.Namespace) -> plt.Figure:
    """Rows: measures; columns: mixers; one line per variant (dashed: with LayerNorm)."""
    names = list(MEASURES)
    fig, axes = plt.subplots(len(names), len(args.mixers), squeeze=False, sharex=True,
                             figsize=(2.8 * len(args.mixers) + 1.8, 2.0 * len(names)))  # fmt: skip
    depths = range(args.depth + 1)
    for col, mixer in enumerate(args.mixers):
        for row, name in enumerate(names):
            ax = axes[row][col]
            for variant in VARIANTS:
                for norm in NORMS:
                    values = curves[mixer, variant, norm].measures[name]
                    ax.plot(depths, values, marker="o", markersize=2,
                            linestyle="-" if norm == "none" else "--",
                            label=f"{variant}{'' if norm == 'none' else ' +LN'}")  # fmt: skip
            if name == "relative_residual":
                ax.set_yscale("log")
            mine = [v for (m, _, _), p in curves.items() if m == mixer for v in p.measures[name]]
            if all(math.isnan(v) for v in mine):
                ax.text(0.5, 0.5, "n/a: no softmax attention", transform=ax.transAxes,
                        ha="center", va="center", fontsize=8, color="gray")  # fmt: skip
                ax.set_yticks([])
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(mixer)
            if col == 0:
                ax.set_ylabel(name.replace("_", " "), fontsize=8)
        axes[-1][col].set_xlabel("depth")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.suptitle("Every measure at init (float64 probe; attention entropy in nats, n/a without "
                 "softmax attention)", fontsize=9)  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1 - 1.6 / (2.8 * len(args.mixers) + 1.8), 1))
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixers", nargs="+", default=list(MIXERS), choices=list(MIXERS))
    parser.add_argument("--depth", type=int, default=12)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--rate-seeds", type=int, default=5, help="seeds of the rate fit (>= 3)")
    parser.add_argument("--rate-input-std", type=float, default=1.0,
                        help="std of the token embeddings and positions in the rate study")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("scripts/results/rank_collapse"))
    args = parser.parse_args()
    if args.rate_seeds < 3:
        parser.error("--rate-seeds must be at least 3: the interval is over seeds")
    args.out.mkdir(parents=True, exist_ok=True)
    names = list(MEASURES)

    rows = []  # (mixer, variant, norm, depth, residual mean, std, then each measure's mean, std)
    curves: dict[tuple[str, str, str], RankProfile] = {}
    for mixer in args.mixers:
        for variant, (skip, mlp) in VARIANTS.items():
            for norm in NORMS:
                runs = [measure(mixer, skip, mlp, norm, args, seed) for seed in range(args.seeds)]
                by_name = {
                    n: torch.tensor([r.measures[n] for r in runs], dtype=torch.float64)
                    for n in names
                }
                # over seeds; n/a (NaN) stays n/a
                mean = {n: v.mean(0) for n, v in by_name.items()}
                std = {n: v.std(0, unbiased=False) for n, v in by_name.items()}
                curves[mixer, variant, norm] = RankProfile(
                    mean=mean["relative_residual"].tolist(),
                    std=std["relative_residual"].tolist(),
                    measures={n: v.tolist() for n, v in mean.items()},
                    measures_std={n: v.tolist() for n, v in std.items()},
                )
                rows += [
                    [mixer, variant, norm, d]
                    + [x for n in names for x in (mean[n][d].item(), std[n][d].item())]
                    for d in range(args.depth + 1)
                ]

    with open(args.out / "rank_collapse.csv", "w", newline="") as f:
        writer = csv.writer(f)
        columns = ["residual_mean", "residual_std"]
        columns += [f"{n}_{stat}" for n in names[1:] for stat in ("mean", "std")]
        writer.writerow(["mixer", "variant", "norm", "depth", *columns])
        writer.writerows(rows)

    lines = [
        f"Relative residual at init (float64 probe, mean ± std over {args.seeds} seeds; "
        f"dim {args.dim}, {args.heads} heads, {args.tokens} tokens).",
        "",
        "| mixer | variant | norm | depth 1 | depth 3 | depth "
        f"{args.depth} | exponent growth per layer |",
        "|---|---|---|---|---|---|---|",
    ]
    for (mixer, variant, norm), profile in curves.items():
        mean, std = profile.mean, profile.std
        growth = exponent_growth(mean)
        cells = [f"{mean[d]:.1e} ± {std[d]:.0e}" for d in (1, min(3, args.depth), args.depth)]
        lines.append(
            f"| {mixer} | {variant} | {norm} | {' | '.join(cells)} | "
            f"{'–' if growth is None else f'{growth:.2f}'} |"
        )
    lines += [
        "",
        f"Every measure at depth {args.depth} (mean over {args.seeds} seeds; n/a: no softmax "
        "attention). Collapse reads: residual 0, effective and stable rank 1, token similarity 1; "
        f"attention entropy log N = {math.log(args.tokens):.2f} nats for uniform attention.",
        "",
        "| mixer | variant | norm | " + " | ".join(n.replace("_", " ") for n in names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for (mixer, variant, norm), profile in curves.items():
        cells = [fmt(profile.measures[n][args.depth], ".3g") for n in names]
        lines.append(f"| {mixer} | {variant} | {norm} | {' | '.join(cells)} |")

    rate = rate_study(args)
    if rate:
        lines += [
            "",
            "The paper's rate: pure attention (no skip, MLP or norm), token embeddings and "
            f"positions with std {args.rate_input_std:g}. Per seed, least squares of "
            "log r_{l+1} = k·log r_l + log c over the layers with r_l ≤ "
            f"{RATE_START} and r_{{l+1}} > {RATE_FLOOR:g}; k over seeds as mean and Student-t 95% "
            "interval (Dong et al.: k = 3, res_{l+1} ≲ c·res_l³).",
            "",
            "| mixer | per-layer exponent k | 95% interval | seeds fitted | k per seed |",
            "|---|---|---|---|---|",
        ]
        for mixer, r in rate.items():
            lo, hi = r["mean"] - r["half"], r["mean"] + r["half"]
            lines.append(
                f"| {mixer} | {fmt(r['mean'], '.2f')} | [{fmt(lo, '.2f')}, {fmt(hi, '.2f')}] | "
                f"{r['used']} of {args.rate_seeds} | "
                f"{', '.join(fmt(k, '.2f') for k in r['slopes'])} |"
            )
        with open(args.out / "cubic_rate.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["mixer", "seed", "depth", "residual", "fitted_exponent"])
            for mixer, r in rate.items():
                for seed, (curve, k) in enumerate(zip(r["curves"], r["slopes"], strict=True)):
                    writer.writerows([mixer, seed, d, v, k] for d, v in enumerate(curve))
        fig = rate_figure(rate, args)
        fig.savefig(args.out / "cubic_rate.png", dpi=120)
        plt.close(fig)
    (args.out / "rank_collapse.md").write_text("\n".join(lines) + "\n")

    paths = ["| paths through k heads | share |", "|---|---|"]
    paths += [f"| {k} | {share:.3g} |" for k, share in path_counts(args.depth, args.heads)]
    (args.out / "path_counts.md").write_text(
        f"Depth {args.depth}, {args.heads} heads: share of the (1+H)^L paths of each length.\n\n"
        + "\n".join(paths)
        + "\n"
    )

    fig, axes = plt.subplots(
        1, len(args.mixers), figsize=(3.0 * len(args.mixers) + 1.5, 3.4), sharey=True
    )
    axes = [axes] if len(args.mixers) == 1 else axes
    depths = range(args.depth + 1)
    for ax, mixer in zip(axes, args.mixers, strict=True):
        for variant in VARIANTS:
            for norm in NORMS:
                mean = torch.tensor(curves[mixer, variant, norm].mean)
                ax.semilogy(
                    depths,
                    mean.clamp_min(1e-17),
                    marker="o",
                    markersize=3,
                    linestyle="-" if norm == "none" else "--",
                    label=f"{variant}{'' if norm == 'none' else ' +LN'}",
                )
        ax.set_title(mixer)
        ax.set_xlabel("depth")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("relative residual ‖res(H)‖ / ‖H‖")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.suptitle("Rank collapse at init (float64 probe; dashed: with LayerNorm)")
    fig.tight_layout(rect=(0, 0, 0.88, 1))
    fig.savefig(args.out / "rank_collapse.png", dpi=120)
    plt.close(fig)
    fig = measures_figure(curves, args)
    fig.savefig(args.out / "rank_collapse_measures.png", dpi=110)
    plt.close(fig)
    print((args.out / "rank_collapse.md").read_text())
    print((args.out / "path_counts.md").read_text())
    print(f"wrote {args.out}/rank_collapse.{{csv,md,png}}, rank_collapse_measures.png, "
          "cubic_rate.{csv,png} and path_counts.md")  # fmt: skip


if __name__ == "__main__":
    main()
