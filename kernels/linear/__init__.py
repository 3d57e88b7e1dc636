"""Triton kernels for `linear_attention`: normalised linear attention, chunked.

- `_jit.py`: the `@triton.jit` kernels, with the algorithm, the backward's derivation, its limits.
- `tuning.py`: the configs the autotuner may try, their pruning, and the key it tunes on.
- `launch.py`: the launchers: the kernels' own limits, output allocation, the grid.
- `aot.py`: the ahead-of-time compile specs that scripts/kernel_report.py compiles.

docs/kernels.md describes the design.
"""

from .aot import aot_specs
from .launch import linear_attention_backward, linear_attention_forward

__all__ = ["aot_specs", "linear_attention_backward", "linear_attention_forward"]
