"""Render the results pages' generated regions (README.md, docs/results.md) from the committed
tables under scripts/results/ (attnzoo.pages): every number, interval, verdict word and scope in
a region comes from the tables; the text around the regions is written by hand.

    python scripts/pages.py            # rewrite the regions that differ
    python scripts/pages.py --check    # change nothing; exit 1 naming the pages that differ
"""

from __future__ import annotations

import argparse

from attnzoo.pages import ROOT, stale, write


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a page is not current"
    )
    args = parser.parse_args()
    if args.check:
        pages = stale(ROOT)
        for page in pages:
            print(f"{page}: not what the tables give; run python scripts/pages.py")
        print("every generated region is current" if not pages else "")
        return 1 if pages else 0
    changed = write(ROOT)
    print(f"rewrote {', '.join(changed)}" if changed else "every generated region is current")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
