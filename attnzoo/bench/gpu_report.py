"""The GPU check's report: the stage table, the verdict table (per op and shape which path won,
the Triton kernel or the fastest PyTorch formulation; per op the `AUTO_TRITON` value that would
follow; then the kernel benchmark's targets), and the files of the report folder, rewritten after
each stage: `<date>-<gpu>.md`, its JSON twin `.json`, and `-logs.tar.gz`, every stage's output.

Each file is written to a temporary name and renamed, so a check killed while writing leaves
the previous version whole, never half a file."""

from __future__ import annotations

import json
import os
import re
import tarfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # gpu_check runs the stages and calls this module
    from attnzoo.bench.gpu_check import Check


def auto_verdict(a: dict) -> str:
    """What to do with an op's AUTO_TRITON, given the value that follows from the timings."""
    if a["follows"] == a["auto_triton"]:
        return f"keep {a['auto_triton']}"
    return f"flip to {a['follows']} in {a['file']}"


def verdict_rows(check: Check) -> list[dict[str, str]]:
    """The verdict table: which path won per op, shape and mode; per op the AUTO_TRITON that
    would follow (True only where Triton won every timing of the op: one constant covers every
    shape); then bench_kernels' targets."""
    rows = []
    for r in check.bench.get("paths", []):
        rows.append(
            {
                "what": f"{r['op']} ({r['part']}) {r['shape']} {r['mode']}",
                "measured": f"{r['ratio']:.2f}× (triton {r['triton_ms']:.3f} ms, "
                f"{r['torch_path']} {r['torch_ms']:.3f} ms)",
                "verdict": f"{r['won']} won",
            }
        )
    for a in check.bench.get("auto", []):
        rows.append(
            {
                "what": f"impl=auto {a['op']}: AUTO_TRITON = {a['auto_triton']}",
                "measured": f"Triton won {a['triton_won']}/{a['measured']}",
                "verdict": auto_verdict(a),
            }
        )
    for v in check.bench.get("verdicts", []):
        rows.append({"what": v["target"], "measured": v["measured"], "verdict": v["verdict"]})
    return rows


def stage_table_md(check: Check) -> str:
    lines = ["| stage | status | seconds (limit) | result | error |", "|---|---|---|---|---|"]
    for s in check.stages:
        lines.append(
            f"| {s.name} | {s.status} | {s.seconds:.0f} ({s.limit_s:.0f}) | {s.summary} | "
            f"{s.error.replace('|', '/')} |"
        )
    return "\n".join(lines)


def verdict_table_md(check: Check) -> str:
    lines = ["| what | measured (speed-up of Triton) | verdict |", "|---|---|---|"]
    lines += [f"| {r['what']} | {r['measured']} | {r['verdict']} |" for r in verdict_rows(check)]
    return "\n".join(lines)


def report_md(check: Check, title: str) -> str:
    e = check.env
    md = [f"# {title}", ""]
    if check.dry_run:
        md += ["**Dry run** on CPU at tiny sizes: proves the script, measures nothing.", ""]
    setup = f"; the installation before it took {check.setup_s:.0f} s" if check.setup_s else ""
    md += [
        f"Budget: {check.budget_s:.0f} s for the stages{setup}; the stages have taken "
        f"{sum(s.seconds for s in check.stages):.0f} s. A stage left `running` is one during "
        "which the check itself was killed; `not reached` ones came after it; `not run` ones "
        "found the budget spent.",
        "",
    ]
    md += ["## Environment", ""]
    md += [
        f"- {k}: {e.get(k)}"
        for k in ("gpu", "capability", "driver", "cuda", "torch", "triton", "python")
    ]
    md += ["", "## Stages", "", stage_table_md(check), ""]
    failed = [t for t in check.tests if t["outcome"] in ("FAILED", "ERROR")]
    md += ["## cuda test tier", "", f"{len(check.tests)} tests reported; {len(failed)} failed.", ""]
    md += [f"- `{t['test']}`: {t.get('error', '')}" for t in failed] + [""]
    if check.train:
        keys = ["job", "status"] + [k for k in check.train[0] if k not in ("job", "status")]
        keys += sorted({k for r in check.train for k in r} - set(keys))
        md += ["## Training benchmark", "", "| " + " | ".join(keys) + " |"]
        md += ["|" + "---|" * len(keys)]
        md += ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |" for r in check.train]
        md += [""]
    if check.default_job:
        md += ["## Default job", "", "```", json.dumps(check.default_job, indent=1), "```", ""]
    md += ["## Verdicts", ""]
    md += [
        "Per op, shape and mode, which path won: the Triton kernel or the fastest PyTorch "
        "formulation (the ratio is PyTorch's time over Triton's); per op, the `AUTO_TRITON` "
        "value that would follow (one constant per op covers every shape: True only where "
        "Triton won every timing); then the kernel benchmark's targets.",
        "",
    ]
    md += [verdict_table_md(check), ""]
    return "\n".join(md)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


# What the log archive leaves out: checkpoints (the default job's), and the dry run's corpus.
ARCHIVE_SKIP_SUFFIXES = (".pt", ".pth", ".safetensors")
ARCHIVE_MAX_BYTES = 48 * 2**20  # of files added, before compression (the archive stays < 16 MiB)


def _replace(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def write_archive(check: Check, path: Path) -> None:
    """Every stage's output (logs, the kernel benchmark's files, the default job's run folder
    without its checkpoint) as one archive."""

    def write(tmp: Path) -> None:
        added = 0
        with tarfile.open(tmp, "w:gz") as tar:
            for f in sorted(p for p in check.work.rglob("*") if p.is_file()):
                rel = f.relative_to(check.work)
                size = f.stat().st_size
                if rel.parts[0] == "data" or f.suffix in ARCHIVE_SKIP_SUFFIXES:
                    continue
                if added + size > ARCHIVE_MAX_BYTES:
                    continue
                tar.add(f, arcname=f"{path.name.removesuffix('.tar.gz')}/{rel}")
                added += size

    _replace(path, write)


REPORT_SUFFIXES = (".md", ".json", "-logs.tar.gz")


def remove_report(out: Path, stem: str) -> None:
    """Remove the report files of `stem` (one renamed once the GPU was named)."""
    for suffix in REPORT_SUFFIXES:
        (out / f"{stem}{suffix}").unlink(missing_ok=True)


def write_report(check: Check, stem: str) -> None:
    """`<out>/<stem>.md` (tables, verdicts, what failed with its error), `<out>/<stem>.json`
    and `<out>/<stem>-logs.tar.gz`."""
    title = f"gpu_check {stem}" + (" (dry run)" if check.dry_run else "")
    payload = {
        "dry_run": check.dry_run,
        "time_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "budget_s": check.budget_s,
        "setup_s": check.setup_s,
        "env": check.env,
        "stages": [asdict(s) for s in check.stages],
        "tests": check.tests,
        "bench_kernels": {
            k: check.bench.get(k) for k in ("meta", "verdicts", "paths", "auto", "notes")
        },
        "bench_train": check.train,
        "default_job": check.default_job,
        "verdicts": verdict_rows(check),
    }
    write_archive(check, check.out / f"{stem}-logs.tar.gz")
    _replace(check.out / f"{stem}.md", lambda p: p.write_text(report_md(check, title)))
    _replace(
        check.out / f"{stem}.json", lambda p: p.write_text(json.dumps(payload, indent=1) + "\n")
    )
