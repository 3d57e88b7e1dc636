"""Rank collapse at init for every mixer of the zoo: the central result of Dong, Cordonnier &
Loukas (2021), and which mixers share it.

For each mixer (and the option rows of attnzoo.analysis.stacks: scaled-dot causal and with each
sink, sigmoid at bias 0, gated DeltaNet; the recurrent mixers run causal) and each block variant
(pure attention, +skip, +MLP, +skip+MLP, each with and without LayerNorm) this builds models at
init, probes them in float64, and records after every block the relative residual ‖res(H)‖/‖H‖
and the other measures of attnzoo.rank (effective rank, stable rank, token similarity, attention
entropy). One depth-L model gives the curve for depths
1..L: at init the first l blocks of a depth-L model are distributed exactly like a depth-l model.

Every interval is Student-t 95% over seeds, with the sample standard deviation (ddof = 1); the
std columns of rank_collapse.csv are that sample standard deviation.

The paper's rate. For pure attention (no skip, no MLP, no norm) Dong et al. prove
res_{l+1} ≲ c·res_l³: the log-residual triples per layer, up to a weight-dependent constant. A
plain float64 forward cannot follow that past two or three blocks (the residual H − 1·mean(H)
is formed by cancellation and returns rounding error near 1e-16), so the rate study measures
the pure stacks of the mixers that collapse by propagating the token mean and the residual
separately (attnzoo.analysis.split_residual: exact algebra, no cancellation, readable down to
1e-250); mixers without such a rule (those that keep rank) are measured by the plain float64
forward. Both rates are read from the same layers for every stack, the outputs of blocks 1 to 5
(attnzoo.analysis.fits.FIT_LAYERS; the embedding → block-1 step is left out), and only from a
seed whose five layers are all above the measurement's floor. The paper's k is the least-squares
slope of log r_{l+1} = k·log r_l + log c over them, per seed, mean and interval over the seeds
(--rate-seeds, at least 3). Its models are the study's, with token embeddings and positions
drawn with std 1 (--rate-input-std) instead of 0.02: at std 0.02 the attention is so flat that
one layer takes the residual from 1 to 1e-4, leaving no regime to read.

Which kind of collapse. The rate study runs the pure stack of every mixer, and of a control
whose answer is known (a frozen random row-stochastic mixer, attnzoo.analysis.controls: singly
exponential), and puts each in words by a fixed rule (attnzoo.analysis.fits.collapse_kind,
calibrated in the tests on synthetic rates k = 1, 2, 3, on the control and on local attention):
whether the last layer keeps the input's residual, and whether each layer's log-decrement grows
(doubly exponential) or stays the same (singly). Linear attention and FAVOR+ are also run with
the eps of their normaliser at 0 (rows "eps 0"): with eps > 0 their rows sum to slightly less
than 1 and the mean leaks into the residual, a singly exponential term that takes over once the
residual is small. The report checks its reading against what is known: a pure Re(fft2) stack
keeps rank, the control decays singly exponentially, and so does a local mask, which decays more
slowly than full attention (Wu et al. 2024). Attention entropy is reported only where the
mixer's weights are a distribution (n/a for pooling, Nyström (no weights exposed), Fourier, the
token MLP, identity).

The λ-skip (Joseph et al. 2024, arXiv 2410.10609): the pure stacks of the recurrent mixers and
of causal scaled-dot attention with each block λ·x + f(x) (model.residual=lambda), λ swept over
attnzoo.analysis.stacks.LAMBDAS, with no norm and with the paper's LayerNorm after the sum, read
by the same rule: from which λ on does a stack stop collapsing? A stack whose state vanishes to
0 (its relative residual NaN: a signal lost in magnitude, not rank) is said so, not read.

Outputs (in --out): rank_collapse.csv (every point, every measure, mean and std over the
seeds), rank_collapse_seeds.csv (the same per seed), rank_collapse.md (tables at
the last depth, the exponent growth, and the rate), rank_collapse.png (log residual against
depth), rank_collapse_measures.png (every measure against depth, per mixer), collapse_rate.csv
(the rate table: per stack the verdict, k with its interval, the layers it was read from),
cubic_rate.csv (the rate study's residuals and both exponents, per seed and mixer),
cubic_rate.png (the measured residual of the doubly exponential stacks on a log(−log) axis
beside the cubic rate, and log r_{l+1} against log r_l beside slope 3), path_counts.md (the
share of paths of each length in a depth-L, H-head network, C(L,k)·H^k / (1+H)^L),
lambda_skip.csv (the λ sweep's reading per stack, λ and norm), lambda_skip_seeds.csv (its
residuals per seed and block), lambda_skip.png (r_L / r_0 against λ), rank_collapse.json (the
command, the machine and the settings every number depends on).

    python scripts/rank_collapse.py --out scripts/results/rank_collapse   # the committed run
    python scripts/rank_collapse.py --depth 12 --seeds 10 --dim 128 --tokens 64   # full size
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shlex
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from attnzoo import MIXERS, RankProfile  # noqa: E402
from attnzoo.analysis.figures import measures_figure, rate_figure, residual_figure  # noqa: E402
from attnzoo.analysis.fits import (  # noqa: E402
    DOUBLY,
    FIT_LAYERS,
    FLOAT64_FLOOR,
    decrement_ratio,
    exponent_growth,
    fit_rate,
    floor_free_kind,
    layers_above,
)
from attnzoo.analysis.known_collapse import ci, known_answers  # noqa: E402
from attnzoo.analysis.split_residual import SPLIT_FLOOR  # noqa: E402
from attnzoo.analysis.stacks import (  # noqa: E402
    EPS_ZERO,
    FLOOR_RANGE,
    FLOORS,
    LAMBDA_NORMS,
    LAMBDA_STACKS,
    LAMBDAS,
    OPTION_ROWS,
    Stack,
    lambda_report,
    lambda_sweep,
    measure,
    pure_curve,
    stack_of,
    stacks,
)
from attnzoo.analysis.tables import fmt  # noqa: E402
from attnzoo.analysis.verdicts import COLLAPSED, KEPT  # noqa: E402
from attnzoo.paths import path_shares  # noqa: E402
from attnzoo.rank import MEASURES  # noqa: E402
from attnzoo.stats import mean_interval, t_ppf  # noqa: E402
from attnzoo.studies import ZOO_MIXERS, Progress, default_out, duration, machine  # noqa: E402

VARIANTS = {  # name -> (model.residual, model.mlp)
    "pure": ("none", False),
    "+skip": ("add", False),
    "+mlp": ("none", True),
    "+skip+mlp": ("add", True),
}
NORMS = ("none", "layernorm")
# the control of the rate study: a mixer whose collapse is known (singly exponential)
CONTROL = "attnzoo.analysis.controls.FrozenStochastic"
CONTROL_NAME = "frozen random row-stochastic (control)"


def rate_stacks(mixers: list[str]) -> dict[str, Stack]:
    """The rate study's pure stacks: each mixer, its option rows and eps-0 rows, the control."""
    return {**stacks(mixers, {**OPTION_ROWS, **EPS_ZERO}), CONTROL: Stack(CONTROL)}


def rate_study(args: argparse.Namespace) -> dict[str, dict]:
    """Pure stacks (no skip, MLP or norm) of every mixer and of the control over --rate-seeds
    seeds: the residual curves, the kind of collapse with its intervals (collapse_kind, where it
    is the same at every floor of FLOOR_RANGE: floor_free_kind), the paper's exponent where the
    cubic regime has layers (fit_rate), and log10 r at depth 3."""
    out: dict[str, dict] = {}
    rows = rate_stacks(args.mixers)
    print(f"the rate study: {len(rows)} pure stacks × {args.rate_seeds} seeds", file=sys.stderr)
    progress = Progress(len(rows), stream=sys.stderr)
    for name, stack in rows.items():
        measured = [pure_curve(stack, args, 1000 + seed) for seed in range(args.rate_seeds)]
        progress.done(name)
        curves = [c for c, _ in measured]
        how = measured[0][1]
        floor = FLOORS[how]
        slopes = [fit_rate(c, floor) for c in curves]
        used = sum(not math.isnan(k) for k in slopes)
        # every seed fitted, or no paper's k: a seed is never dropped for being short
        fit = mean_interval(slopes if used == len(slopes) else [])
        kind, share, ratio = floor_free_kind(curves, FLOOR_RANGE[how])
        depth3 = mean_interval([math.log10(max(c[min(3, args.depth)], 1e-300)) for c in curves])
        out[name] = {
            "curves": curves,
            "slopes": slopes,
            "mean": fit.mean,
            "half": fit.half_width,
            "fit": fit,
            "used": used,
            "kind": kind,
            "share": share,
            "ratio": ratio,
            "depth3": depth3,
            "how": how,
            "floor": floor,
            "above": min(layers_above(c, floor) for c in curves),
        }
    return out


def price(rows_of: dict[str, Stack], args: argparse.Namespace) -> None:
    """--dry-run: how many models each part builds and probes, and the time it takes: each part
    is run on one seed (the first), timed, and scaled to the seeds asked for; nothing is
    written. So the price costs about 1/--seeds of the block variants and 1/--rate-seeds of the
    rest."""

    def timed(fn, *a) -> float:
        start = time.perf_counter()
        fn(*a)
        return time.perf_counter() - start

    one = argparse.Namespace(**{**vars(args), "rate_seeds": 1})
    variants = [(r, m, n) for r, m in VARIANTS.values() for n in NORMS]
    block = sum(timed(measure, stack, *v, args, 0) for stack in rows_of.values() for v in variants)
    rate_rows = list(rate_stacks(args.mixers).values())
    rate = sum(timed(pure_curve, stack, args, 1000) for stack in rate_rows)
    lam = timed(lambda_sweep, args.mixers, one)
    lambda_models = sum(stack_of(n).mixer in args.mixers for n in LAMBDA_STACKS)
    lambda_models *= len(LAMBDA_NORMS) * len(LAMBDAS)
    parts = [
        ("the block variants", len(rows_of) * len(variants) * args.seeds, block * args.seeds),
        ("the rate study", len(rate_rows) * args.rate_seeds, rate * args.rate_seeds),
        ("the λ-skip sweep", lambda_models * args.rate_seeds, lam * args.rate_seeds),
    ]
    print(f"rank_collapse --dry-run: depth {args.depth}, dim {args.dim}, {args.tokens} tokens")
    for what, models, seconds in parts:
        print(f"  {what}: {models} models, ~{duration(seconds)}")
    total = sum(seconds for _, _, seconds in parts)
    print(
        f"  in all ~{duration(total)} on this machine (each part timed on one seed), then the "
        f"tables and figures; nothing written, the report would go to {args.out}"
    )


# the options every number of the report depends on, recorded in rank_collapse.json
SETTINGS = (
    "dim",
    "heads",
    "tokens",
    "depth",
    "seeds",
    "rate_seeds",
    "batch",
    "vocab",
    "rate_input_std",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixers", nargs="+", default=list(ZOO_MIXERS), choices=list(MIXERS))
    parser.add_argument("--depth", type=int, default=12)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--rate-seeds", type=int, default=5, help="seeds of the rate fit (>= 3)")
    parser.add_argument(
        "--rate-input-std",
        type=float,
        default=1.0,
        help="std of the token embeddings and positions in the rate study",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=default_out("rank_collapse"),
        help="report folder (default results/rank_collapse/)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="say what would run and how long it takes (each part is timed on one seed); write nothing",
    )
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error("--seeds must be at least 2: the interval is over seeds")
    if args.rate_seeds < 3:
        parser.error("--rate-seeds must be at least 3: the interval is over seeds")
    names = list(MEASURES)

    rows = []  # (mixer, variant, norm, depth, residual mean, std, then each measure's mean, std)
    per_seed = []  # (mixer, variant, norm, seed, depth, then each measure)
    curves: dict[tuple[str, str, str], RankProfile] = {}
    rows_of = stacks(args.mixers)
    if args.dry_run:
        price(rows_of, args)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"the block variants: {len(rows_of)} stacks × {len(VARIANTS) * len(NORMS)} variants × "
        f"{args.seeds} seeds, depth {args.depth}",
        file=sys.stderr,
    )
    progress = Progress(len(rows_of), stream=sys.stderr)
    for mixer, stack in rows_of.items():
        for variant, (residual, mlp) in VARIANTS.items():
            for norm in NORMS:
                runs = [
                    measure(stack, residual, mlp, norm, args, seed) for seed in range(args.seeds)
                ]
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
                std = {n: v.std(0, unbiased=True) for n, v in by_name.items()}  # ddof = 1
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
        progress.done(mixer)

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

    command = f"python {' '.join(shlex.quote(a) for a in sys.argv)}"
    header = {  # what the numbers depend on, for the results page to state
        "command": command,
        "machine": machine(),
        **{k: getattr(args, k) for k in SETTINGS},
    }
    (args.out / "rank_collapse.json").write_text(json.dumps(header, indent=2) + "\n")
    lines = [
        f"Command: `{command}`  ",
        f"Machine: {header['machine']}",
        "",
        f"Relative residual at init (float64 probe, mean [Student-t 95% interval] over "
        f"{args.seeds} seeds, sample std with ddof = 1; dim {args.dim}, {args.heads} heads, "
        f"{args.tokens} tokens).",
        "",
        "| mixer | variant | norm | depth 1 | depth 3 | depth "
        f"{args.depth} | exponent growth per layer |",
        "|---|---|---|---|---|---|---|",
    ]
    for (mixer, variant, norm), profile in curves.items():
        mean, std = profile.mean, profile.std
        growth = exponent_growth(mean)
        half = [t_ppf(0.975, args.seeds - 1) * s / math.sqrt(args.seeds) for s in std]
        cells = [
            f"{fmt(mean[d], '.2g', nan='n/a')} [{fmt(mean[d] - half[d], '.2g', nan='n/a')}, "
            f"{fmt(mean[d] + half[d], '.2g', nan='n/a')}]"
            for d in (1, min(3, args.depth), args.depth)
        ]
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
        cells = [fmt(profile.measures[n][args.depth], ".3g", nan="n/a") for n in names]
        lines.append(f"| {mixer} | {variant} | {norm} | {' | '.join(cells)} |")

    rate = rate_study(args)
    layers = f"{FIT_LAYERS.start}–{FIT_LAYERS.stop - 1}"
    lines += [
        "",
        f"## Which mixers collapse, and how: pure stacks (no skip, MLP or norm), {args.rate_seeds} "
        f"seeds, token embeddings and positions with std {args.rate_input_std:g}",
        "",
        "Measured: split = the token mean and the residual propagated apart "
        "(attnzoo.analysis.split_residual: exact algebra, never a difference of two O(1) numbers, "
        f"read down to {SPLIT_FLOOR:g}); float64 = the plain float64 forward (read down to "
        f"{FLOAT64_FLOOR:g}), for the mixers that keep rank and have no split rule. "
        "The rule (attnzoo.analysis.fits.collapse_kind): the share of the input's "
        "relative residual the last layer keeps, r_L / r_0, decides whether a stack collapses "
        f"(interval over seeds ≥ {KEPT}: no collapse; ≤ {COLLAPSED}: collapses; else partial); "
        "for a collapsing stack the decrement ratio k (least squares of δ_{l+1} = k·δ_l, "
        f"δ_l = log r_{{l+1}} − log r_l, over layers {layers} for every stack, the "
        "embedding → block-1 step left out; a factor, so its mean and interval over seeds are "
        "geometric) decides how: "
        f"doubly exponential when its interval lies above {DOUBLY}, singly when it lies inside "
        f"[{1 / DOUBLY:.2f}, {DOUBLY}] (a geometric decay gives 1, Dong et al.'s cubic rate 3); "
        f"not resolved when some seed has a layer of {layers} under the floor, or when the "
        "verdict changes with the floor moved 100× either way (float64: up 100×, down to "
        "1e-15). The rule is "
        "calibrated in tests/test_analysis.py (synthetic k = 1, 2, 3 with the seeds' noise, the "
        "control and local attention singly, the floor moved 100× either way). "
        f"The paper's k: least squares of log r_{{l+1}} = k·log r_l + log c over the same layers "
        "(n/a unless every seed has them all above the floor). Intervals: Student-t 95% over "
        "seeds (ddof = 1). Layers above the floor: the fewest over the seeds, of "
        f"{args.depth}. The control, "
        f"{CONTROL_NAME}, is not a mixer of the zoo (attnzoo.analysis.controls); the eps 0 rows "
        "are linear attention and FAVOR+ with no eps in their normaliser.",
        "",
        "| mixer | measured | collapse | r_L / r_0 | decrement ratio k | layers fitted | "
        "layers above floor | paper's k | log10 r at depth 3 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    table = []
    for mixer, r in rate.items():
        collapsing = r["kind"].startswith("collapses")
        resolved = r["ratio"].n > 0
        paper = "n/a" if math.isnan(r["mean"]) else ci(r["fit"], ".2f")
        paper = paper if collapsing else "–"
        name = CONTROL_NAME if mixer == CONTROL else mixer
        lines.append(
            f"| {name} | {r['how']} | {r['kind']} | {ci(r['share'], '.2g')} | "
            f"{ci(r['ratio'], '.2f') if collapsing else '–'} | "
            f"{layers if collapsing and resolved else '–'} | {r['above']} | {paper} | "
            f"{ci(r['depth3'], '.2f')} |"
        )
        table.append(
            [
                name,
                r["how"],
                f"{r['floor']:g}",
                r["kind"],
                r["share"].mean,
                r["share"].low,
                r["share"].high,
                r["ratio"].mean,
                r["ratio"].low,
                r["ratio"].high,
                layers if resolved else "",
                r["above"],
                r["fit"].mean,
                r["fit"].low,
                r["fit"].high,
                args.rate_seeds,
            ]
        )
    lines += ["", "Checks against what is known:", "", *known_answers(rate, CONTROL)]
    print("the λ-skip sweep", file=sys.stderr, flush=True)
    lines += lambda_report(lambda_sweep(args.mixers, args), args)
    with open(args.out / "collapse_rate.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                "mixer",
                "measured",
                "floor",
                "verdict",
                "kept_share",
                "kept_share_low",
                "kept_share_high",
                "k",
                "k_low",
                "k_high",
                "layers_fitted",
                "layers_above_floor",
                "paper_k",
                "paper_k_low",
                "paper_k_high",
                "seeds",
            ]
        )
        writer.writerows(table)
    with open(args.out / "cubic_rate.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["mixer", "measured", "seed", "depth", "residual", "fitted_exponent", "decrement_ratio"]
        )
        for mixer, r in rate.items():
            for seed, (curve, k) in enumerate(zip(r["curves"], r["slopes"], strict=True)):
                ratio = decrement_ratio(curve, r["floor"])
                writer.writerows(
                    [mixer, r["how"], seed, d, v, k, ratio] for d, v in enumerate(curve)
                )
    # the paper's rate is about doubly exponential collapse: the figure draws those stacks
    fitted = {m: r for m, r in rate.items() if r["used"] and "doubly" in r["kind"]}
    if fitted:
        title = (
            f"Rate of rank collapse, pure stacks at init, mean and residual apart "
            f"({args.rate_seeds} seeds, dim {args.dim}, {args.heads} heads, {args.tokens} tokens, "
            f"input std {args.rate_input_std:g}); the paper's k: mean ± Student-t 95% over "
            "seeds; the decrement ratio: geometric mean over seeds"
        )
        fig = rate_figure(fitted, args.depth, title, SPLIT_FLOOR)
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

    fig = residual_figure(curves, list(rows_of), args.depth)
    fig.savefig(args.out / "rank_collapse.png", dpi=120)
    plt.close(fig)
    fig = measures_figure(curves, list(rows_of), args.depth)
    fig.savefig(args.out / "rank_collapse_measures.png", dpi=110)
    plt.close(fig)
    print((args.out / "rank_collapse.md").read_text())
    print((args.out / "path_counts.md").read_text())
    print(
        f"wrote {args.out}/rank_collapse.{{csv,md,png}}, rank_collapse_measures.png, "
        "collapse_rate.csv, cubic_rate.{csv,png}, path_counts.md and lambda_skip.{csv,png}"
    )


if __name__ == "__main__":
    main()
