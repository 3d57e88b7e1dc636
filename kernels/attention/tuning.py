"""The attention kernels' tuning space: the compile-time variants, the tiles the autotuner may
try for each, and how a call's sizes map onto them.

One table, `_GPU_CONFIGS`, is read by both the autotuner (on a GPU it times a variant's row on
the first call per sequence-length bucket, keeps the fastest, and stores its choice in Triton's
cache directory) and the ahead-of-time report (`scripts/kernel_report.py` compiles every entry
for sm_80 and sm_90). A row holds the largest tiles that compile without spilling for sm_80 and
sm_90, plus full-size tiles that spill a little where a GPU measurement favoured them; ptxas's
register allocation is not monotone in the tile size, hence the irregular rows. 8-warp tiles
serve the variants with causal, padding and dropout all on, which spill on 4 warps. Under the
interpreter there is one small config: it checks semantics only. docs/kernels.md has the
compile report and the measurements behind the table.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import torch
import triton

from .._checks import TRITON_DTYPES
from .._host import INTERPRET, next_power_of_2
from ._jit import HEADS_PADDED, KERNELS, MAX_QK_HEAD

Config = tuple[int, int, int, int]  # (BLOCK_M, BLOCK_N, num_warps, num_stages)

# Elements of O (and of dO) per program of the delta kernel: 4096 // HEAD rows, 32 to 256.
DELTA_TILE = 4096


# --------------------------------------------------------------------------------------------
# Variants: how sizes and dtypes map to compile-time switches
# --------------------------------------------------------------------------------------------


def head_width(d_v: int) -> int:
    """The padded feature tile: the value width rounded up to a power of two, at least 16."""
    return max(16, next_power_of_2(d_v))


_QK_HEADS = tuple(2**i for i in range(4, MAX_QK_HEAD.bit_length()))  # 16 .. MAX_QK_HEAD


def qk_tile_width(d_qk: int, head: int) -> int:
    """The backward's q/k feature tile (QK_HEAD): HEAD when the q/k width fits in it or is wider
    than MAX_QK_HEAD (then chunked, HEAD wide), else the q/k width rounded up to a power of two,
    so that each backward program computes the scores of a tile pair once."""
    return next_power_of_2(d_qk) if head < d_qk <= MAX_QK_HEAD else head


def dot_precision(dtype: torch.dtype) -> str:
    """DOT_PREC: fp32 inputs get IEEE fp32 dots, not TF32 (half-precision inputs ignore it)."""
    return "ieee" if dtype == torch.float32 else "tf32"


def variant_name(head: int, qk_head: int, metric: bool, chunked: bool) -> str:
    """The row of _GPU_CONFIGS: "plain", "metric", "chunked", or "wide<QK_HEAD>"."""
    if qk_head > head:
        return f"wide{qk_head}"
    return "metric" if metric else ("chunked" if chunked else "plain")


def spec_cases() -> Iterator[tuple[str, torch.dtype, int, int, bool, bool]]:
    """(kernel, dtype, head, qk_head, metric, chunked) for every variant the launchers can compile.

    Causal or not, padding mask or not, and the sequence length are runtime arguments: they do
    not multiply the variants. Metric attention is never chunked (dk = dv ≤ 128). The forward's
    q/k tiles are always HEAD wide; the backward's are wider (`wide`, qk_head > head) when the
    q/k width fits in one tile of at most MAX_QK_HEAD (see `qk_tile_width`)."""
    for kernel in KERNELS:
        for dtype in TRITON_DTYPES:
            for head in HEADS_PADDED:
                for metric, chunked in ((False, False), (False, True), (True, False)):
                    yield kernel, dtype, head, head, metric, chunked
                if kernel != "attn_fwd":
                    for qk_head in (w for w in _QK_HEADS if w > head):
                        yield kernel, dtype, head, qk_head, False, False


# --------------------------------------------------------------------------------------------
# The table: (kernel, "half" | "fp32", variant) -> {HEAD: configs}
# --------------------------------------------------------------------------------------------

_A, _B = (128, 64, 4, 3), (64, 64, 4, 3)
_GPU_CONFIGS: dict[tuple[str, str, str], dict[int, list[Config]]] = {
    ("attn_fwd", "half", "plain"): {
        16: [_A, _B],
        32: [_A, _B],
        64: [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), _B],
        128: [(128, 64, 8, 2), (64, 32, 8, 1)],
    },
    ("attn_fwd", "half", "metric"): {
        16: [_A, _B],
        32: [_A, _B],
        64: [(128, 64, 8, 3), (64, 32, 8, 2)],
        128: [(64, 32, 8, 1)],
    },
    ("attn_fwd", "half", "chunked"): {
        16: [(128, 64, 8, 2), (64, 64, 4, 2)],
        32: [(128, 64, 8, 2), (64, 64, 4, 2)],
        64: [(64, 32, 8, 2)],
        128: [(32, 32, 8, 1), (32, 16, 4, 1)],
    },
    ("attn_fwd", "fp32", "plain"): {
        16: [(64, 32, 8, 2)],
        32: [(64, 32, 8, 2)],
        64: [(64, 32, 8, 2)],
        128: [(32, 32, 8, 1)],
    },
    ("attn_fwd", "fp32", "metric"): {
        16: [(64, 32, 8, 2)],
        32: [(64, 32, 8, 2)],
        64: [(32, 32, 8, 1)],
        128: [(32, 32, 8, 1)],
    },
    ("attn_fwd", "fp32", "chunked"): {
        16: [(64, 32, 8, 2)],
        32: [(64, 32, 8, 2)],
        64: [(32, 16, 4, 1)],
        128: [(32, 32, 8, 1)],
    },
    ("attn_bwd_dkdv", "half", "plain"): {
        16: [(64, 64, 4, 2)],
        32: [(64, 64, 4, 2)],
        64: [(64, 128, 8, 2), (32, 128, 4, 3), (64, 64, 4, 2), (32, 64, 4, 2)],
        128: [(32, 128, 8, 2), (32, 32, 8, 1)],
    },
    ("attn_bwd_dkdv", "half", "chunked"): {
        16: [(32, 32, 8, 1)],
        32: [(32, 32, 4, 1)],
        64: [(32, 32, 4, 1)],
        128: [(32, 32, 8, 1)],
    },
    ("attn_bwd_dkdv", "fp32", "plain"): {
        16: [(16, 32, 4, 1)],
        32: [(16, 32, 4, 1)],
        64: [(16, 32, 4, 1)],
        128: [(16, 16, 4, 1)],
    },
    ("attn_bwd_dkdv", "fp32", "chunked"): {
        16: [(16, 16, 8, 1)],
        32: [(16, 32, 4, 1)],
        64: [(16, 16, 8, 1)],
        128: [(16, 16, 4, 1)],
    },
    ("attn_bwd_dq", "half", "plain"): {
        16: [(64, 64, 4, 2)],
        32: [(64, 64, 4, 2)],
        64: [(128, 64, 8, 2), (128, 32, 4, 3), (128, 64, 4, 2), (64, 64, 4, 2)],
        128: [(128, 32, 8, 2), (32, 32, 8, 1)],
    },
    ("attn_bwd_dq", "half", "chunked"): {
        16: [(32, 32, 4, 1)],
        32: [(32, 32, 4, 1)],
        64: [(32, 32, 4, 1)],
        128: [(32, 32, 8, 1)],
    },
    ("attn_bwd_dq", "fp32", "plain"): {
        16: [(16, 32, 4, 1)],
        32: [(16, 32, 4, 1)],
        64: [(16, 32, 4, 1)],
        128: [(16, 16, 8, 1)],
    },
    ("attn_bwd_dq", "fp32", "chunked"): {
        16: [(16, 32, 4, 1)],
        32: [(16, 32, 4, 1)],
        64: [(16, 32, 4, 1)],
        128: [(16, 16, 8, 1)],
    },
}
# The backward's wide variants (QK_HEAD > HEAD: the whole q/k width in one tile). The fp32
# dk (dq) accumulator, [BLOCK, QK_HEAD], takes 32-row tiles on 8 warps (16-row for fp32 inputs).
_T64, _T32 = (64, 64, 8, 2), (32, 32, 8, 1)  # 64×64 and 32×32 tiles, 8 warps
_GPU_CONFIGS.update(
    {
        ("attn_bwd_dkdv", "half", "wide32"): {16: [_T64]},
        ("attn_bwd_dkdv", "half", "wide64"): {16: [_T64], 32: [(64, 32, 8, 2)]},
        ("attn_bwd_dkdv", "half", "wide128"): {16: [_T32], 32: [_T32], 64: [_T32]},
        ("attn_bwd_dkdv", "half", "wide256"): {h: [_T32] for h in HEADS_PADDED},
        ("attn_bwd_dkdv", "half", "wide512"): {
            16: [_T32],
            32: [_T32],
            64: [_T32],
            128: [(32, 16, 8, 1)],
        },
        ("attn_bwd_dq", "half", "wide32"): {16: [(64, 64, 4, 2)]},
        ("attn_bwd_dq", "half", "wide64"): {16: [_T64], 32: [_T64]},
        ("attn_bwd_dq", "half", "wide128"): {16: [_T32], 32: [_T32], 64: [_T32]},
        ("attn_bwd_dq", "half", "wide256"): {h: [_T32] for h in HEADS_PADDED},
        ("attn_bwd_dq", "half", "wide512"): {h: [_T32] for h in HEADS_PADDED},
        ("attn_bwd_dkdv", "fp32", "wide32"): {16: [(16, 32, 4, 1)]},
        ("attn_bwd_dkdv", "fp32", "wide64"): {16: [(16, 16, 8, 1)], 32: [(16, 32, 4, 1)]},
        ("attn_bwd_dkdv", "fp32", "wide128"): {h: [(16, 16, 8, 1)] for h in (16, 32, 64)},
        ("attn_bwd_dkdv", "fp32", "wide256"): {
            16: [(16, 16, 8, 1)],
            32: [(16, 16, 16, 1)],
            64: [(16, 16, 8, 1)],
            128: [(16, 16, 4, 1)],
        },
        ("attn_bwd_dkdv", "fp32", "wide512"): {
            16: [(16, 16, 8, 1)],
            32: [(16, 16, 8, 1)],
            64: [(16, 16, 16, 1)],
            128: [(16, 32, 16, 1)],
        },
        ("attn_bwd_dq", "fp32", "wide32"): {16: [(16, 32, 4, 1)]},
        ("attn_bwd_dq", "fp32", "wide64"): {16: [(16, 32, 4, 1)], 32: [(16, 32, 4, 1)]},
        ("attn_bwd_dq", "fp32", "wide128"): {h: [(16, 16, 8, 1)] for h in (16, 32, 64)},
        ("attn_bwd_dq", "fp32", "wide256"): {
            16: [(16, 16, 4, 1)],
            32: [(16, 16, 8, 1)],
            64: [(16, 16, 8, 1)],
            128: [(16, 16, 8, 1)],
        },
        ("attn_bwd_dq", "fp32", "wide512"): {
            16: [(16, 16, 8, 1)],
            32: [(16, 16, 4, 1)],
            64: [(16, 16, 8, 1)],
            128: [(16, 16, 8, 1)],
        },
    }
)
# The backward's metric variant uses the plain tables (verified by the report like the rest).
for _kernel in ("attn_bwd_dkdv", "attn_bwd_dq"):
    for _kind in ("half", "fp32"):
        _GPU_CONFIGS[(_kernel, _kind, "metric")] = _GPU_CONFIGS[(_kernel, _kind, "plain")]


def block_configs(
    kernel: str,
    dtype: torch.dtype,
    head: int,
    metric: bool,
    chunked: bool,
    interpret: bool = INTERPRET,
    qk_head: int | None = None,
) -> list[Config]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) the autotuner may try for one kernel variant
    (`qk_head`, the backward's q/k tile, defaults to `head`).

    One config under the interpreter: it only checks semantics, and 32×32 tiles make sequences
    of 17..257 tokens span one to nine ragged tiles."""
    if interpret:
        return [(32, 32, 4, 1)]
    kind = "fp32" if dtype == torch.float32 else "half"
    variant = variant_name(head, qk_head or head, metric, chunked)
    return _GPU_CONFIGS[(kernel, kind, variant)][head]


# --------------------------------------------------------------------------------------------
# The autotuner: every config of a kernel, pruned per call to its variant's row
# --------------------------------------------------------------------------------------------


def n_bucket(n: int) -> int:
    """The sequence length as the autotuner sees it: the next power of two, between 64 and 16384.
    One tuning serves every length in a bucket, and the best tile depends on N only through its
    scale."""
    return min(max(64, next_power_of_2(max(n, 1))), 16384)


def _as_triton_configs(kernel: str, interpret: bool = INTERPRET) -> list[triton.Config]:
    """Every config of `kernel` in the table, for the autotuner; the pruner narrows it per call."""
    seen: dict[Config, triton.Config] = {}
    for name, dtype, head, qk_head, metric, chunked in spec_cases():
        if name != kernel:
            continue
        for bm, bn, w, s in block_configs(
            kernel, dtype, head, metric, chunked, interpret, qk_head=qk_head
        ):
            seen[(bm, bn, w, s)] = triton.Config(
                {"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s
            )
    return list(seen.values())


def _pruner(kernel: str, interpret: bool = INTERPRET):
    """The autotuner's early pruning: keep the configs of the called variant's row."""

    def prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
        dtype, head = named_args["Q"].dtype, kwargs["HEAD"]
        metric, chunked, qk_head = kwargs["METRIC"], kwargs["CHUNKED"], kwargs.get("QK_HEAD")
        wanted = set(
            block_configs(kernel, dtype, head, metric, chunked, interpret, qk_head=qk_head)
        )
        keep = [
            c
            for c in configs
            if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) in wanted
        ]
        return keep

    return prune


# Keep the autotuner's choice on disk (Triton's cache directory), so a new process with the same
# kernels, GPU and bucket does not tune again; the argument exists from triton 3.2.
_CACHE_RESULTS = (
    {"cache_results": True}
    if "cache_results" in inspect.signature(triton.autotune).parameters
    else {}
)


def autotuned(kernel: str) -> triton.runtime.Autotuner:
    """KERNELS[kernel] wrapped in Triton's autotuner over its table configs."""
    return triton.autotune(
        configs=_as_triton_configs(kernel),
        # The tensors' dtypes are part of the key too (Triton adds them).
        # A window's reach (left, right) is not in the key: one tuning serves every window.
        # SINK is the forward's alone.
        key=[
            "n_bucket",
            "n_chunks",
            "HEAD",
            "CHUNKED",
            "METRIC",
            "DROPOUT",
            "HAS_MASK",
            "CAUSAL",
            "WINDOW",
            "SIGMOID",
            "KEY_BIAS",
            *(["SINK"] if "SINK" in KERNELS[kernel].arg_names else []),
        ],
        prune_configs_by={"early_config_prune": _pruner(kernel)},
        **_CACHE_RESULTS,
    )(KERNELS[kernel])
