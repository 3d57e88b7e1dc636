"""The stacks the rank-collapse study probes at init (scripts/rank_collapse.py): which mixer, with
which options, causal or not, and how one is built, measured and swept over Joseph et al.'s
λ-skip.

Every mixer runs at its defaults under its own name. The recurrent mixers (retention, GLA,
Mamba-2, DeltaNet) are causal by nature (their bidirectional form is attnzoo's two summed scans),
so they are probed causal, and so is a scaled-dot row beside them as their reference; a
bidirectional stack is the default elsewhere. Rows with options sit beside the defaults: the
three sink options of scaled-dot attention (a learned sink starts at logit 0, so at init it is
zero_kv's), sigmoid attention at bias 0 as well as at its default −log N, gated DeltaNet.

The λ-skip (attnzoo.residual, `model.residual=lambda`): each block is λ·x + f(x), no MLP, with
no norm or with the paper's LayerNorm after the sum (post-norm). λ = 0 is the pure stack, λ = 1
the plain skip.
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass, field

import torch

from attnzoo.analysis.fits import FLOAT64_FLOOR, collapse_kind
from attnzoo.analysis.split_residual import SPLIT_FLOOR, split_residual_profile, supports_split
from attnzoo.analysis.tables import fmt
from attnzoo.model import EMBED_STD, Model, ModelConfig
from attnzoo.rank import RankProfile, rank_profile
from attnzoo.stats import Interval


@dataclass(frozen=True)
class Stack:
    """A mixer with its options, causal or not."""

    mixer: str
    options: dict = field(default_factory=dict, hash=False)
    causal: bool = False


def causal_only(name: str) -> bool:
    """Whether the mixer registered as `name` can only be causal (stick-breaking, forgetting)."""
    from attnzoo.mixers import MIXERS, can_run

    cls = MIXERS.get(name)
    return cls is not None and not can_run(cls, causal=False)


def recurrent(name: str) -> bool:
    """Whether the mixer registered as `name` is of the recurrent family (a scan over tokens,
    causal by nature): a user's recurrent mixer is probed causal too."""
    from attnzoo.mixers import MIXERS
    from attnzoo.mixers.recurrent import _Recurrent

    cls = MIXERS.get(name)
    return isinstance(cls, type) and issubclass(cls, _Recurrent)


# rows beside the mixers at their defaults, by row name: included where their mixer is studied
OPTION_ROWS = {
    "scaled_dot (causal)": Stack("scaled_dot", causal=True),
    "scaled_dot (sink learned)": Stack("scaled_dot", {"sink": "learned"}),
    "scaled_dot (sink zero_kv)": Stack("scaled_dot", {"sink": "zero_kv"}),
    "sigmoid (bias 0)": Stack("sigmoid", {"bias": 0.0}),
    "deltanet (gated)": Stack("deltanet", {"gated": True}, causal=True),
    "scaled_dot (gate headwise)": Stack("scaled_dot", {"gate": "headwise"}),
    "scaled_dot (gate elementwise)": Stack("scaled_dot", {"gate": "elementwise"}),
}
# rows of the rate study only: linear attention and FAVOR+ with no eps in their normaliser
EPS_ZERO = {
    "linear (eps 0)": Stack("linear", {"eps": 0.0}),
    "favor (eps 0)": Stack("favor", {"eps": 0.0}),
}
# the λ-skip sweep: which mixers, which λ, which norms (name -> (norm, norm_position))
LAMBDA_STACKS = ("mamba2", "retention", "gla", "deltanet", "scaled_dot (causal)")
LAMBDAS = (-1.0, 0.0, 0.01, 0.03, 0.1, 0.3, 1.0)
LAMBDA_NORMS = {"none": ("none", "pre"), "post-LN": ("layernorm", "post")}


def stack_of(name: str) -> Stack:
    """The stack of a row name: an option row, a rate-study row, or a mixer at its defaults."""
    causal = recurrent(name) or causal_only(name)
    return {**OPTION_ROWS, **EPS_ZERO}.get(name) or Stack(name, causal=causal)


def stacks(mixers: list[str], rows: dict[str, Stack] = OPTION_ROWS) -> dict[str, Stack]:
    """Each of `mixers` at its defaults (the recurrent ones causal), then the `rows` whose mixer
    is one of them."""
    out = {m: stack_of(m) for m in mixers}
    out.update({name: s for name, s in rows.items() if s.mixer in mixers})
    return out


def build(
    stack: Stack,
    residual: str,
    mlp: bool,
    norm: str,
    args: argparse.Namespace,
    seed: int,
    input_std: float | None = None,
    **model: object,
) -> tuple[Model, torch.Tensor]:
    """One model of `stack` at init and its probe tokens (args: dim, depth, heads, tokens, batch,
    vocab); `input_std` redraws the token embeddings and positions with that std, `model` sets
    further ModelConfig fields (the residual's)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(
        dim=args.dim,
        depth=args.depth,
        heads=args.heads,
        mixer=stack.mixer,
        mixer_options=dict(stack.options),
        causal=stack.causal,
        residual=residual,
        mlp=mlp,
        norm=norm,
        **model,
    )
    net = Model(cfg, out_features=2, max_len=args.tokens, vocab_size=args.vocab)
    if input_std is not None:
        with torch.no_grad():
            net.embed.weight.mul_(input_std / EMBED_STD)
            if isinstance(net.pos, torch.nn.Parameter):
                net.pos.mul_(input_std / EMBED_STD)
    return net, torch.randint(0, args.vocab, (args.batch, args.tokens))


def measure(
    stack: Stack, residual: str, mlp: bool, norm: str, args: argparse.Namespace, seed: int
) -> RankProfile:
    """Every measure after every block of one model at init, probed in float64."""
    model, tokens = build(stack, residual, mlp, norm, args, seed)
    return rank_profile(model, tokens, dtype=torch.float64, measures=None)


FLOORS = {"split": SPLIT_FLOOR, "float64": FLOAT64_FLOOR}
# The floors a rate's verdict must not depend on (fits.floor_free_kind): its own, 100× higher
# and 100× lower, except that a plain float64 probe goes down to 1e-15 only (a collapsed stack
# reads its rounding error, about 2.3e-16, below that).
FLOOR_RANGE = {
    "split": (SPLIT_FLOOR, SPLIT_FLOOR * 100, SPLIT_FLOOR / 100),
    "float64": (FLOAT64_FLOOR, FLOAT64_FLOOR * 100, 1e-15),
}


def pure_curve(stack: Stack, args: argparse.Namespace, seed: int) -> tuple[list[float], str]:
    """The relative residual of a pure stack with the rate study's inputs (--rate-input-std),
    and how it was measured: "split" (mean and residual apart) where the mixer has a rule, else
    "float64"."""
    model, tokens = build(stack, "none", False, "none", args, seed, args.rate_input_std)
    if supports_split(model):
        return split_residual_profile(model, tokens), "split"
    return rank_profile(model, tokens, dtype=torch.float64, measures=[]).mean, "float64"


@dataclass
class LambdaRow:
    """One (mixer, λ, norm) of the λ-skip sweep: the seeds' curves and the collapse rule's
    reading of them (attnzoo.analysis.fits.collapse_kind, floor FLOAT64_FLOOR)."""

    stack: str
    lam: float
    norm: str
    curves: list[list[float]]
    kind: str
    share: Interval
    ratio: Interval


def lambda_sweep(mixers: list[str], args: argparse.Namespace) -> list[LambdaRow]:
    """The LAMBDA_STACKS of `mixers` with a λ-skip, no MLP, for every LAMBDAS and LAMBDA_NORMS,
    over --rate-seeds seeds with the rate study's inputs, measured by the plain float64 forward."""
    out = []
    for name in [n for n in LAMBDA_STACKS if stack_of(n).mixer in mixers]:
        stack = stack_of(name)
        for norm, (kind, position) in LAMBDA_NORMS.items():
            for lam in LAMBDAS:
                curves = []
                for seed in range(args.rate_seeds):
                    model, tokens = build(
                        stack,
                        "lambda",
                        False,
                        kind,
                        args,
                        1000 + seed,
                        args.rate_input_std,
                        residual_alpha=lam,
                        norm_position=position,
                    )
                    curves.append(
                        rank_profile(model, tokens, dtype=torch.float64, measures=[]).mean
                    )
                verdict, share, ratio = collapse_kind(curves, floor=FLOAT64_FLOOR)
                out.append(LambdaRow(name, lam, norm, curves, verdict, share, ratio))
    return out


def collapse_stops(rows: list[LambdaRow], stack: str, norm: str) -> float | None:
    """The smallest λ > 0 of the sweep from which on every larger λ reads "no collapse", None
    where the largest does not."""
    found = None
    for r in sorted(
        (r for r in rows if r.stack == stack and r.norm == norm and r.lam > 0), key=lambda r: -r.lam
    ):
        if r.kind != "no collapse":
            break
        found = r.lam
    return found


def stop_words(stop: float | None) -> str:
    """collapse_stops in words for the table."""
    if stop is None:
        return "beyond the sweep"
    return "every λ > 0" if stop == min(x for x in LAMBDAS if x > 0) else f"λ = {stop:g}"


def lambda_report(sweep: list[LambdaRow], args: argparse.Namespace) -> list[str]:
    """The λ-skip sweep's table for rank_collapse.md; writes lambda_skip.csv (the reading per
    stack, λ and norm), lambda_skip_seeds.csv (every seed's residual after every block) and
    lambda_skip.png."""
    with open(args.out / "lambda_skip.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                "mixer",
                "lambda",
                "norm",
                "verdict",
                "kept_share",
                "kept_share_low",
                "kept_share_high",
                "k",
                "k_low",
                "k_high",
                "seeds",
            ]
        )
        writer.writerows(
            [
                r.stack,
                r.lam,
                r.norm,
                r.kind,
                r.share.mean,
                r.share.low,
                r.share.high,
                r.ratio.mean,
                r.ratio.low,
                r.ratio.high,
                len(r.curves),
            ]
            for r in sweep
        )
    with open(args.out / "lambda_skip_seeds.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["mixer", "lambda", "norm", "seed", "depth", "relative_residual"])
        writer.writerows(
            [r.stack, r.lam, r.norm, seed, d, v]
            for r in sweep
            for seed, c in enumerate(r.curves)
            for d, v in enumerate(c)
        )
    if sweep:
        import matplotlib.pyplot as plt

        from attnzoo.analysis.figures import lambda_figure

        fig = lambda_figure(
            sweep,
            f"λ-skip λ·x + f(x), pure stacks of depth {args.depth} at "
            f"init ({args.rate_seeds} seeds, input std {args.rate_input_std:g})",
        )
        fig.savefig(args.out / "lambda_skip.png", dpi=120)
        plt.close(fig)
    norms = list(dict.fromkeys(r.norm for r in sweep))
    lines = [
        "",
        f"## λ-skips (Joseph et al. 2024): λ·x + f(x), no MLP, depth {args.depth}, "
        f"{args.rate_seeds} seeds, the inputs of the pure stacks above",
        "",
        "Norm none, or the paper's LayerNorm after the sum (post-LN); λ = 0 is the pure stack, "
        "λ = 1 the plain skip. Measured by the plain float64 forward, read by the same rule as "
        "the pure stacks (r_L / r_0 and, where it collapses, the decrement ratio k). Collapse "
        "stops at: the smallest λ > 0 from which every larger λ of the sweep reads no collapse "
        f'("every λ > 0": already at λ = {min(x for x in LAMBDAS if x > 0):g}).',
        "",
        "| mixer | norm | "
        + " | ".join(f"λ = {lam:g}" for lam in LAMBDAS)
        + " | collapse stops at |",
        "|---|---|" + "---|" * (len(LAMBDAS) + 1),
    ]
    for name in dict.fromkeys(r.stack for r in sweep):
        for norm in norms:
            row = {r.lam: r for r in sweep if r.stack == name and r.norm == norm}
            cells = [
                f"{row[lam].kind} ({fmt(row[lam].share.mean, '.2g', nan='n/a')})" for lam in LAMBDAS
            ]
            stop = collapse_stops(sweep, name, norm)
            lines.append(f"| {name} | {norm} | {' | '.join(cells)} | {stop_words(stop)} |")
    return lines + ["", "(In parentheses: r_L / r_0, the mean over seeds.)"]
