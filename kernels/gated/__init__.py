"""gated_linear_attention: linear attention with a decaying state (RetNet, Mamba-2, GLA).

- `ops.py`: the public op, its custom-op registration (op, fake, autograd, autocast) and checks.
- `naive.py`: the recurrence one token at a time, and the chunked PyTorch path of the op; it
  needs torch only.
- `_jit.py`, `_jit_dkdv.py`, `launch.py`, `aot.py`: the chunked Triton kernels, their
  launchers and the ahead-of-time compile specs that scripts/kernel_report.py compiles. They
  import triton, so they load on first use, not with the package.

docs/kernels.md describes the design.
"""

from .._op import lazy_getattr
from .ops import gated_linear_attention

__getattr__ = lazy_getattr(
    __name__,
    {
        "aot_specs": "aot",
        "gated_linear_attention_forward": "launch",
        "gated_linear_attention_backward": "launch",
    },
)
__all__ = ["gated_linear_attention"]
