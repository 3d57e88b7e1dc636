"""delta_rule: a linear-attention state written by error correction (DeltaNet, Gated DeltaNet).

- `naive.py`: the recurrence one token at a time, and the chunked PyTorch path of the op (the
  WY/UT form); it needs torch only.

There is no Triton kernel of the delta rule in attnzoo: `impl="fla"` calls flash-linear-
attention's chunked kernels where the optional `fla-core` is installed (docs/kernels.md).
"""
