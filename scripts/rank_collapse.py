"""Rank collapse at init for every mixer: the central result of Dong, Cordonnier & Loukas (2021).

For each mixer and each block variant (pure attention, +skip, +MLP, +skip+MLP, each with and
without LayerNorm) this builds models at init, probes them in float64, and records the relative
residual ‖res(H)‖/‖H‖ after every block. One depth-L model gives the curve for depths 1..L: at init
the first l blocks of a depth-L model are distributed exactly like a depth-l model.

Outputs (in --out): rank_collapse.csv (every point), rank_collapse.md (table at the last depth and
the exponent growth), rank_collapse.png (log residual against depth), path_counts.md (the share of
paths of each length in a depth-L, H-head network, C(L,k)·H^k / (1+H)^L).

    python scripts/rank_collapse.py                        # 2-core CPU: about a minute
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

from attnzoo import MIXERS, Model, ModelConfig, rank_profile  # noqa: E402

VARIANTS = {  # name -> (skip, mlp)
    "pure": (False, False),
    "+skip": (True, False),
    "+mlp": (False, True),
    "+skip+mlp": (True, True),
}
NORMS = ("none", "layernorm")
# Below this the float64 probe is at its rounding floor and log-ratios stop meaning anything.
FLOOR = 1e-13


def measure(
    mixer: str, skip: bool, mlp: bool, norm: str, args: argparse.Namespace, seed: int
) -> list[float]:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        dim=args.dim, depth=args.depth, heads=args.heads, mixer=mixer, skip=skip, mlp=mlp, norm=norm
    )
    model = Model(cfg, out_features=2, max_len=args.tokens, vocab_size=args.vocab)
    tokens = torch.randint(0, args.vocab, (args.batch, args.tokens))
    return rank_profile(model, tokens, dtype=torch.float64).mean


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
    parser.add_argument("--out", type=Path, default=Path("scripts/results/rank_collapse"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    rows = []  # (mixer, variant, norm, depth, mean, std)
    curves: dict[tuple[str, str, str], tuple[torch.Tensor, torch.Tensor]] = {}
    for mixer in args.mixers:
        for variant, (skip, mlp) in VARIANTS.items():
            for norm in NORMS:
                runs = torch.tensor(
                    [measure(mixer, skip, mlp, norm, args, seed) for seed in range(args.seeds)]
                )
                mean, std = runs.mean(0), runs.std(0, unbiased=False)
                curves[mixer, variant, norm] = mean, std
                rows += [
                    (mixer, variant, norm, d, mean[d].item(), std[d].item())
                    for d in range(len(mean))
                ]

    with open(args.out / "rank_collapse.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["mixer", "variant", "norm", "depth", "residual_mean", "residual_std"])
        writer.writerows(rows)

    lines = [
        f"Relative residual at init (float64 probe, mean ± std over {args.seeds} seeds; "
        f"dim {args.dim}, {args.heads} heads, {args.tokens} tokens).",
        "",
        "| mixer | variant | norm | depth 1 | depth 3 | depth "
        f"{args.depth} | exponent growth per layer |",
        "|---|---|---|---|---|---|---|",
    ]
    for (mixer, variant, norm), (mean, std) in curves.items():
        growth = exponent_growth(mean.tolist())
        cells = [f"{mean[d]:.1e} ± {std[d]:.0e}" for d in (1, min(3, args.depth), args.depth)]
        lines.append(
            f"| {mixer} | {variant} | {norm} | {' | '.join(cells)} | "
            f"{'–' if growth is None else f'{growth:.2f}'} |"
        )
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
                mean, _ = curves[mixer, variant, norm]
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
    print((args.out / "rank_collapse.md").read_text())
    print((args.out / "path_counts.md").read_text())
    print(f"wrote {args.out}/rank_collapse.{{csv,md,png}} and path_counts.md")


if __name__ == "__main__":
    main()
