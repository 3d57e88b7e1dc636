"""Benchmark attnzoo's kernels against what a user would write instead, with a verdict per target.

Each op runs through the public API (`attnzoo.kernels.*`, `impl="triton"`) and is compared with
its PyTorch formulation, bf16, forward and forward+backward:

| part | attnzoo op | what a user would write instead |
|---|---|---|
| scaled_dot | `scaled_dot_attention(q, k, v)` | `sdpa(q, k, v)` |
| metric | `metric_attention(p, M)` | `sdpa(p @ M, p, p)` |
| quadratic | `quadratic_attention(x, U, v)` | `sdpa(x @ U[h], x, v)`, x expanded over the heads |
| pool | `pool_mix(x, window)` (centred) | `avg_pool1d(x, window, count_include_pad=False) - x` |

`sdpa` is `torch.nn.functional.scaled_dot_product_attention`, timed on each backend that takes the
shape (`sdpa_kernel` with FLASH_ATTENTION, CUDNN_ATTENTION, EFFICIENT_ATTENTION; a backend that
refuses a shape is noted and skipped). Shapes: the training shape of nanoGPT's GPU recipe
(batch 64, 6 heads, N = 256, head dim 64, causal) and batch 2, 8 heads, head dim 64 at
N = 1024 / 4096 / 8192, causal and bidirectional; quadratic's width is D = heads x head dim.
pool_mix runs on x of (batch, N, D) of the same shapes, centred (`avg_pool1d` has no causal
window that leaves padding uncounted), plus one large x (8 x 8192 x 1024) for its bandwidth,
against a copy of x as the bandwidth reference.

Two numbers per call, so that neither hides the other:
- device ms: CUDA events around each call, with the L2 cache flushed before it (as
  `triton.testing.do_bench` does) and the GPU held busy by a sleep kernel while the host enqueues
  every call, so launch overhead is not in it; the median over `--reps` calls;
- host us: wall time of the launch path per call (Python, autograd, argument checks, launches),
  timing `--reps` calls back to back without any synchronisation in between (the launch queue
  takes them all, so the host never waits for the device).
A training step pays max(device, host) per op when nothing else keeps the GPU busy.

Targets, judged on device time, printed as a verdict table at the end:
- scaled_dot fwd+bwd >= 1.0x flash SDPA at N = 4096, causal and bidirectional (goal 1.6x: cuDNN);
- at the training shape, scaled_dot fwd+bwd <= 1.2x flash's time;
- metric fwd+bwd >= 1.0x the best SDPA formulation at N = 4096 (goal 1.3x);
- quadratic fwd+bwd >= 1.0x its SDPA formulation and >= 50% of scaled_dot's TFLOP/s, N = 4096;
- pool_mix fwd+bwd >= 1.0x `avg_pool1d - x`, at every pool shape;
- host time per call (fwd, and fwd+bwd) <= 1.5x SDPA's at the training shape.

Before timing, and alone under `--dry-run`, under TRITON_INTERPRET=1 or without a GPU, every
comparison is validated at a tiny fp32 shape: the attnzoo op against each formulation above
(outputs and gradients of every input), so the formulations the benchmark times are proven to
compute the ops. Without a GPU it also prints the FLOP and byte model of each op.

    python scripts/bench_kernels.py                                # everything (GPU)
    python scripts/bench_kernels.py --only scaled_dot pool --n 4096 --out results/
    python scripts/bench_kernels.py --dry-run                      # validation only, any machine
    python scripts/bench_kernels.py --smoke --n 32 --head-dim 16 --out DIR   # the timing path on CPU

Each part runs under its own time limit (`--timeout`, SIGALRM); results print as they come, a
short table of ratios and verdicts comes last, and `--out DIR` writes bench_kernels.json and
bench_kernels.md. Exit status 1 if a validation fails. The JSON also holds `dispatch`: one row per
op, dtype, causal, width, forward-only or forward+backward and N, with the attnzoo op's time and
the fastest PyTorch formulation's: what `scripts/gpu_check.py` turns into the dispatch table of
`impl="auto"` (`attnzoo.kernels.dispatch.make_table`).

`--smoke` runs the timing loop without a GPU (fp32 on CPU, a wall-clock timer, the Triton kernels
in the interpreter under TRITON_INTERPRET=1) so that the timing, the verdicts and the files are
exercised at tiny shapes; its numbers measure nothing and are marked so.

FLOPs follow the FlashAttention papers' convention: the forward counts its matmuls (2 FLOPs per
multiply-add), the backward 2.5x the attention forward (five N x N matmuls against two), causal
halves the N x N terms. The byte model counts one read of each input and one write of each output
(compulsory traffic) plus the key/value tiles streamed once per 128-query tile.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F

BLOCK_M = 128  # query tile of the byte model
PARTS = ("scaled_dot", "metric", "quadratic", "pool")
BACKENDS = ("flash", "cudnn", "efficient")
POOL_LARGE = (8, 8192, 1024)  # (batch, tokens, D): ~134 MB per bf16 tensor, well beyond L2


@dataclass(frozen=True)
class Shape:
    name: str
    batch: int
    heads: int
    n: int
    head_dim: int
    causal: bool
    elt: int = 2  # bytes per element (bf16)

    @property
    def width(self) -> int:
        """Model width D = heads x head_dim: quadratic's q/k width and pool_mix's features."""
        return self.heads * self.head_dim


TRAIN = Shape("train", 64, 6, 256, 64, True)


def attention_shapes(
    ns: list[int], modes: list[str], batch: int, heads: int, head_dim: int, train: bool
) -> list[Shape]:
    shapes = [TRAIN] if train else []
    for n in ns:
        for mode in modes:
            shapes.append(Shape(f"N{n}-{mode}", batch, heads, n, head_dim, mode == "causal"))
    return shapes


def pool_shapes(shapes: list[Shape], large: bool) -> list[Shape]:
    """x of (batch, N, heads x head_dim) per attention shape, once each, centred; plus the large x."""
    seen, out = set(), []
    for s in shapes:
        if (s.batch, s.n, s.width) not in seen:
            seen.add((s.batch, s.n, s.width))
            out.append(Shape(f"{s.name.split('-')[0]}-pool", s.batch, 1, s.n, s.width, False))
    if large:
        b, n, d = POOL_LARGE
        out.append(Shape("large-pool", b, 1, n, d, False))
    return out


# ------------------------------------------------------------------------------------ cost model


def cost(op: str, s: Shape, window: int = 3) -> dict[str, float]:
    """FLOPs of forward and backward and HBM bytes of the forward, by the model in the docstring."""
    bh, n, d, e = s.batch * s.heads, s.n, s.head_dim, s.elt
    frac = 0.5 if s.causal else 1.0
    tiles = -(-n // BLOCK_M)
    if op == "scaled_dot":
        attn = 2 * bh * n * n * (d + d) * frac
        fwd, bwd = attn, 2.5 * attn
        compulsory = e * bh * n * (3 * d + d) + 4 * bh * n  # q, k, v in; out, lse out
        streamed = e * bh * tiles * n * (2 * d)  # k and v tiles per query tile
    elif op == "quadratic":
        big_d = s.width
        proj = 2 * bh * n * big_d * big_d  # q = x U[h], one batched matmul
        attn = 2 * bh * n * n * (big_d + d) * frac
        fwd, bwd = proj + attn, 2.5 * attn + 2 * proj
        compulsory = e * (s.batch * n * big_d + s.heads * big_d**2)  # x and U
        compulsory += e * bh * n * (2 * big_d + 2 * d) + 4 * bh * n  # q out + in, v in, o out
        streamed = e * bh * tiles * n * (big_d + d)  # x (as k) and v tiles per query tile
    elif op == "metric":
        proj = 2 * bh * n * d * d  # q = p M, in registers
        attn = 2 * bh * n * n * (d + d) * frac
        fwd, bwd = proj + attn, 2.5 * attn + 2 * proj
        compulsory = e * (bh * n * 2 * d + s.heads * d * d) + 4 * bh * n  # p and M in; out, lse
        streamed = e * bh * tiles * n * d  # one p tile serves as key and value
    elif op == "pool":  # s.head_dim is the width D here, heads 1
        elems = s.batch * n * d
        fwd = bwd = elems * window  # additions: not what bounds it
        compulsory, streamed = 2 * e * elems, 0  # x in, out out (the backward: g in, dx out)
    else:
        raise ValueError(f"unknown op {op!r}")
    return {"fwd_flop": fwd, "bwd_flop": bwd, "fwd_bytes": compulsory + streamed}


def print_model(shapes: list[Shape], pools: list[Shape], window: int) -> None:
    print("| op | shape | fwd GFLOP | fwd+bwd GFLOP | fwd bytes (MB) | fwd FLOP/byte |")
    print("|---|---|---|---|---|---|")
    rows = [(op, s) for s in shapes for op in PARTS[:3]] + [("pool", s) for s in pools]
    for op, s in rows:
        c = cost(op, s, window)
        print(
            f"| {op} | {s.name} | {c['fwd_flop'] / 1e9:.2f} | "
            f"{(c['fwd_flop'] + c['bwd_flop']) / 1e9:.2f} | {c['fwd_bytes'] / 1e6:.1f} | "
            f"{c['fwd_flop'] / c['fwd_bytes']:.1f} |"
        )


# ------------------------------------------------------------------------------------ the comparisons

# What a user would write instead of each op. Module-level functions, so that the validation
# checks exactly what the timing runs.


def sdpa_scaled_dot(q, k, v, causal: bool):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def sdpa_metric(p, m, causal: bool):
    """`sdpa(p @ M, p, p)`: p (B, H, N, dk), M (H, dk, dk); scale 1/sqrt(dk) as the op's."""
    return F.scaled_dot_product_attention(p @ m, p, p, is_causal=causal)


def sdpa_quadratic(x, u, v, causal: bool):
    """`sdpa(x @ U[h], x, v)`: x (B, N, D) as the key of every head; scale 1/sqrt(D) as the op's."""
    x_b1nd = x[:, None]
    return F.scaled_dot_product_attention(
        x_b1nd @ u, x_b1nd.expand(-1, u.shape[0], -1, -1), v, is_causal=causal
    )


def avg_pool_mix(x, window: int):
    """`avg_pool1d(x) - x` over the tokens of x (B, N, D), padding not counted: centred pool_mix."""
    pooled = F.avg_pool1d(x.mT, window, 1, window // 2, count_include_pad=False)
    return pooled.mT - x


def copy_of(x):
    """The bandwidth reference: one read and one write of x."""
    return x.clone()


@dataclass
class Candidate:
    name: str  # "attnzoo", "sdpa flash", "avg_pool1d - x", "copy"
    run: Callable[..., torch.Tensor]
    backend: str | None = None  # the SDPA backend it is pinned to
    reference: bool = False  # timed for scale (the copy), not a competitor


def make_inputs(
    part: str, s: Shape, device: str, dtype: torch.dtype, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        t = torch.randn(*shape, generator=gen) * scale
        return t.to(device=device, dtype=dtype).requires_grad_(True)

    b, h, n, d = s.batch, s.heads, s.n, s.head_dim
    if part == "scaled_dot":
        return randn(b, h, n, d), randn(b, h, n, d), randn(b, h, n, d)
    if part == "metric":
        c = torch.randn(h, d, d, generator=gen) / d**0.5
        m = ((c + c.mT) / 2).to(device=device, dtype=dtype).requires_grad_(True)
        return randn(b, h, n, d), m
    if part == "quadratic":
        return (
            randn(b, n, s.width),
            randn(h, s.width, s.width, scale=s.width**-0.5),
            randn(b, h, n, d),
        )
    if part == "pool":
        return (randn(b, n, d),)
    raise ValueError(f"unknown part {part!r}")


def candidates(
    part: str, s: Shape, impl: str, window: int, backends: tuple[str, ...] = BACKENDS
) -> list[Candidate]:
    """The attnzoo op first, then what it is compared with."""
    from attnzoo import kernels

    c = s.causal
    if part == "scaled_dot":
        ours = Candidate(
            "attnzoo", lambda q, k, v: kernels.scaled_dot_attention(q, k, v, causal=c, impl=impl)
        )
        theirs = [
            Candidate(f"sdpa {be}", lambda q, k, v: sdpa_scaled_dot(q, k, v, c), be)
            for be in backends
        ]
    elif part == "metric":
        ours = Candidate(
            "attnzoo", lambda p, m: kernels.metric_attention(p, m, causal=c, impl=impl)
        )
        theirs = [
            Candidate(f"sdpa(p@M,p,p) {be}", lambda p, m: sdpa_metric(p, m, c), be)
            for be in backends
        ]
    elif part == "quadratic":
        ours = Candidate(
            "attnzoo", lambda x, u, v: kernels.quadratic_attention(x, u, v, causal=c, impl=impl)
        )
        theirs = [
            Candidate(f"sdpa(x@U,x,v) {be}", lambda x, u, v: sdpa_quadratic(x, u, v, c), be)
            for be in backends
        ]
    elif part == "pool":
        ours = Candidate("attnzoo", lambda x: kernels.pool_mix(x, window, impl=impl))
        theirs = [
            Candidate("avg_pool1d - x", lambda x: avg_pool_mix(x, window)),
            Candidate("copy", copy_of, reference=True),
        ]
    else:
        raise ValueError(f"unknown part {part!r}")
    return [ours, *theirs]


@contextlib.contextmanager
def backend_only(name: str | None) -> Iterator[None]:
    """Pin SDPA to one backend (nothing to pin for None)."""
    if name is None:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kind = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,  # --smoke on CPU, where the fused backends refuse
    }[name]
    with sdpa_kernel([kind]):
        yield


# ------------------------------------------------------------------------------------ validation


@dataclass
class Check:
    part: str
    mode: str
    formulation: str
    impl: str
    err_out: float
    err_grad: float
    ok: bool


VALIDATION_SHAPE = Shape("tiny", 2, 2, 37, 16, False, elt=4)


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


def validate(parts: list[str], device: str, impl: str, window: int, tol: float) -> list[Check]:
    """Each attnzoo op against each of its formulations at a tiny fp32 shape: outputs and the
    gradients of every input for one random upstream gradient, causal and bidirectional (pool:
    centred). The SDPA backend is left to PyTorch here: a backend changes the kernel, not the
    formula, and flash and cuDNN do not take fp32."""
    checks = []
    for part in parts:
        modes = (False,) if part == "pool" else (False, True)
        for causal in modes:
            s = Shape(**{**asdict(VALIDATION_SHAPE), "causal": causal})
            cands = candidates(part, s, impl, window)
            ours, others = cands[0], [c for c in cands[1:] if not c.reference]
            inputs = make_inputs(part, s, device, torch.float32)
            out = ours.run(*inputs)
            grad = torch.randn_like(out)
            ref_grads = torch.autograd.grad(out, inputs, grad)
            seen = set()
            for cand in others:
                label = cand.name.rsplit(" ", 1)[0] if cand.backend else cand.name
                if label in seen:  # one check per formula, not per backend
                    continue
                seen.add(label)
                xs = [t.detach().clone().requires_grad_(True) for t in inputs]
                got = cand.run(*xs)
                grads = torch.autograd.grad(got, xs, grad)
                err_out = _rel_err(got, out)
                err_grad = max(_rel_err(g, r) for g, r in zip(grads, ref_grads, strict=True))
                check = Check(
                    part,
                    "causal" if causal else "bidirectional",
                    label,
                    impl,
                    err_out,
                    err_grad,
                    err_out <= tol and err_grad <= tol,
                )
                checks.append(check)
                print(
                    f"validate {part:10s} {check.mode:13s} attnzoo (impl={impl}) vs {label}: "
                    f"out {err_out:.1e}, grads {err_grad:.1e} "
                    f"{'ok' if check.ok else f'MISMATCH (tolerance {tol:.0e})'}",
                    flush=True,
                )
    return checks


# ------------------------------------------------------------------------------------ timing


class PartTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Raise PartTimeout in this (main) thread after `seconds`; no limit where SIGALRM is not
    available (Windows, or not the main thread) or when seconds <= 0."""
    usable = (
        seconds > 0
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def _raise(signum, frame):
        raise PartTimeout(f"{what} stopped at its time limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Timer:
    """Device and host time of one call on CUDA, by the method in the module docstring."""

    reps: int
    flush_bytes: int = 256 * 2**20
    _cycles_per_ms: float = 0.0
    _flush: torch.Tensor | None = field(default=None, repr=False)

    def _sleep_ms(self, ms: float) -> None:
        if not hasattr(torch.cuda, "_sleep"):  # pragma: no cover - private API, present in 2.x
            return
        if not self._cycles_per_ms:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(10_000_000)
            end.record()
            torch.cuda.synchronize()
            self._cycles_per_ms = 10_000_000 / max(start.elapsed_time(end), 1e-3)
        torch.cuda._sleep(int(min(ms, 5_000) * self._cycles_per_ms))

    def __call__(self, fn: Callable[[], object]) -> dict[str, float]:
        if self._flush is None:
            self._flush = torch.empty(self.flush_bytes, dtype=torch.int8, device="cuda")
        for _ in range(3):  # compile, autotune, allocator warm-up
            fn()
        torch.cuda.synchronize()

        # host: reps calls back to back, no synchronisation in between (the launch queue takes
        # them all, so the host never waits for the device here)
        start = time.perf_counter()
        for _ in range(self.reps):
            fn()
        host_us = (time.perf_counter() - start) / self.reps * 1e6
        torch.cuda.synchronize()

        # device: events around each call after an L2 flush, all queued behind a sleep
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        # the sleep outlasts the host's enqueueing (host time + the flush's launch, with margin),
        # so the device then runs the calls back to back and no launch gap enters the events
        self._sleep_ms(self.reps * (host_us / 1e3 + 0.05) * 1.5 + 5)
        for i in range(self.reps):
            self._flush.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        device_ms = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))
        return {"device_ms": device_ms, "host_us": host_us}


def wall_timer(fn: Callable[[], object]) -> dict[str, float]:
    """--smoke's timer: one warm-up call, then the wall time of one call (no GPU, no meaning)."""
    fn()
    start = time.perf_counter()
    fn()
    took = time.perf_counter() - start
    return {"device_ms": took * 1e3, "host_us": took * 1e6}


@dataclass
class Result:
    part: str
    shape: str
    candidate: str
    mode: str  # "fwd" or "fwd+bwd"
    device_ms: float | None = None
    host_us: float | None = None
    rate: float | None = None  # TFLOP/s (attention) or GB/s moved (pool, copy)
    note: str = ""


def _first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:160]}"


def time_part(
    part: str,
    shapes: list[Shape],
    impl: str,
    window: int,
    timer: Callable[[Callable[[], object]], dict[str, float]],
    emit: Callable[[Result], None],
    device: str = "cuda",
    dtype: torch.dtype = torch.bfloat16,
    backends: tuple[str, ...] = BACKENDS,
) -> None:
    """Time every candidate of one part at every shape, fwd and fwd+bwd, emitting as it goes."""
    for s in shapes:
        inputs = make_inputs(part, s, device, dtype)
        c = cost(part, replace(s, elt=dtype.itemsize), window)
        for cand in candidates(part, s, impl, window, backends):
            modes = ("fwd",) if cand.reference else ("fwd", "fwd+bwd")
            with backend_only(cand.backend):
                try:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        out = cand.run(*inputs)
                    grad = torch.randn_like(out)
                except (RuntimeError, ValueError, NotImplementedError) as err:  # shape refused
                    reasons = "; ".join(str(w.message).splitlines()[0][:120] for w in caught[:2])
                    note = f"unavailable: {_first_line(err)}" + (f" ({reasons})" if reasons else "")
                    emit(Result(part, s.name, cand.name, "fwd+bwd", note=note))
                    continue
                del out

                def forward(cand=cand, inputs=inputs):
                    cand.run(*inputs)

                def forward_backward(cand=cand, inputs=inputs, grad=grad):
                    for t in inputs:
                        t.grad = None
                    cand.run(*inputs).backward(grad)

                for mode in modes:
                    try:
                        took = timer(forward if mode == "fwd" else forward_backward)
                    except RuntimeError as err:
                        emit(Result(part, s.name, cand.name, mode, note=_first_line(err)))
                        continue
                    if part == "pool" or cand.reference:
                        rate = (
                            c["fwd_bytes"] * (1 if mode == "fwd" else 2) / took["device_ms"] / 1e6
                        )
                    else:
                        flop = c["fwd_flop"] + (c["bwd_flop"] if mode == "fwd+bwd" else 0)
                        rate = flop / took["device_ms"] / 1e9
                    ms, us = took["device_ms"], took["host_us"]
                    emit(Result(part, s.name, cand.name, mode, ms, us, rate))
        del inputs
        if device == "cuda":
            torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------ verdicts


@dataclass
class Verdict:
    target: str
    measured: str
    goal: str
    verdict: str  # "met", "MISSED", "not measured"


def _lookup(results: list[Result]) -> Callable[..., Result | None]:
    table = {(r.part, r.shape, r.candidate, r.mode): r for r in results if r.device_ms}

    def get(part: str, shape: str, cand: str, mode: str = "fwd+bwd") -> Result | None:
        return table.get((part, shape, cand, mode))

    return get


def _best_sdpa(
    results: list[Result], part: str, shape: str, mode: str = "fwd+bwd"
) -> Result | None:
    """The fastest SDPA formulation (any backend) of one part at one shape."""
    found = [
        r
        for r in results
        if (r.part, r.shape, r.mode) == (part, shape, mode)
        and r.candidate.startswith("sdpa")
        and r.device_ms
    ]
    return min(found, key=lambda r: r.device_ms, default=None)


def verdicts(results: list[Result], n_target: int = 4096) -> list[Verdict]:
    get = _lookup(results)
    out: list[Verdict] = []

    def judge(target: str, ratio: float | None, need: float, goal: str, detail: str = "") -> None:
        if ratio is None:
            out.append(Verdict(target, "–", goal, "not measured"))
            return
        out.append(
            Verdict(
                target,
                f"{ratio:.2f}×{detail}",
                goal,
                "met" if ratio >= need - 1e-12 else "MISSED",
            )
        )

    def speedup(ours: Result | None, theirs: Result | None) -> float | None:
        return None if ours is None or theirs is None else theirs.device_ms / ours.device_ms

    for mode in ("causal", "bidirectional"):
        shape = f"N{n_target}-{mode}"
        ours, flash = get("scaled_dot", shape, "attnzoo"), get("scaled_dot", shape, "sdpa flash")
        cudnn = get("scaled_dot", shape, "sdpa cudnn")
        extra = f" (cuDNN {speedup(ours, cudnn):.2f}×)" if speedup(ours, cudnn) else ""
        judge(
            f"scaled_dot fwd+bwd vs flash SDPA, {shape}",
            speedup(ours, flash),
            1.0,
            "≥ 1.0× (goal 1.6×, cuDNN's)",
            extra,
        )
    ours, flash = get("scaled_dot", "train", "attnzoo"), get("scaled_dot", "train", "sdpa flash")
    # time ratio ≤ 1.2 is speedup ≥ 1/1.2
    sp = speedup(ours, flash)
    if sp is None:
        out.append(
            Verdict(
                "scaled_dot fwd+bwd at the training shape",
                "–",
                "≤ 1.2× flash's time",
                "not measured",
            )
        )
    else:
        out.append(
            Verdict(
                "scaled_dot fwd+bwd at the training shape",
                f"{1 / sp:.2f}× flash's time",
                "≤ 1.2× flash's time",
                "met" if 1 / sp <= 1.2 else "MISSED",
            )
        )
    for mode in ("causal", "bidirectional"):
        shape = f"N{n_target}-{mode}"
        best = _best_sdpa(results, "metric", shape)
        detail = f" (best: {best.candidate})" if best else ""
        judge(
            f"metric fwd+bwd vs best sdpa(p@M,p,p), {shape}",
            speedup(get("metric", shape, "attnzoo"), best),
            1.0,
            "≥ 1.0× (goal 1.3×)",
            detail,
        )
    for mode in ("causal", "bidirectional"):
        shape = f"N{n_target}-{mode}"
        best = _best_sdpa(results, "quadratic", shape)
        ours = get("quadratic", shape, "attnzoo")
        detail = f" (best: {best.candidate})" if best else ""
        judge(
            f"quadratic fwd+bwd vs sdpa(x@U,x,v), {shape}",
            speedup(ours, best),
            1.0,
            "≥ 1.0×",
            detail,
        )
        sd = get("scaled_dot", shape, "attnzoo")
        share = None if ours is None or sd is None else ours.rate / sd.rate
        out.append(
            Verdict(
                f"quadratic TFLOP/s vs scaled_dot's, {shape}",
                "–" if share is None else f"{share:.0%}",
                "≥ 50%",
                "not measured" if share is None else ("met" if share >= 0.5 else "MISSED"),
            )
        )
    pool_shapes_seen = sorted({r.shape for r in results if r.part == "pool"})
    ratios = []
    for shape in pool_shapes_seen:
        sp = speedup(get("pool", shape, "attnzoo"), get("pool", shape, "avg_pool1d - x"))
        if sp is not None:
            ratios.append((sp, shape))
    worst = min(ratios, default=None)
    judge(
        "pool_mix fwd+bwd vs avg_pool1d - x, every pool shape",
        None if worst is None else worst[0],
        1.0,
        "≥ 1.0×",
        "" if worst is None else f" (worst: {worst[1]})",
    )
    for mode in ("fwd", "fwd+bwd"):
        ours = get("scaled_dot", "train", "attnzoo", mode)
        flash = get("scaled_dot", "train", "sdpa flash", mode)
        ratio = None if ours is None or flash is None else ours.host_us / flash.host_us
        out.append(
            Verdict(
                f"host time per {mode} call at the training shape, vs SDPA",
                "–"
                if ratio is None
                else f"{ratio:.2f}× ({ours.host_us:.0f} vs {flash.host_us:.0f} µs)",
                "≤ 1.5×",
                "not measured" if ratio is None else ("met" if ratio <= 1.5 else "MISSED"),
            )
        )
    return out


# ------------------------------------------------------------------------------------ dispatch rows

OP_NAMES = {
    "scaled_dot": "scaled_dot_attention",
    "metric": "metric_attention",
    "quadratic": "quadratic_attention",
    "pool": "pool_mix",
}


def dispatch_rows(results: list[Result], shapes: list[Shape], dtype: torch.dtype) -> list[dict]:
    """Per part, shape and mode: the attnzoo op's device time against the fastest PyTorch
    formulation's (any SDPA backend; avg_pool1d - x for pool), keyed as kernels/dispatch.py keys
    a call: op, dtype, causal, dim (head dim; the width D for quadratic and pool), grad, n."""
    by_name = {s.name: s for s in shapes}
    rows = []
    for part, shape, mode in sorted({(r.part, r.shape, r.mode) for r in results}):
        s = by_name.get(shape)
        same = [
            r for r in results if (r.part, r.shape, r.mode) == (part, shape, mode) and r.device_ms
        ]
        ours = next((r for r in same if r.candidate == "attnzoo"), None)
        theirs = [r for r in same if r.candidate not in ("attnzoo", "copy")]
        best = min(theirs, key=lambda r: r.device_ms, default=None)
        if s is None or ours is None or best is None:
            continue
        rows.append(
            {
                "op": OP_NAMES[part],
                "dtype": str(dtype).removeprefix("torch."),
                "causal": s.causal,
                "dim": s.width if part == "quadratic" else s.head_dim,
                "grad": mode == "fwd+bwd",
                "n": s.n,
                "shape": shape,
                "triton_ms": ours.device_ms,
                "torch_ms": best.device_ms,
                "torch_path": best.candidate,
                "ratio": best.device_ms / ours.device_ms,
            }
        )
    return rows


# ------------------------------------------------------------------------------------ report


def results_table(results: list[Result]) -> str:
    lines = [
        "| part | shape | candidate | mode | device ms | host µs | TFLOP/s or GB/s | time vs attnzoo | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    get = _lookup(results)
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
        "| part | mode | formulation | impl | max rel. err out | max rel. err grads | ok |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {c.part} | {c.mode} | {c.formulation} | {c.impl} | {c.err_out:.1e} | "
        f"{c.err_grad:.1e} | {'yes' if c.ok else 'NO'} |"
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


# ------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--n", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=("causal", "bidirectional"),
        default=["causal", "bidirectional"],
    )
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--no-train-shape", action="store_true", help="leave out batch 64 x N 256")
    parser.add_argument("--no-pool-large", action="store_true", help="leave out pool's 8x8192x1024")
    parser.add_argument("--window", type=int, default=3, help="pool_mix window (odd)")
    parser.add_argument("--reps", type=int, default=30, help="timed calls per measurement")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per part (0: none)")
    parser.add_argument("--tol", type=float, default=2e-4, help="validation: max relative error")
    parser.add_argument("--dry-run", action="store_true", help="validate only, no timing")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="time on CPU (fp32, wall clock) to exercise the timing path; the numbers mean nothing",
    )
    parser.add_argument("--out", type=Path, default=None, help="write bench_kernels.json/.md here")
    args = parser.parse_args(argv)
    for name, value in (("--batch", args.batch), ("--heads", args.heads), ("--reps", args.reps)):
        if value < 1:
            parser.error(f"{name} must be ≥ 1, got {value}")
    if not 16 <= args.head_dim <= 128:
        parser.error(f"--head-dim must be in 16..128, got {args.head_dim}")
    if args.window < 1 or args.window % 2 == 0:
        parser.error(f"--window must be a positive odd int (centred pool), got {args.window}")
    if any(n < 1 for n in args.n):
        parser.error(f"--n must be ≥ 1, got {args.n}")

    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    gpu = torch.cuda.is_available() and not interpret
    timing = gpu and not args.dry_run
    smoke = args.smoke and not gpu
    shapes = attention_shapes(
        args.n, args.modes, args.batch, args.heads, args.head_dim, not args.no_train_shape
    )
    pools = pool_shapes(shapes, not args.no_pool_large)
    notes: list[str] = []
    device = torch.cuda.get_device_name() if gpu else "cpu"
    print(f"bench_kernels on {device}; parts {', '.join(args.only)}\n", flush=True)

    # 1. validation: the formulations compute the ops
    impl = "triton" if gpu or interpret else "torch"
    if impl == "torch":
        notes.append(
            "no GPU and no TRITON_INTERPRET=1: the formulations were checked against the PyTorch "
            "reference (impl='torch'), not the Triton kernels"
        )
    checks: list[Check] = []
    for part in args.only:
        try:
            with time_limit(args.timeout, f"validation of {part}"):
                checks += validate([part], "cuda" if gpu else "cpu", impl, args.window, args.tol)
        except PartTimeout as err:
            notes.append(str(err))
            print(err, flush=True)
    failed = [c for c in checks if not c.ok]
    print()

    # 2. timing, part by part, or the cost model where there is no GPU
    results: list[Result] = []

    def emit(r: Result) -> None:
        results.append(r)
        dev = "" if r.device_ms is None else f"device {r.device_ms:8.3f} ms"
        host = "" if r.host_us is None else f"host {r.host_us:7.0f} µs"
        rate = (
            "" if r.rate is None else f"{r.rate:8.1f} {'GB/s' if r.part == 'pool' else 'TFLOP/s'}"
        )
        print(
            f"{r.part:10s} {r.shape:18s} {r.candidate:24s} {r.mode:8s} {dev} {host} {rate} {r.note}",
            flush=True,
        )

    dtype = torch.float32 if smoke else torch.bfloat16
    if timing or smoke:
        timer = wall_timer if smoke else Timer(args.reps)
        where = ("cpu", dtype) if smoke else ("cuda", dtype)
        backends = ("math",) if smoke else BACKENDS
        if smoke:
            notes.append(
                "--smoke: fp32 on CPU with a wall-clock timer; the numbers measure nothing"
            )
        for part in args.only:
            part_shapes = pools if part == "pool" else shapes
            try:
                with time_limit(args.timeout, f"part {part}"):
                    time_part(part, part_shapes, impl, args.window, timer, emit, *where, backends)
            except PartTimeout as err:
                notes.append(f"{err}; its results so far are kept")
                print(err, flush=True)
            except Exception as err:  # noqa: BLE001 - report and go on with the next part
                notes.append(f"part {part} failed: {_first_line(err)}")
                print(f"part {part} failed: {_first_line(err)}", flush=True)
    else:
        print_model(shapes, pools, args.window)
        print()
        why = (
            "--dry-run"
            if args.dry_run
            else ("TRITON_INTERPRET=1" if interpret else "no CUDA device")
        )
        print(f"{why}: timings need a GPU; the table above is the FLOP and byte model behind the")
        print("ratios a GPU run measures, and the validation above checks every comparison.")
        notes.append(f"{why}: no timings")

    vs = verdicts(results) if results else []
    rows = dispatch_rows(results, shapes + pools, dtype)
    if results:
        print("\n" + results_table(results))
        print("\n" + verdict_table(vs))
    print(f"\nvalidation: {len(checks) - len(failed)}/{len(checks)} comparisons agree")
    for note in notes:
        print(f"note: {note}")
    if args.out:
        meta = {
            "device": device,
            "smoke": smoke,
            "capability": (
                "{}.{}".format(*torch.cuda.get_device_capability()) if gpu and not smoke else None
            ),
            "torch": torch.__version__,
            "command": "python scripts/bench_kernels.py "
            + " ".join(sys.argv[1:] if argv is None else argv),
            "time_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        }
        try:
            import triton

            meta["triton"] = triton.__version__
        except ImportError:  # pragma: no cover
            pass
        write_out(args.out, meta, checks, results, vs, notes, rows)
        print(f"wrote {args.out / 'bench_kernels.json'} and bench_kernels.md")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
