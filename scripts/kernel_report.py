"""Compile every Triton kernel of attnzoo.kernels for real NVIDIA GPUs, without a GPU.

Every module in attnzoo.kernels that defines `aot_specs()` is found with pkgutil; each spec (one
kernel in one configuration its launcher can pick) is compiled with
`triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))` for sm_80 and sm_90, through
the ptxas that ships in the triton wheel. The table gives registers per thread, shared memory,
spilled bytes (stores + loads, from `ptxas -v`) and, on sm_90, whether wgmma (Hopper warp-group
MMA) instructions were emitted. The exit status is 1 if any spec fails to compile. Spills are
reported, not refused: a larger tile that spills a little can still be the fastest (the autotuner
measures; see README), so the table is what to read before and after a change to the configs.

    python scripts/kernel_report.py                 # Markdown table on stdout
    python scripts/kernel_report.py --json out.json # also the rows as JSON
    python scripts/kernel_report.py --summary       # plus one line per kernel and target
    python scripts/kernel_report.py --only attn_fwd --cc 90
    python scripts/kernel_report.py --only "pool_fwd fp16" --only "pool_bwd fp16"  # either

TRITON_INTERPRET is removed from the environment before triton is imported: under the
interpreter `triton.compile` would not produce GPU code.
"""

from __future__ import annotations

import os

os.environ.pop("TRITON_INTERPRET", None)

import argparse  # noqa: E402
import contextlib  # noqa: E402
import hashlib  # noqa: E402
import importlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import pkgutil  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from multiprocessing import get_context  # noqa: E402
from pathlib import Path  # noqa: E402

CCS = (80, 90)
PACKAGE = "attnzoo.kernels"


def discover() -> dict[str, list]:
    """module name -> its aot_specs(), for every module of attnzoo.kernels that defines one."""
    package = importlib.import_module(PACKAGE)
    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{PACKAGE}.{info.name}")
        if callable(getattr(module, "aot_specs", None)):
            found[info.name] = module.aot_specs()
    return found


_REGS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def _ptxas_usage(log: str) -> tuple[int, int] | None:
    regs, spills = _REGS.search(log), _SPILLS.search(log)
    if regs is None or spills is None:
        return None
    return int(regs.group(1)), int(spills.group(1)) + int(spills.group(2))


def _rerun_ptxas(ptx: str, cc: int) -> str:
    """`ptxas -v` on the PTX, for kernels that came out of triton's cache (no log then), with the
    flags triton's own make_cubin passes (register allocation depends on them)."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        cmd = [
            get_ptxas(cc).path,
            "-lineinfo",
            "-v",
            "--regAllocOptLevel=2",
            f"--gpu-name={sm_arch_from_capability(cc)}",
            str(src),
            "-o",
            str(Path(tmp) / "k.o"),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return done.stdout + done.stderr


def _usage_cache(ptx: str, cc: int) -> Path:
    """Where the ptxas usage of one PTX lives beside triton's cache: keyed by the PTX, the target
    and the ptxas version, so a kernel that came out of triton's cache does not need ptxas again
    either (ptxas was most of a warm report's time)."""
    from triton import knobs
    from triton.backends.nvidia.compiler import get_ptxas

    key = hashlib.sha256(f"{cc}\n{get_ptxas(cc).version}\n{ptx}".encode()).hexdigest()
    return Path(knobs.cache.dir) / "attnzoo-ptxas-usage" / f"{key}.json"


def _usage(ptx: str, cc: int, fresh_log: str) -> tuple[int, int] | None:
    """(registers, spilled bytes): from this compilation's ptxas log, else from the usage cache,
    else from running ptxas again; what is found is cached."""
    path = _usage_cache(ptx, cc)
    usage = _ptxas_usage(fresh_log)
    if usage is None and path.exists():
        with contextlib.suppress(ValueError, OSError):
            regs, spills = json.loads(path.read_text())
            return int(regs), int(spills)
    if usage is None:
        usage = _ptxas_usage(_rerun_ptxas(ptx, cc))
    if usage is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # written whole, then renamed
        tmp.write_text(json.dumps(list(usage)))
        tmp.replace(path)
    return usage


def compile_one(job: tuple[str, int, int]) -> dict:
    """Compile spec `index` of module `module` for compute capability `cc`; one table row."""
    module, index, cc = job
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec = importlib.import_module(f"{PACKAGE}.{module}").aot_specs()[index]
    row = {"kernel": f"{module}.{spec.name}", "config": spec.label, "cc": cc}
    knobs.nvidia.dump_ptxas_log = True
    log = io.StringIO()
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(log):
            compiled = triton.compile(
                ASTSource(spec.fn, spec.signature, spec.constexprs, spec.attrs),
                target=GPUTarget("cuda", cc, 32),
                options={"num_warps": spec.num_warps, "num_stages": spec.num_stages},
            )
        usage = _usage(compiled.asm["ptx"], cc, log.getvalue())
    except Exception as err:  # report every failure, do not stop at the first
        row.update(error=f"{type(err).__name__}: {str(err).splitlines()[0][:200]}")
        return row
    row.update(
        registers=usage[0] if usage else None,
        shared=int(compiled.metadata.shared),
        spills=usage[1] if usage else None,
        wgmma=("wgmma" in compiled.asm["ptx"]) if cc >= 90 else None,
        seconds=round(time.perf_counter() - start, 2),
        error=None if usage else "no ptxas usage found",
    )
    return row


def _init_worker() -> None:
    os.environ.pop("TRITON_INTERPRET", None)


def markdown(rows: list[dict]) -> str:
    lines = [
        "| kernel | config | cc | registers | shared mem (B) | spills (B) | wgmma |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("error"):
            lines.append(
                f"| {r['kernel']} | {r['config']} | sm_{r['cc']} | FAILED: {r['error']} ||||"
            )
            continue
        wgmma = "–" if r["wgmma"] is None else ("yes" if r["wgmma"] else "no")
        lines.append(
            f"| {r['kernel']} | {r['config']} | sm_{r['cc']} | {r['registers']} | {r['shared']} "
            f"| {r['spills']} | {wgmma} |"
        )
    return "\n".join(lines)


def summary_markdown(rows: list[dict]) -> str:
    """One row per kernel and target: how many configs, register and shared-memory ranges,
    total spills, and how many configs use wgmma."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["kernel"], r["cc"]), []).append(r)
    lines = [
        "| kernel | cc | configs | failed | registers | shared mem (B) | spills (B) | wgmma |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (kernel, cc), group in groups.items():
        ok = [r for r in group if not r.get("error")]
        regs = [r["registers"] for r in ok] or [0]
        shared = [r["shared"] for r in ok] or [0]
        wgmma = f"{sum(bool(r['wgmma']) for r in ok)}/{len(ok)}" if cc >= 90 else "–"
        lines.append(
            f"| {kernel} | sm_{cc} | {len(group)} | {len(group) - len(ok)} | "
            f"{min(regs)}–{max(regs)} | {min(shared)}–{max(shared)} | "
            f"{sum(r['spills'] or 0 for r in ok)} | {wgmma} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cc", type=int, nargs="+", default=list(CCS), choices=CCS)
    parser.add_argument(
        "--only",
        action="append",
        default=None,
        help="substring a kernel or config must contain; repeated, any of them",
    )
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    parser.add_argument(
        "--summary", action="store_true", help="after the table, one line per kernel and target"
    )
    args = parser.parse_args(argv)

    start = time.perf_counter()
    specs = discover()
    jobs = [
        (module, i, cc)
        for module, module_specs in specs.items()
        for i, spec in enumerate(module_specs)
        for cc in args.cc
        if args.only is None or any(o in f"{module}.{spec.name} {spec.label}" for o in args.only)
    ]
    if not jobs:
        print(f"no kernel specs matched (modules with aot_specs: {sorted(specs)})", file=sys.stderr)
        return 1
    if args.jobs > 1:
        ctx = get_context("spawn")
        with ProcessPoolExecutor(args.jobs, mp_context=ctx, initializer=_init_worker) as pool:
            rows = list(pool.map(compile_one, jobs, chunksize=4))
    else:
        rows = [compile_one(job) for job in jobs]

    table = markdown(rows)
    if args.summary:
        table += "\n\n" + summary_markdown(rows)
    failed = [r for r in rows if r.get("error")]
    spilled = [r for r in rows if not r.get("error") and r["spills"]]
    print(table)
    summary = (
        f"\n{len(rows)} compilations ({len(specs)} modules: {', '.join(sorted(specs))}) in "
        f"{time.perf_counter() - start:.0f} s; {len(failed)} failed, {len(spilled)} spilled."
    )
    print(summary)
    if args.out:
        args.out.write_text(table + "\n" + summary + "\n")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
