"""Ahead-of-time compile specs of the pool_mix kernels, for scripts/kernel_report.py."""

from __future__ import annotations

import torch

from .._aot import AotSpec
from ._jit import _pool_bwd_kernel, _pool_fwd_kernel
from .tuning import GPU_CONFIGS

_TL_TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


def aot_specs() -> list[AotSpec]:
    """Every kernel x configuration the launchers can pick, for scripts/kernel_report.py.

    Causal and centred windows share one binary: the direction is the runtime `left` offset
    (window - 1 or window // 2), and so does every window, so they are not separate rows. The
    specs assume the common contiguous feature axis (stride 1, which Triton specialises as a
    constant at launch), 16-byte aligned pointers and a width D that is a multiple of 16, as a
    launch on a fresh tensor of a usual model width would (Triton specialises on both).
    """
    aligned = [["tt.divisibility", 16]]
    specs: list[AotSpec] = []
    for ty in _TL_TYPES.values():
        for cfg in GPU_CONFIGS:  # what a GPU launch can pick, whatever TRITON_INTERPRET says
            bn, bd, warps = cfg.kwargs["BLOCK_N"], cfg.kwargs["BLOCK_D"], cfg.num_warps
            tile = f"BLOCK_N={bn} BLOCK_D={bd} w{warps}"
            for has_mask in (False, True):
                specs.append(
                    AotSpec(
                        name="pool_fwd",
                        fn=_pool_fwd_kernel,
                        signature={
                            "x_ptr": f"*{ty}",
                            "pad_ptr": "*u8",
                            "out_ptr": f"*{ty}",
                            "rcount_ptr": "*fp32",
                            "N": "i32",
                            "D": "i32",
                            "window": "i32",
                            "left": "i32",
                            "stride_xb": "i32",
                            "stride_xn": "i32",
                            "stride_xd": "constexpr",
                            "stride_pb": "i32",
                            "stride_pn": "i32",
                            "rows_bucket": "i32",
                            "d_bucket": "i32",
                            "HAS_MASK": "constexpr",
                            "BLOCK_N": "constexpr",
                            "BLOCK_D": "constexpr",
                        },
                        constexprs={
                            "stride_xd": 1,
                            "HAS_MASK": has_mask,
                            "BLOCK_N": bn,
                            "BLOCK_D": bd,
                        },
                        num_warps=warps,
                        num_stages=cfg.num_stages,
                        label=f"{ty} {'mask' if has_mask else 'no-mask'} any-window {tile}",
                        # the pointers, D and x's batch and token strides: multiples of 16
                        attrs={(i,): aligned for i in (0, 1, 2, 3, 5, 8, 9)},
                    )
                )
            specs.append(
                AotSpec(
                    name="pool_bwd",
                    fn=_pool_bwd_kernel,
                    signature={
                        "g_ptr": f"*{ty}",
                        "rcount_ptr": "*fp32",
                        "dx_ptr": f"*{ty}",
                        "N": "i32",
                        "D": "i32",
                        "window": "i32",
                        "left": "i32",
                        "stride_gb": "i32",
                        "stride_gn": "i32",
                        "stride_gd": "constexpr",
                        "rows_bucket": "i32",
                        "d_bucket": "i32",
                        "BLOCK_N": "constexpr",
                        "BLOCK_D": "constexpr",
                    },
                    constexprs={"stride_gd": 1, "BLOCK_N": bn, "BLOCK_D": bd},
                    num_warps=warps,
                    num_stages=cfg.num_stages,
                    label=f"{ty} any-window {tile}",
                    attrs={(i,): aligned for i in (0, 1, 2, 4, 7, 8)},
                )
            )
    return specs
