"""What every op of attnzoo.kernels shares, naming none of them: the `torch.library` namespace
and its registration helpers, the dtype policy, and the choice of implementation.

Each family's `ops.py` (kernels/<family>/ops.py) registers its ops as custom ops in the
`attnzoo` namespace (`torch.ops.attnzoo.*`) with a schema, a fake (meta) implementation, its
autograd formula and an autocast rule (`register_autocast` here), and defines the public
function that checks the arguments once and picks the implementation (`use_triton`).

**Dtype policy** (one rule for every op and every implementation): an op computes in its
*activations'* dtype — the autocast dtype under `torch.autocast` on the inputs' device (fp16,
bf16 and fp32 inputs are cast to it, as autocast casts a matmul's), otherwise the dtype of the
first activation (q, x or p), which the other activations must share. Parameters (U, M) are
cast to it. Scores, softmax statistics and every product accumulate in fp32 (fp64 for fp64
inputs), and the output has the activations' dtype. The op body then runs with autocast off,
so nothing inside it is cast again.

**impl**, every op's last argument:
- "torch": the PyTorch path (any device, any float dtype): the naive reference of the family
  (`naive.py`), or a fused PyTorch formulation of it where one exists (SDPA);
- "triton": the Triton kernels, through the custom op (CUDA tensors, or any tensor under
  TRITON_INTERPRET=1);
- "auto": PyTorch on CPU; on CUDA the path last measured faster for that op, a one-line
  choice (`AUTO_TRITON`) in the family's ops.py with the card and date beside it
  (`scripts/gpu_check.py` measures it; docs/gpu.md has the figures).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
from types import ModuleType

import torch
from torch import Tensor

from ._checks import TRITON_DTYPES, check_scale, check_triton

NAMESPACE = "attnzoo"
IMPLS = ("auto", "torch", "triton")
AUTOCAST_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

lib = torch.library.Library(NAMESPACE, "FRAGMENT")


def compute_dtype(activation: Tensor) -> torch.dtype:
    """The dtype every op computes and returns in: under autocast on the activation's device the
    autocast dtype, otherwise the activation's own (fp64 is never cast, as autocast does)."""
    device = activation.device.type
    if (
        device in ("cpu", "cuda")
        and activation.dtype in AUTOCAST_DTYPES
        and torch.is_autocast_enabled(device)
    ):
        return torch.get_autocast_dtype(device)
    return activation.dtype


def cast_floats(args: tuple, dtype: torch.dtype) -> tuple:
    """Every fp16/bf16/fp32 tensor in `args` in `dtype`; other arguments as they are."""
    return tuple(
        a.to(dtype) if isinstance(a, Tensor) and a.dtype in AUTOCAST_DTYPES else a for a in args
    )


def accumulate_dtype(t: Tensor) -> torch.dtype:
    """What products and statistics accumulate in: fp64 for fp64 inputs, else fp32."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def apply_dtype_policy(
    activations: tuple[Tensor, ...], parameters: tuple[Tensor, ...] = ()
) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """The module docstring's dtype policy; mismatches it does not resolve are left for
    `check_same` to report."""
    first = activations[0]
    if not isinstance(first, Tensor) or not first.is_floating_point():
        return activations, parameters
    dtype = compute_dtype(first)
    if dtype != first.dtype:  # autocast: every activation goes to its dtype
        activations = cast_floats(activations, dtype)
    parameters = tuple(
        t.to(dtype) if isinstance(t, Tensor) and t.is_floating_point() else t for t in parameters
    )
    return activations, parameters


def autocast_off(t: Tensor) -> contextlib.AbstractContextManager:
    """Autocast off for t's device while the block runs (an op body, whose inputs already have
    the policy's dtype; a mixer's part that must run in fp32); nothing where it is not on."""
    device = t.device.type
    if device in ("cpu", "cuda") and torch.is_autocast_enabled(device):
        return torch.autocast(device, enabled=False)
    return contextlib.nullcontext()


def default_scale(scale: float | None, features: int) -> float:
    """The score scale: 1/sqrt(features) by default, else `scale` checked."""
    return 1.0 / math.sqrt(features) if scale is None else check_scale(scale)


def dropout_seed(t: Tensor, dropout_p: float) -> Tensor | None:
    """The Philox key of one call's dropout mask, drawn on t's device from torch's generator
    (so `torch.manual_seed` makes dropout reproducible, with no host round trip)."""
    if dropout_p == 0.0:
        return None
    return torch.randint(0, 2**62, (1,), dtype=torch.int64, device=t.device)


def use_triton(impl: str, name: str, t: Tensor, auto_triton: bool) -> bool:
    """Whether a call runs the Triton kernel: impl="triton" (checked: `t`, the first activation
    called `name`, must be something the kernels take), or impl="auto" on CUDA where the op's
    `auto_triton` says the kernel was measured faster there."""
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not one of {IMPLS}")
    if impl == "triton":
        check_triton(name, t)
        return True
    return impl == "auto" and auto_triton and t.is_cuda and t.dtype in TRITON_DTYPES


@functools.cache
def triton_part(module: str) -> ModuleType:
    """A family's Triton module (e.g. "attnzoo.kernels.pooling.launch"), imported on first use:
    triton is optional off Linux and slow to import."""
    try:
        return importlib.import_module(module)
    except ImportError as err:  # pragma: no cover - depends on the platform
        raise NotImplementedError(
            f"impl='triton' needs triton and {module}, which failed to import: {err}"
        ) from err


def lazy_getattr(package: str, attributes: dict[str, str]):
    """A package's module `__getattr__` that imports `attributes[name]` (a module of the package,
    e.g. its Triton launcher) on first access of `name`: a family's package imports without
    triton, and its kernels load when something asks for them."""

    def __getattr__(name: str):
        if name not in attributes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{attributes[name]}"), name)

    return __getattr__


def rows_like(t: Tensor, b: int, n: int) -> Tensor:
    """A (b, n) fp32 per-row statistic (lse, rcount, den), as the kernels allocate it."""
    return t.new_empty((b, n), dtype=torch.float32)


def contiguous_like(t: Tensor) -> Tensor:
    """What the kernels allocate for an output shaped like `t`: contiguous, whatever t's strides."""
    return t.new_empty(t.shape)


def no_gradient_for(ctx, statistic: Tensor) -> None:
    """A forward's second output (lse, rcount, den) is a statistic for the backward, not a
    function to differentiate: it gets no gradient, and the backward is handed None for it (by
    default autograd would allocate and zero-fill a tensor of its shape on every backward)."""
    ctx.mark_non_differentiable(statistic)
    ctx.set_materialize_grads(False)


def register_autocast(name: str, n_cast: int | None = None) -> None:
    """The autocast rule of op `name` on CPU and CUDA: the dtype policy for a call of
    `torch.ops.attnzoo.<name>` made under autocast (the public functions cast before they call
    it). `n_cast`: only the first n_cast arguments are activations to cast (the others keep
    their dtype), default all of them.

    `torch.library.register_autocast` casts to one fixed dtype; the policy casts to the
    autocast dtype of the moment (fp16 or bf16), so the rule is a kernel on the Autocast keys
    that casts, then redispatches below them."""
    op = getattr(torch.ops.attnzoo, name).default
    for device_type in ("cpu", "cuda"):
        key = "Autocast" + torch._C._dispatch_key_for_device(device_type)
        excluded = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

        def autocast_kernel(keyset, *args, excluded=excluded):
            first = next(a for a in args if isinstance(a, Tensor))
            dtype = compute_dtype(first)
            cast = args if n_cast is None else args[:n_cast]
            with torch._C._ExcludeDispatchKeyGuard(excluded):
                return op(*cast_floats(cast, dtype), *args[len(cast) :])

        lib.impl(name, autocast_kernel, key, with_keyset=True)
