"""Ahead-of-time compile specs of the gated_linear_attention kernels, for scripts/kernel_report.py."""

from __future__ import annotations

import torch

from .._aot import AotSpec
from ._jit import BT, _gla_bwd_dkdv_kernel, _gla_bwd_dq_kernel, _gla_fwd_kernel
from .launch import dot_precision, num_warps

_TL_TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
WIDTHS = (16, 32, 64, 128)
_FP32 = ("g_ptr", "h0_ptr", "ht_ptr", "dht_ptr", "dg_ptr", "dh0_ptr")  # decays and states
_KERNELS = (
    ("gla_fwd", _gla_fwd_kernel, "HAS_H0"),
    ("gla_bwd_dq", _gla_bwd_dq_kernel, "HAS_H0"),
    ("gla_bwd_dkdv", _gla_bwd_dkdv_kernel, "HAS_DHT"),
)


def _signature(names: list[str], ty: str) -> dict[str, str]:
    """Pointers of the inputs' dtype (fp32 for the decay and the states), fp32 scale, int sizes
    and strides; the feature strides of q, k, v and the upstream gradient the constant 1 (as
    Triton specialises a unit stride at launch). The decay's key stride stays an argument: a
    decay per token is a zero-stride view."""
    sig: dict[str, str] = {}
    for name in names:
        if name in _FP32:
            sig[name] = "*fp32"
        elif name.endswith("_ptr"):
            sig[name] = f"*{ty}"
        elif name == "scale":
            sig[name] = "fp32"
        elif name in ("stride_qk", "stride_kk", "stride_vd", "stride_od") or name.isupper():
            sig[name] = "constexpr" if name not in ("H", "N", "K", "V") else "i32"
        else:
            sig[name] = "i32"
    return sig


def aot_specs() -> list[AotSpec]:
    """Every kernel x dtype x width the launcher can pick (K = V = width), with the state
    switch on (the switch adds a load, not a loop): the launcher's one config per width."""
    specs: list[AotSpec] = []
    for dtype, ty in _TL_TYPES.items():
        for w in WIDTHS:
            for name, fn, switch in _KERNELS:
                names = list(fn.arg_names)
                signature = _signature(names, ty)
                constexprs = {
                    **{
                        n: 1
                        for n in ("stride_qk", "stride_kk", "stride_vd", "stride_od")
                        if n in names
                    },
                    switch: True,
                    "DOT_PREC": dot_precision(dtype),
                    "BK": w,
                    "BV": w,
                    "BT": BT,
                }
                hinted = [
                    j for j, n in enumerate(names)
                    if signature[n] != "constexpr" and (n.endswith("_ptr") or n in ("K", "V"))
                ]  # fmt: skip
                warps = num_warps(w, w)
                specs.append(
                    AotSpec(
                        name=name,
                        fn=fn,
                        signature=signature,
                        constexprs=constexprs,
                        num_warps=warps,
                        num_stages=1,
                        label=f"{ty} K=V={w} BT={BT} w{warps} s1",
                        attrs={(j,): [["tt.divisibility", 16]] for j in hinted},
                    )
                )
    return specs
