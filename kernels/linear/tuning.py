"""The linear_attention kernels' tuning space: the configs, their pruning, the autotuning key.

Every kernel walks the chunks of one (batch, head) in sequence with its fp32 state (F × dv) in
registers, so the tile shape is fixed by the problem: BT = 64 tokens a chunk, and the feature
and value widths padded to powers of two (BF, BV). What is left to tune is the warps that share
the state and the chunk tiles, and the pipelining of the chunk loads. With a 128 × 128 state
(64 KiB of fp32) 4 warps would hold 128 registers a thread for the state alone, so the widest
states keep only the 8-warp configs. Under the interpreter one config.
"""

from __future__ import annotations

import torch
import triton

from .._host import INTERPRET, next_power_of_2

BT = 64  # tokens a chunk
GPU_CONFIGS = [
    triton.Config({"BT": BT}, num_warps=4, num_stages=2),
    triton.Config({"BT": BT}, num_warps=4, num_stages=1),
    triton.Config({"BT": BT}, num_warps=8, num_stages=2),
    triton.Config({"BT": BT}, num_warps=8, num_stages=1),
]
INTERPRETER_CONFIGS = [triton.Config({"BT": BT}, num_warps=4, num_stages=1)]
CONFIGS = INTERPRETER_CONFIGS if INTERPRET else GPU_CONFIGS
KEY = ["n_bucket", "CAUSAL", "HAS_MASK", "BF", "BV"]  # the autotuner adds the tensors' dtypes
WIDE_STATE = 128 * 128  # BF x BV from which only 8-warp configs are kept


def width(n: int) -> int:
    """A feature or value width padded to the tiles' power of two (at least 16, for tl.dot)."""
    return max(16, next_power_of_2(n))


def n_bucket(n: int) -> int:
    """The sequence-length bucket the autotuner keys on: a power of two from 64 to 65536."""
    return min(max(next_power_of_2(n), 64), 65536)


def dot_precision(dtype: torch.dtype) -> str:
    """DOT_PREC: fp32 inputs get IEEE fp32 dots, not TF32 (half-precision inputs ignore it)."""
    return "ieee" if dtype == torch.float32 else "tf32"


def kept_configs(configs: list[triton.Config], bf: int, bv: int) -> list[triton.Config]:
    """The configs worth timing for a BF x BV state."""
    if bf * bv >= WIDE_STATE:
        wide = [c for c in configs if c.num_warps >= 8]
        return wide or configs
    return configs


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    args = {**named_args, **kwargs}  # BF and BV come as keywords
    return kept_configs(configs, int(args["BF"]), int(args["BV"]))


def autotuned(fn: triton.JITFunction) -> triton.runtime.Autotuner:
    """`fn` wrapped in Triton's autotuner over CONFIGS, pruned per call by the state's size."""
    return triton.autotune(CONFIGS, key=KEY, prune_configs_by={"early_config_prune": _prune})(fn)
