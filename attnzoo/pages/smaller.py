"""The README's lines for the two one-table studies: rank collapse in real architectures
(scripts/architectures.py's architectures.csv) and the training benchmark
(scripts/bench_train.py's shakespeare.md), each from its table."""

from __future__ import annotations

from pathlib import Path

from attnzoo.pages.words import fmt, listed, read_rows, wrap

ARCHITECTURES = Path("scripts/results/architectures/architectures.csv")
BENCH = Path("scripts/results/bench_train/shakespeare.md")
# float64's floor for the relative residual: the round-off of a mean over 128 tokens is ~1e-16;
# a state within a hundred times of it has no residual left to measure
FLOAT64_FLOOR = 1e-14
MODELS = {"bert": "BERT", "albert": "ALBERT", "xlnet": "XLNet", "gpt2": "GPT-2", "vit": "ViT"}


def architectures(root: Path) -> str:
    """Which models' pure attention ends at float64's floor, and where the others end."""
    rows = read_rows(root / ARCHITECTURES)
    last: dict[str, dict[str, str]] = {}
    for r in (r for r in rows if r["variant"] == "pure_attention"):
        if r["model"] not in last or int(r["layer"]) > int(last[r["model"]]["layer"]):
            last[r["model"]] = r
    floor = [
        MODELS.get(m, m) for m, r in last.items() if float(r["relative_residual"]) < FLOAT64_FLOOR
    ]
    above = [
        f"{MODELS.get(m, m)}'s ends at {fmt(float(r['relative_residual']), '.2g')} after "
        f"{r['layer']} layers"
        for m, r in last.items()
        if float(r["relative_residual"]) >= FLOAT64_FLOOR
    ]
    weights = listed(sorted({r["weights"] for r in rows}))
    said = f"in {listed(floor)} pure attention falls to float64's floor" if floor else ""
    if above:
        said += ("; " if said else "") + "; ".join(above)
    return (
        wrap(
            f"**Real architectures** ({weights}, float64 probe): {said}. [Rank collapse in real "
            "architectures](docs/results.md#rank-collapse-in-real-architectures-bert-albert-xlnet-gpt-2-vit)",
            bullet=True,
        )
        + "\n"
    )


def _bench_rows(root: Path) -> dict[str, dict[str, str]]:
    """The benchmark table's rows by mixer (the first table of shakespeare.md)."""
    lines = (root / BENCH).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| mixer |"))
    head = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True))
        rows[cells["mixer"]] = cells
    return rows


def bench(root: Path) -> str:
    """scaled-dot's loss and time against the plain GPT of the same shape."""
    rows = _bench_rows(root)
    scaled, gpt = rows["scaled_dot"], rows["gpt"]
    return (
        wrap(
            "**nanoGPT's Tiny Shakespeare CPU recipe**: `scaled_dot` reaches val loss "
            f"{fmt(float(scaled['val loss']), '.3f')} at {scaled['time vs gpt'].rstrip('x')}× the "
            f"time of a plain PyTorch GPT of the same shape ({fmt(float(gpt['val loss']), '.3f')}; "
            "one seed). [Training benchmark](docs/results.md#training-benchmark-on-cpu-nanogpts-"
            "tiny-shakespeare-recipe-and-imdb-every-mixer)",
            bullet=True,
        )
        + "\n"
    )
