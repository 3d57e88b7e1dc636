"""The training benchmark on the results pages (scripts/bench_train.py's shakespeare.md, imdb.md
and probe_overhead.md): the results page's tables, the targets read against them and the rank
probe's cost, and the README's line, each from the tables."""

from __future__ import annotations

import re
from pathlib import Path

from attnzoo.pages.words import fmt, wrap

FOLDER = Path("scripts/results/bench_train")
BENCH = FOLDER / "shakespeare.md"
IMDB = FOLDER / "imdb.md"
PROBE = FOLDER / "probe_overhead.md"
# the targets of the CPU recipe, fixed before it was measured: scaled-dot's val loss and its
# time against the plain GPT of the same shape
TARGET_LOSS, TARGET_TIME = 1.90, 1.1
PROBE_TARGET = 0.05  # the rank probe's share of training time
REFERENCE = "gpt"  # the plain PyTorch GPT, "plain GPT" on the page


def _bench_rows(root: Path, path: Path = BENCH) -> dict[str, dict[str, str]]:
    """The rows by mixer of the first table of a benchmark's markdown report."""
    lines = (root / path).read_text(encoding="utf-8").splitlines()
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


def _ratio(cell: str) -> float:
    return float(cell.rstrip("x"))


def _table(rows: dict[str, dict[str, str]], metric: str, probe: bool) -> str:
    head = f"| mixer | params | {metric} | ms/step (median) | final rank | time vs plain GPT |"
    lines = [
        head + (" rank probe, share of training time at eval_every=100 |" if probe else ""),
        "|---|---:|---:|---:|---:|---:|" + ("---:|" if probe else ""),
    ]
    for mixer, r in rows.items():
        cells = [
            "plain GPT" if mixer == REFERENCE else mixer,
            r["params"],
            fmt(float(r[metric]), ".3f"),
            r["ms/step (median)"],
            r["final rank"],
            f"{fmt(_ratio(r['time vs gpt']), '.2f')}×",
        ]
        if probe:
            cells.append(r["probe share at eval_every=100"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _steps(root: Path) -> int:
    """The steps of the probe's run, from the command its report records."""
    command = next(
        line
        for line in (root / PROBE).read_text(encoding="utf-8").splitlines()
        if "--steps" in line
    )
    return int(re.search(r"--steps (\d+)", command).group(1))


def _probe(root: Path) -> str:
    """The probe's cost with every measure against the relative residual alone."""
    rows = _bench_rows(root, PROBE)
    ms = [
        [float(x) for x in r["probe ms: relative residual / all measures"].split(" / ")]
        for r in rows.values()
    ]
    share = [
        float(r["share at eval_every=100: relative residual / all"].split(" / ")[1].rstrip("%"))
        for r in rows.values()
    ]
    later = [float(r["share at eval_every=250: all"].rstrip("%")) for r in rows.values()]
    return wrap(
        "**The rank probe with every collapse measure.** The first table timed the probe with the "
        "relative residual alone. With all five measures (the `train.rank_measures` default) it "
        f"takes {fmt(min(a for _, a in ms), '.0f')} to {fmt(max(a for _, a in ms), '.0f')} ms on "
        f"this recipe against {fmt(min(r for r, _ in ms), '.0f')} to "
        f"{fmt(max(r for r, _ in ms), '.0f')} ms for the relative residual "
        f"([`probe_overhead.md`](../{PROBE.as_posix()}), one {_steps(root)}-step run of every "
        "model): at the trainer's default `train.eval_every=100` that is "
        f"{fmt(min(share), '.1f')}% to {fmt(max(share), '.1f')}% of training time, at this "
        f"recipe's 250 at most {fmt(max(later), '.2f')}% (target: ≤ {PROBE_TARGET:.0%}: "
        + ("met" if max(share) / 100 <= PROBE_TARGET else "not met")
        + ")."
    )


def results_section(root: Path) -> str:
    """docs/results.md's CPU benchmark: both tables, the targets and the probe's cost."""
    rows = _bench_rows(root)
    scaled, gpt = rows["scaled_dot"], rows[REFERENCE]
    loss, time = float(scaled["val loss"]), _ratio(scaled["time vs gpt"])
    met = [loss <= TARGET_LOSS, time <= TARGET_TIME]
    verdict = {
        (True, True): "meets both targets",
        (True, False): "meets the loss target, not the time target",
        (False, True): "meets the time target, not the loss target",
        (False, False): "meets neither target",
    }[tuple(met)]
    return (
        "\n".join(
            [
                _table(rows, "val loss", probe=True),
                "",
                wrap(
                    f"Targets: `scaled_dot` val loss ≤ {TARGET_LOSS:.2f} and "
                    f"time ≤ {TARGET_TIME:g}× the plain GPT's. `scaled_dot` reaches "
                    f"{fmt(loss, '.3f')} at {fmt(time, '.2f')}× ({verdict}); the plain GPT "
                    f"{fmt(float(gpt['val loss']), '.3f')}. Time ratios are of mean ms/step over the "
                    "run. IMDB, the same model on the first 128 BPE tokens of each review, batch 32, "
                    "300 steps (a CPU budget, not convergence):"
                ),
                "",
                _table(_bench_rows(root, IMDB), "val accuracy", probe=False),
                "",
                _probe(root),
            ]
        )
        + "\n"
    )
