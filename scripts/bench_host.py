"""attnzoo's own host time per op call, on any machine: the kernels' launches stubbed out.

At small training shapes the attention kernels are host-bound (the H100 baseline: 258 µs of CPU
per scaled_dot forward call against SDPA's 52 µs), and a GPU is not always at hand. This script
times everything attnzoo runs in Python per call — the public op's checks and dtype policy, the
eager autograd path, the launcher's limits, output allocation, the grid — with each Triton launch
replaced by a stub that only evaluates the grid, so what Triton's launcher and the driver add is
not in it (`scripts/bench_kernels.py` measures the whole path on a GPU: its host-µs column).

Tensors are tiny CPU tensors (the host path does not depend on sizes; small ones keep the real
work in the stubbed-out path — allocations, metric's dp/dM products — negligible), so it runs with
TRITON_INTERPRET=1, set here before triton is imported. Compare revisions in alternation, on an
otherwise idle machine:

    python scripts/bench_host.py                 # every op: forward (also under no_grad), fwd+bwd
    python scripts/bench_host.py --reps 15 --calls 300
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402

import torch  # noqa: E402
import triton.runtime.interpreter  # noqa: E402
from attnzoo.kernels.attention import launch as attention_launch  # noqa: E402
from attnzoo.kernels.pooling import launch as pooling_launch  # noqa: E402

from attnzoo import kernels  # noqa: E402

LAUNCHES = {
    attention_launch: ("_fwd", "_attn_bwd_delta", "_bwd_dkdv", "_bwd_dq"),
    pooling_launch: ("_pool_fwd", "_pool_bwd"),
}


class _StubLaunch:
    """Stands in for `kernel[grid](...)`: evaluates the grid with the first config's tile sizes,
    as Triton's launcher would, counts the launch, runs nothing."""

    def __init__(self, name: str, kernel, counts: Counter) -> None:
        configs = getattr(kernel, "configs", None) or [None]
        self.meta = dict(configs[0].kwargs) if configs[0] is not None else {}
        self.name, self.counts = name, counts

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            if callable(grid):
                grid({**self.meta, **kwargs})
            self.counts[self.name] += 1

        return launch


def _unstubbed(self, *args, **kwargs):
    raise RuntimeError(
        f"{self.fn.__name__} was launched for real: add its launcher to bench_host.LAUNCHES"
    )


def stub_launches() -> Counter:
    """Replace every Triton launch of attnzoo.kernels by a stub; returns the launch counter. A
    kernel launched any other way raises instead of running unseen in the timings."""
    counts: Counter = Counter()
    for module, names in LAUNCHES.items():
        for name in names:
            setattr(module, name, _StubLaunch(name, getattr(module, name), counts))
    triton.runtime.interpreter.InterpretedFunction.run = _unstubbed
    return counts


def calls(b: int = 2, h: int = 2, n: int = 16, d: int = 64) -> dict:
    """op name -> (inputs that need gradients, forward call), at the mixers' usual arguments
    (quadratic's x narrow, so that its x·U[h] product stays negligible)."""
    q, k, v = (torch.randn(b, h, n, d, requires_grad=True) for _ in range(3))
    x = torch.randn(b, n, 16, requires_grad=True)
    u = torch.randn(h, 16, 16, requires_grad=True)
    m = torch.randn(h, d, d, requires_grad=True)
    return {
        "scaled_dot": (
            (q, k, v),
            lambda: kernels.scaled_dot_attention(q, k, v, True, impl="triton"),
        ),
        "quadratic": ((x, u, v), lambda: kernels.quadratic_attention(x, u, v, True, impl="triton")),
        "metric": ((q, m), lambda: kernels.metric_attention(q, m, True, impl="triton")),
        "pool_mix": ((x,), lambda: kernels.pool_mix(x, 3, impl="triton")),
    }


def time_per_call(fn, reps: int, n_calls: int) -> list[float]:
    """CPU µs per call of each of `reps` timed batches of `n_calls` calls (after a warm-up
    batch). CPU time of this process, not wall time: on a shared machine the other processes'
    share of the cores does not count, the work of the host path does."""
    for _ in range(n_calls):
        fn()
    per_call = []
    for _ in range(reps):
        start = time.process_time()
        for _ in range(n_calls):
            fn()
        per_call.append((time.process_time() - start) / n_calls * 1e6)
    return per_call


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=15, help="timed batches per measurement")
    parser.add_argument("--calls", type=int, default=300, help="calls per batch")
    args = parser.parse_args(argv)
    if args.reps < 1 or args.calls < 1:
        parser.error(f"--reps and --calls must be ≥ 1, got {args.reps} and {args.calls}")
    counts = stub_launches()
    rows = []
    for name, (inputs, forward) in calls().items():
        grad = torch.ones_like(forward())

        def forward_backward(forward=forward, inputs=inputs, grad=grad):
            torch.autograd.grad(forward(), inputs, grad)  # no accumulation into .grad

        @torch.no_grad()
        def forward_no_grad(forward=forward):  # evaluation: nothing recorded for autograd
            forward()

        parts = (
            ("forward", forward),
            ("forward, no_grad", forward_no_grad),
            ("forward+backward", forward_backward),
        )
        for part, fn in parts:
            counts.clear()
            fn()
            launched = sum(counts.values())
            if launched == 0:
                raise RuntimeError(f"{name} {part} launched no stubbed kernel: the stub missed it")
            times = time_per_call(fn, args.reps, args.calls)
            rows.append(
                {
                    "op": name,
                    "part": part,
                    "launches": launched,
                    "median_us": statistics.median(times),
                    "best_us": min(times),
                }
            )
    print("| op | part | launches | median CPU µs/call | best CPU µs/call |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['op']} | {r['part']} | {r['launches']} | {r['median_us']:.1f} "
            f"| {r['best_us']:.1f} |"
        )
    print(
        f"\n{args.reps} batches of {args.calls} calls, kernels stubbed (Triton's launcher excluded)."
    )
    return rows


if __name__ == "__main__":
    main()
