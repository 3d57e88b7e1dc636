"""The kernel benchmark's verdicts, and which path won per op and shape.

Targets are judged on device time; each part declares its own (`Part.targets`, in its family's
bench.py), and `verdicts` lists them in the parts' order, then the closing ones (the launch
path's host time).

`path_rows` says, per op, shape and mode, which path won: the attnzoo op's Triton time against
the fastest PyTorch formulation's (any SDPA backend; never a candidate impl="auto" would not run
instead, `Part.not_auto`), with the ratio. `auto_rows` turns them into the `AUTO_TRITON` value
that would follow for each op: one constant per op (kernels/<family>/ops.py) covers every shape,
so it follows True only where the kernel won at every shape and mode measured, for every part
that measures the op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .cases import parts
from .timing import Result


@dataclass
class Verdict:
    target: str
    measured: str
    goal: str
    verdict: str  # "met", "MISSED", "not measured"


def lookup(results: list[Result]) -> Callable[..., Result | None]:
    table = {(r.part, r.shape, r.candidate, r.mode): r for r in results if r.device_ms}

    def get(part: str, shape: str, cand: str, mode: str = "fwd+bwd") -> Result | None:
        return table.get((part, shape, cand, mode))

    return get


def speedup(ours: Result | None, theirs: Result | None) -> float | None:
    """Their device time over ours (> 1: the attnzoo op is faster), or None if either is missing."""
    return None if ours is None or theirs is None else theirs.device_ms / ours.device_ms


def judged(target: str, ratio: float | None, need: float, goal: str, detail: str = "") -> Verdict:
    """A speed-up target: met where `ratio` >= `need`."""
    if ratio is None:
        return Verdict(target, "–", goal, "not measured")
    return Verdict(
        target, f"{ratio:.2f}×{detail}", goal, "met" if ratio >= need - 1e-12 else "MISSED"
    )


def verdicts(results: list[Result], n_target: int = 4096) -> list[Verdict]:
    out = [v for p in parts() for v in p.targets(results, n_target)]
    return out + [v for p in parts() for v in p.closing_targets(results, n_target)]


# ------------------------------------------------------------------------------------ which path won


def path_rows(results: list[Result]) -> list[dict]:
    """Per part with a kernel, shape and mode: the attnzoo op's device time against the fastest
    PyTorch formulation's, the ratio (> 1: Triton faster) and which path won."""
    rows = []
    for p in parts():
        if p.auto_triton is None:  # no kernel: nothing for AUTO_TRITON to choose
            continue
        mine = [r for r in results if r.part == p.name and r.device_ms]
        for shape, mode in dict.fromkeys((r.shape, r.mode) for r in mine):
            same = [r for r in mine if (r.shape, r.mode) == (shape, mode)]
            ours = next((r for r in same if r.candidate == "attnzoo"), None)
            theirs = [r for r in same if r.candidate != "attnzoo" and r.candidate not in p.not_auto]
            best = min(theirs, key=lambda r: r.device_ms, default=None)
            if ours is None or best is None:
                continue
            ratio = best.device_ms / ours.device_ms
            rows.append(
                {
                    "op": p.op,
                    "part": p.name,
                    "shape": shape,
                    "mode": mode,
                    "triton_ms": ours.device_ms,
                    "torch_ms": best.device_ms,
                    "torch_path": best.candidate,
                    "ratio": ratio,
                    "won": "triton" if ratio > 1.0 else "torch",
                }
            )
    return rows


def auto_rows(rows: list[dict]) -> list[dict]:
    """Per op measured: its AUTO_TRITON now, the value that would follow from `rows` (True only
    where Triton won every row of the op), and the file that holds the constant."""
    out = []
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = [r for r in rows if r["op"] == op]
        p = next(p for p in parts() if p.op == op and p.auto_triton is not None)
        won = sum(r["won"] == "triton" for r in mine)
        out.append(
            {
                "op": op,
                "file": f"kernels/{p.family}/ops.py",
                "auto_triton": p.auto_triton(),
                "follows": won == len(mine),
                "triton_won": won,
                "measured": len(mine),
                "parts": list(dict.fromkeys(r["part"] for r in mine)),
            }
        )
    return out
