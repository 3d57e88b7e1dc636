"""The headline claims of README.md's Results and of docs/results.md, as data.

A claim is a sentence of a page, the committed tables under scripts/results/ it rests on, and a
predicate over those tables. `check` evaluates the predicate and looks the sentence up in its
page; the numbers a sentence quotes are fields of its text, filled from the tables through one
rounding function, `fmt`, so a number in the prose is the table's value rounded once, and a
table that changes changes the sentence a page must carry. The claims of each study are in
its module (`recall`); the other studies' text is generated from their tables
(attnzoo.pages);
`CLAIMS` is all of them. The tables and pages are read from a checkout of the repository.

    python scripts/claims.py            # every claim: holds / fails, and why

tests/test_claims.py runs every claim against the committed tables, and shows a claim failing
on a table altered by one number.
"""

from attnzoo.claims.base import Claim, Tables, check, fmt, render
from attnzoo.claims.recall import RECALL

CLAIMS: list[Claim] = [*RECALL]

__all__ = ["CLAIMS", "Claim", "Tables", "check", "fmt", "render"]
