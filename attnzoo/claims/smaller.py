"""The claims of the smaller studies: see attnzoo.claims."""

from __future__ import annotations

from attnzoo.claims.base import (
    README,
    Claim,
    Problems,
    Tables,
    expect,
    fmt,
    num,
)

# ---- the smaller studies: real architectures and the training benchmark (path length: attnzoo.pages) ---------------

ARCH = "architectures/architectures.csv"
BENCH = "bench_train/shakespeare.md"
FLOAT64_FLOOR = 1e-14


def pure_attention_last(t: Tables, model: str) -> float:
    rows = t.rows(ARCH, model=model, variant="pure_attention")
    return num(max(rows, key=lambda r: int(r["layer"])), "relative_residual")


def architectures(t: Tables) -> Problems:
    for model in ("bert", "albert", "xlnet", "vit"):
        r = pure_attention_last(t, model)
        yield from expect(r < FLOAT64_FLOOR, f"{model}: pure attention ends at {r:.2g}")
    r = pure_attention_last(t, "gpt2")
    yield from expect(r > 1e-3, f"gpt2: pure attention ends at {r:.2g}")
    yield from expect({w["weights"] for w in t.rows(ARCH)} == {"random init"}, "not random init")


def bench(t: Tables) -> dict[str, dict[str, str]]:
    return {r["mixer"]: r for r in t.markdown(BENCH, "| mixer | params |")}


SMALLER = [
    Claim(
        "architectures",
        README,
        "in BERT, ALBERT, XLNet and ViT pure attention falls to float64's floor; GPT-2's causal "
        "attention decays only exponentially (one seed, no pretrained weights)",
        (ARCH,),
        architectures,
    ),
    Claim(
        "bench-train",
        README,
        "`scaled_dot` reaches val loss {loss} at {ratio}× the time of a plain PyTorch GPT of the "
        "same shape (one seed)",
        (BENCH,),
        lambda t: expect(set(bench(t)) >= {"scaled_dot", "gpt"}, "rows missing"),
        lambda t: {
            "loss": fmt(float(bench(t)["scaled_dot"]["val loss"]), ".3f"),
            "ratio": bench(t)["scaled_dot"]["time vs gpt"].rstrip("x"),
        },
    ),
]
