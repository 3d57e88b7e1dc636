"""Ahead-of-time compile specs of the attention kernels, for scripts/kernel_report.py.

One spec per kernel and per configuration the launchers can pick on a GPU (the GPU table of
tuning.py, also when this process runs the interpreter), with the argument types and the
alignment hints that a launch on freshly allocated tensors gets from the JIT.
"""

from __future__ import annotations

import itertools

import torch

from .._aot import AotSpec
from .._checks import TRITON_DTYPES
from ._jit import HEADS_PADDED, KERNELS, MAX_QK_HEAD, _attn_bwd_delta
from .tuning import DELTA_TILE, block_configs, dot_precision, spec_cases, variant_name

_TRITON_DTYPE = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


_CONSTEXPRS = frozenset(
    [
        "METRIC",
        "HEAD",
        "QK_HEAD",
        "CHUNKED",
        "DROPOUT",
        "HAS_MASK",
        "CAUSAL",
        "WINDOW",
        "SINK",
        "SIGMOID",
        "KEY_BIAS",
        "BLOCK_M",
        "BLOCK_N",
        "DOT_PREC",
    ]
)


def _signature(fn, dtype: torch.dtype) -> dict[str, str]:
    ptr = f"*{_TRITON_DTYPE[dtype]}"
    sig: dict[str, str] = {}
    for name in fn.arg_names:
        if name in _CONSTEXPRS:
            sig[name] = "constexpr"
        elif name == "Mask":
            sig[name] = "*i8"
        elif name == "Seed":
            sig[name] = "*i64"
        elif name in ("Lse", "Delta", "Sink", "KeyBias", "DKeyBias", "DeltaExact"):
            sig[name] = "*fp32"
        elif name in ("Q", "K", "V", "M", "Out", "DO", "DQ", "DK", "DV"):
            sig[name] = ptr
        elif name in ("scale", "scale2", "bias2", "dropout_p"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


# Integer arguments the JIT sees as multiples of 16 for contiguous operands whose token count and
# widths are multiples of 16 (the shapes people train with): it specialises such values, and
# that is what lets a row's loads be 16-byte vectors. The report compiles that common case;
# without the hint ptxas would see scalar loads and report spills the real kernel does not have.
_DIVISIBLE_INTS = frozenset(
    ("N", "d_qk", "d_v", "smh", "smr")
    + tuple(f"s{t}{d}" for t in ("q", "k", "v", "o", "do", "dq", "dk", "dv") for d in "bhn")
)


def _aligned(fn, sig: dict[str, str]) -> dict:
    """16-byte aligned pointers, as the JIT specialises them for tensors torch allocates, and the
    integer strides and sizes that are multiples of 16 in the common case (_DIVISIBLE_INTS)."""
    return {
        (i,): [["tt.divisibility", 16]]
        for i, name in enumerate(fn.arg_names)
        if sig[name].startswith("*") or name in _DIVISIBLE_INTS
    }


# The switch sets compiled per variant: none (every config of the row), then at the row's first
# config all of them with a causal mask, and all of them with a sliding window instead (the
# launcher folds causal into the window, so WINDOW never comes with CAUSAL); the forward with a
# sink as well (the backward kernels take no sink), and sigmoid attention with its masks (it
# has no dropout), and a key bias (the Forgetting Transformer's: causal, with padding and
# dropout) in all three kernels.
_SWITCHES = (
    "",
    "causal mask dropout",
    "window mask dropout",
    "causal mask dropout sink",
    "causal mask sigmoid",
    "causal mask dropout keybias",
)


def _compiled(kernel: str, head: int, qk_head: int, metric: bool, switches: str) -> bool:
    """Whether a variant takes these switches: a window, sigmoid attention and a key bias only
    come with scaled-dot attention's prologue (plain, chunked, wide), a sink only reaches the
    forward. The wide backward (q/k tiles wider than HEAD) compiles its switches at the widest
    q/k tile only: the code is the same at every width, and the widest holds the most registers,
    so it is where a switch would spill first (the widths between compile without switches)."""
    if metric and ("window" in switches or "sigmoid" in switches or "keybias" in switches):
        return False
    if switches and head < qk_head < MAX_QK_HEAD:
        return False
    return "sink" not in switches or kernel == "attn_fwd"


def aot_specs() -> list[AotSpec]:
    """One spec per kernel and per configuration the launchers can pick on a GPU (the GPU tables,
    also when this process runs the interpreter) with no mask and no dropout; and at the first
    configuration of each, the variants with the switches of `_SWITCHES` (causal or a sliding
    window, padding mask and dropout; with a sink; sigmoid attention with causal and padding
    masks; with a key bias)."""
    specs = []
    for (kernel, dtype, head, qk_head, metric, chunked), switches in itertools.product(
        spec_cases(), _SWITCHES
    ):
        if not _compiled(kernel, head, qk_head, metric, switches):
            continue
        all_on = bool(switches)
        sig = _signature(KERNELS[kernel], dtype)
        aligned = _aligned(KERNELS[kernel], sig)
        configs = block_configs(
            kernel, dtype, head, metric, chunked, interpret=False, qk_head=qk_head
        )
        # The masks and dropout add elementwise work to a variant, no new tile shapes: the variants
        # with all three on (causal or window, padding mask, dropout: the most code) compile at
        # each row's first config (what ptxas makes of it is in the report); on a GPU the autotuner still
        # times every config and skips one that runs out of resources.
        for bm, bn, warps, stages in configs[:1] if all_on else configs:
            constexprs = {
                "METRIC": metric,
                "HEAD": head,
                "CHUNKED": chunked,
                "DROPOUT": "dropout" in switches,
                "HAS_MASK": all_on,
                "CAUSAL": "causal" in switches,
                "WINDOW": "window" in switches,
                "SIGMOID": "sigmoid" in switches,
                "KEY_BIAS": "keybias" in switches,
                "BLOCK_M": bm,
                "BLOCK_N": bn,
                "DOT_PREC": dot_precision(dtype),
            }
            if "QK_HEAD" in KERNELS[kernel].arg_names:
                constexprs["QK_HEAD"] = qk_head
            if "SINK" in KERNELS[kernel].arg_names:
                constexprs["SINK"] = "sink" in switches
            prologue = variant_name(head, qk_head, metric, chunked)
            prologue += f" {switches}" if all_on else ""
            label = (
                f"{_TRITON_DTYPE[dtype]} {prologue} HEAD={head} "
                f"BLOCK_M={bm} BLOCK_N={bn} w{warps} s{stages}"
            )
            specs.append(
                AotSpec(
                    name=kernel,
                    fn=KERNELS[kernel],
                    signature=sig,
                    constexprs=constexprs,
                    num_warps=warps,
                    num_stages=stages,
                    label=label,
                    attrs=aligned,
                )
            )
    for dtype, head in itertools.product(TRITON_DTYPES, HEADS_PADDED):
        sig = _signature(_attn_bwd_delta, dtype)
        rows = DELTA_TILE // head
        specs.append(
            AotSpec(
                name="attn_bwd_delta",
                fn=_attn_bwd_delta,
                signature=sig,
                constexprs={"HEAD": head, "BLOCK_M": rows},
                num_warps=4,
                num_stages=1,
                label=f"{_TRITON_DTYPE[dtype]} HEAD={head} BLOCK_M={rows} w4",
                attrs=_aligned(_attn_bwd_delta, sig),
            )
        )
    return specs
