"""The pool_mix kernels' tuning space: the tile configs, their pruning, the autotuning buckets.

Tiles of 4096 or 8192 elements, 32 per thread: enough bytes in flight per SM to cover DRAM
latency, few enough registers for several programs per SM. Wide feature blocks make long
contiguous rows; tall token blocks shrink the halo share ((window - 1) / BLOCK_N). Which wins
depends on the width and on how many programs the batch makes, so the autotuner keys on a
power-of-two bucket of batch × tokens and of D, not on their exact values: a new sequence length
does not re-tune. Under the interpreter one small tile, so the tests cross several token and
feature tiles with small tensors.
"""

from __future__ import annotations

import triton

from .._host import INTERPRET, cdiv, next_power_of_2

GPU_CONFIGS = [
    triton.Config({"BLOCK_N": 64, "BLOCK_D": 64}, num_warps=4, num_stages=1),
    triton.Config({"BLOCK_N": 32, "BLOCK_D": 128}, num_warps=4, num_stages=1),
    triton.Config({"BLOCK_N": 128, "BLOCK_D": 32}, num_warps=4, num_stages=1),
    triton.Config({"BLOCK_N": 128, "BLOCK_D": 64}, num_warps=8, num_stages=1),
    triton.Config({"BLOCK_N": 64, "BLOCK_D": 128}, num_warps=8, num_stages=1),
]
INTERPRETER_CONFIGS = [triton.Config({"BLOCK_N": 32, "BLOCK_D": 32}, num_warps=4, num_stages=1)]
CONFIGS = INTERPRETER_CONFIGS if INTERPRET else GPU_CONFIGS
# The forward's key; the backward has no mask switch and keys on the first two.
KEY = ["rows_bucket", "d_bucket", "HAS_MASK"]  # the autotuner adds the tensors' dtypes


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """Keep the feature blocks that waste at most a quarter of their lanes on D (and always the
    narrowest, so something is left)."""
    d = int(named_args["D"])
    narrowest = min(c.kwargs["BLOCK_D"] for c in configs)
    kept = [
        c
        for c in configs
        if c.kwargs["BLOCK_D"] == narrowest
        or cdiv(d, c.kwargs["BLOCK_D"]) * c.kwargs["BLOCK_D"] <= 1.25 * d
    ]
    return kept


def buckets(b: int, n: int, d: int) -> tuple[int, int]:
    """Power-of-two buckets of batch x tokens (capped at 2**20) and of D (capped at 4096)."""
    return min(next_power_of_2(b * n), 2**20), min(next_power_of_2(d), 4096)


def autotuned(fn: triton.JITFunction, key: list[str]) -> triton.runtime.Autotuner:
    """`fn` wrapped in Triton's autotuner over CONFIGS, pruned per call by the width D."""
    return triton.autotune(CONFIGS, key=key, prune_configs_by={"early_config_prune": _prune})(fn)
