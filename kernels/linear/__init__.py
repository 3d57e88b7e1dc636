"""linear_attention: normalised linear attention, chunked.

- `ops.py`: the public op, its custom-op registration (op, fake, autograd, autocast) and checks.
- `naive.py`: the PyTorch reference, which is also the op's PyTorch path.
- `_jit.py`: the `@triton.jit` kernels, with the algorithm, the backward's derivation, its limits.
- `tuning.py`: the configs the autotuner may try, their pruning, and the key it tunes on.
- `launch.py`: the launchers: the kernels' own limits, output allocation, the grid.
- `aot.py`: the ahead-of-time compile specs that scripts/kernel_report.py compiles.
The Triton modules import triton: they load on first use, not with the package.

docs/kernels.md describes the design.
"""

from .._op import lazy_getattr
from .ops import linear_attention

__getattr__ = lazy_getattr(
    __name__,
    {
        "aot_specs": "aot",
        "linear_attention_forward": "launch",
        "linear_attention_backward": "launch",
    },
)
__all__ = ["linear_attention"]
