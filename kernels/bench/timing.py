"""The kernel benchmark's timing: two numbers per call, so that neither hides the other.

- device ms: CUDA events around each call, with the L2 cache flushed before it (as
  `triton.testing.do_bench` does) and the GPU held busy by a sleep kernel while the host enqueues
  every call, so launch overhead is not in it; the median over `reps` calls (`Timer`);
- host us: wall time of the launch path per call (Python, autograd, argument checks, launches),
  timing `reps` calls back to back without any synchronisation in between (the launch queue
  takes them all, so the host never waits for the device).

A training step pays max(device, host) per op when nothing else keeps the GPU busy. `wall_timer`
stands in on CPU (`--smoke`): it exercises the timing path, its numbers measure nothing. Each
step (a part's validation, a part's timing) runs under its own time limit (`time_limit`,
SIGALRM): a fixed one per step, or its share of one budget (`Budget`).
"""

from __future__ import annotations

import contextlib
import signal
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import torch

from .cases import BACKENDS, Shape, backend_only, candidates, cost, make_inputs, part


class PartTimeout(Exception):
    pass


def stopped_by_limit(err: BaseException) -> PartTimeout | None:
    """The PartTimeout behind `err`, if a time limit raised it: the alarm can fire inside code
    that wraps what it raises (Triton's interpreter raises InterpreterError from it)."""
    while err is not None:
        if isinstance(err, PartTimeout):
            return err
        err = err.__cause__ or err.__context__
    return None


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
class Budget:
    """One time budget shared by the benchmark's steps in order, as the GPU check's stages share
    theirs: a step's limit is its share of the time left, among the steps still to run (itself
    first), so the time one step leaves unused goes to the steps after it. Without a budget
    (`seconds` <= 0) every step gets `per_step` (0: no limit)."""

    seconds: float
    shares: Mapping[str, float]
    per_step: float = 0.0
    clock: Callable[[], float] = time.monotonic
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = self.clock() + self.seconds

    def limit(self, step: str, left: Sequence[str]) -> float:
        """The step's limit in seconds; at most 0 once the budget is spent (the step is then
        not run: `time_limit` takes 0 as no limit at all)."""
        if self.seconds <= 0:
            return self.per_step
        available = self.deadline - self.clock()
        return available * self.shares[step] / sum(self.shares[s] for s in left)


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
    rate: float | None = None  # TFLOP/s, or GB/s moved (a bandwidth part, a copy)
    note: str = ""


def first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:160]}"


def time_part(
    name: str,
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
    bandwidth = part(name).bandwidth
    for s in shapes:
        inputs = make_inputs(name, s, device, dtype)
        c = cost(name, replace(s, elt=dtype.itemsize), window)  # None: no rate
        for cand in candidates(name, s, impl, window, backends, device):
            if cand.skip:
                emit(Result(name, s.name, cand.name, "fwd+bwd", note=f"skipped: {cand.skip}"))
                continue
            modes = ("fwd",) if cand.reference else ("fwd", "fwd+bwd")
            with backend_only(cand.backend):
                try:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        out = cand.run(*inputs)
                    grad = torch.randn_like(out)
                except (RuntimeError, ValueError, NotImplementedError) as err:  # shape refused
                    reasons = "; ".join(str(w.message).splitlines()[0][:120] for w in caught[:2])
                    note = f"unavailable: {first_line(err)}" + (f" ({reasons})" if reasons else "")
                    emit(Result(name, s.name, cand.name, "fwd+bwd", note=note))
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
                        emit(Result(name, s.name, cand.name, mode, note=first_line(err)))
                        continue
                    if c is None:  # no cost model for the part: no rate
                        rate = None
                    elif bandwidth or cand.reference:
                        rate = (
                            c["fwd_bytes"] * (1 if mode == "fwd" else 2) / took["device_ms"] / 1e6
                        )
                    else:
                        flop = c["fwd_flop"] + (c["bwd_flop"] if mode == "fwd+bwd" else 0)
                        rate = flop / took["device_ms"] / 1e9
                    ms, us = took["device_ms"], took["host_us"]
                    emit(Result(name, s.name, cand.name, mode, ms, us, rate))
        del inputs
        if device == "cuda":
            torch.cuda.empty_cache()
