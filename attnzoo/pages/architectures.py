"""Rank collapse in real architectures on the results pages (scripts/architectures.py's
architectures.csv and path_counts.csv): the results page's settings, table and findings, and
the README's line, each from the tables alone.

A model's residual is "at float64's floor" below FLOAT64_FLOOR (attnzoo.analysis.fits): the
round-off of a mean over a window's tokens is ~1e-16, and a state within a hundred times of it
has no residual left to measure. How a falling curve falls is read by the decrement ratio k of
attnzoo.analysis.fits (1 for a singly exponential decay, the exponent of r_{l+1} = c·r_l^k for a
doubly exponential one, 3 at Dong et al.'s bound) over the layers that rank-collapse study reads,
where they are above the floor; one seed, so k has no interval and is described, not tested."""

from __future__ import annotations

import math
from pathlib import Path

from attnzoo.analysis.fits import DOUBLY, FLOAT64_FLOOR, decrement_ratio
from attnzoo.pages.words import fmt, listed, read_rows, span, wrap

FOLDER = Path("scripts/results/architectures")
MODELS = {"bert": "BERT", "albert": "ALBERT", "xlnet": "XLNet", "gpt2": "GPT-2", "vit": "ViT"}
PURE, BARE = "pure_attention", "pure_attention_no_norm"  # the latter: no norms either
COLUMNS = {
    "full": "full",
    "no_skip": "no_skip",
    "no_mlp": "no_mlp",
    PURE: "pure_attention",
    BARE: "pure_attention, no norms",
}
FROM_LAYER = 3  # the table's first column: after the first layers' transient


def name(model: str) -> str:
    return MODELS.get(model, model)


class Study:
    """The committed tables of the architectures probe under `root`."""

    def __init__(self, root: Path) -> None:
        self.rows = read_rows(root / FOLDER / "architectures.csv")
        self.paths = read_rows(root / FOLDER / "path_counts.csv")
        self.models = list(dict.fromkeys(r["model"] for r in self.rows))
        self.last = max(int(r["layer"]) for r in self.rows)

    def curve(self, model: str, variant: str) -> list[float]:
        points = sorted(
            (int(r["layer"]), float(r["relative_residual"]))
            for r in self.rows
            if r["model"] == model and r["variant"] == variant
        )
        return [v for _, v in points]

    def at(self, model: str, variant: str, layer: int) -> float:
        return self.curve(model, variant)[layer]

    def floor_layer(self, model: str, variant: str) -> int | None:
        """The first layer at float64's floor, None when the curve never reaches it."""
        return next(
            (i for i, v in enumerate(self.curve(model, variant)) if v < FLOAT64_FLOOR), None
        )

    def collapsed(self) -> list[str]:
        """The models whose pure attention ends at float64's floor."""
        return [m for m in self.models if self.curve(m, PURE)[-1] < FLOAT64_FLOOR]

    def path_stats(self) -> tuple[int, int, float, float]:
        """Layers, heads, the share of paths through at most FROM_LAYER heads and the mean
        number of heads on a path (path_counts.csv; the same for every model of one shape)."""
        shapes = {(int(r["layers"]), int(r["heads"])) for r in self.paths}
        if len(shapes) != 1:
            raise ValueError(f"path_counts.csv holds {len(shapes)} shapes; the page states one")
        ((layers, heads),) = shapes
        first = self.paths[0]["model"]
        share = {int(r["k"]): float(r["share"]) for r in self.paths if r["model"] == first}
        short = sum(v for k, v in share.items() if k <= FROM_LAYER)
        return layers, heads, short, sum(k * v for k, v in share.items())


def _cell(value: float) -> str:
    """Two decimals down to 0.1, two significant digits below."""
    return fmt(value, ".2f" if value >= 0.1 else ".2g")


def table(study: Study) -> str:
    lines = [
        "| model | " + " | ".join(COLUMNS.values()) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    for m in study.models:
        cells = [
            f"{_cell(study.at(m, v, FROM_LAYER))} → {_cell(study.at(m, v, study.last))}"
            for v in COLUMNS
        ]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _by_layer(study: Study, models: list[str], variant: str) -> str:
    """ "BERT and ALBERT by layer 3, ViT by layer 6": the floor's first layer, grouped."""
    groups: dict[int, list[str]] = {}
    for m in models:
        layer = study.floor_layer(m, variant)
        if layer is not None:
            groups.setdefault(layer, []).append(name(m))
    return ", ".join(f"{listed(ms)} by layer {layer}" for layer, ms in sorted(groups.items()))


def agrees(study: Study) -> str:
    """What agrees with Dong et al.: the models whose pure attention reaches the floor, with
    what the full model, the model without skips and the one without MLPs keep."""
    down = study.collapsed()
    last = study.last
    full = [study.at(m, "full", last) for m in down]
    no_mlp = {m: study.at(m, "no_mlp", last) for m in down}
    skip_floor = [m for m in down if study.floor_layer(m, "no_skip") is not None]
    sooner = [
        m
        for m in down
        if (bare := study.floor_layer(m, BARE)) is not None and bare <= study.floor_layer(m, PURE)
    ]
    layers, heads, short, mean = study.path_stats()
    text = (
        f"In {listed([name(m) for m in down])} pure attention falls to float64's floor (below "
        f"{FLOAT64_FLOOR:g}): {_by_layer(study, down, PURE)}; the full model keeps "
        f"{span(full, '.2f')} after {last} layers. Without its skips alone, "
        + (
            "every one of them reaches the floor as pure attention does"
            if skip_floor == down
            else f"{listed([name(m) for m in skip_floor]) or 'none'} reaches the floor"
        )
        + f" ({_by_layer(study, skip_floor, 'no_skip')}); without its MLPs alone it keeps "
        + ", ".join(f"{name(m)} {fmt(v, '.2f')}" for m, v in no_mlp.items())
        + f" after {last} layers. Without the norms too, pure attention reaches the floor by "
        "the same layer or sooner in "
        + (listed([name(m) for m in sooner]) if sooner else "none of them")
        + f" (at the floor {_by_layer(study, down, BARE)}). Of the (1 + {heads})^{layers} "
        f"paths through a {layers}-layer, {heads}-head network (`path_counts.csv`), the share "
        f"through at most {FROM_LAYER} heads is {fmt(short, '.2g')}, and the mean path goes "
        f"through {fmt(mean, '.1f')} heads."
    )
    return wrap(text)


def _decades(curve: list[float]) -> list[float]:
    """Decades lost per layer from layer 1 while above the floor."""
    above = [v for v in curve[1:] if v >= FLOAT64_FLOOR]
    return [math.log10(a) - math.log10(b) for a, b in zip(above, above[1:], strict=False)]


def differs(study: Study) -> list[str]:
    """Where a model's pure attention does not fall as the paper's bound says: not to the
    floor (its loss per layer from FROM_LAYER on), or singly exponentially (its decrement
    ratio and decades per layer)."""
    bullets = []
    for m in study.models:
        curve = study.curve(m, PURE)
        k = decrement_ratio(curve)
        if m not in study.collapsed():
            first, end = curve[FROM_LAYER], curve[-1]
            lost = 1 - (end / first) ** (1 / (study.last - FROM_LAYER))
            bullets.append(
                f"**{name(m)}'s pure attention does not reach the floor.** From layer "
                f"{FROM_LAYER} on it loses {lost:.0%} of its residual per layer (geometric mean; "
                f"{_cell(first)} after {FROM_LAYER} layers, {_cell(end)} after {study.last}); "
                f"decrement ratio k = {fmt(k, '.2f')}."
            )
        elif not math.isnan(k) and 1 / DOUBLY <= k <= DOUBLY:
            bullets.append(
                f"**{name(m)}'s pure attention falls singly exponentially** (decrement ratio k = "
                f"{fmt(k, '.2f')}): {span(_decades(curve), '.1f')} decades per layer from layer 1 "
                f"until the floor at layer {study.floor_layer(m, PURE)}."
            )
        elif not math.isnan(k) and k < 1 / DOUBLY:
            floor = study.floor_layer(m, PURE)
            bullets.append(
                f"**{name(m)}'s pure attention slows before the floor** (decrement ratio k = "
                f"{fmt(k, '.2f')}: each layer takes less than the one before): "
                + ", ".join(_cell(v) for v in curve[1:floor])
                + f" after layers 1 to {floor - 1}, then the floor at layer {floor}."
            )
    return [wrap(b, bullet=True) for b in bullets]


def results_section(root: Path) -> str:
    """docs/results.md's measured part: the table, what agrees and what does not."""
    study = Study(root)
    lines = [
        f"Relative residual after layer {FROM_LAYER} → after layer {study.last}:",
        "",
        table(study),
        "",
        "Every point: [`architectures.csv`](../scripts/results/architectures/architectures.csv); "
        "layers",
        "1–3 and the path counts: "
        "[`architectures.md`](../scripts/results/architectures/architectures.md).",
        "",
        agrees(study),
        "",
        *differs(study),
    ]
    return "\n".join(lines) + "\n"


def headline(root: Path) -> str:
    """README's line: which models' pure attention ends at float64's floor, where the others
    end."""
    study = Study(root)
    floor = [name(m) for m in study.collapsed()]
    above = [
        f"{name(m)}'s ends at {fmt(study.at(m, PURE, study.last), '.2g')} after {study.last} layers"
        for m in study.models
        if m not in study.collapsed()
    ]
    weights = listed(sorted({r["weights"] for r in study.rows}))
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
