"""How many threads a run uses: torch's intra-op threads from the work per step and the cores this
process may use and nobody else is using (its affinity mask, less what /proc/stat shows busy,
capped by OMP_NUM_THREADS where the environment sets it)."""

from __future__ import annotations

import os
import time
from pathlib import Path

# On an idle 2-core CPU two threads beat one on the Shakespeare preset (~3.8 GFLOP a step) and by
# less on the default job (~0.6 GFLOP), but when another process starts mid-run two threads can
# run many times slower (README, "Threads"): a small job keeps one thread.
AUTO_FLOP_PER_THREAD = 1.5e9
# What one CPU thread trains, in FLOP/s by the 6 x params x tokens count: scaled_dot on the Tiny
# Shakespeare CPU recipe takes 3.8 GFLOP a step in 66 ms on one thread (docs/results.md, "Training
# benchmark on CPU"). Used only to warn, before a long run starts, how long it will take on a CPU.
CPU_FLOP_PER_S_PER_THREAD = 5e10
LONG_CPU_RUN_S = 1800  # a run estimated to take longer than this on the CPU is said to, up front


def cpu_estimate(params: int, tokens_per_step: int, steps: int, threads: int) -> float:
    """Seconds a run of `steps` steps would train on this CPU, roughly (CPU_FLOP_PER_S_PER_THREAD)."""
    return steps * 6 * params * tokens_per_step / (max(threads, 1) * CPU_FLOP_PER_S_PER_THREAD)


def threads_for(value: int | str, params: int, tokens_per_step: int, cores: int) -> int:
    """torch's intra-op threads for `train.threads`: an int as given; `auto` one thread per
    AUTO_FLOP_PER_THREAD of training work per step (6 x params x tokens), at least 1 and at most
    the idle `cores`. Small models lose more to handing work between threads than a second core
    gives them, and a thread on a core that another process keeps busy stalls all the others at
    every parallel region."""
    if value != "auto":
        return int(value)
    flop_per_step = 6 * params * tokens_per_step
    return max(1, min(cores, int(flop_per_step // AUTO_FLOP_PER_THREAD)))


def available_cores() -> int:
    """CPU cores this process may use and nobody else is using: its affinity mask (e.g. a SLURM
    allocation) shared among the data-parallel processes on this machine, less the cores other
    processes keep busy beyond what the mask leaves free (`busy_cores`)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - platforms without affinity masks
        cores = os.cpu_count() or 1
    outside = (os.cpu_count() or cores) - cores  # cores this process may not use anyway
    busy = max(0, busy_cores() - outside)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    free = max(1, (cores - busy) // max(1, local))
    limit = env_thread_limit()
    return free if limit is None else min(free, limit)


def env_thread_limit() -> int | None:
    """The thread count the environment asks for in OMP_NUM_THREADS (a positive int), or None.
    Launchers that run several jobs on one machine set it per job: joblib's workers, and so the
    parallel Hydra launcher, get cores // n_jobs; SLURM users often set it to their allocation.
    Sampling busy cores cannot see this, because jobs started together all see an idle machine."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    try:
        limit = int(value.split(",")[0])  # OpenMP allows a nesting list: the outer level
    except ValueError:
        return None
    return limit if limit >= 1 else None


def _cpu_times(stat: Path) -> tuple[int, int, int]:
    """(total, idle) CPU time summed over every CPU, and the number of CPUs, from /proc/stat."""
    lines = stat.read_text().splitlines()
    fields = [int(v) for v in lines[0].split()[1:]]  # "cpu": every CPU's times summed
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return sum(fields[:8]), idle, cpus


def busy_cores(window_s: float = 0.25, stat: Path = Path("/proc/stat")) -> int:
    """Cores other processes keep fully busy now: the machine's non-idle CPU time over a short
    window in which this process sleeps (/proc/stat), rounded down. Where there is no /proc/stat,
    the 1-minute load average instead, which lags: a job that ended a minute ago still counts
    there, so a calm machine right after another run would look busy."""
    try:
        total0, idle0, cpus = _cpu_times(stat)
        time.sleep(window_s)
        total1, idle1, _ = _cpu_times(stat)
    except (OSError, ValueError, IndexError):
        try:
            return int(os.getloadavg()[0])
        except (OSError, AttributeError):  # pragma: no cover - no load average either
            return 0
    elapsed = total1 - total0
    if elapsed <= 0:
        return 0
    busy_share = 1.0 - (idle1 - idle0) / elapsed
    return int(busy_share * max(cpus, 1) + 0.25)  # a core 75% busy counts as busy
