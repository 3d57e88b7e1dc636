"""pool_mix: the mean over a window of real tokens, minus the token itself.

- `ops.py`: the public op, its custom-op registration (op, fake, autograd, autocast) and checks.
- `naive.py`: the PyTorch reference, which is also the op's PyTorch path.
- `_jit.py`: the `@triton.jit` kernels, with the algorithm, its invariants and its limits.
- `tuning.py`: the tile configs the autotuner may try, their pruning, and the buckets it keys on.
- `launch.py`: the launchers: the kernels' own limits, output allocation, the grid.
- `aot.py`: the ahead-of-time compile specs that scripts/kernel_report.py compiles.
The Triton modules import triton: they load on first use, not with the package.

docs/kernels.md describes the design and its measurements.
"""

from .._op import lazy_getattr
from .ops import pool_mix

__getattr__ = lazy_getattr(
    __name__, {"aot_specs": "aot", "pool_mix_forward": "launch", "pool_mix_backward": "launch"}
)
__all__ = ["pool_mix"]
