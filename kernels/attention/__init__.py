"""The attention ops on one family of flash-attention kernels: scaled-dot (with an optional
sliding window), quadratic-form, metric-tensor and sigmoid attention.

Read top to bottom, as in Triton's fused-attention tutorial:

- `ops.py`: the public ops, their custom-op registration (op, fake, autograd, autocast), their
  checks, and the PyTorch paths (SDPA on each op's one-line formulation).
- `naive.py`: the PyTorch references the kernels are tested against.
- `_jit.py`: the `@triton.jit` kernels, with the algorithm, its invariants and its limits.
- `tuning.py`: the tuning space: the compile-time variants, the tile configs the autotuner may
  try for each, and the sequence-length buckets it keys on.
- `launch.py`: the launchers: the kernels' own limits, output allocation, the grid, and the
  forward and backward that the custom ops run.
- `aot.py`: the ahead-of-time compile specs that scripts/kernel_report.py compiles for sm_80
  and sm_90.
The Triton modules import triton: they load on first use of a name below, not with the package.

docs/kernels.md describes the design and its measurements.
"""

from .._op import lazy_getattr
from .ops import metric_attention, quadratic_attention, scaled_dot_attention, sigmoid_attention

_TRITON = {
    "HEADS_PADDED": "_jit",
    "KERNELS": "_jit",
    "MAX_HEAD": "_jit",
    "MAX_QK_HEAD": "_jit",
    "aot_specs": "aot",
    "attention_backward": "launch",
    "attention_forward": "launch",
    "dropout_keep_mask": "launch",
    "metric_backward": "launch",
    "metric_forward": "launch",
    "scaled_dot_backward": "launch",
    "scaled_dot_forward": "launch",
    "sigmoid_backward": "launch",
    "sigmoid_forward": "launch",
    "block_configs": "tuning",
    "head_width": "tuning",
    "n_bucket": "tuning",
    "qk_tile_width": "tuning",
    "spec_cases": "tuning",
    "variant_name": "tuning",
}
__getattr__ = lazy_getattr(__name__, _TRITON)
__all__ = ["metric_attention", "quadratic_attention", "scaled_dot_attention", "sigmoid_attention"]
