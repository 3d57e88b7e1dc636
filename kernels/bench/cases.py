"""The kernel benchmark's cases: shapes, and the parts each op family declares.

A **part** is one comparison the benchmark times: an attnzoo op against what a user would write
instead, with its inputs, its candidates, an optional float64 truth, its cost model and its
targets. Each family declares its parts in `kernels/<family>/bench.py` (a list `PARTS` of `Part`);
`parts()` finds them by importing the `bench` module of every subpackage of attnzoo.kernels that
has one, and orders them by each part's `order`. A new family with a `bench.py` is benchmarked
without a change here. docs/gpu.md has the table of parts and what each is compared with.

Shapes: the training shape of nanoGPT's GPU recipe (`TRAIN`: batch 64, 6 heads, N = 256, head
dim 64, causal) and (batch, heads, N, head dim) grids, causal and bidirectional
(`attention_shapes`); a part times every one whose causality it takes (`Part.modes`), or shapes
of its own made from them (`Part.shapes`, e.g. pooling's x of (batch, N, D)).

`sdpa` is `torch.nn.functional.scaled_dot_product_attention`, pinned to one backend at a time
(`backend_only`). A candidate that cannot run here (fla-core not installed, no GPU, no
bidirectional form) is kept as a row that says why (`Candidate.skip`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # the parts' targets read results and return verdicts
    from .timing import Result
    from .verdicts import Verdict

PACKAGE = __name__.rsplit(".", 2)[0]  # attnzoo.kernels, whose subpackages declare the parts
BACKENDS = ("flash", "cudnn", "efficient")
TORCH_PATH = "torch path"  # the op's own PyTorch path (impl="torch"): what impl="auto" runs instead
VALIDATION_S = 3  # each part's validation's share of a budget, in seconds


@dataclass(frozen=True)
class Shape:
    """One benchmarked shape: (batch, heads, N, head dim) of the attention-like ops; a part with
    shapes of its own (pooling's x) says what it puts in them."""

    name: str
    batch: int
    heads: int
    n: int
    head_dim: int
    causal: bool
    elt: int = 2  # bytes per element (bf16)

    @property
    def width(self) -> int:
        """Model width D = heads x head_dim."""
        return self.heads * self.head_dim


TRAIN = Shape("train", 64, 6, 256, 64, True)


def attention_shapes(
    ns: list[int], modes: list[str], batch: int, heads: int, head_dim: int, train: bool
) -> list[Shape]:
    """The training shape (if `train`), then one shape per N and mode ("causal" or
    "bidirectional"), named N<n>-<mode>."""
    shapes = [TRAIN] if train else []
    for n in ns:
        for mode in modes:
            shapes.append(Shape(f"N{n}-{mode}", batch, heads, n, head_dim, mode == "causal"))
    return shapes


@dataclass
class Candidate:
    name: str  # "attnzoo", "sdpa flash", "torch path", "copy"
    run: Callable[..., torch.Tensor]
    backend: str | None = None  # the SDPA backend it is pinned to
    reference: bool = False  # timed for scale (a copy), not a competitor
    skip: str = ""  # why it cannot run here (then it is reported, never called)


@dataclass(frozen=True)
class Part:
    """One part of the benchmark, declared by its family in kernels/<family>/bench.py.

    The callables take the shape `s` of one case: `inputs(s, device, dtype, seed)` the tensors
    every candidate is called with; `candidates(s, impl, window, backends, device)` the attnzoo
    op first (through the public API, `impl`), then what it is compared with; `cost(s, window)`
    FLOPs of forward and backward and HBM bytes of the forward (`fwd_flop`, `bwd_flop`,
    `fwd_bytes`), or None where the part has no cost model (its rows then carry no rate);
    `truth(s)` a float64 formula (its name, the function) that every candidate is validated
    against, or None to validate the candidates against the attnzoo op; `targets(results,
    n_target)` the part's verdicts, and `closing_targets` those the report lists after every
    part's own (the launch path's host time)."""

    name: str
    order: int  # where the part stands in the benchmark and its report: smaller first
    op: str  # the public op the attnzoo row calls
    share_s: float  # seconds it is expected to take on an H100 at the GPU check's options
    inputs: Callable[..., tuple[torch.Tensor, ...]]
    candidates: Callable[..., list[Candidate]]
    cost: Callable[[Shape, int], dict[str, float] | None] = lambda s, window: None
    truth: Callable[[Shape], tuple[str, Callable[..., torch.Tensor]] | None] = lambda s: None
    targets: Callable[[list[Result], int], list[Verdict]] = lambda results, n_target: []
    closing_targets: Callable[[list[Result], int], list[Verdict]] = lambda results, n: []
    # the op's AUTO_TRITON (kernels/<family>/ops.py) as it is now; None: the op has no Triton
    # kernel, its attnzoo row runs the PyTorch path whatever impl says and decides no path
    auto_triton: Callable[[], bool] | None = None
    modes: tuple[bool, ...] = (False, True)  # the causal values it runs at (False: bidirectional)
    # its own shapes from the attention shapes (and whether to add a large one), where it has them
    shapes: Callable[[list[Shape], bool], list[Shape]] | None = None
    # candidates timed for the targets and the results table that impl="auto" would not run
    # instead of the kernel (a copy, another formulation, fla-core): never a path row's PyTorch side
    not_auto: tuple[str, ...] = ()
    bandwidth: bool = False  # rates in GB/s moved (the cost model's bytes), not TFLOP/s
    family: str = ""  # its package under attnzoo.kernels (set by `parts`)

    def shapes_for(self, shapes: list[Shape], large: bool = False) -> list[Shape]:
        """The shapes the part is timed at: its own, or the attention shapes it takes."""
        if self.shapes is not None:
            return self.shapes(shapes, large)
        return [s for s in shapes if s.causal in self.modes]


@functools.cache
def parts() -> tuple[Part, ...]:
    """Every part of every family under attnzoo.kernels that has a `bench` module, ordered by
    `Part.order` (then name)."""
    package = importlib.import_module(PACKAGE)
    found: dict[str, Part] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if not info.ispkg:
            continue
        family = importlib.import_module(f"{PACKAGE}.{info.name}")
        if "bench" not in {m.name for m in pkgutil.iter_modules(family.__path__)}:
            continue
        for p in importlib.import_module(f"{family.__name__}.bench").PARTS:
            if p.name in found:
                raise ValueError(f"two families declare the part {p.name!r}")
            found[p.name] = replace(p, family=info.name)
    return tuple(sorted(found.values(), key=lambda p: (p.order, p.name)))


def part_names() -> tuple[str, ...]:
    return tuple(p.name for p in parts())


def part(name: str) -> Part:
    for p in parts():
        if p.name == name:
            return p
    raise ValueError(f"unknown part {name!r}; known: {part_names()}")


def step_shares(names: tuple[str, ...] | list[str]) -> dict[str, float]:
    """The shares of the benchmark's steps: each part's validation, then each part's timing."""
    return {
        **{f"validate {p}": VALIDATION_S for p in names},
        **{p: part(p).share_s for p in names},
    }


def part_shapes(name: str, shapes: list[Shape], large: bool = False) -> list[Shape]:
    return part(name).shapes_for(shapes, large)


def make_inputs(
    name: str, s: Shape, device: str, dtype: torch.dtype, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    return part(name).inputs(s, device, dtype, seed)


def candidates(
    name: str,
    s: Shape,
    impl: str,
    window: int,
    backends: tuple[str, ...] = BACKENDS,
    device: str = "cuda",
) -> list[Candidate]:
    """The attnzoo op first, then what it is compared with, on `device`."""
    p = part(name)
    if s.causal not in p.modes:
        takes = "causal" if p.modes == (True,) else "bidirectional"
        raise ValueError(f"part {name!r} is {takes} only, got the shape {s.name!r}")
    return p.candidates(s, impl, window, backends, device)


def cost(name: str, s: Shape, window: int = 3) -> dict[str, float] | None:
    return part(name).cost(s, window)


def truth(name: str, s: Shape) -> tuple[str, Callable[..., torch.Tensor]] | None:
    return part(name).truth(s)


# ------------------------------------------------------------------------------------ helpers


def seeded(seed: int) -> torch.Generator:
    """The CPU generator a part draws its inputs from (the same tensors on every device)."""
    return torch.Generator(device="cpu").manual_seed(seed)


def randn_leaf(
    gen: torch.Generator, device: str, dtype: torch.dtype, *shape: int, scale: float = 1.0
) -> torch.Tensor:
    """A standard normal tensor (times `scale`) on `device` in `dtype`, requiring grad."""
    t = torch.randn(*shape, generator=gen) * scale
    return t.to(device=device, dtype=dtype).requires_grad_(True)


def heads_first(t_bnh_: torch.Tensor) -> torch.Tensor:
    """(B, N, H, ...) -> (B, H, N, ...), a view."""
    return t_bnh_.transpose(1, 2)


def skipped(*inputs):
    raise NotImplementedError("a skipped candidate is never called")


def fla_function(
    module: str, name: str
) -> tuple[Callable[..., tuple] | None, dict[str, bool], str]:
    """flash-linear-attention's function `name` of `module`, with the keywords that make it take
    (B, N, H, ...) tensors, or None and why it is not there."""
    try:
        fn = getattr(importlib.import_module(module), name)
    except Exception as err:  # noqa: BLE001 - absent, or present and broken: either way a skip
        return None, {}, f"fla-core is not importable ({type(err).__name__}: {str(err)[:80]})"
    keywords = {}
    if "head_first" in inspect.signature(fn).parameters:
        keywords["head_first"] = False  # older releases: (B, H, N, ...) unless told otherwise
    return fn, keywords, ""


def fla_here(found: Callable | None, why: str, device: str, backends: tuple[str, ...]):
    """fla-core's function and why not, where a GPU runs it: on CPU (--smoke: SDPA pinned to
    "math") its Triton kernels cannot run, so the row is a skip that says so."""
    if found is not None and (device != "cuda" or backends == ("math",)):
        return None, "flash-linear-attention's kernels need a GPU"
    return found, why


@contextlib.contextmanager
def backend_only(name: str | None) -> Iterator[None]:
    """Pin SDPA to one backend (nothing to pin for None)."""
    if name is None:
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kind = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,  # --smoke on CPU, where the fused backends refuse
    }[name]
    with sdpa_kernel([kind]):
        yield
