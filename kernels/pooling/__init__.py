"""Triton kernels for `pool_mix`: the mean over a window of real tokens, minus the token itself.

- `_jit.py`: the `@triton.jit` kernels, with the algorithm, its invariants and its limits.
- `tuning.py`: the tile configs the autotuner may try, their pruning, and the buckets it keys on.
- `launch.py`: the launchers: the kernels' own limits, output allocation, the grid.
- `aot.py`: the ahead-of-time compile specs that scripts/kernel_report.py compiles.

docs/kernels.md describes the design and its measurements.
"""

from .aot import aot_specs
from .launch import pool_mix_backward, pool_mix_forward

__all__ = ["aot_specs", "pool_mix_backward", "pool_mix_forward"]
