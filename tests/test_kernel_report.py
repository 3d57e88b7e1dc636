"""scripts/kernel_report.py: every Triton kernel compiles for sm_80 and sm_90, spills reported.

The report runs in a subprocess without TRITON_INTERPRET (conftest sets it for this process), with
the ptxas inside the triton wheel; no GPU is needed. A compilation takes about 3 CPU-seconds cold.
The slow tier, which CI runs, compiles a representative config of every kernel and switch set and
each kernel's largest tiles (~130 compilations, minutes). The full report, every config the
launchers can pick (~1900 compilations, about an hour cold on 2 cores, half a minute warm: the
report caches ptxas's usage beside triton's cache), is its own marker, run after a change to a
kernel's configs: `python -m pytest -m aot tests/test_kernel_report.py`.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from attnzoo.kernels import attention, gated, linear, pooling

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "scripts" / "kernel_report.py"


def run(
    args: list[str], interpret: bool = False, timeout: int = 900
) -> subprocess.CompletedProcess:
    """Runs a script in its own process group, so a timeout also ends its compile workers."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    cmd = [sys.executable, *args]
    with subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def table_rows(stdout: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in stdout.splitlines()
        if line.startswith(tuple(f"| {m.__name__.rsplit('.', 1)[-1]}." for m in KERNEL_MODULES))
    ]


# A representative config (`--only` substrings, any of them): every kernel, each dtype, each
# variant row (plain, chunked, metric, wide q/k tiles), the variant with causal, padding mask and
# dropout all on, the sink, sigmoid and key-bias variants, and the forward's tile shapes where sm_90
# must use wgmma.
REPRESENTATIVE = (
    "attn_fwd fp16 plain HEAD=64 ",  # every tile shape of the most used variant
    "attn_fwd bf16 metric causal mask dropout HEAD=32 ",
    "attn_fwd fp32 chunked HEAD=128 ",  # fp32: IEEE dots, no wgmma
    "attn_bwd_delta bf16 HEAD=64 ",
    "attn_bwd_dq fp16 plain causal mask dropout HEAD=64 ",
    "attn_bwd_dq fp32 metric HEAD=16 ",
    "attn_bwd_dkdv bf16 wide64 HEAD=32 ",
    "attn_bwd_dkdv fp16 chunked causal mask dropout HEAD=128 ",
    "attn_bwd_dkdv bf16 plain window mask dropout HEAD=64 ",  # the window's transposed bounds
    "attn_fwd bf16 plain causal mask dropout sink HEAD=64 ",  # the sink's running-max start
    "attn_fwd fp16 chunked causal mask sigmoid HEAD=32 ",  # sigmoid: no running max or lse
    "attn_bwd_dkdv fp16 plain causal mask sigmoid HEAD=64 ",
    "attn_bwd_dq fp32 wide512 causal mask sigmoid HEAD=32 ",  # a switch at the widest q/k tile
    "attn_fwd fp16 plain causal mask dropout keybias HEAD=64 ",  # the key bias (forgetting)
    "attn_bwd_dkdv fp16 plain causal mask dropout keybias HEAD=64 ",  # its column sums
    "attn_bwd_dq bf16 plain causal mask dropout keybias HEAD=64 ",  # the exact delta it stores
    "pool_fwd bf16 mask any-window BLOCK_N=64 ",
    "pool_bwd fp32 any-window BLOCK_N=128 ",
)


# Every kernel package the report compiles.
KERNEL_MODULES = (attention, pooling, linear, gated)


def largest_configs() -> tuple[str, ...]:
    """Each kernel's largest config per variant (plain, chunked, metric, wide, causal, ...) in bf16
    and fp32: the most tile volume (the product of its sizes), then the most switches. That is
    where a config runs out of shared memory or spills first; fp16 compiles bf16's code. (Gated
    linear attention's kernels compile at every config in tests/test_gated_linear_attention.py.)"""
    largest: dict[tuple[str, str, str], str] = {}
    for kernel, label in specs(None, (attention, pooling, linear)):
        dtype, *words = label.split()
        if dtype == "fp16":
            continue
        variant = re.sub(r"\d+$", "", words[0]) if "=" not in words[0] else ""
        key = (kernel, dtype, variant)
        if key not in largest or _size(label) > _size(largest[key]):
            largest[key] = label
    return tuple(f"{kernel} {label}" for (kernel, _, _), label in largest.items())


def _size(label: str) -> tuple[int, int]:
    sizes = [int(word.rsplit("=", 1)[1]) for word in label.split() if "=" in word]
    return math.prod(sizes), len(label.split())


def specs(only: tuple[str, ...] | None, modules=KERNEL_MODULES) -> list[tuple[str, str]]:
    """(kernel, config) of every spec the report compiles with these --only substrings."""
    rows = [
        (f"{module.__name__.rsplit('.', 1)[-1]}.{s.name}", s.label)
        for module in modules
        for s in module.aot_specs()
    ]
    return [r for r in rows if only is None or any(o in f"{r[0]} {r[1]}" for o in only)]


@pytest.mark.aot  # ~1900 compilations: about an hour cold on 2 cores; not in CI
def test_report_compiles_every_kernel_config_for_sm80_and_sm90(tmp_path: Path) -> None:
    check_report(tmp_path, only=None)


@pytest.mark.slow  # ~130 compilations: minutes cold
def test_report_compiles_every_switch_set_and_the_largest_tiles(tmp_path: Path) -> None:
    assert all(specs((o,)) for o in REPRESENTATIVE), "a REPRESENTATIVE substring matches nothing"
    every_kernel = {kernel for kernel, _ in specs(None)}
    assert {kernel for kernel, _ in specs(REPRESENTATIVE, (attention, pooling))} == {
        kernel for kernel in every_kernel if kernel.startswith(("attention.", "pooling."))
    }
    largest = largest_configs()
    assert {o.split()[0] for o in largest} == {
        k for k in every_kernel if not k.startswith("gated.")
    }
    check_report(tmp_path, only=REPRESENTATIVE + largest)


def check_report(tmp_path: Path, only: tuple[str, ...] | None) -> None:
    args = [str(REPORT), "--json", str(tmp_path / "rows.json")]
    for substring in only or ():
        args += ["--only", substring]
    # ~3 CPU-seconds a compilation cold, and the slow tier's other worker keeps a core busy
    out = run(args, timeout=1800 if only else 7200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]

    expected = {(kernel, config, f"sm_{cc}") for kernel, config in specs(only) for cc in (80, 90)}
    rows = table_rows(out.stdout)
    assert {(r[0], r[1], r[2]) for r in rows} == expected
    assert len(rows) == len(expected)
    for kernel, config, cc, regs, shared, spills, wgmma in rows:
        assert 0 < int(regs) <= 255, (kernel, config, cc)
        # the pooling kernels keep their tiles in registers; every attention kernel stages tiles
        assert int(shared) > 0 or kernel.startswith("pooling."), (kernel, config, cc)
        assert int(spills) >= 0, (kernel, config, cc)  # reported; the autotuner may pick a spiller
        assert wgmma in (("yes", "no") if cc == "sm_90" else ("–",))
    # Hopper's warp-group MMA is what makes the half-precision forward fast on sm_90; it needs
    # query tiles of at least 64 rows (one warp group).
    half_fwd_90 = [r for r in rows if r[0] == "attention.attn_fwd" and r[2] == "sm_90"]
    big_tiles = [r for r in half_fwd_90 if "BLOCK_M=32" not in r[1] and not r[1].startswith("fp32")]
    assert len(big_tiles) >= (20 if only is None else 1)
    assert all(r[6] == "yes" for r in big_tiles)
    # fp32 inputs use IEEE fp32 dots (accuracy over speed): no tensor-core MMA
    assert all(r[6] == "no" for r in half_fwd_90 if r[1].startswith("fp32"))

    saved = json.loads((tmp_path / "rows.json").read_text())
    assert len(saved) == len(expected) and not any(r["error"] for r in saved)


@pytest.mark.slow  # a subprocess; the representative report stays
def test_report_unsets_triton_interpret_itself() -> None:
    """Run with TRITON_INTERPRET=1 in its environment, it still compiles real GPU code."""
    out = run([str(REPORT), "--only", "attention.attn_fwd fp16 plain HEAD=16 "], interpret=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = table_rows(out.stdout)
    n_configs = len(
        attention.block_configs("attn_fwd", torch.float16, 16, False, False, interpret=False)
    )
    assert len(rows) == 2 * n_configs
    assert {r[2] for r in rows} == {"sm_80", "sm_90"}


def test_report_fails_when_nothing_matches() -> None:
    out = run([str(REPORT), "--only", "no-such-kernel"])
    assert out.returncode == 1
    assert "no kernel specs matched" in out.stderr


def test_ptxas_usage_is_cached_beside_tritons_cache(tmp_path: Path) -> None:
    """A kernel that comes out of triton's cache has no ptxas log; its usage comes from the
    report's own cache (keyed by PTX and target) instead of a second ptxas run, and a PTX it has
    not seen still goes to ptxas."""
    code = """
import sys
sys.path.insert(0, "scripts")
import kernel_report as r
log = "ptxas info : Used 40 registers\\n 0 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads"
assert r._usage("ptx A", 90, log) == (40, 12)
def no_ptxas(ptx, cc):
    raise RuntimeError("ptxas ran for " + ptx)
r._rerun_ptxas = no_ptxas
assert r._usage("ptx A", 90, "") == (40, 12)
try:
    r._usage("ptx A", 80, "")
except RuntimeError as err:
    print(err)
"""
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path)}
    env.pop("TRITON_INTERPRET", None)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ptxas ran for ptx A"  # another target: not the cached entry
    assert len(list((tmp_path / "attnzoo-ptxas-usage").glob("*.json"))) == 1
