"""The claims of rank collapse during training: see attnzoo.claims."""

from __future__ import annotations

from collections.abc import Sequence

from attnzoo.claims.base import (
    README,
    RESULTS_PAGE,
    Claim,
    Problems,
    Tables,
    expect,
    fmt,
    num,
    span,
)

# ---- rank collapse during training (scripts/rank_ablation.py) -----------------------------------

ABLATION = "rank_ablation/rank_ablation.csv"
ATTENTION = ("scaled_dot", "quadratic", "metric", "linear", "favor", "local")
MEASURES = ("relative_residual", "effective_rank", "stable_rank", "token_similarity")
UNLEARNED = 3.30  # a val loss at or above it: the model stayed at the unigram loss (3.33)


def configs(t: Tables, **where: str) -> list[dict[str, str]]:
    return t.rows(ABLATION, **where)


def with_residual(t: Tables, **where: str) -> list[dict[str, str]]:
    return [r for r in configs(t, **where) if r["residual"] != "none"]


def name(r: dict[str, str]) -> str:
    mlp = "MLP on" if r["mlp"] == "True" else "MLP off"
    return f"{r['mixer']} residual={r['residual']} {mlp} norm={r['norm']}"


def trained(r: dict[str, str], measure: str) -> str:
    return r[f"trained_{measure}_verdict"]


def loss(r: dict[str, str]) -> float:
    return num(r, "val_loss_mean")


def no_residual_collapses(t: Tables, mlp: str, measures: Sequence[str] = MEASURES) -> Problems:
    for r in configs(t, residual="none", mlp=mlp, norm="layernorm"):
        if r["mixer"] in ATTENTION:
            for m in measures:
                yield from expect(trained(r, m) == "collapsed", f"{name(r)}: {m} {trained(r, m)}")
            yield from expect(loss(r) >= UNLEARNED, f"{name(r)}: learned (val loss {loss(r):.3f})")


def no_residual_mlp_off(t: Tables) -> Problems:
    """MLP off, no residual: every measure collapsed but quadratic's and favor's residual."""
    yield from no_residual_collapses(t, "False", MEASURES[1:])
    for r in configs(t, residual="none", mlp="False", norm="layernorm"):
        if r["mixer"] in ATTENTION:
            got = trained(r, "relative_residual")
            want = "partial" if r["mixer"] in ("quadratic", "favor") else "collapsed"
            yield from expect(got == want, f"{name(r)}: relative residual {got}")


def attention_losses(t: Tables, residual: bool, mlp: str = "True") -> list[float]:
    rows = configs(t, mlp=mlp, norm="layernorm")
    return [
        loss(r) for r in rows if r["mixer"] in ATTENTION and (r["residual"] != "none") == residual
    ]


def keeps_residual_and_similarity(t: Tables, mlp: str) -> Problems:
    for r in with_residual(t, mlp=mlp, norm="layernorm"):
        if r["mixer"] != "token_mlp":
            for m in ("relative_residual", "token_similarity"):
                yield from expect(trained(r, m) == "kept", f"{name(r)}: {m} {trained(r, m)}")


def stable_kept(t: Tables, mlp: str) -> list[dict[str, str]]:
    return [r for r in with_residual(t, mlp=mlp) if trained(r, "stable_rank") == "kept"]


def stable_fields(t: Tables) -> dict[str, str]:
    kept = stable_kept(t, "False")
    by = {
        m: sum(r["mixer"] == m for r in kept)
        for m in ("pooling", "identity", "linear", "token_mlp")
    }
    return {
        "kept": str(len(kept)),
        "configs": str(len(with_residual(t, mlp="False"))),
        **{m: str(n) for m, n in by.items()},
    }


def stable_scope(t: Tables) -> Problems:
    """MLP on: no configuration with a residual keeps stable rank, and it collapses only where
    the model did not learn or for identity with add and no norm. MLP off: exactly the
    configurations named keep it (linear and token MLP with rezero, layerscale, deepnorm)."""
    for r in stable_kept(t, "True"):
        yield f"{name(r)} keeps stable rank"
    for r in with_residual(t, mlp="True"):
        if trained(r, "stable_rank") == "collapsed" and loss(r) < UNLEARNED:
            yield from expect(
                (r["mixer"], r["residual"], r["norm"]) == ("identity", "add", "none"),
                f"{name(r)}: stable rank collapsed at val loss {loss(r):.3f}",
            )
    kept = stable_kept(t, "False")
    mixers = {r["mixer"] for r in kept}
    yield from expect(mixers == {"pooling", "identity", "linear", "token_mlp"}, f"kept by {mixers}")
    for m in ("linear", "token_mlp"):
        got = {r["residual"] for r in kept if r["mixer"] == m}
        yield from expect(got == {"rezero", "layerscale", "deepnorm"}, f"{m} keeps it with {got}")


def add_no_norm(t: Tables, mlp: str) -> list[dict[str, str]]:
    return configs(t, residual="add", mlp=mlp, norm="none")


def stable_collapses_learned(t: Tables) -> list[dict[str, str]]:
    rows = add_no_norm(t, "False")
    return [r for r in rows if trained(r, "stable_rank") == "collapsed" and loss(r) < UNLEARNED]


def stable_off_fields(t: Tables) -> dict[str, str]:
    rows = stable_collapses_learned(t)
    by = {r["mixer"]: r for r in rows}
    return {
        "n": str(len(rows)),
        "losses": span((loss(r) for r in rows), ".2f"),
        "favor": fmt(loss(by["favor"]), ".2f"),
        "local": fmt(loss(by["local"]), ".2f"),
    }


def stable_off_predicate(t: Tables) -> Problems:
    rows = stable_collapses_learned(t)
    yield from expect({"favor", "local"} <= {r["mixer"] for r in rows}, "favor or local missing")


def add_no_norm_keeps(t: Tables) -> Problems:
    """MLP on: both kept for every mixer but pooling (residual only); MLP off: identity alone."""
    for r in add_no_norm(t, "True"):
        got = tuple(trained(r, m) == "kept" for m in ("relative_residual", "token_similarity"))
        want = (True, r["mixer"] != "pooling")
        yield from expect(got == want, f"{name(r)}: residual, similarity kept: {got}")
    for r in add_no_norm(t, "False"):
        both = all(trained(r, m) == "kept" for m in ("relative_residual", "token_similarity"))
        yield from expect(both == (r["mixer"] == "identity"), f"{name(r)}: keeps both: {both}")


def no_residual_no_norm(t: Tables) -> Problems:
    for r in configs(t, residual="none", norm="none"):
        if r["mixer"] in (*ATTENTION, "token_mlp"):
            for m in MEASURES:
                yield from expect(trained(r, m) == "collapsed", f"{name(r)}: {m} {trained(r, m)}")


def token_mlp(t: Tables) -> dict[str, dict[str, str]]:
    return {r["residual"]: r for r in configs(t, mixer="token_mlp", mlp="True", norm="layernorm")}


def token_mlp_predicate(t: Tables) -> Problems:
    rows = token_mlp(t)
    for res in ("none", "add", "denseformer"):
        yield from expect(loss(rows[res]) >= UNLEARNED, f"token_mlp {res} learned")
    for res in ("rezero", "layerscale", "deepnorm", "scaled", "attnres"):
        yield from expect(loss(rows[res]) < UNLEARNED, f"token_mlp {res} did not learn")


def interval(r: dict[str, str], key: str, spec: str) -> str:
    return f"{fmt(num(r, key + '_mean'), spec)} [{fmt(num(r, key + '_ci_low'), spec)}, {fmt(num(r, key + '_ci_high'), spec)}]"


def token_mlp_fields(t: Tables) -> dict[str, str]:
    rows = token_mlp(t)
    return {
        "stuck": span((loss(rows[r]) for r in ("add", "denseformer")), ".2f"),
        "scaled": interval(rows["scaled"], "val_loss", ".2f"),
        "attnres": interval(rows["attnres"], "val_loss", ".2f"),
        "small": span((loss(rows[r]) for r in ("rezero", "layerscale", "deepnorm")), ".2f"),
    }


def init_variants(t: Tables) -> Problems:
    for r in configs(t, residual="rezero"):
        for m in MEASURES:
            yield from expect(r[f"init_{m}_verdict"] == "kept", f"{name(r)}: init {m}")
    for res in ("add", "scaled", "denseformer", "attnres"):
        for r in configs(t, residual=res, norm="layernorm"):
            if r["mixer"] in ATTENTION:
                got = r["init_stable_rank_verdict"]
                yield from expect(got == "collapsed", f"{name(r)}: init stable rank {got}")


def no_residual_fields(t: Tables) -> dict[str, str]:
    return {
        "none": span(attention_losses(t, residual=False), ".2f"),
        "residual": span(attention_losses(t, residual=True), ".2f"),
    }


RANK_ABLATION = [
    Claim(
        "ablation-no-residual",
        README,
        "with LayerNorm and the MLP on, every input-dependent attention mixer without a residual "
        "collapses by all four measures and does not learn (val loss {none} against {residual} "
        "with any residual variant)",
        (ABLATION,),
        lambda t: no_residual_collapses(t, "True"),
        no_residual_fields,
    ),
    Claim(
        "ablation-residual-keeps",
        README,
        "every residual variant keeps the relative residual and token similarity for every mixer "
        "but the token MLP",
        (ABLATION,),
        lambda t: [
            *keeps_residual_and_similarity(t, "True"),
            *keeps_residual_and_similarity(t, "False"),
        ],
    ),
    Claim(
        "ablation-stable-rank",
        README,
        "no configuration with the MLP on keeps stable rank, {kept} of the {configs} with a "
        "residual and the MLP off do",
        (ABLATION,),
        stable_scope,
        stable_fields,
    ),
    Claim(
        "ablation-no-residual-docs",
        RESULTS_PAGE,
        "Without a residual, with the MLP on, every input-dependent attention mixer collapses by "
        "all four measures and does not learn (scaled-dot, quadratic, metric, linear, favor, "
        "local): val loss {none}, against {residual} for the same mixers with any residual "
        "variant.",
        (ABLATION,),
        lambda t: no_residual_collapses(t, "True"),
        no_residual_fields,
    ),
    Claim(
        "ablation-no-residual-mlp-off-docs",
        RESULTS_PAGE,
        "With the MLP off they do not learn either, and collapse by every measure but the "
        "relative residual of quadratic and FAVOR+ (partial).",
        (ABLATION,),
        no_residual_mlp_off,
    ),
    Claim(
        "ablation-residual-keeps-docs",
        RESULTS_PAGE,
        "Every residual variant keeps the relative residual and token similarity for every mixer "
        "but the token MLP, with the MLP on or off.",
        (ABLATION,),
        lambda t: [
            *keeps_residual_and_similarity(t, "True"),
            *keeps_residual_and_similarity(t, "False"),
        ],
    ),
    Claim(
        "ablation-stable-rank-docs",
        RESULTS_PAGE,
        "With the MLP on, stable rank is kept by no trained configuration with a residual: it is "
        "partial, and collapsed only where the model did not learn (token MLP with add or "
        "denseformer) and for identity with add and no norm. With the MLP off, {kept} of the "
        "{configs} configurations with a residual keep it (pooling {pooling}, identity "
        "{identity}, linear attention {linear} and the token MLP {token_mlp}: with rezero, "
        "layerscale and deepnorm)",
        (ABLATION,),
        stable_scope,
        stable_fields,
    ),
    Claim(
        "ablation-stable-rank-off-docs",
        RESULTS_PAGE,
        "with add and no norm it collapses for {n} mixers whose models did learn (val loss "
        "{losses}; FAVOR+ {favor}, local attention {local})",
        (ABLATION,),
        stable_off_predicate,
        stable_off_fields,
    ),
    Claim(
        "ablation-init-docs",
        RESULTS_PAGE,
        "rezero (each block the identity at init) keeps all four measures for every mixer, while "
        "with add, scaled, denseformer and attnres the attention mixers' stable rank is already "
        "collapsed after four blocks",
        (ABLATION,),
        init_variants,
    ),
    Claim(
        "ablation-no-norm-docs",
        RESULTS_PAGE,
        "with no residual and no norm every attention mixer and the token MLP collapse by all "
        "four measures, with the MLP on or off; with the MLP on, `add` without a norm keeps the "
        "relative residual and token similarity for every mixer but pooling (the residual only), "
        "with the MLP off for identity alone.",
        (ABLATION,),
        lambda t: [*no_residual_no_norm(t), *add_no_norm_keeps(t)],
    ),
    Claim(
        "ablation-token-mlp-docs",
        RESULTS_PAGE,
        "At this one untuned learning rate, the token MLP (MLP on) learns only with some residual "
        "variants: with add or denseformer it stays at the untrained loss ({stuck}), with scaled "
        "at {scaled} and attnres {attnres} (seeds disagree), with rezero, layerscale and "
        "deepnorm at {small}",
        (ABLATION,),
        token_mlp_predicate,
        token_mlp_fields,
    ),
]
