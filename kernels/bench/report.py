"""The kernel benchmark's report: the cost model, results, verdicts, which path won and the
validation as Markdown tables, and the files `--out` writes (bench_kernels.json,
bench_kernels.md)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from .cases import Shape, part, parts
from .timing import Result
from .validate import Check
from .verdicts import Verdict, lookup


def print_model(shapes: list[Shape], window: int, large: bool = True) -> None:
    """The cost model of every part at every shape it is timed at: shape by shape over the
    attention shapes, then the parts' own shapes."""
    print("| op | shape | fwd GFLOP | fwd+bwd GFLOP | fwd bytes (MB) | fwd FLOP/byte |")
    print("|---|---|---|---|---|---|")
    rows = [(p, s) for p in parts() for s in p.shapes_for(shapes, large)]
    rows.sort(key=lambda row: (0, shapes.index(row[1])) if row[1] in shapes else (1, 0))
    for p, s in rows:
        c = p.cost(s, window)
        if c is None:  # no cost model for the part
            continue
        print(
            f"| {p.name} | {s.name} | {c['fwd_flop'] / 1e9:.2f} | "
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
        unit = " GB/s" if part(r.part).bandwidth and r.rate is not None else ""
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


def paths_table(rows: list[dict]) -> str:
    lines = [
        "| op | part | shape | mode | triton ms | fastest PyTorch ms | its path | speed-up of "
        "Triton | won |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['op']} | {r['part']} | {r['shape']} | {r['mode']} | {r['triton_ms']:.3f} | "
        f"{r['torch_ms']:.3f} | {r['torch_path']} | {r['ratio']:.2f}× | {r['won']} |"
        for r in rows
    ]
    return "\n".join(lines)


def auto_table(auto: list[dict]) -> str:
    lines = [
        "| op | Triton won | AUTO_TRITON now | would follow | where |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {a['op']} | {a['triton_won']}/{a['measured']} | {a['auto_triton']} | "
        f"{a['follows']} | {a['file']} |"
        for a in auto
    ]
    return "\n".join(lines)


def write_out(out: Path, meta: dict, checks, results, vs, notes, rows=(), auto=()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "meta": meta,
        "validation": [asdict(c) for c in checks],
        "results": [asdict(r) for r in results],
        "verdicts": [asdict(v) for v in vs],
        "paths": list(rows),
        "auto": list(auto),
        "notes": notes,
    }
    (out / "bench_kernels.json").write_text(json.dumps(payload, indent=1))
    md = [f"# bench_kernels: {meta['device']}", "", "```", meta["command"], "```", ""]
    md += ["## Validation (tiny fp32 shape)", "", checks_table(checks), ""]
    if results:
        md += ["## Timings (bf16)", "", results_table(results), ""]
        md += ["## Targets", "", verdict_table(vs), ""]
    if rows:
        md += ['## Which path won (impl="auto")', "", paths_table(list(rows)), ""]
        md += [auto_table(list(auto)), ""]
    if notes:
        md += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    (out / "bench_kernels.md").write_text("\n".join(md))
