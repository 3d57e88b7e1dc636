"""delta_rule: a linear-attention state written by error correction (DeltaNet, Gated DeltaNet).

- `ops.py`: the public op and its checks; `impl="fla"` calls flash-linear-attention's chunked
  kernels where the optional `fla-core` is installed (docs/kernels.md).
- `naive.py`: the recurrence one token at a time, and the chunked PyTorch path of the op (the
  WY/UT form); it needs torch only.

There is no Triton kernel of the delta rule in attnzoo.
"""

from .ops import delta_rule

__all__ = ["delta_rule"]
