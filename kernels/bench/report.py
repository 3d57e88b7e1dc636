"""The kernel benchmark's report: the cost model, results, verdicts and validation as Markdown
tables, and the files `--out` writes (bench_kernels.json, bench_kernels.md)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from .cases import PARTS, Shape, cost, part_shapes
from .timing import Result
from .validate import Check
from .verdicts import Verdict, lookup


def print_model(shapes: list[Shape], pools: list[Shape], window: int) -> None:
    print("| op | shape | fwd GFLOP | fwd+bwd GFLOP | fwd bytes (MB) | fwd FLOP/byte |")
    print("|---|---|---|---|---|---|")
    rows = [(op, s) for op in PARTS if op != "pool" for s in part_shapes(op, shapes, pools)]
    rows.sort(key=lambda row: shapes.index(row[1]))  # shape by shape, as before
    rows += [("pool", s) for s in pools]
    for op, s in rows:
        c = cost(op, s, window)
        if c is None:  # no FLOP model for the op (NO_COST)
            continue
        print(
            f"| {op} | {s.name} | {c['fwd_flop'] / 1e9:.2f} | "
            f"{(c['fwd_flop'] + c['bwd_flop']) / 1e9:.2f} | {c['fwd_bytes'] / 1e6:.1f} | "
            f"{c['fwd_flop'] / c['fwd_bytes']:.1f} |"
        )


def results_table(results: list[Result]) -> str:
    lines = [
        "| part | shape | candidate | mode | device ms | host µs | TFLOP/s or GB/s | time vs attnzoo | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    get = lookup(results)
    for r in results:
        ours = get(r.part, r.shape, "attnzoo", r.mode)
        vs = (
            f"{r.device_ms / ours.device_ms:.2f}×"
            if r.device_ms and ours and r.candidate != "attnzoo"
            else ""
        )
        unit = " GB/s" if r.part == "pool" and r.rate is not None else ""
        lines.append(
            f"| {r.part} | {r.shape} | {r.candidate} | {r.mode} | "
            f"{'' if r.device_ms is None else f'{r.device_ms:.3f}'} | "
            f"{'' if r.host_us is None else f'{r.host_us:.0f}'} | "
            f"{'' if r.rate is None else f'{r.rate:.0f}{unit}'} | {vs} | {r.note} |"
        )
    return "\n".join(lines)


def verdict_table(vs: list[Verdict]) -> str:
    lines = ["| target | measured | goal | verdict |", "|---|---|---|---|"]
    lines += [f"| {v.target} | {v.measured} | {v.goal} | {v.verdict} |" for v in vs]
    return "\n".join(lines)


def checks_table(checks: list[Check]) -> str:
    lines = [
        "| part | mode | formulation | impl | max rel. err out | max rel. err grads | ok | "
        "against |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {c.part} | {c.mode} | {c.formulation} | {c.impl} | {c.err_out:.1e} | "
        f"{c.err_grad:.1e} | {'yes' if c.ok else 'NO'} | {c.against} |"
        for c in checks
    ]
    return "\n".join(lines)


def write_out(out: Path, meta: dict, checks, results, vs, notes, rows=()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "meta": meta,
        "validation": [asdict(c) for c in checks],
        "results": [asdict(r) for r in results],
        "verdicts": [asdict(v) for v in vs],
        "dispatch": list(rows),
        "notes": notes,
    }
    (out / "bench_kernels.json").write_text(json.dumps(payload, indent=1))
    md = [f"# bench_kernels: {meta['device']}", "", "```", meta["command"], "```", ""]
    md += ["## Validation (tiny fp32 shape)", "", checks_table(checks), ""]
    if results:
        md += ["## Timings (bf16)", "", results_table(results), ""]
        md += ["## Targets", "", verdict_table(vs), ""]
    if notes:
        md += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    (out / "bench_kernels.md").write_text("\n".join(md))
