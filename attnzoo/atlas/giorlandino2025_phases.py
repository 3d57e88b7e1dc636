"""Giorlandino & Goldt (ICLR 2026, arXiv 2505.24333), "Two failure modes of deep transformers and
how to avoid them": at init, self-attention with small query/key weights averages the tokens
(rank collapse) and with large ones concentrates every row on a few keys (entropy collapse). The
paper maps one attention row onto Derrida's Random Energy Model: with the query and key weights
drawn at std √β (log T)^¼ / √d_H, the scores of T keys are Gaussian with std β √((1−p) log T)
across keys (p: the tokens' mean cosine similarity), and the row condenses above

    β_c(p) = √(2 / (1 − p))                       (the authors' code: get_attention_update)

Below β_c the row's output is the token mean (its squared norm p, its overlap with another
row's p); above it keeps a share Y₂ = 1 − β_c/β of its own token (squared norm p + (1−p) Y₂).
A post-LN block LN(α·x + attn(x)) then maps the similarity p to

    p' = (v·p + α²·p) / (v·q_att + α²),           v = E‖W_o W_v x‖² / ‖x‖²

and the attention entropy per log T is (1 − β²(1−p)/2)₊, the REM's entropy density (0: entropy
collapse). Below β_c the map does not depend on β and has the closed form
odds(p_L) = odds(p_0)·(1 + v/α²)^L, so the residual strength at which the similarity after L
blocks reaches τ is α_c² = v / ((odds(τ)/odds(p_0))^(1/L) − 1): the rank-collapse boundary.

attnzoo's model here is the package's own post-norm block with the λ-skip (`residual=lambda`,
λ = α, `norm_position=post`, LayerNorm, no MLP, one head), the package's default init for the
value and output projections (each uniform ±1/√D, so v = 1/3 · 1/3 = 1/9), and one model-level
intervention: the query and key weights are redrawn at the paper's std for β (scaled_dot has no
score-scale option; the authors' notebooks do the same redraw). The embedding is the identity
and the tokens are x_i = √p₀·c + √(1−p₀)·z_i (one shared Gaussian c, the z_i independent),
p₀ = 0.2 as in the authors' Gain-controlled-propagation notebook. Rank collapse is read by the
package's token similarity (and relative residual), entropy collapse by its attention entropy.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections import defaultdict
from pathlib import Path

import torch

from attnzoo.atlas import select
from attnzoo.model import Model, ModelConfig
from attnzoo.rank import attention_entropy, relative_residual, token_similarity

ID = "giorlandino2025-phases"
PAPER = (
    "Giorlandino & Goldt 2025 (ICLR 2026, arXiv 2505.24333), the rank- vs entropy-collapse "
    "phases at init"
)
PLOTS = (
    "token similarity after 12 post-LN blocks over the score scale β and the skip strength α, "
    "with the theory's two boundaries; attention entropy against β; similarity against depth"
)
SEEDS = 3
SECONDS = 295.0

DIM, TOKENS, DEPTH = 256, 256, 12
P0 = 0.2  # the tokens' initial mean cosine similarity (the authors' notebook starts at 0.2)
V_GAIN = 1.0 / 9.0  # E‖W_o W_v x‖²/‖x‖² of attnzoo's default init (two uniform ±1/√D layers)
TAU = 0.9  # token similarity at which a stack counts as rank-collapsed
BETAS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0)
ALPHAS = (0.1, 0.15, 0.25, 0.35, 0.5, 0.7, 1.0, 2.0)
DEPTH_CURVES = ((0.5, 0.35), (0.5, 1.0), (4.0, 0.35), (4.0, 1.0))  # (β, α) drawn against depth
QUICK = {"dim": 64, "tokens": 128, "depth": 4, "betas": (0.5, 1.0, 3.0), "alphas": (0.1, 0.35, 1.0)}
REM_ROWS = 256  # rows of T Gaussian scores per β in the finite-T REM reference
AUTHORS_DIR = "ICLR-Signal-Propagation-Transformers"  # inside $ATTNZOO_AUTHORS_CODE


# ---- the theory --------------------------------------------------------------------------------


def beta_c(p: float) -> float:
    """The REM condensation point of a row whose tokens have mean cosine similarity p."""
    return math.sqrt(2.0 / (1.0 - p)) if p < 1.0 else math.inf


def theory_entropy(p: float, beta: float) -> float:
    """The attention entropy over log T of the REM at T → ∞: (1 − β²(1−p)/2)₊."""
    return max(0.0, 1.0 - beta**2 * (1.0 - p) / 2.0)


def block_map(p: float, beta: float, alpha: float, v: float = V_GAIN) -> float:
    """The token similarity after one post-LN block LN(α·x + attn(x)) at similarity p."""
    if p >= 1.0:
        return 1.0
    y2 = max(0.0, 1.0 - beta_c(p) / beta)  # the row's participation ratio Σ w²
    q_att = p + (1.0 - p) * y2
    return (v * p + alpha**2 * p) / (v * q_att + alpha**2)


def theory_similarity(
    p0: float, beta: float, alpha: float, depth: int, v: float = V_GAIN
) -> list[float]:
    """The similarity after 0..depth blocks."""
    out = [p0]
    for _ in range(depth):
        out.append(block_map(out[-1], beta, alpha, v))
    return out


def theory_alpha_c(
    beta: float, p0: float, depth: int, tau: float = TAU, v: float = V_GAIN
) -> float:
    """The skip strength α at which the similarity after `depth` blocks is τ (bisection in log α;
    below β_c(p₀) it is the closed form of the module docstring)."""
    lo, hi = math.log(1e-3), math.log(1e3)
    for _ in range(60):
        mid = (lo + hi) / 2
        if theory_similarity(p0, beta, math.exp(mid), depth, v)[-1] > tau:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def closed_form_alpha_c(p0: float, depth: int, tau: float = TAU, v: float = V_GAIN) -> float:
    odds = lambda p: p / (1.0 - p)
    return math.sqrt(v / ((odds(tau) / odds(p0)) ** (1.0 / depth) - 1.0))


def rem_entropy(beta: float, p: float, tokens: int, rows: int, seed: int) -> float:
    """The REM at finite T: the mean entropy over log T of softmax rows of T independent
    Gaussian scores with std β √((1−p) log T) — the paper's model before T → ∞."""
    g = torch.Generator().manual_seed(seed)
    std = beta * math.sqrt((1.0 - p) * math.log(tokens))
    s = std * torch.randn(rows, tokens, generator=g, dtype=torch.float64)
    w = torch.softmax(s, dim=-1)
    h = -torch.special.xlogy(w, w).sum(-1)
    return float(h.mean()) / math.log(tokens)


# ---- attnzoo's model ---------------------------------------------------------------------------


def build_model(beta: float, alpha: float, dim: int, tokens: int, depth: int, seed: int) -> Model:
    """The post-LN attention stack with the λ-skip α, the query and key weights redrawn at the
    paper's std √β (log T)^¼ / √D (one head, so d_H = D), the embedding the identity."""
    torch.manual_seed(seed)  # the same draws for every (β, α): only their scale changes
    config = ModelConfig(
        dim=dim,
        depth=depth,
        heads=1,
        mixer="scaled_dot",
        residual="lambda",
        residual_alpha=alpha,
        mlp=False,
        norm="layernorm",
        norm_position="post",
        pos_emb="none",
        impl="torch",
    )
    model = Model(config, out_features=1, max_len=tokens, in_features=dim)
    std = math.sqrt(beta) * math.log(tokens) ** 0.25 / math.sqrt(dim)
    with torch.no_grad():
        model.embed.weight.copy_(torch.eye(dim))
        model.embed.bias.zero_()
        for block in model.blocks:
            w_q, w_k, _ = block.mixer.qkv.weight.chunk(3, dim=0)
            w_q.normal_(0.0, std)
            w_k.normal_(0.0, std)
    return model.eval()


@torch.no_grad()
def profile(model: Model, x_bnd: torch.Tensor) -> tuple[list[float], list[float], list[float]]:
    """The token similarity and relative residual (attnzoo.rank) of every hidden state, and the
    attention entropy (nats, heads' mean) of the first and the last block, from the mixers' own
    `attention_probs` on their inputs (post-norm: the block's input)."""
    _, hidden = model(x_bnd, return_hidden=True)
    sim = [float(token_similarity(h).mean()) for h in hidden]
    res = [float(relative_residual(h).mean()) for h in hidden]
    ent = [
        float(attention_entropy(model.blocks[k].mixer.attention_probs(hidden[k])).mean())
        for k in (0, len(model.blocks) - 1)
    ]
    return sim, res, ent


def tokens_with_similarity(p0: float, dim: int, tokens: int, seed: int) -> torch.Tensor:
    """(1, T, D) tokens √p₀·c + √(1−p₀)·zᵢ: unit variance per feature, mean cosine ≈ p₀."""
    g = torch.Generator().manual_seed(10_000 + seed)
    c_11d = torch.randn(1, 1, dim, generator=g)
    z_1nd = torch.randn(1, tokens, dim, generator=g)
    return math.sqrt(p0) * c_11d + math.sqrt(1.0 - p0) * z_1nd


def _authors_theory_gap(p0: float, depth: int) -> float | None:
    """The largest gap, over the grid, between `theory_similarity` and the authors' own
    `get_block_update_wres` (theory_update_relu.py) with their MLP switched off (var_w → 0,
    var_b = 0, α_MLP → ∞); None when $ATTNZOO_AUTHORS_CODE holds no copy of their code."""
    root = os.environ.get("ATTNZOO_AUTHORS_CODE")
    path = Path(root or ".") / AUTHORS_DIR / "theory_update_relu.py"
    if not root or not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("giorlandino_theory_update_relu", path)
    authors = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(authors)
    gap = 0.0
    for beta in BETAS:
        for alpha in ALPHAS:
            ours = theory_similarity(p0, beta, alpha, depth)
            p = p0
            for layer in range(1, depth + 1):
                p = float(
                    authors.get_block_update_wres(
                        p, beta, var_w=1e-12, var_v=V_GAIN, var_b=0.0, alpha_A=alpha, alpha_MLP=1e6
                    )
                )
                gap = max(gap, abs(p - ours[layer]))
    return gap


def measure(seeds: int, quick: bool = False) -> list[dict]:
    size = QUICK if quick else {}
    dim, tokens, depth = size.get("dim", DIM), size.get("tokens", TOKENS), size.get("depth", DEPTH)
    betas, alphas = size.get("betas", BETAS), size.get("alphas", ALPHAS)
    log_t = math.log(tokens)
    common = {"dim": dim, "tokens": tokens, "depth": depth, "p0": P0, "v": V_GAIN}
    rows: list[dict] = []
    for seed in range(seeds):
        x = tokens_with_similarity(P0, dim, tokens, seed)
        for beta in betas:
            print(f"{ID}: seed {seed} β={beta}", file=sys.stderr)
            for alpha in alphas:
                model = build_model(beta, alpha, dim, tokens, depth, seed)
                sim, res, ent = profile(model, x)
                ent = [h / log_t for h in ent]
                theory = theory_similarity(P0, beta, alpha, depth)
                rows.append(
                    {
                        "kind": "grid",
                        "seed": seed,
                        "beta": beta,
                        "alpha": alpha,
                        "layer": depth,
                        "token_similarity": sim[-1],
                        "relative_residual": res[-1],
                        "entropy_first": ent[0],
                        "entropy_last": ent[1],
                        "theory_similarity": theory[-1],
                        "theory_entropy_first": theory_entropy(P0, beta),
                        "theory_entropy_last": theory_entropy(theory[-2], beta),
                        **common,
                    }
                )
                if quick or (beta, alpha) in DEPTH_CURVES:
                    for layer in range(depth + 1):
                        rows.append(
                            {
                                "kind": "depth",
                                "seed": seed,
                                "beta": beta,
                                "alpha": alpha,
                                "layer": layer,
                                "token_similarity": sim[layer],
                                "relative_residual": res[layer],
                                "theory_similarity": theory[layer],
                            }
                        )
        for beta in betas:
            rows.append(
                {
                    "kind": "rem",
                    "seed": seed,
                    "beta": beta,
                    "rem_entropy": rem_entropy(beta, P0, tokens, REM_ROWS, seed),
                    "theory_entropy_first": theory_entropy(P0, beta),
                }
            )
    rows.append({"kind": "authors", "seed": 0, "authors_gap": _authors_theory_gap(P0, depth)})
    return rows


# ---- reading the rows --------------------------------------------------------------------------


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def measured_alpha_c(rows: list[dict], beta: float, tau: float = TAU) -> float:
    """Where the seeds' mean similarity after the last block crosses τ along α, interpolated
    in log α between the grid's two neighbours; NaN where it does not cross."""
    by_alpha = defaultdict(list)
    for r in select(rows, kind="grid", beta=beta):
        by_alpha[r["alpha"]].append(r["token_similarity"])
    pts = sorted((a, _mean(v)) for a, v in by_alpha.items())
    for (a0, s0), (a1, s1) in zip(pts, pts[1:], strict=False):
        if s0 > tau >= s1:
            f = (s0 - tau) / (s0 - s1)
            return math.exp(math.log(a0) + f * (math.log(a1) - math.log(a0)))
    return math.nan


def measured_beta_c(rows: list[dict], seed: int | None = None) -> float:
    """β_c read off the high-temperature branch: a least-squares fit of 1 − H/log T = c·β² on
    the first block's entropy at β ≤ 0.75 β_c(p₀) (where the REM law holds), and its zero
    β = 1/√c, where the paper's entropy density vanishes."""
    p0 = _p0(rows)
    pts = {}
    for r in select(rows, kind="grid"):
        if (seed is None or r["seed"] == seed) and r["beta"] <= 0.75 * beta_c(p0):
            pts.setdefault((r["seed"], r["beta"]), r["entropy_first"])  # one per (seed, β)
    num = sum(b**2 * (1.0 - h) for (_, b), h in pts.items())
    den = sum(b**4 for (_, b) in pts)
    return 1.0 / math.sqrt(num / den) if den and num > 0 else math.nan


def _p0(rows: list[dict]) -> float:
    return select(rows, kind="grid")[0]["p0"]


def _grid_info(rows: list[dict]) -> tuple[list[float], list[float], int, int]:
    grid = select(rows, kind="grid")
    betas = sorted({r["beta"] for r in grid})
    alphas = sorted({r["alpha"] for r in grid})
    return betas, alphas, grid[0]["depth"], grid[0]["tokens"]


def _cell_mean(rows: list[dict], key: str, **where) -> float:
    return _mean([r[key] for r in select(rows, **where)])


# ---- the figure --------------------------------------------------------------------------------


def draw(rows: list[dict], png: Path) -> None:
    from attnzoo.atlas._plot import panels, save, seed_lines

    betas, alphas, depth, tokens = _grid_info(rows)
    p0, v = _p0(rows), select(rows, kind="grid")[0]["v"]
    bc = beta_c(p0)
    fig, axes = panels(3, f"{ID}: {PAPER}", width=5.2, height=4.3)

    ax = axes[0]
    z = [
        [_cell_mean(rows, "token_similarity", kind="grid", beta=b, alpha=a) for b in betas]
        for a in alphas
    ]
    mesh = ax.pcolormesh(betas, alphas, z, shading="nearest", cmap="viridis", vmin=0, vmax=1)
    fig.colorbar(mesh, ax=ax, label=f"token similarity after {depth} blocks (measured)")
    fine = [betas[0] * (betas[-1] / betas[0]) ** (k / 200) for k in range(201)]
    ax.plot(
        fine,
        [theory_alpha_c(b, p0, depth, TAU, v) for b in fine],
        "w-",
        lw=2,
        label=f"theory: similarity {TAU} (rank-collapse edge)",
    )
    meas = [(b, measured_alpha_c(rows, b)) for b in betas]
    ax.plot(
        *zip(*[(b, a) for b, a in meas if not math.isnan(a)], strict=True),
        "w--o",
        ms=3,
        label="measured: similarity crosses 0.9",
    )
    ax.axvline(bc, color="tab:red", lw=2, label=f"theory β_c(p₀) = {bc:.2f} (entropy collapse)")
    mbc = measured_beta_c(rows)
    ax.axvline(mbc, color="tab:red", ls="--", label=f"measured β_c = {mbc:.2f} (entropy fit)")
    ax.set(xscale="log", yscale="log", xlabel="β (query/key scale)", ylabel="α (skip strength λ)")
    _plain_ticks(ax.xaxis, [b for b in betas if b in (0.25, 0.5, 1.0, 2.0, 4.0)])
    _plain_ticks(ax.yaxis, [a for a in alphas if a in (0.1, 0.25, 0.5, 1.0, 2.0)])
    ax.set_title("rank collapse below and left, entropy collapse right", fontsize=9)
    ax.legend(fontsize=6, loc="upper right")

    ax = axes[1]
    seed_lines(
        ax,
        select(rows, kind="grid", alpha=alphas[0]),
        "beta",
        "entropy_first",
        "attnzoo, first block",
        "C0",
        marker="o",
    )
    seed_lines(
        ax,
        select(rows, kind="rem"),
        "beta",
        "rem_entropy",
        f"REM at T={tokens}",
        "C1",
        linestyle=":",
    )
    fine = [betas[0] * (betas[-1] / betas[0]) ** (k / 300) for k in range(301)]
    ax.plot(
        fine,
        [theory_entropy(p0, b) for b in fine],
        "k-",
        lw=1.5,
        label="REM, T → ∞: (1 − β²(1−p₀)/2)₊",
    )
    c = 1.0 / mbc**2
    ax.plot(
        [b for b in fine if b <= mbc],
        [1 - c * b**2 for b in fine if b <= mbc],
        "C0--",
        lw=1,
        label=f"fit 1 − cβ² (zero at {mbc:.2f})",
    )
    ax.axvline(bc, color="tab:red", lw=1)
    ax.set(xscale="log", xlabel="β", ylabel="attention entropy / log T", ylim=(-0.02, 1.02))
    _plain_ticks(ax.xaxis, [b for b in betas if b in (0.25, 0.5, 1.0, 2.0, 4.0)])
    ax.set_title(f"entropy collapse at β_c(p₀={p0}) = {bc:.2f}", fontsize=9)
    ax.legend(fontsize=6)

    ax = axes[2]
    for k, (b, a) in enumerate(
        sorted({(r["beta"], r["alpha"]) for r in select(rows, kind="depth")})
    ):
        sub = select(rows, kind="depth", beta=b, alpha=a)
        seed_lines(ax, sub, "layer", "token_similarity", f"β={b}, α={a}", f"C{k}", marker="o")
        th = sorted(
            (r["layer"], r["theory_similarity"]) for r in sub if r["seed"] == sub[0]["seed"]
        )
        ax.plot(*zip(*th, strict=True), color=f"C{k}", ls=":", lw=1.5)
    ax.set(xlabel="block", ylabel="token similarity", ylim=(0, 1.02))
    ax.set_title("measured (solid) against the theory's map (dotted)", fontsize=9)
    ax.legend(fontsize=6)
    save(fig, png)


def _plain_ticks(axis, ticks: list[float]) -> None:
    """Ticks at `ticks`, written as plain numbers, no minor ticks (a log axis's default labels
    collide over a short range)."""
    from matplotlib.ticker import FixedLocator, NullLocator

    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(lambda v, _: f"{v:g}")
    axis.set_minor_locator(NullLocator())


ENTROPY_TOLERANCE = 0.10  # |measured β_c / formula − 1| that counts as agreement
RANK_RANGE = (0.8, 1.25)  # measured α_c / closed form that counts as agreement


def describe(rows: list[dict]) -> str:
    betas, alphas, depth, tokens = _grid_info(rows)
    grid = select(rows, kind="grid")
    p0, v, dim = grid[0]["p0"], grid[0]["v"], grid[0]["dim"]
    seeds = sorted({r["seed"] for r in grid})
    bc = beta_c(p0)
    mbc = measured_beta_c(rows)
    per_seed = [measured_beta_c(rows, s) for s in seeds]
    below = [b for b in betas if b < bc]
    ac_th = closed_form_alpha_c(p0, depth, TAU, v)
    ac_meas = [(b, measured_alpha_c(rows, b)) for b in below]
    ratios = [a / ac_th for _, a in ac_meas if not math.isnan(a)]
    gaps = [abs(r["token_similarity"] - r["theory_similarity"]) for r in grid]
    gaps_below = [
        abs(r["token_similarity"] - r["theory_similarity"]) for r in grid if r["beta"] < bc
    ]
    rem = select(rows, kind="rem")
    rem_gap = max(
        abs(_cell_mean(rows, "entropy_first", kind="grid", beta=r["beta"]) - r["rem_entropy"])
        for r in rem
    )
    hi = [b for b in betas if b >= 2 * bc]
    h_hi = {b: _cell_mean(rows, "entropy_first", kind="grid", beta=b) for b in hi}
    h_lo = {b: _cell_mean(rows, "entropy_first", kind="grid", beta=b) for b in betas[:1]}
    authors = select(rows, kind="authors")[0]["authors_gap"]
    a_small, a_big = alphas[0], alphas[-1]
    sim_small = _cell_mean(rows, "token_similarity", kind="grid", beta=betas[0], alpha=a_small)
    sim_big = _cell_mean(rows, "token_similarity", kind="grid", beta=betas[0], alpha=a_big)
    sim_hot = _cell_mean(rows, "token_similarity", kind="grid", beta=betas[-1], alpha=1.0)
    sim_hot_th = _cell_mean(rows, "theory_similarity", kind="grid", beta=betas[-1], alpha=1.0)
    fmt_ratios = ", ".join(f"β={b}: {a:.3g}" for b, a in ac_meas)
    return "\n".join(
        [
            "**The paper's claim.** At initialisation a softmax row is a Random Energy Model: with "
            "query and key weights at std √β (log T)^¼/√d_H it condenses on a few keys above "
            "β_c(p) = √(2/(1−p)) (entropy collapse; the tokens keep their signal), and below "
            "β_c it averages the tokens, so that only a strong enough residual branch keeps "
            "them apart (rank collapse). Their trainability diagram is these two boundaries in "
            "the plane of the query/key scale and the residual strength.",
            "",
            f"**What attnzoo measured** ({len(seeds)} seeds, D = {dim}, T = {tokens} tokens, "
            f"{depth} post-LN attention blocks `residual=lambda`, no MLP, one head; tokens "
            f"start at mean cosine p₀ = {p0}; the query/key weights redrawn at the paper's std "
            f"— a model-level intervention, since scaled_dot has no score-scale option; the "
            f"value and output projections at attnzoo's default init, v = {v:.4f}):",
            "",
            f"- *Entropy collapse.* The first block's attention entropy per log T follows the "
            f"REM: {h_lo[betas[0]]:.3f} at β = {betas[0]} (theory "
            f"{theory_entropy(p0, betas[0]):.3f}), "
            + (", ".join(f"{h:.3f} at β = {b}" for b, h in h_hi.items()) or "no β ≥ 2 β_c")
            + f" (theory 0). Fitting 1 − H/log T = cβ² on β ≤ 0.75 β_c puts its zero at "
            f"β_c = {mbc:.3f} (per seed {', '.join(f'{x:.3f}' for x in per_seed)}) against the "
            f"formula's √(2/(1−p₀)) = {bc:.3f}, {100 * (mbc / bc - 1):+.1f}%. The REM itself at "
            f"T = {tokens} (Gaussian scores, no model) is within {rem_gap:.3f} of the measured "
            f"entropy at every β: the smooth crossover around β_c is the REM's finite-T "
            f"rounding, not a departure of the model.",
            f"- *Rank collapse.* Below β_c the theory's similarity after {depth} blocks reaches "
            f"{TAU} at α_c = {ac_th:.3f} for every β (closed form); the measured crossing "
            f"(seed mean, log-interpolated) is at {fmt_ratios}, i.e. "
            + (f"{min(ratios):.2f}–{max(ratios):.2f} × α_c" if ratios else "nowhere on the grid")
            + f". At β = {betas[0]} the similarity "
            f"ends at {sim_small:.3f} with α = {a_small} and {sim_big:.3f} with α = {a_big}.",
            f"- *Signal kept by condensed rows.* At β = {betas[-1]}, α = 1 the similarity ends "
            f"at {sim_hot:.3f} (theory {sim_hot_th:.3f}) after {depth} blocks.",
            f"- *The theory's map, layer by layer.* Over the whole grid the measured final "
            f"similarity is within {max(gaps):.3f} of the map (mean {_mean(gaps):.3f}; "
            f"{max(gaps_below):.3f} at β < β_c).",
            "- *The authors' code.* "
            + (
                f"Their `get_block_update_wres` (theory_update_relu.py) with the MLP switched "
                f"off gives the same map: largest gap over the grid {authors:.1e}."
                if authors is not None
                else "Not compared in this run ($ATTNZOO_AUTHORS_CODE did not name a copy of "
                "ICLR-Signal-Propagation-Transformers)."
            ),
            "",
            "**Agreement.** "
            + (
                f"The entropy boundary falls at the REM's β_c(p₀) within "
                f"{100 * ENTROPY_TOLERANCE:.0f}%"
                if abs(mbc / bc - 1) <= ENTROPY_TOLERANCE
                else f"The entropy boundary misses the REM's β_c(p₀) by more than "
                f"{100 * ENTROPY_TOLERANCE:.0f}%"
            )
            + (
                f"; the rank-collapse boundary falls at the closed-form α_c within the range "
                f"{RANK_RANGE[0]}–{RANK_RANGE[1]} × α_c at every β < β_c."
                if ratios and RANK_RANGE[0] <= min(ratios) and max(ratios) <= RANK_RANGE[1]
                else f"; the rank-collapse boundary leaves {RANK_RANGE[0]}–{RANK_RANGE[1]} × "
                "the closed-form α_c at some β < β_c."
            )
            + " Departures: the entropy transition is rounded at T = "
            f"{tokens} (log T = {math.log(tokens):.1f}), as the finite-T REM predicts; near "
            "β_c the rows are not yet uniform, so the measured α_c there sits below the "
            "T → ∞ value. Not reproduced: the paper's MLP and the BERT/TinyStories "
            "experiments (attnzoo's MLP is GELU and this figure leaves it off).",
        ]
    )
