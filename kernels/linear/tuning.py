"""The linear_attention kernels' tuning space: the configs, their pruning, the autotuning key.

Every kernel walks the chunks of one (batch, head) in sequence with its fp32 state (F × dv) in
registers, so the tiles follow from the problem: the chunk of BT tokens and the feature and
value widths padded to powers of two (BF, BV). What is tuned is the chunk, the warps that share
the state and the tiles, and the pipelining of the chunk loads, pruned by what the compile report
(scripts/kernel_report.py) shows to fit:

- half precision: chunks of 64 tokens (the design's chunk: 64 × 64 blocks on tensor cores), 4 or
  8 warps, 1 or 2 stages; with a 128 × 128 state (64 KiB of fp32, 128 registers a thread on 4
  warps for the state alone) only 8 warps, and chunks of 32 beside 64.
- fp32: chunks of 16 or 32 tokens on 8 warps. A chunk of 64 holds 64 × 64 fp32 blocks next to the
  fp32 operands of IEEE dots and spills tens of KB a thread; 16- and 32-token chunks spill little
  or nothing (docs/kernels.md has the report).

The algorithm does not depend on the chunk: a chunk only decides which products happen as
chunk × chunk blocks and which through the state. Under the interpreter one config, chunks of 64.
"""

from __future__ import annotations

import torch
import triton

from .._host import INTERPRET, next_power_of_2

BT = 64  # tokens a chunk, half precision
GPU_CONFIGS = [
    triton.Config({"BT": BT}, num_warps=4, num_stages=2),
    triton.Config({"BT": BT}, num_warps=4, num_stages=1),
    triton.Config({"BT": BT}, num_warps=8, num_stages=2),
    triton.Config({"BT": BT}, num_warps=8, num_stages=1),
    triton.Config({"BT": 32}, num_warps=8, num_stages=1),  # fp32, and the widest half states
    triton.Config({"BT": 16}, num_warps=8, num_stages=1),  # fp32
]
INTERPRETER_CONFIGS = [triton.Config({"BT": BT}, num_warps=4, num_stages=1)]
CONFIGS = INTERPRETER_CONFIGS if INTERPRET else GPU_CONFIGS
KEY = ["n_bucket", "CAUSAL", "HAS_MASK", "BF", "BV"]  # the autotuner adds the tensors' dtypes
WIDE_STATE = 128 * 128  # BF x BV from which half precision keeps only 8 warps


def width(n: int) -> int:
    """A feature or value width padded to the tiles' power of two (at least 16, for tl.dot)."""
    return max(16, next_power_of_2(n))


def n_bucket(n: int) -> int:
    """The sequence-length bucket the autotuner keys on: a power of two from 64 to 65536."""
    return min(max(next_power_of_2(n), 64), 65536)


def dot_precision(dtype: torch.dtype) -> str:
    """DOT_PREC: fp32 inputs get IEEE fp32 dots, not TF32 (half-precision inputs ignore it)."""
    return "ieee" if dtype == torch.float32 else "tf32"


def kept_configs(configs: list[triton.Config], bf: int, bv: int, fp32: bool) -> list[triton.Config]:
    """The configs worth timing for a BF x BV state in fp32 or half precision (at least one)."""
    if fp32:
        kept = [c for c in configs if c.kwargs["BT"] <= 32 and c.num_warps == 8]
    elif bf * bv >= WIDE_STATE:
        kept = [c for c in configs if c.kwargs["BT"] >= 32 and c.num_warps == 8]
    else:
        kept = [c for c in configs if c.kwargs["BT"] == BT]
    return kept or configs


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    args = {**named_args, **kwargs}  # BF and BV come as keywords
    first = next(iter(named_args.values()))  # the first tensor: q, or k for dq
    fp32 = first.dtype == torch.float32
    return kept_configs(configs, int(args["BF"]), int(args["BV"]), fp32)


def autotuned(
    fn: triton.JITFunction, configs: list[triton.Config] | None = None
) -> triton.runtime.Autotuner:
    """`fn` wrapped in Triton's autotuner over `configs` (default CONFIGS), pruned per call by
    the dtype and the state's size."""
    configs = CONFIGS if configs is None else configs
    return triton.autotune(configs, key=KEY, prune_configs_by={"early_config_prune": _prune})(fn)
