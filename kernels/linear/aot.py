"""Ahead-of-time compile specs of the linear_attention kernels, for scripts/kernel_report.py."""

from __future__ import annotations

import torch

from .._aot import AotSpec
from ._jit import _linear_bwd_dkdv_kernel, _linear_bwd_dq_kernel, _linear_fwd_kernel
from .tuning import GPU_CONFIGS, dot_precision, kept_configs

_TL_TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
WIDTHS = (16, 32, 64, 128)
_CONSTEXPRS = (
    "CAUSAL",
    "HAS_MASK",
    "DOT_PREC",
    "BF",
    "BV",
    "BT",
)  # BF = BV: every padded width the launcher can pick


def _strides(prefix: str, dims: str) -> dict[str, str]:
    """The strides of one tensor: the last (feature) stride the constant 1, as Triton
    specialises it at launch for a tensor with contiguous features."""
    out = {f"stride_{prefix}{d}": "i32" for d in dims[:-1]}
    out[f"stride_{prefix}{dims[-1]}"] = "constexpr"
    return out


def _signature(names: list[str], ty: str) -> dict[str, str]:
    """Argument -> type: pointers of the inputs' dtype, the mask bytes, fp32 den, int sizes."""
    sig: dict[str, str] = {}
    for name in names:
        if name == "pad_ptr":
            sig[name] = "*u8"
        elif name == "den_ptr":
            sig[name] = "*fp32"
        elif name.endswith("_ptr"):
            sig[name] = f"*{ty}"
        elif name == "eps":
            sig[name] = "fp32"
        elif name.startswith("stride_"):
            sig[name] = "i32"
        elif name in _CONSTEXPRS:
            sig[name] = "constexpr"
        else:
            sig[name] = "i32"
    return sig


def _aligned(name: str, signature: dict[str, str]) -> bool:
    """Pointers (not the mask's bytes), F, dv and the batch/head/token strides of the
    (B, H, N, ·) tensors: multiples of 16 for fresh tensors of a usual width."""
    if signature[name] == "constexpr" or name in ("pad_ptr", "stride_pb", "stride_pn"):
        return False
    return name.endswith("_ptr") or name in ("F", "DV") or name.startswith("stride_")


def _kernel_args(fn) -> list[str]:
    return list(fn.arg_names)


_KERNELS = (
    ("linear_fwd", _linear_fwd_kernel),
    ("linear_bwd_dq", _linear_bwd_dq_kernel),
    ("linear_bwd_dkdv", _linear_bwd_dkdv_kernel),
)


def aot_specs() -> list[AotSpec]:
    """Every kernel x dtype x width x config the launchers can pick, for scripts/kernel_report.py.

    Each (kernel, dtype, width) compiles causal with a padding mask at every kept config, and
    non-causal without a mask at the first: the switches add or remove whole loops, not code in
    them. The specs assume contiguous features (unit last stride), 16-byte aligned pointers and
    strides and widths that are multiples of 16, as a launch on fresh (B, H, N, 64) tensors has.
    """
    aligned = [["tt.divisibility", 16]]
    specs: list[AotSpec] = []
    for dtype, ty in _TL_TYPES.items():
        for w in WIDTHS:
            for name, fn in _KERNELS:
                names = _kernel_args(fn)
                signature = _signature(names, ty)
                unit = {n: 1 for n in names if n.startswith("stride_") and n[-1] in "fd"}
                for n in unit:
                    signature[n] = "constexpr"
                configs = kept_configs(GPU_CONFIGS, w, w, dtype == torch.float32)
                for i, cfg in enumerate(configs):
                    for causal, mask in ((True, True), (False, False)):
                        if i > 0 and not causal:
                            continue
                        constexprs = {
                            **unit,
                            "CAUSAL": causal,
                            "HAS_MASK": mask,
                            "DOT_PREC": dot_precision(dtype),
                            "BF": w,
                            "BV": w,
                            "BT": cfg.kwargs["BT"],
                        }
                        # pointers, and the sizes and strides that are multiples of 16
                        hinted = [j for j, n in enumerate(names) if _aligned(n, signature)]
                        switches = "causal mask" if causal else "bidirectional"
                        specs.append(
                            AotSpec(
                                name=name,
                                fn=fn,
                                signature=signature,
                                constexprs=constexprs,
                                num_warps=cfg.num_warps,
                                num_stages=cfg.num_stages,
                                label=(
                                    f"{ty} {switches} F=dv={w} BT={cfg.kwargs['BT']} "
                                    f"w{cfg.num_warps} s{cfg.num_stages}"
                                ),
                                attrs={(j,): aligned for j in hinted},
                            )
                        )
    return specs
