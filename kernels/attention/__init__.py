"""Flash attention in Triton: one kernel family, three prologues (scaled-dot, quadratic, metric).

Read top to bottom, as in Triton's fused-attention tutorial:

- `_jit.py`: the `@triton.jit` kernels, with the algorithm, its invariants and its limits.
- `tuning.py`: the tuning space: the compile-time variants, the tile configs the autotuner may
  try for each, and the sequence-length buckets it keys on.
- `launch.py`: the launchers: the kernels' own limits, output allocation, the grid, and the
  forward and backward of each op that the custom ops in kernels/library.py run.
- `aot.py`: the ahead-of-time compile specs that scripts/kernel_report.py compiles for sm_80
  and sm_90.

docs/kernels.md describes the design and its measurements. The names below are what the rest
of attnzoo.kernels, the scripts and the tests use; the modules hold the rest.
"""

from ._jit import HEADS_PADDED, KERNELS, MAX_HEAD, MAX_QK_HEAD
from .aot import aot_specs
from .launch import (
    attention_backward,
    attention_forward,
    dropout_keep_mask,
    metric_backward,
    metric_forward,
    scaled_dot_backward,
    scaled_dot_forward,
    sigmoid_backward,
    sigmoid_forward,
)
from .tuning import block_configs, head_width, n_bucket, qk_tile_width, spec_cases, variant_name

__all__ = [
    "HEADS_PADDED",
    "KERNELS",
    "MAX_HEAD",
    "MAX_QK_HEAD",
    "aot_specs",
    "attention_backward",
    "attention_forward",
    "block_configs",
    "dropout_keep_mask",
    "head_width",
    "metric_backward",
    "metric_forward",
    "n_bucket",
    "qk_tile_width",
    "scaled_dot_backward",
    "scaled_dot_forward",
    "sigmoid_backward",
    "sigmoid_forward",
    "spec_cases",
    "variant_name",
]
