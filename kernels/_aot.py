"""What a kernel module declares for ahead-of-time compilation checks (scripts/kernel_report.py).

Each Triton module in attnzoo.kernels defines `aot_specs() -> list[AotSpec]`: one spec per kernel
and per configuration its launcher can pick, so the report compiles exactly what can run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class AotSpec:
    name: str  # kernel name as shown in the report, e.g. "attn_fwd"
    fn: Any  # the @triton.jit function
    signature: dict[str, str]  # argument -> triton type ("*fp16", "i32", "fp32", "constexpr")
    constexprs: dict[str, Any]  # constexpr argument -> value
    num_warps: int = 4
    num_stages: int = 2
    label: str = ""  # the configuration in words, e.g. "fp16 causal BLOCK_M=64 BLOCK_N=64 D=64"
    attrs: dict[Any, Any] = field(default_factory=dict)  # ASTSource attrs (e.g. divisibility)
