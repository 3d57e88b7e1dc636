"""The collapse atlas: the rank-collapse literature's figures, redrawn with attnzoo's mixers, block
switches and measures (the figures are the modules of attnzoo.atlas).

    python scripts/atlas.py --list                          # id, paper, what it plots, run time
    python scripts/atlas.py dong2021-residual               # draw one into results/atlas/
    python scripts/atlas.py dong2021-residual --out scripts/results/atlas --seeds 5
    python scripts/atlas.py dong2021-residual --dry-run     # its price, measured here
    python scripts/atlas.py --page                          # docs/atlas.md from the committed files

A figure writes ID.csv (every plotted value with its seed), ID.png (drawn from that CSV as read
back) and ID.md (the paper's claim and what attnzoo measured, numbers from the CSV), all three
or none: nothing is written before the measurement is done, and a bad figure id or seed count is
refused (exit 2) before anything runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from attnzoo.atlas import (
    PAGE,
    PAGE_COMMAND,
    RESULTS,
    ROOT,
    SUFFIXES,
    AtlasError,
    figure,
    figures,
    read_csv,
    render_page,
    seconds_text,
    unit,
    write_csv,
)
from attnzoo.studies import default_out


def list_figures() -> str:
    lines = []
    for fid, module in figures().items():
        lines += [
            f"{fid}",
            f"    paper:    {module.PAPER}",
            f"    plots:    {module.PLOTS}",
            f"    run time: ~{seconds_text(module.SECONDS)} at {module.SEEDS} seeds on 2 CPU cores",
        ]
    return "\n".join(lines)


def price(module, seeds: int) -> str:
    """One unit of the figure's work, timed here, times the units `seeds` seeds take."""
    work, count, what = unit(module, seeds)
    start = time.perf_counter()
    work()
    each = time.perf_counter() - start
    return (
        f"{module.ID} --dry-run: one {what} took {each:.1f} s here; {count} × {each:.1f} s = "
        f"~{seconds_text(count * each)} at {seeds} seeds (the figure's own estimate on 2 CPU "
        f"cores at {module.SEEDS} seeds: ~{seconds_text(module.SECONDS)}); nothing written"
    )


def draw(module, seeds: int, out: Path) -> list[Path]:
    """Measure, then write ID.{csv,png,md} into `out` together: they are made in a temporary
    folder beside it first, so a failure leaves `out` as it was."""
    start = time.perf_counter()
    rows = module.measure(seeds)
    print(f"{module.ID}: measured in {seconds_text(time.perf_counter() - start)}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out, prefix=".atlas-") as tmp:
        made = {s: Path(tmp) / f"{module.ID}{s}" for s in SUFFIXES}
        write_csv(rows, made[".csv"])
        rows = read_csv(made[".csv"])  # what is committed is what is drawn and described
        module.draw(rows, made[".png"])
        made[".md"].write_text(module.describe(rows).strip() + "\n", encoding="utf-8")
        for path in made.values():
            path.replace(out / path.name)
    return [out / f"{module.ID}{s}" for s in SUFFIXES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("figure", nargs="?", metavar="ID", help="the figure to draw (see --list)")
    parser.add_argument("--list", action="store_true", help="name the figures and stop")
    parser.add_argument(
        "--out",
        type=Path,
        default=default_out("atlas"),
        help=f"folder for ID.{{png,csv,md}} (default results/atlas/; the committed ones: {RESULTS})",
    )
    parser.add_argument("--seeds", type=int, default=None, help="seeds (default: the figure's)")
    parser.add_argument(
        "--dry-run", action="store_true", help="time one unit of the figure's work; write nothing"
    )
    parser.add_argument(
        "--page", action="store_true", help=f"write {PAGE} from the committed figures"
    )
    args = parser.parse_args(argv)

    if args.list or args.page:
        if args.figure is not None:
            parser.error(f"--list and --page take no figure id (got {args.figure!r})")
        if args.list:
            print(list_figures())
        if args.page:
            (ROOT / PAGE).write_text(render_page(), encoding="utf-8")
            print(f"wrote {PAGE} ({PAGE_COMMAND})")
        return 0
    if args.figure is None:
        parser.error(f"give a figure id, --list or --page; figures: {', '.join(figures())}")
    try:
        module = figure(args.figure)
    except AtlasError as e:
        parser.error(str(e))
    if args.seeds is not None and args.seeds < 1:
        parser.error(f"--seeds={args.seeds} must be at least 1")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out={args.out} is a file; give a folder")
    seeds = module.SEEDS if args.seeds is None else args.seeds
    if args.dry_run:
        print(price(module, seeds))
        return 0
    for path in draw(module, seeds, args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
