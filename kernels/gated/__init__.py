"""gated_linear_attention: linear attention with a decaying state (RetNet, Mamba-2, GLA).

- `naive.py`: the recurrence one token at a time, and the chunked PyTorch path of the op; it
  needs torch only.
- `_jit.py`, `_jit_dkdv.py`, `launch.py`, `aot.py`: the chunked Triton kernels, their
  launchers and the ahead-of-time compile specs that scripts/kernel_report.py compiles. They
  import triton, so they load on first use of an attribute below, not with the package.

docs/kernels.md describes the design.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "aot_specs": "aot",
    "gated_linear_attention_forward": "launch",
    "gated_linear_attention_backward": "launch",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
