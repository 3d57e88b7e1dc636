"""Rank collapse at init for every mixer of the zoo: the central result of Dong, Cordonnier &
Loukas (2021), and which mixers share it.

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

Which kind of collapse. The rate study runs the pure stack of every mixer, and of a control
whose answer is known (a frozen random row-stochastic mixer, attnzoo.analysis.controls: singly
exponential), and puts each in words by a fixed rule
(attnzoo.analysis.fits.collapse_kind): whether the last layer keeps the input's residual, and
whether each layer's log-decrement grows (doubly exponential) or stays the same (singly). The
report checks its reading against what is known: a pure Re(fft2) stack keeps rank, the control
decays singly exponentially, a local mask decays more slowly than full attention (Wu et al.
2024). Attention entropy is reported only where the mixer's weights are a distribution (n/a
for pooling, Nyström's pseudo-inverse, Fourier, the token MLP, identity).

Outputs (in --out): rank_collapse.csv (every point, every measure, mean and std over the
seeds), rank_collapse_seeds.csv (the same per seed), rank_collapse.md (tables at
the last depth, the exponent growth, and the rate), rank_collapse.png (log residual against
depth), rank_collapse_measures.png (every measure against depth, per mixer), cubic_rate.csv (the
rate study's residuals and both exponents, per seed and mixer), cubic_rate.png (the measured residual of pure attention on a
log(−log) axis beside the cubic rate, and log r_{l+1} against log r_l beside slope 3),
path_counts.md (the share of paths of each length in a depth-L, H-head network,
C(L,k)·H^k / (1+H)^L).

    python scripts/rank_collapse.py                        # 2 shared CPU cores: 3-6 minutes
    python scripts/rank_collapse.py --depth 12 --seeds 10 --dim 128 --tokens 64   # full size
"""

from __future__ import annotations

import argparse
import csv
import math
import shlex
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attnzoo import MIXERS, Model, ModelConfig, RankProfile, rank_profile  # noqa: E402
from attnzoo.analysis.figures import measures_figure, rate_figure, residual_figure  # noqa: E402
from attnzoo.analysis.fits import (  # noqa: E402
    DOUBLY,
    RATE_FLOOR,
    RATE_START,
    collapse_kind,
    decrement_ratio,
    exponent_growth,
    fit_rate,
)
from attnzoo.analysis.verdicts import COLLAPSED, KEPT  # noqa: E402
from attnzoo.model import EMBED_STD  # noqa: E402
from attnzoo.paths import path_shares  # noqa: E402
from attnzoo.rank import MEASURES  # noqa: E402
from attnzoo.stats import Interval, mean_interval  # noqa: E402
from attnzoo.studies import machine  # noqa: E402

VARIANTS = {  # name -> (skip, mlp)
    "pure": (False, False),
    "+skip": (True, False),
    "+mlp": (False, True),
    "+skip+mlp": (True, True),
}
NORMS = ("none", "layernorm")
# the control of the rate study: a mixer whose collapse is known (singly exponential)
CONTROL = "attnzoo.analysis.controls.FrozenStochastic"
CONTROL_NAME = "frozen random row-stochastic (control)"


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


def fmt(value: float, spec: str) -> str:
    return "n/a" if math.isnan(value) else format(value, spec)


def rate_study(args: argparse.Namespace) -> dict[str, dict]:
    """Pure stacks (no skip, MLP or norm) of every mixer and of the control over --rate-seeds
    seeds: the residual curves, the kind of collapse with its intervals (collapse_kind), the
    paper's exponent where the cubic regime has layers (fit_rate), and log10 r at depth 3."""
    out: dict[str, dict] = {}
    for mixer in [*args.mixers, CONTROL]:
        curves = [
            measure(mixer, False, False, "none", args, 1000 + seed, args.rate_input_std, []).mean
            for seed in range(args.rate_seeds)
        ]
        slopes = [fit_rate(c) for c in curves]
        fit = mean_interval([k for k in slopes if not math.isnan(k)])  # seeds too short to fit: out
        kind, share, ratio = collapse_kind(curves)
        depth3 = mean_interval([math.log10(max(c[min(3, args.depth)], 1e-300)) for c in curves])
        out[mixer] = {"curves": curves, "slopes": slopes, "mean": fit.mean, "half": fit.half_width,
                      "used": sum(not math.isnan(k) for k in slopes), "kind": kind,
                      "share": share, "ratio": ratio, "depth3": depth3}  # fmt: skip
    return out


def ci(x: Interval, spec: str) -> str:
    return f"{fmt(x.mean, spec)} [{fmt(x.low, spec)}, {fmt(x.high, spec)}]"


def checks(rate: dict[str, dict]) -> list[str]:
    """What is known, read off the rate study: each line says whether it holds here."""
    lines = []
    if "fourier" in rate:
        kind = rate["fourier"]["kind"]
        lines.append(f"- A pure Re(fft2) stack (fourier) keeps rank: {kind} — "
                     f"{'holds' if kind == 'no collapse' else 'does not hold'}.")  # fmt: skip
    kind = rate[CONTROL]["kind"]
    lines.append(f"- A frozen random row-stochastic mixer collapses singly exponentially: {kind} — "
                 f"{'holds' if 'singly' in kind else 'does not hold'}.")  # fmt: skip
    if "local" in rate and "scaled_dot" in rate:
        local, full = rate["local"]["depth3"], rate["scaled_dot"]["depth3"]
        lines.append(
            "- A local mask decays more slowly than full attention (Wu et al. 2024): log10 r at "
            f"depth 3, local {ci(local, '.2f')} vs scaled_dot {ci(full, '.2f')} — "
            f"{'holds' if local.low > full.high else 'not resolved'} (95% intervals "
            f"{'disjoint' if local.low > full.high else 'overlap or reversed'})."
        )
    return lines


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
    per_seed = []  # (mixer, variant, norm, seed, depth, then each measure)
    curves: dict[tuple[str, str, str], RankProfile] = {}
    for mixer in args.mixers:
        for variant, (skip, mlp) in VARIANTS.items():
            for norm in NORMS:
                runs = [measure(mixer, skip, mlp, norm, args, seed) for seed in range(args.seeds)]
                per_seed += [
                    [mixer, variant, norm, seed, d] + [r.measures[n][d] for n in names]
                    for seed, r in enumerate(runs)
                    for d in range(args.depth + 1)
                ]
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
    with open(args.out / "rank_collapse_seeds.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["mixer", "variant", "norm", "seed", "depth", *names])
        writer.writerows(per_seed)

    lines = [
        f"Command: `python {' '.join(shlex.quote(a) for a in sys.argv)}`  ",
        f"Machine: {machine()}",
        "",
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
    lines += [
        "",
        f"## Which mixers collapse, and how: pure stacks (no skip, MLP or norm), {args.rate_seeds} "
        f"seeds, token embeddings and positions with std {args.rate_input_std:g}",
        "",
        "The rule (attnzoo.analysis.fits.collapse_kind): the share of the input's "
        "relative residual the last layer keeps, r_L / r_0, decides whether a stack collapses "
        f"(interval over seeds ≥ {KEPT}: no collapse; ≤ {COLLAPSED}: collapses; else partial); "
        "for a collapsing stack the decrement ratio k (least squares of δ_{l+1} = k·δ_l, "
        "δ_l = log r_{l+1} − log r_l, over the layers above the float64 floor; a factor, so its "
        "mean and interval over seeds are geometric) decides how: "
        f"doubly exponential when its interval lies above {DOUBLY}, singly when it lies inside "
        f"[{1 / DOUBLY:.2f}, {DOUBLY}] (a geometric decay gives 1, Dong et al.'s cubic rate 3). "
        f"The paper's k: least squares of log r_{{l+1}} = k·log r_l + log c over the layers with "
        f"r_l ≤ {RATE_START} and r_{{l+1}} > {RATE_FLOOR:g} (n/a: fewer than two such layers in "
        "every seed). Intervals: Student-t 95% over seeds. The control, "
        f"{CONTROL_NAME}, is not a mixer of the zoo (attnzoo.analysis.controls).",
        "",
        "| mixer | collapse | r_L / r_0 | decrement ratio k | paper's k (seeds fitted) | "
        "log10 r at depth 3 |",
        "|---|---|---|---|---|---|",
    ]
    for mixer, r in rate.items():
        collapsing = r["kind"].startswith("collapses")
        paper = "n/a" if not r["used"] else (
            f"{fmt(r['mean'], '.2f')} [{fmt(r['mean'] - r['half'], '.2f')}, "
            f"{fmt(r['mean'] + r['half'], '.2f')}] ({r['used']} of {args.rate_seeds})"
        )  # fmt: skip
        name = CONTROL_NAME if mixer == CONTROL else mixer
        lines.append(
            f"| {name} | {r['kind']} | {ci(r['share'], '.2g')} | "
            f"{ci(r['ratio'], '.2f') if collapsing else '–'} | {paper} | {ci(r['depth3'], '.2f')} |"
        )
    lines += ["", "Checks against what is known:", "", *checks(rate)]
    with open(args.out / "cubic_rate.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["mixer", "seed", "depth", "residual", "fitted_exponent", "decrement_ratio"]
        )
        for mixer, r in rate.items():
            for seed, (curve, k) in enumerate(zip(r["curves"], r["slopes"], strict=True)):
                ratio = decrement_ratio(curve)
                writer.writerows([mixer, seed, d, v, k, ratio] for d, v in enumerate(curve))
    # the paper's rate is about doubly exponential collapse: the figure draws those stacks
    fitted = {m: r for m, r in rate.items() if r["used"] and "doubly" in r["kind"]}
    if fitted:
        title = (
            f"Rate of rank collapse, pure attention at init, float64 probe ({args.rate_seeds} "
            f"seeds, dim {args.dim}, {args.heads} heads, {args.tokens} tokens, input std "
            f"{args.rate_input_std:g}); k: mean ± Student-t 95% over seeds"
        )
        fig = rate_figure(fitted, args.depth, title)
        fig.savefig(args.out / "cubic_rate.png", dpi=120)
        plt.close(fig)
    (args.out / "rank_collapse.md").write_text("\n".join(lines) + "\n")

    paths = ["| paths through k heads | share |", "|---|---|"]
    paths += [
        f"| {k} | {share:.3g} |" for k, share in enumerate(path_shares(args.depth, args.heads))
    ]
    (args.out / "path_counts.md").write_text(
        f"Depth {args.depth}, {args.heads} heads: share of the (1+H)^L paths of each length.\n\n"
        + "\n".join(paths)
        + "\n"
    )

    fig = residual_figure(curves, args.mixers, args.depth)
    fig.savefig(args.out / "rank_collapse.png", dpi=120)
    plt.close(fig)
    fig = measures_figure(curves, args.mixers, args.depth)
    fig.savefig(args.out / "rank_collapse_measures.png", dpi=110)
    plt.close(fig)
    print((args.out / "rank_collapse.md").read_text())
    print((args.out / "path_counts.md").read_text())
    print(f"wrote {args.out}/rank_collapse.{{csv,md,png}}, rank_collapse_measures.png, "
          "cubic_rate.{csv,png} and path_counts.md")  # fmt: skip


if __name__ == "__main__":
    main()
