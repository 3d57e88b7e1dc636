"""Every headline claim of README.md and docs/results.md, checked against the committed tables
(attnzoo.claims): holds / fails, and why.

    python scripts/claims.py
"""

from __future__ import annotations

from attnzoo.claims import CLAIMS, check


def main() -> int:
    failed = 0
    for claim in CLAIMS:
        problems = check(claim)
        failed += bool(problems)
        print(f"{'fails' if problems else 'holds'}  {claim.id}  ({', '.join(claim.tables)})")
        for p in problems:
            print(f"       {p}")
    print(f"{len(CLAIMS) - failed} of {len(CLAIMS)} claims hold")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
