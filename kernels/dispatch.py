"""How `impl="auto"` chooses, on CUDA, between an op's Triton kernel and its PyTorch path.

Two sources of decisions, both measured, neither written by hand:

1. **The dispatch table** of the GPU, in `TABLE_DIR` (`dispatch_tables/` beside this file): the
   card's own, `<device name>.json` (`NVIDIA-H100-80GB-HBM3.json`), else its compute
   capability's, `<major>.<minor>.json` (`9.0.json`), so that two cards of one capability (an H100
   and an H200) can each have their own table and a card without one can use its siblings'.
   `scripts/gpu_check.py` writes the card's table from its kernel benchmark (`bench_kernels.py`):
   one entry per op, dtype, causal or not, width, forward-only or forward+backward, and range of
   sequence-length buckets, holding the verdict (`"triton"` or `"torch"`) and the times behind it.
   Where the table has no entry (or there is no table for the GPU), the call takes PyTorch.
2. **Benchmark mode** (`attnzoo.kernels.benchmark_mode = True`, or `impl="tune"` per call), in
   the spirit of `torch.backends.cudnn.benchmark`: the first call for a new key times the Triton
   kernel against the PyTorch path (forward+backward where autograd records the call), keeps the
   faster, logs the decision once, and remembers it in memory and in a JSON file in the user's
   cache directory, named for the GPU and the torch and triton versions (`tune_cache_path`), so
   the next process on the same card and software reads it instead of timing again. A decision
   from benchmark mode wins over the table.

**The key** of a call is (op, dtype, causal, dim, n bucket, grad): `dim` is the width the op
works on — the head dim for scaled_dot and metric, the model width D for quadratic (its score
width) and pool_mix; the n bucket is the sequence length rounded up to a power of two; `grad` is
whether autograd records the call (a training step) or not (evaluation, inference). A
scaled-dot call with a sliding window has a key of its own (`windowed`, one key for every
window): the benchmark's `local` part times the windowed kernel and writes entries with
`"windowed": true`; where a table has none, such calls take PyTorch, and benchmark mode does not
time them (its candidates have no window). A gated_linear_attention call's key does not say
whether its log decay is per head or per key dimension: the benchmark measures both forms and
writes the kernel's worse ratio of the two, and benchmark mode times a per-key decay.

**Table schema** (version 1; `load_table` checks every field and names the file in its error):

    {"schema": 1, "capability": "9.0", "device": "NVIDIA H100 80GB HBM3",
     "torch": "2.11.0+cu130", "triton": "3.6.0", "measured_utc": "...", "command": "...",
     "entries": [{"op": "scaled_dot_attention", "dtype": "bfloat16", "causal": true,
                  "dim": 64, "grad": true, "n_min": 1, "n_max": 512, "impl": "torch",
                  "measured_n": 256, "triton_ms": 1.276, "torch_ms": 0.248,
                  "torch_path": "sdpa flash", "ratio": 0.19}]}

`ratio` is torch_ms / triton_ms (above 1: the kernel is faster). An entry covers the buckets
n_min..n_max (powers of two); at most one entry may cover a bucket of a key.

Under `torch.compile` the choice is made while tracing, from the same table and decisions
(`choose` runs once per compiled shape and the graph keeps its answer).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

SCHEMA = 1
# The folder of the measured tables, the one place impl="auto" reads them from: in a checkout
# kernels/dispatch_tables/, which is where scripts/gpu_check.py writes by default.
TABLE_DIR = Path(__file__).resolve().parent / "dispatch_tables"
OPS = (
    "scaled_dot_attention",
    "quadratic_attention",
    "metric_attention",
    "sigmoid_attention",
    "pool_mix",
    "linear_attention",
    "gated_linear_attention",
)
DTYPES = ("float16", "bfloat16", "float32")
CHOICES = ("triton", "torch")

log = logging.getLogger(__name__)


class DispatchTableError(ValueError):
    """A dispatch table that cannot be read; the message names the file."""


# ------------------------------------------------------------------------------------ keys


def n_bucket(n: int) -> int:
    """The sequence-length bucket of n: the smallest power of two >= n (1 for n <= 1).

    A symbolic length (torch.compile) is bucketed by comparisons, which give a plain int."""
    if type(n) is int:
        return 1 if n <= 1 else 1 << (n - 1).bit_length()
    bucket = 1
    while bucket < n:
        bucket *= 2
    return bucket


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Key:
    op: str
    dtype: str  # "bfloat16"
    causal: bool
    dim: int
    n: int  # the bucket, a power of two
    grad: bool
    windowed: bool = False  # a sliding window (scaled_dot_attention)

    def __str__(self) -> str:
        return (
            f"{self.op} {self.dtype} {'causal' if self.causal else 'bidirectional'}"
            f"{' windowed' if self.windowed else ''} "
            f"dim={self.dim} n<={self.n} {'fwd+bwd' if self.grad else 'fwd'}"
        )


# ------------------------------------------------------------------------------------ the table


@dataclass(frozen=True)
class Entry:
    op: str
    dtype: str
    causal: bool
    dim: int
    grad: bool
    n_min: int
    n_max: int
    impl: str  # "triton" or "torch"
    measured_n: int
    triton_ms: float
    torch_ms: float
    torch_path: str = ""
    ratio: float = 0.0
    windowed: bool = False

    def covers(self, key: Key) -> bool:
        same = (self.op, self.dtype, self.causal, self.dim, self.grad, self.windowed)
        return same == (key.op, key.dtype, key.causal, key.dim, key.grad, key.windowed) and (
            self.n_min <= key.n <= self.n_max
        )


_FIELDS: dict[str, tuple[type, ...]] = {
    "op": (str,),
    "dtype": (str,),
    "causal": (bool,),
    "dim": (int,),
    "grad": (bool,),
    "n_min": (int,),
    "n_max": (int,),
    "impl": (str,),
    "measured_n": (int,),
    "triton_ms": (int, float),
    "torch_ms": (int, float),
}


def _entry(path: Path, i: int, raw: object) -> Entry:
    def bad(why: str) -> DispatchTableError:
        return DispatchTableError(f"dispatch table {path}: entry {i}: {why}")

    if not isinstance(raw, dict):
        raise bad(f"must be an object, got {type(raw).__name__}")
    for name, types in _FIELDS.items():
        if name not in raw:
            raise bad(f"missing field {name!r}")
        value = raw[name]
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise bad(
                f"field {name!r} must be {'/'.join(t.__name__ for t in types)}, got {value!r}"
            )
    unknown = set(raw) - set(_FIELDS) - {"torch_path", "ratio", "windowed"}
    if unknown:
        raise bad(f"unknown field(s) {sorted(unknown)}")
    if not isinstance(raw.get("windowed", False), bool):
        raise bad(f"field 'windowed' must be bool, got {raw['windowed']!r}")
    if raw["op"] not in OPS:
        raise bad(f"op {raw['op']!r} is not one of {OPS}")
    if raw["dtype"] not in DTYPES:
        raise bad(f"dtype {raw['dtype']!r} is not one of {DTYPES}")
    if raw["impl"] not in CHOICES:
        raise bad(f"impl {raw['impl']!r} is not one of {CHOICES}")
    if not 1 <= raw["n_min"] <= raw["n_max"]:
        raise bad(f"needs 1 <= n_min <= n_max, got {raw['n_min']}..{raw['n_max']}")
    if raw["dim"] < 1 or raw["measured_n"] < 1:
        raise bad("dim and measured_n must be positive")
    for name in ("triton_ms", "torch_ms"):
        if not (math.isfinite(raw[name]) and raw[name] > 0):
            raise bad(f"{name} must be a positive time in ms, got {raw[name]!r}")
    return Entry(**raw)


def load_table(path: str | Path) -> list[Entry]:
    """The entries of one dispatch table, every field checked; DispatchTableError names the file
    and the entry at fault."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DispatchTableError(f"dispatch table {path}: cannot be read: {err}") from err
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise DispatchTableError(
            f'dispatch table {path}: needs an object with "schema": {SCHEMA}, got {got!r}'
        )
    if not isinstance(data.get("entries"), list):
        raise DispatchTableError(f'dispatch table {path}: "entries" must be a list')
    entries = [_entry(path, i, raw) for i, raw in enumerate(data["entries"])]
    seen: dict[tuple, list[Entry]] = {}
    for i, e in enumerate(entries):
        group = seen.setdefault((e.op, e.dtype, e.causal, e.dim, e.grad, e.windowed), [])
        for other in group:
            if e.n_min <= other.n_max and other.n_min <= e.n_max:
                raise DispatchTableError(
                    f"dispatch table {path}: entry {i} ({e.op} {e.dtype} causal={e.causal} "
                    f"dim={e.dim} grad={e.grad}) covers n {e.n_min}..{e.n_max}, which overlaps "
                    f"{other.n_min}..{other.n_max} of an earlier entry"
                )
        group.append(e)
    return entries


def lookup(entries: Iterable[Entry], key: Key) -> Entry | None:
    """The entry that covers the key, or None (the call then takes PyTorch)."""
    return next((e for e in entries if e.covers(key)), None)


def table_file(device: str) -> str:
    """The file name of a card's own table: its device name made a file name
    ("NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3.json")."""
    return f"{_slug(device)}.json"


def table_paths(device: str, capability: str) -> tuple[Path, Path]:
    """Where a GPU's table is looked for, in order: the card's own, then its compute
    capability's ("9.0")."""
    return TABLE_DIR / table_file(device), TABLE_DIR / f"{capability}.json"


@functools.cache
def table_for(device: str, capability: str) -> tuple[Entry, ...]:
    """The committed table of a GPU: the card's own, else its capability's; empty where
    neither was measured."""
    for path in table_paths(device, capability):
        if path.exists():
            return tuple(load_table(path))
    return ()


def make_table(rows: Iterable[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """A dispatch table from benchmark measurements.

    `rows`: one per op, dtype, causal, dim, grad, windowed (absent: False) and measured
    sequence length n, with `triton_ms`, `torch_ms` (the fastest PyTorch formulation) and
    `torch_path`. Each measured
    n covers its own bucket and the buckets up to the geometric middle between it and the next
    measured bucket; the shortest measured covers every bucket below it and the longest one bucket
    beyond it (longer sequences have no entry, so PyTorch). The kernel is chosen where it was
    strictly faster."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("triton_ms") and r.get("torch_ms"):
            key = (r["op"], r["dtype"], r["causal"], r["dim"], r["grad"], r.get("windowed", False))
            groups.setdefault(key, []).append(r)
    entries = []
    for key, group in sorted(groups.items(), key=lambda kv: str(kv[0])):
        op, dtype, causal, dim, grad, windowed = key
        by_bucket: dict[int, dict] = {}
        for r in group:  # two measurements in one bucket: the longer n speaks for it
            b = n_bucket(r["n"])
            if b not in by_bucket or r["n"] > by_bucket[b]["n"]:
                by_bucket[b] = r
        buckets = sorted(by_bucket)
        for i, b in enumerate(buckets):
            r = by_bucket[b]
            lo = 1 if i == 0 else _middle(buckets[i - 1], b) * 2
            hi = 2 * b if i == len(buckets) - 1 else _middle(b, buckets[i + 1])
            ratio = r["torch_ms"] / r["triton_ms"]
            entries.append(
                _without_default_window(
                    Entry(
                        op=op,
                        dtype=dtype,
                        causal=causal,
                        dim=dim,
                        grad=grad,
                        n_min=lo,
                        n_max=hi,
                        impl="triton" if ratio > 1.0 else "torch",
                        measured_n=r["n"],
                        triton_ms=round(r["triton_ms"], 4),
                        torch_ms=round(r["torch_ms"], 4),
                        torch_path=r.get("torch_path", ""),
                        ratio=round(ratio, 3),
                        windowed=windowed,
                    )
                )
            )
    return {"schema": SCHEMA, **meta, "entries": entries}


def _without_default_window(record: Key | Entry) -> dict[str, Any]:
    """A key or entry as JSON fields: `windowed` only where it is true, so files written without
    windows read the same as before the field existed."""
    fields = asdict(record)
    if not fields["windowed"]:
        del fields["windowed"]
    return fields


def _middle(lo: int, hi: int) -> int:
    """The largest bucket that still belongs to `lo` between two measured buckets lo < hi."""
    return 2 ** ((int(math.log2(lo)) + int(math.log2(hi))) // 2)


# ------------------------------------------------------------------------------------ benchmark mode


# The package itself (attnzoo.kernels, being imported when this module is), whose attribute
# `benchmark_mode` the user sets; a module attribute is something torch.compile can trace.
_package = sys.modules.get(__package__ or "")


def benchmark_mode() -> bool:
    """`attnzoo.kernels.benchmark_mode`, set by the user (default False)."""
    return bool(getattr(_package, "benchmark_mode", False))


def cache_dir() -> Path:
    """$ATTNZOO_CACHE_DIR, else $XDG_CACHE_HOME/attnzoo, else ~/.cache/attnzoo: the trainer's
    cache directory (attnzoo.tasks), repeated here because kernels/ imports nothing from it."""
    if os.environ.get("ATTNZOO_CACHE_DIR"):
        return Path(os.environ["ATTNZOO_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "attnzoo"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-")


@dataclass(frozen=True)
class Device:
    """What a tuning decision is valid for: the GPU and the software that compiled the kernel."""

    name: str
    capability: str
    torch: str
    triton: str

    @classmethod
    def of(cls, index: int | None) -> Device:
        major, minor = torch.cuda.get_device_capability(index)
        try:
            import triton

            triton_version = triton.__version__
        except ImportError:  # pragma: no cover - no kernels without triton anyway
            triton_version = "none"
        return cls(
            torch.cuda.get_device_name(index), f"{major}.{minor}", torch.__version__, triton_version
        )


def tune_cache_path(device: Device) -> Path:
    """<cache_dir>/tune/<gpu>-sm<capability>-torch<version>-triton<version>.json"""
    cc = device.capability.replace(".", "")
    name = f"{_slug(device.name)}-sm{cc}-torch{_slug(device.torch)}-triton{_slug(device.triton)}"
    return cache_dir() / "tune" / f"{name}.json"


Candidates = tuple[Callable[[], object], Callable[[], object]]  # (triton, torch), one call each
Timer = Callable[[Callable[[], object]], float]  # ms of one call


def cuda_timer(fn: Callable[[], object], reps: int = 5) -> float:
    """Median device ms of `fn` over `reps` calls after two untimed ones (compilation,
    autotuning, allocation), with CUDA events."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


@dataclass
class Tuner:
    """Benchmark mode's decisions: in memory, in the cache file of each device, timed on a miss.

    `timer` and `device_of` are what a test replaces (the defaults need a GPU)."""

    timer: Timer = cuda_timer
    device_of: Callable[[int | None], Device] = Device.of
    decisions: dict[tuple[Device, Key], dict[str, Any]] = field(default_factory=dict)
    _loaded: set[Device] = field(default_factory=set)

    def decision(self, key: Key, index: int | None) -> dict[str, Any] | None:
        """The decision already made for the key on this device (memory, then its cache file)."""
        device = self.device_of(index)
        if device not in self._loaded:
            self._loaded.add(device)
            for key_, record in self._read(device).items():
                self.decisions.setdefault((device, key_), record)
        return self.decisions.get((device, key))

    def decide(self, key: Key, index: int | None, candidates: Callable[[], Candidates]) -> str:
        """The choice for the key, "triton" or "torch": the decision made before, else timed now."""
        record = self.decision(key, index)
        if record is None:
            device = self.device_of(index)
            run_triton, run_torch = candidates()
            triton_ms = self.timer(run_triton)
            torch_ms = self.timer(run_torch)
            choice = "triton" if triton_ms < torch_ms else "torch"
            record = {"impl": choice, "triton_ms": triton_ms, "torch_ms": torch_ms}
            self.decisions[(device, key)] = record
            log.info(
                "attnzoo.kernels benchmark mode on %s: %s -> %s (triton %.3f ms, torch %.3f ms)",
                device.name,
                key,
                choice,
                triton_ms,
                torch_ms,
            )
            self._write(device)
        return record["impl"]

    def _read(self, device: Device) -> dict[Key, dict[str, Any]]:
        path = tune_cache_path(device)
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text())
            if data.get("device") != asdict(device):
                return {}  # a file name collision after slugging: not this device's decisions
            return {
                Key(**d["key"]): {k: d[k] for k in ("impl", "triton_ms", "torch_ms")}
                for d in data["decisions"]
                if d["impl"] in CHOICES
            }
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("attnzoo.kernels: ignoring the unreadable tuning cache %s (%s)", path, err)
            return {}

    def _write(self, device: Device) -> None:
        path = tune_cache_path(device)
        decisions = [
            {"key": _without_default_window(key), **record}
            for (dev, key), record in self.decisions.items()
            if dev == device
        ]
        payload = {"schema": SCHEMA, "device": asdict(device), "decisions": decisions}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(payload, indent=1))
            os.replace(tmp, path)
        except OSError as err:  # a read-only home: the decision still holds in memory
            log.warning("attnzoo.kernels: cannot write the tuning cache %s (%s)", path, err)


TUNER = Tuner()

# op name -> (dtype, causal, shape, window, device, grad) -> (triton call, torch call): what a
# tuning run times, made by kernels/ops.py, which knows each op's arguments
CandidateMaker = Callable[[torch.dtype, bool, tuple[int, ...], int, torch.device, bool], Candidates]
CANDIDATES: dict[str, CandidateMaker] = {}


# ------------------------------------------------------------------------------------ the choice


_memo: dict[tuple, bool] = {}


def clear() -> None:
    """Forget the memoised choices and loaded tables (after a table or the tuner changed)."""
    _memo.clear()
    table_for.cache_clear()


def choose(
    op: str,
    dtype: torch.dtype,
    causal: bool,
    dim: int,
    n: int,
    grad: bool,
    index: int | None,
    tune: bool,
    shape: tuple[int, ...] = (),
    window: int = 0,
    windowed: bool = False,
) -> bool:
    """Whether a CUDA call of `op` runs its Triton kernel (`n` is already a bucket).

    Every argument is a plain value, so torch.compile calls this once while tracing and keeps
    its answer. With `tune`, a decision of benchmark mode (made now if there is none, timing
    inputs of `shape`) wins; otherwise the GPU's table (its own, else its capability's) decides,
    and without an entry PyTorch does. A `windowed` call (sliding-window attention) is never timed:
    the table decides."""
    memo_key = (op, dtype, causal, dim, n, grad, index, tune, windowed)
    hit = _memo.get(memo_key)
    if hit is not None:
        return hit
    key = Key(op, dtype_name(dtype), causal, dim, n, grad, windowed)
    if tune and not windowed:
        device = torch.device("cuda", index) if index is not None else torch.device("cuda")
        made = CANDIDATES[op]

        def candidates() -> Candidates:
            return made(dtype, causal, shape, window, device, grad)

        devices = [device] if torch.cuda.is_available() else []  # none in CPU tests
        with torch.random.fork_rng(devices=devices):  # the user's random stream is untouched
            choice = TUNER.decide(key, index, candidates) == "triton"
    else:
        gpu = TUNER.device_of(index)
        entry = lookup(table_for(gpu.name, gpu.capability), key)
        choice = entry is not None and entry.impl == "triton"
    _memo[memo_key] = choice
    return choice


# What `torch.compiler.assume_constant_result(choose)` does (tests/test_dispatch.py checks that it
# still is), without importing torch._dynamo (a second of start-up) in every process.
choose._dynamo_marked_constant = True  # type: ignore[attr-defined]
