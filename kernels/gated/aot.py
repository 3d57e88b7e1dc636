"""Ahead-of-time compile specs of the gated_linear_attention kernels, for scripts/kernel_report.py."""

from __future__ import annotations

import torch

from .._aot import AotSpec
from ._jit import BT, _gla_bwd_dq_kernel, _gla_fwd_kernel
from ._jit_dkdv import _gla_bwd_dk_kernel, _gla_bwd_dv_kernel
from .launch import dot_precision, key_tile, num_warps, value_tile

_TL_TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
WIDTHS = (16, 32, 64, 128)
_FP32 = ("g_ptr", "h0_ptr", "ht_ptr", "dht_ptr", "dh0_ptr", "ds_ptr")  # decays and states
_KERNELS = (
    ("gla_fwd", _gla_fwd_kernel, "HAS_H0"),
    ("gla_bwd_dq", _gla_bwd_dq_kernel, "HAS_H0"),
    ("gla_bwd_dk", _gla_bwd_dk_kernel, "HAS_DHT"),
    ("gla_bwd_dv", _gla_bwd_dv_kernel, "HAS_DHT"),
)


def _signature(names: list[str], ty: str, parts: bool) -> dict[str, str]:
    """Pointers of the inputs' dtype (fp32 for the decay and the states, and for dq and dk when
    they are parts of V tiles), fp32 scale, int sizes and strides; the feature strides of q, k,
    v and the upstream gradient the constant 1 (as Triton specialises a unit stride at launch).
    The decay's key stride stays an argument: a decay per token is a zero-stride view."""
    sig: dict[str, str] = {}
    for name in names:
        if name in _FP32 or (parts and name in ("dq_ptr", "dk_ptr")):
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


def spec(name: str, fn, switch: str, dtype: torch.dtype, w: int, bv: int) -> AotSpec:
    """One kernel at K = V = w with V tiles of bv columns (bv < w: dq and dk as fp32 parts)."""
    ty = _TL_TYPES[dtype]
    names = list(fn.arg_names)
    signature = _signature(names, ty, parts=bv < w)
    constexprs = {
        **{n: 1 for n in ("stride_qk", "stride_kk", "stride_vd", "stride_od") if n in names},
        switch: True,
        "DOT_PREC": dot_precision(dtype),
        "BK": w,
        "BV": bv,
        "BT": BT,
        **({"BKA": key_tile(w)} if "BKA" in names else {}),
    }
    hinted = [
        j
        for j, n in enumerate(names)
        if signature[n] != "constexpr" and (n.endswith("_ptr") or n in ("K", "V"))
    ]
    warps = num_warps(dtype, w, w)
    return AotSpec(
        name=name,
        fn=fn,
        signature=signature,
        constexprs=constexprs,
        num_warps=warps,
        num_stages=1,
        label=f"{ty} K=V={w} BV={bv} BT={BT}"
        + (f" BKA={key_tile(w)}" if "BKA" in names else "")
        + f" w{warps} s1",
        attrs={(j,): [["tt.divisibility", 16]] for j in hinted},
    )


def aot_specs() -> list[AotSpec]:
    """Every kernel x dtype x width the launcher can pick (K = V = width, the V tile it picks
    for that width), with the state switch on (the switch adds a load, not a loop): the
    launcher's one config per width."""
    return [
        spec(name, fn, switch, dtype, w, value_tile(dtype, w, w))
        for dtype in _TL_TYPES
        for w in WIDTHS
        for name, fn, switch in _KERNELS
    ]
