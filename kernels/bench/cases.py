"""The kernel benchmark's cases: shapes, the cost model, and what each op is compared with.

Each op runs through the public API (`impl="triton"`) and is compared with what a user would
write instead:

| part | attnzoo op | what a user would write instead |
|---|---|---|
| scaled_dot | `scaled_dot_attention(q, k, v)` | `sdpa(q, k, v)` |
| metric | `metric_attention(p, M)` | `sdpa(p @ M, p, p)` |
| quadratic | `quadratic_attention(x, U, v)` | `sdpa(x @ U[h], x, v)`, x expanded over the heads |
| pool | `pool_mix(x, window)` (centred) | `avg_pool1d(x, window, count_include_pad=False) - x` |
| linear | `linear_attention(q, k, v)` | its PyTorch path (`impl="torch"`, chunked einsums); causal: the cumsum/einsum formulation, and flash-linear-attention's `chunk_linear_attn` where `fla-core` is importable |
| local | `scaled_dot_attention(q, k, v, window=w)` | `sdpa(q, k, v, attn_mask=band)`, the banded boolean mask (also the PyTorch path of a windowed call) |
| gated | `gated_linear_attention(q, k, v, g)`, g (B, H, N): a log decay per head (RetNet, Mamba-2) | its PyTorch path (`impl="torch"`, chunked); flash-linear-attention's `chunk_simple_gla` where `fla-core` is importable |
| gated_key | `gated_linear_attention(q, k, v, g)`, g (B, H, N, K): a log decay per key dimension (GLA) | its PyTorch path (`impl="torch"`, chunked); flash-linear-attention's `chunk_gla` where `fla-core` is importable |
| sigmoid | `sigmoid_attention(q, k, v, bias=-log N)` | its PyTorch path (`impl="torch"`, the reference: σ of the N x N scores, times v) |
| delta | `delta_rule(q, k, v, beta)` (DeltaNet), attnzoo's chunked PyTorch path: it has no kernel | flash-linear-attention's `chunk_delta_rule` (`impl="fla"`) where `fla-core` is importable |
| delta_gated | `delta_rule(q, k, v, beta, log_decay)` (Gated DeltaNet), the same path | flash-linear-attention's `chunk_gated_delta_rule` (`impl="fla"`) |

`sdpa` is `torch.nn.functional.scaled_dot_product_attention`, pinned to one backend at a time
(`backend_only`). Shapes: the training shape of nanoGPT's GPU recipe (`TRAIN`: batch 64, 6 heads,
N = 256, head dim 64, causal) and (batch, heads, N, head dim) grids, causal and bidirectional;
quadratic's width is D = heads x head dim. pool_mix runs on x of (batch, N, D) of the same shapes,
centred (`avg_pool1d` has no causal window that leaves padding uncounted), plus one large x
(`POOL_LARGE`) for its bandwidth, against a copy of x as the bandwidth reference. linear takes
non-negative features (elu + 1) of width F = head dim, laid out (batch, N, heads, F) as a
mixer's projection gives them (the attnzoo op and PyTorch read them through strides, fla-core
takes that layout as it is). local's window reaches `local_reach(shape)` keys back (and forward,
bidirectional): min(128, N / 4). gated and gated_key take q, k, v and the log decay g in that
layout too, g drawn as the mixers' gates give it (`gated.naive.sample_log_decay`: about
(-2.5, 0)) and kept in fp32, as the op computes it; every candidate runs at the op's default
scale 1/sqrt(K), fla-core's included. The recurrence is causal, so they are timed at the causal
shapes only (`CAUSAL_ONLY`). sigmoid's bias is -log N, the sigmoid mixer's default. delta and
delta_gated take q, k (L2-normalised, as the deltanet mixer gives them), v in (B, H, N, ·), beta
= σ(randn) and a log decay drawn as gated's, (B, H, N), both fp32; causal only as well. attnzoo
has no Triton kernel of the delta rule (`NO_KERNEL`): its "attnzoo" row is the chunked PyTorch
path whatever `impl` says, timed against fla-core's kernels (through `impl="fla"`, which adds a
transpose to (B, N, H, ·) and back), and the parts write no dispatch row.

Candidates that are not what `impl="auto"` runs instead of the kernel (`ALTERNATIVES`: the cumsum
formulation, fla-core) are timed for the verdicts and the results table but never decide the
dispatch table; a candidate that cannot run here (fla-core not installed, no GPU, no
bidirectional form) is kept as a row that says why (`Candidate.skip`). gated and gated_key both
measure gated_linear_attention, whose dispatch key does not tell the decay forms apart (see
`verdicts.dispatch_rows`). The validation checks every candidate of gated, gated_key and sigmoid
against a float64 formula (`truth`: the recurrence one token at a time, the sigmoid reference),
the delta parts against the recurrence too, and those of the other parts against the attnzoo
op.

The cost model: FLOPs by `attnzoo.kernels.flops.op_flops` (matmuls only, 2 per multiply-add,
causal halves the N x N terms, the attention backward 2.5x its forward; sigmoid's are scaled_dot's);
the byte model counts one read of each input and one write of each output (compulsory traffic)
plus the key/value tiles streamed once per `BLOCK_M`-query tile. op_flops has no formula for the
gated recurrence or the delta rule, so those parts have no cost (`NO_COST`) and their rows no
rate.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import attention, delta, gated, linear, pooling
from ..attention import naive as attention_naive
from ..delta import naive as delta_naive
from ..flops import ATTENTION_OPS, op_flops
from ..gated import naive as gated_naive

BLOCK_M = 128  # query tile of the byte model
PARTS = (
    "scaled_dot",
    "metric",
    "quadratic",
    "pool",
    "linear",
    "local",
    "gated",
    "gated_key",
    "sigmoid",
    "delta",
    "delta_gated",
)
# the recurrences run forwards in time: causal shapes only
CAUSAL_ONLY = ("gated", "gated_key", "delta", "delta_gated")
NO_KERNEL = ("delta", "delta_gated")  # attnzoo's path is PyTorch (chunked) whatever impl says
DISPATCH_PARTS = tuple(p for p in PARTS if p not in NO_KERNEL)  # what the GPU check times
BACKENDS = ("flash", "cudnn", "efficient")
# Each part's share of a budget (`--budget`), in the seconds it is expected to take on an H100 at
# the GPU check's options (training shape, N = 1k/4k, 10 reps): mostly compiling and autotuning
# each kernel variant (estimated, not yet measured), and the same for its validation's fp32
# variants at the tiny shape.
PART_S = {
    "scaled_dot": 20,
    "metric": 18,
    "quadratic": 22,
    "pool": 6,
    "linear": 18,
    "local": 16,
    "gated": 14,
    "gated_key": 14,
    "sigmoid": 14,
    "delta": 10,
    "delta_gated": 10,
}
VALIDATION_S = 3


def step_shares(parts: tuple[str, ...] | list[str]) -> dict[str, float]:
    """The shares of the benchmark's steps: each part's validation, then each part's timing."""
    return {**{f"validate {p}": VALIDATION_S for p in parts}, **{p: PART_S[p] for p in parts}}


LOCAL_WINDOW = 128  # local's reach at long N: keys each side of the query (min(128, N / 4))
LINEAR_EPS = 1e-6  # linear_attention's default
FLA = "fla chunk_linear_attn"
FLA_SIMPLE_GLA = "fla chunk_simple_gla"  # a log decay per head (gated)
FLA_GLA = "fla chunk_gla"  # a log decay per key dimension (gated_key)
FLA_DELTA = "fla chunk_delta_rule"  # delta
FLA_GATED_DELTA = "fla chunk_gated_delta_rule"  # delta_gated
CUMSUM = "cumsum/einsum"
# timed against, but not what impl="auto" runs instead
ALTERNATIVES = (CUMSUM, FLA, FLA_SIMPLE_GLA, FLA_GLA, FLA_DELTA, FLA_GATED_DELTA)
TORCH_PATH = "torch path"  # the op's own PyTorch path (impl="torch"): what impl="auto" runs instead
POOL_LARGE = (8, 8192, 1024)  # (batch, tokens, D): ~134 MB per bf16 tensor, well beyond L2


@dataclass(frozen=True)
class Shape:
    """One benchmarked shape: (batch, heads, N, head dim) of the attention ops; for pool_mix,
    heads 1 and head_dim the width D of x."""

    name: str
    batch: int
    heads: int
    n: int
    head_dim: int
    causal: bool
    elt: int = 2  # bytes per element (bf16)

    @property
    def width(self) -> int:
        """Model width D = heads x head_dim: quadratic's q/k width and pool_mix's features."""
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


def pool_shapes(shapes: list[Shape], large: bool) -> list[Shape]:
    """x of (batch, N, heads x head_dim) per attention shape, once each, centred; plus the large x."""
    seen, out = set(), []
    for s in shapes:
        if (s.batch, s.n, s.width) not in seen:
            seen.add((s.batch, s.n, s.width))
            out.append(Shape(f"{s.name.split('-')[0]}-pool", s.batch, 1, s.n, s.width, False))
    if large:
        b, n, d = POOL_LARGE
        out.append(Shape("large-pool", b, 1, n, d, False))
    return out


def part_shapes(part: str, shapes: list[Shape], pools: list[Shape]) -> list[Shape]:
    """The shapes a part is timed at: pool's x shapes for pool, the causal attention shapes for
    the causal-only parts (`CAUSAL_ONLY`), every attention shape for the others."""
    if part == "pool":
        return pools
    if part in CAUSAL_ONLY:
        return [s for s in shapes if s.causal]
    return shapes


# ------------------------------------------------------------------------------------ cost model

# attnzoo.kernels.flops has no formula for the gated recurrence or the delta rule
NO_COST = ("gated", "gated_key", "delta", "delta_gated")


def cost(op: str, s: Shape, window: int = 3) -> dict[str, float] | None:
    """FLOPs of forward and backward (attnzoo.kernels.flops.op_flops; pool_mix: its additions)
    and HBM bytes of the forward, by the byte model in the module docstring; None for the parts
    the model does not cover (`NO_COST`), whose rows then carry no rate."""
    if op in NO_COST:
        return None
    bh, n, d, e = s.batch * s.heads, s.n, s.head_dim, s.elt
    tiles = -(-n // BLOCK_M)
    if op in (*ATTENTION_OPS, "linear"):
        fwd = op_flops(op, s.batch, s.heads, n, d, s.causal)
        bwd = op_flops(op, s.batch, s.heads, n, d, s.causal, backward=True)
    if op == "local":  # the scores inside the window only, as the kernels skip the rest
        keys = min(n, local_reach(s) * (1 if s.causal else 2) + 1)
        fwd = 2 * bh * n * keys * 2 * d
        bwd = 2.5 * fwd
        compulsory = e * bh * n * (3 * d + d) + 4 * bh * n
        streamed = e * bh * tiles * min(n, keys + BLOCK_M) * (2 * d)  # the window's k, v tiles
    elif op == "linear":  # q, k, v in, out out, the normaliser (fp32) out; no tile re-reads
        compulsory, streamed = e * bh * n * 4 * d + 4 * bh * n, 0
    elif op == "scaled_dot":
        compulsory = e * bh * n * (3 * d + d) + 4 * bh * n  # q, k, v in; out, lse out
        streamed = e * bh * tiles * n * (2 * d)  # k and v tiles per query tile
    elif op == "sigmoid":  # scaled_dot's traffic without the lse (no row statistics)
        compulsory = e * bh * n * (3 * d + d)
        streamed = e * bh * tiles * n * (2 * d)
    elif op == "quadratic":
        big_d = s.width
        compulsory = e * (s.batch * n * big_d + s.heads * big_d**2)  # x and U
        compulsory += e * bh * n * (2 * big_d + 2 * d) + 4 * bh * n  # q out + in, v in, o out
        streamed = e * bh * tiles * n * (big_d + d)  # x (as k) and v tiles per query tile
    elif op == "metric":
        compulsory = e * (bh * n * 2 * d + s.heads * d * d) + 4 * bh * n  # p and M in; out, lse
        streamed = e * bh * tiles * n * d  # one p tile serves as key and value
    elif op == "pool":  # s.head_dim is the width D here, heads 1
        elems = s.batch * n * d
        fwd = bwd = elems * window  # additions: not what bounds it
        compulsory, streamed = 2 * e * elems, 0  # x in, out out (the backward: g in, dx out)
    else:
        raise ValueError(f"unknown op {op!r}; known: {PARTS}")
    return {"fwd_flop": fwd, "bwd_flop": bwd, "fwd_bytes": compulsory + streamed}


# ------------------------------------------------------------------------------------ the comparisons

# What a user would write instead of each op. Module-level functions, so that the validation
# checks exactly what the timing runs.


def sdpa_scaled_dot(q, k, v, causal: bool):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def sdpa_metric(p, m, causal: bool):
    """`sdpa(p @ M, p, p)`: p (B, H, N, dk), M (H, dk, dk); scale 1/sqrt(dk) as the op's."""
    return F.scaled_dot_product_attention(p @ m, p, p, is_causal=causal)


def sdpa_quadratic(x, u, v, causal: bool):
    """`sdpa(x @ U[h], x, v)`: x (B, N, D) as the key of every head; scale 1/sqrt(D) as the op's."""
    x_b1nd = x[:, None]
    return F.scaled_dot_product_attention(
        x_b1nd @ u, x_b1nd.expand(-1, u.shape[0], -1, -1), v, is_causal=causal
    )


def avg_pool_mix(x, window: int):
    """`avg_pool1d(x) - x` over the tokens of x (B, N, D), padding not counted: centred pool_mix."""
    pooled = F.avg_pool1d(x.mT, window, 1, window // 2, count_include_pad=False)
    return pooled.mT - x


def local_reach(s: Shape) -> int:
    """How many keys back (and forward, bidirectional) local's window reaches at shape s."""
    return max(1, min(LOCAL_WINDOW, s.n // 4))


def local_window(s: Shape) -> tuple[int, int]:
    """The `window=(left, right)` of scaled_dot_attention for local at shape s."""
    reach = local_reach(s)
    return (reach, 0 if s.causal else reach)


def sdpa_band(q, k, v, window: tuple[int, int]):
    """`sdpa(q, k, v, attn_mask=band)`: query i sees keys i - left ..= i + right."""
    n = q.shape[-2]
    i = torch.arange(n, device=q.device)
    offset_nn = i[None, :] - i[:, None]  # key - query
    band_nn = (offset_nn >= -window[0]) & (offset_nn <= window[1])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=band_nn)


def heads_first(t_bnh_: torch.Tensor) -> torch.Tensor:
    """(B, N, H, ...) -> (B, H, N, ...), a view."""
    return t_bnh_.transpose(1, 2)


def cumsum_linear(q_bnhf, k_bnhf, v_bnhv):
    """Causal normalised linear attention as one would write it: the running state as a cumsum
    of the outer products k vᵀ, then einsums: -> (B, H, N, dv)."""
    s_bnhfv = torch.einsum("bnhf,bnhv->bnhfv", k_bnhf, v_bnhv).cumsum(dim=1)
    num_bnhv = torch.einsum("bnhf,bnhfv->bnhv", q_bnhf, s_bnhfv)
    den_bnh = torch.einsum("bnhf,bnhf->bnh", q_bnhf, k_bnhf.cumsum(dim=1))
    return heads_first(num_bnhv / (den_bnh[..., None] + LINEAR_EPS))


def _fla(module: str, name: str) -> tuple[Callable[..., tuple] | None, dict[str, bool], str]:
    """flash-linear-attention's op `name` of `module`, with the keywords that make it take
    (B, N, H, ...) tensors, or None and why it is not there."""
    try:
        op = getattr(importlib.import_module(module), name)
    except Exception as err:  # noqa: BLE001 - absent, or present and broken: either way a skip
        return None, {}, f"fla-core is not importable ({type(err).__name__}: {str(err)[:80]})"
    keywords = {}
    if "head_first" in inspect.signature(op).parameters:
        keywords["head_first"] = False  # older releases: (B, H, N, ...) unless told otherwise
    return op, keywords, ""


def fla_linear() -> tuple[Callable[..., torch.Tensor] | None, str]:
    """flash-linear-attention's chunked linear attention, or None and why it is not there."""
    chunk_linear_attn, keywords, why = _fla("fla.ops.linear_attn", "chunk_linear_attn")
    if chunk_linear_attn is None:
        return None, why
    keywords = {"scale": 1.0, "normalize": True, **keywords}

    def run(q_bnhf, k_bnhf, v_bnhv):
        return heads_first(chunk_linear_attn(q_bnhf, k_bnhf, v_bnhv, **keywords)[0])

    return run, ""


def fla_gated(per_key: bool) -> tuple[Callable[..., torch.Tensor] | None, str]:
    """flash-linear-attention's chunked gated linear attention on (B, N, H, ...) tensors, or None
    and why it is not there: `chunk_gla` for a log decay per key dimension, g (B, N, H, K), and
    `chunk_simple_gla` for one per head, g (B, N, H). It runs at the scale it is given and
    returns (o (B, N, H, V), final state); the output comes back as the op's (B, H, N, V)."""
    if per_key:
        chunk, keywords, why = _fla("fla.ops.gla", "chunk_gla")
    else:
        chunk, keywords, why = _fla("fla.ops.simple_gla", "chunk_simple_gla")
    if chunk is None:
        return None, why

    def run(q_bnhk, k_bnhk, v_bnhv, g, scale: float):
        return heads_first(chunk(q_bnhk, k_bnhk, v_bnhv, g, scale=scale, **keywords)[0])

    return run, ""


def gated_in_torch_layout(q_bnhk, k_bnhk, v_bnhv, g, scale: float, impl: str = "torch"):
    """attnzoo's gated_linear_attention on (B, N, H, ...) inputs (the log decay g (B, N, H) or
    (B, N, H, K)), read as (B, H, N, ...) views; impl "torch" is the path impl="auto" takes where
    the kernel is not chosen (the one benchmark mode times it against)."""
    qkvg = (heads_first(q_bnhk), heads_first(k_bnhk), heads_first(v_bnhv), heads_first(g))
    return gated.gated_linear_attention(*qkvg, scale=scale, impl=impl)


def gated_truth(q_bnhk, k_bnhk, v_bnhv, g, scale: float):
    """The recurrence one token at a time in float64 (`naive.recurrent`): the validation's truth
    for the gated parts."""
    qkvg = (heads_first(t).double() for t in (q_bnhk, k_bnhk, v_bnhv, g))
    return gated_naive.recurrent(*qkvg, scale)[0]


def sigmoid_bias(s: Shape) -> float:
    """The sigmoid part's bias: −log N, the sigmoid mixer's default (the paper's)."""
    return -math.log(s.n)


def sigmoid_op(q, k, v, causal: bool, bias: float, impl: str = "torch"):
    """attnzoo's sigmoid_attention at the default scale 1/sqrt(dk); impl "torch" is its
    reference, the path impl="auto" takes where the kernel is not chosen."""
    return attention.sigmoid_attention(q, k, v, causal=causal, bias=bias, impl=impl)


def sigmoid_truth(q, k, v, causal: bool, bias: float):
    """The reference in float64: the validation's truth for the sigmoid part."""
    q, k, v = q.double(), k.double(), v.double()
    return attention_naive.sigmoid_attention(
        q, k, v, causal, None, 1.0 / math.sqrt(q.shape[-1]), bias
    )


def delta_op(q, k, v, beta, g=None, impl: str = "torch"):
    """attnzoo's delta_rule at its default scale 1/sqrt(K): "torch" its chunked PyTorch path
    (the op's only one), "fla" flash-linear-attention's chunked kernels."""
    return delta.delta_rule(q, k, v, beta, g, impl=impl)


def delta_truth(q, k, v, beta, g=None):
    """The delta rule one token at a time in float64 (`delta.naive.recurrent`): the validation's
    truth for the delta parts."""
    q, k, v, beta = q.double(), k.double(), v.double(), beta.double()
    g = None if g is None else g.double()
    return delta_naive.recurrent(q, k, v, beta, g, 1.0 / math.sqrt(q.shape[-1]))[0]


def fla_delta(gated: bool) -> tuple[Callable[..., torch.Tensor] | None, str]:
    """delta_op through impl="fla" where fla-core's delta rule is importable, or None and why."""
    module, name = (
        ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule")
        if gated
        else ("fla.ops.delta_rule", "chunk_delta_rule")
    )
    found, _, why = _fla(module, name)
    return (None, why) if found is None else (lambda *t: delta_op(*t, impl="fla"), "")


def truth(part: str, s: Shape) -> tuple[str, Callable[..., torch.Tensor]] | None:
    """A float64 formula that every candidate of the part is validated against (outputs and
    gradients), with its name; None for the parts validated against the attnzoo op instead."""
    if part in ("gated", "gated_key"):
        scale = 1.0 / math.sqrt(s.head_dim)
        return "float64 recurrence", lambda q, k, v, g: gated_truth(q, k, v, g, scale)
    if part == "sigmoid":
        c, bias = s.causal, sigmoid_bias(s)
        return "float64 reference", lambda q, k, v: sigmoid_truth(q, k, v, c, bias)
    if part in ("delta", "delta_gated"):
        return "float64 recurrence", delta_truth
    return None


def _skipped(*inputs):
    raise NotImplementedError("a skipped candidate is never called")


def copy_of(x):
    """The bandwidth reference: one read and one write of x."""
    return x.clone()


@dataclass
class Candidate:
    name: str  # "attnzoo", "sdpa flash", "avg_pool1d - x", "copy"
    run: Callable[..., torch.Tensor]
    backend: str | None = None  # the SDPA backend it is pinned to
    reference: bool = False  # timed for scale (the copy), not a competitor
    skip: str = ""  # why it cannot run here (then it is reported, never called)


def make_inputs(
    part: str, s: Shape, device: str, dtype: torch.dtype, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        t = torch.randn(*shape, generator=gen) * scale
        return t.to(device=device, dtype=dtype).requires_grad_(True)

    b, h, n, d = s.batch, s.heads, s.n, s.head_dim
    if part == "scaled_dot":
        return randn(b, h, n, d), randn(b, h, n, d), randn(b, h, n, d)
    if part == "metric":
        c = torch.randn(h, d, d, generator=gen) / d**0.5
        m = ((c + c.mT) / 2).to(device=device, dtype=dtype).requires_grad_(True)
        return randn(b, h, n, d), m
    if part == "quadratic":
        return (
            randn(b, n, s.width),
            randn(h, s.width, s.width, scale=s.width**-0.5),
            randn(b, h, n, d),
        )
    if part == "pool":
        return (randn(b, n, d),)
    if part == "local":
        return randn(b, h, n, d), randn(b, h, n, d), randn(b, h, n, d)
    if part == "sigmoid":
        return randn(b, h, n, d), randn(b, h, n, d), randn(b, h, n, d)
    if part in ("delta", "delta_gated"):  # (B, H, N, ...); keys of unit norm, as the mixer's
        k = F.normalize(torch.randn(b, h, n, d, generator=gen), dim=-1)
        k = k.to(device=device, dtype=dtype).requires_grad_(True)
        beta = torch.sigmoid(torch.randn(b, h, n, generator=gen)).to(device).requires_grad_(True)
        g = gated_naive.sample_log_decay(b, h, n, generator=gen).to(device).requires_grad_(True)
        return (
            randn(b, h, n, d),
            k,
            randn(b, h, n, d),
            beta,
            *((g,) if part == "delta_gated" else ()),
        )
    if part in ("gated", "gated_key"):  # (B, N, H, ...) as a projection leaves them
        size = (b, n, h, d) if part == "gated_key" else (b, n, h)
        g = gated_naive.sample_log_decay(*size, generator=gen)  # fp32, as the op computes it
        g = g.to(device=device).requires_grad_(True)
        return randn(b, n, h, d), randn(b, n, h, d), randn(b, n, h, d), g
    if part == "linear":  # non-negative features, (B, N, H, F) as a projection leaves them

        def feature() -> torch.Tensor:
            t = F.elu(torch.randn(b, n, h, d, generator=gen)) + 1
            return t.to(device=device, dtype=dtype).requires_grad_(True)

        return feature(), feature(), randn(b, n, h, d)
    raise ValueError(f"unknown part {part!r}; known: {PARTS}")


def _fla_here(found: Callable | None, why: str, device: str, backends: tuple[str, ...]):
    """fla-core's op and why not, where a GPU runs it: on CPU (--smoke: SDPA pinned to "math")
    its Triton kernels cannot run, so the row is a skip that says so."""
    if found is not None and (device != "cuda" or backends == ("math",)):
        return None, "flash-linear-attention's kernels need a GPU"
    return found, why


def candidates(
    part: str,
    s: Shape,
    impl: str,
    window: int,
    backends: tuple[str, ...] = BACKENDS,
    device: str = "cuda",
) -> list[Candidate]:
    """The attnzoo op first, then what it is compared with, on `device`."""
    c = s.causal
    if part in CAUSAL_ONLY and not c:
        raise ValueError(f"part {part!r} is causal only, got the bidirectional shape {s.name!r}")
    if part == "scaled_dot":
        ours = Candidate(
            "attnzoo", lambda q, k, v: attention.scaled_dot_attention(q, k, v, causal=c, impl=impl)
        )
        theirs = [
            Candidate(f"sdpa {be}", lambda q, k, v: sdpa_scaled_dot(q, k, v, c), be)
            for be in backends
        ]
    elif part == "metric":
        ours = Candidate(
            "attnzoo", lambda p, m: attention.metric_attention(p, m, causal=c, impl=impl)
        )
        theirs = [
            Candidate(f"sdpa(p@M,p,p) {be}", lambda p, m: sdpa_metric(p, m, c), be)
            for be in backends
        ]
    elif part == "quadratic":
        ours = Candidate(
            "attnzoo", lambda x, u, v: attention.quadratic_attention(x, u, v, causal=c, impl=impl)
        )
        theirs = [
            Candidate(f"sdpa(x@U,x,v) {be}", lambda x, u, v: sdpa_quadratic(x, u, v, c), be)
            for be in backends
        ]
    elif part == "pool":
        ours = Candidate("attnzoo", lambda x: pooling.pool_mix(x, window, impl=impl))
        theirs = [
            Candidate("avg_pool1d - x", lambda x: avg_pool_mix(x, window)),
            Candidate("copy", copy_of, reference=True),
        ]
    elif part == "local":
        w = local_window(s)
        ours = Candidate(
            "attnzoo",
            lambda q, k, v: attention.scaled_dot_attention(q, k, v, causal=c, impl=impl, window=w),
        )
        theirs = [
            Candidate(f"sdpa(band) {be}", lambda q, k, v: sdpa_band(q, k, v, w), be)
            for be in backends
        ]
    elif part == "linear":
        ours = Candidate("attnzoo", lambda q, k, v: linear_in_torch_layout(q, k, v, c, impl))
        theirs = [Candidate(TORCH_PATH, lambda q, k, v: linear_in_torch_layout(q, k, v, c))]
        if c:
            theirs.append(Candidate(CUMSUM, cumsum_linear))
            fla, why = _fla_here(*fla_linear(), device, backends)
            theirs.append(Candidate(FLA, fla or _skipped, skip=why))
        else:
            why = "causal only (bidirectional, the PyTorch path already is q (kᵀ v))"
            theirs.append(Candidate(CUMSUM, _skipped, skip=why))
            theirs.append(Candidate(FLA, _skipped, skip="flash-linear-attention's is causal only"))
    elif part in ("gated", "gated_key"):  # the op's default scale, given to every candidate
        scale = 1.0 / math.sqrt(s.head_dim)
        ours = Candidate(
            "attnzoo", lambda q, k, v, g: gated_in_torch_layout(q, k, v, g, scale, impl)
        )
        theirs = [
            Candidate(TORCH_PATH, lambda q, k, v, g: gated_in_torch_layout(q, k, v, g, scale))
        ]
        fla, why = _fla_here(*fla_gated(part == "gated_key"), device, backends)
        theirs.append(
            Candidate(
                FLA_GLA if part == "gated_key" else FLA_SIMPLE_GLA,
                (lambda q, k, v, g: fla(q, k, v, g, scale)) if fla else _skipped,
                skip=why,
            )
        )
    elif part == "sigmoid":
        bias = sigmoid_bias(s)
        ours = Candidate("attnzoo", lambda q, k, v: sigmoid_op(q, k, v, c, bias, impl))
        theirs = [Candidate(TORCH_PATH, lambda q, k, v: sigmoid_op(q, k, v, c, bias))]
    elif part in NO_KERNEL:
        gated = part == "delta_gated"
        ours = Candidate("attnzoo", delta_op)
        fla, why = _fla_here(*fla_delta(gated), device, backends)
        theirs = [Candidate(FLA_GATED_DELTA if gated else FLA_DELTA, fla or _skipped, skip=why)]
    else:
        raise ValueError(f"unknown part {part!r}; known: {PARTS}")
    return [ours, *theirs]


def linear_in_torch_layout(q_bnhf, k_bnhf, v_bnhv, causal: bool, impl: str = "torch"):
    """attnzoo's linear_attention on (B, N, H, F) inputs, read as (B, H, N, F) views; impl
    "torch" is the path impl="auto" takes where the kernel is not chosen."""
    qkv = (heads_first(q_bnhf), heads_first(k_bnhf), heads_first(v_bnhv))
    return linear.linear_attention(*qkv, causal=causal, eps=LINEAR_EPS, impl=impl)


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
