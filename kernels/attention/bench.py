"""The attention ops in the kernel benchmark (kernels/bench), against what a user would write
instead:

| part | attnzoo op | what a user would write instead |
|---|---|---|
| scaled_dot | `scaled_dot_attention(q, k, v)` | `sdpa(q, k, v)` |
| metric | `metric_attention(p, M)` | `sdpa(p @ M, p, p)` |
| quadratic | `quadratic_attention(x, U, v)` | `sdpa(x @ U[h], x, v)`, x expanded over the heads |
| local | `scaled_dot_attention(q, k, v, window=w)` | `sdpa(q, k, v, attn_mask=band)`, the banded boolean mask (also the PyTorch path of a windowed call) |
| sigmoid | `sigmoid_attention(q, k, v, bias=-log N)` | its PyTorch path (`impl="torch"`, the reference: σ of the N x N scores, times v) |
| forgetting | `scaled_dot_attention(q, k, v, causal=True, key_bias=-cumsum(log f))`, the Forgetting Transformer's decay | its PyTorch path (`impl="torch"`, the reference: what impl="auto" runs, SDPA taking no key bias); flash-linear-attention's `parallel_forgetting_attn` where `fla-core` is importable |

`sdpa` is `torch.nn.functional.scaled_dot_product_attention`, one row per backend. quadratic's
width is D = heads x head dim. local's window reaches `local_reach(shape)` keys back (and
forward, bidirectional): min(128, N / 4); its rows inform scaled_dot_attention's AUTO_TRITON,
which windowed calls follow too. sigmoid's bias is -log N, the sigmoid mixer's default, and its
candidates are validated against the reference in float64. forgetting is causal only (timed at
the causal shapes): q, k, v laid out (B, N, H, dk) as a projection leaves them and as fla takes
them, and log f = logsigmoid(x), x ~ N(0, 1), (B, N, H) in fp32 as the mixer computes it; each
attnzoo candidate forms the key bias -cumsum(log f) as the mixer does, fla sums log f itself.
Every candidate is validated against the paper's formula in float64 (the decay c_i - c_j on the
scores, c = cumsum(log f)); fla's rows have a verdict but never stand for PyTorch in which path
won, and the part's rows inform scaled_dot_attention's AUTO_TRITON with the other two.

**FLOPs** of one call, all heads (B batch, H heads, N tokens, dk head dim, D = H dk), by the
FlashAttention papers' convention (and attnzoo/flops.py's for the forward):

- only matrix multiplications count: a multiply-add is 2 FLOPs, so a product of an (m, k) and a
  (k, n) matrix costs `2 m k n`; softmax, scaling, masks and dropout are left out;
- causal counts half of the N × N score and weight products (N²/2 pairs per head; the exact
  count with the diagonal is N(N+1)/2, a difference of 1/N);
- the backward of the attention core is 2.5 × its forward: five N × N products (the scores
  recomputed, dV, dP, dQ, dK) against the forward's two — what a flash kernel executes. With
  `recompute=False` it is 2 × (one product per operand gradient, no recomputation): the model's
  work. The in-op projections of quadratic (`q = x U⁽ʰ⁾`) and metric (`q = p M⁽ʰ⁾`) are plain
  matmuls: backward 2 × forward either way.

    scaled_dot_attention(q, k, v)   attention_flops(B, H, N, dk, causal)
    sigmoid_attention(q, k, v)      attention_flops(B, H, N, dk, causal)  (σ in softmax's place)
    forgetting (key_bias)           attention_flops(B, H, N, dk, causal)  (the bias add is elementwise)
    metric_attention(p, M)          2 B H N dk²  +  attention_flops(B, H, N, dk, causal)
    quadratic_attention(x, U, v)    2 B H N D²   +  attention_flops(B, H, N, D, causal, dv=dk)
    local (a window of w keys)      2 B H N w 2 dk, backward 2.5 × (the scores inside the window)

**Bytes** of the forward: one read of each input and one write of each output (compulsory
traffic) plus the key/value tiles streamed once per `BLOCK_M`-query tile; forgetting adds its fp32
key bias, read once and again with every key tile.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..bench.cases import (
    BACKENDS,
    TORCH_PATH,
    Candidate,
    Part,
    Shape,
    fla_function,
    fla_here,
    heads_first,
    randn_leaf,
    seeded,
    skipped,
)
from ..bench.timing import Result
from ..bench.verdicts import Verdict, judged, lookup, speedup
from . import naive, ops

BLOCK_M = 128  # query tile of the byte model
LOCAL_WINDOW = 128  # local's reach at long N: keys each side of the query (min(128, N / 4))
ATTENTION_OPS = ("scaled_dot", "metric", "quadratic", "sigmoid")
FLA_FORGETTING = "fla parallel_forgetting_attn"

# ------------------------------------------------------------------------------------ FLOPs


def attention_flops(
    batch: int,
    heads: int,
    n: int,
    dk: int,
    causal: bool,
    backward: bool = False,
    *,
    dv: int | None = None,
    recompute: bool = True,
) -> float:
    """FLOPs of the attention core `softmax(q kᵀ) v` over `batch × heads` sequences of `n`
    tokens: scores of width `dk`, values of width `dv` (default `dk`); the forward's, or with
    `backward` the backward's (2.5 × the forward, or 2 × without `recompute`)."""
    dv = dk if dv is None else dv
    frac = 0.5 if causal else 1.0
    forward = 2 * batch * heads * n * n * (dk + dv) * frac
    if not backward:
        return forward
    return (2.5 if recompute else 2.0) * forward


def op_flops(
    op: str,
    batch: int,
    heads: int,
    n: int,
    head_dim: int,
    causal: bool,
    backward: bool = False,
    *,
    recompute: bool = True,
) -> float:
    """FLOPs of one call of `op` ("scaled_dot", "metric", "quadratic" or "sigmoid"), forward or
    backward, by the table in the module docstring; quadratic's width is D = heads × head_dim."""
    bh, d = batch * heads, head_dim
    if op in ("scaled_dot", "sigmoid"):  # the same two products, σ in softmax's place
        return attention_flops(batch, heads, n, d, causal, backward, recompute=recompute)
    if op == "metric":
        proj = 2 * bh * n * d * d  # q = p M, per head
        attn = attention_flops(batch, heads, n, d, causal, backward, recompute=recompute)
    elif op == "quadratic":
        width = heads * head_dim
        proj = 2 * bh * n * width * width  # q = x U[h], per head
        attn = attention_flops(batch, heads, n, width, causal, backward, dv=d, recompute=recompute)
    else:
        raise ValueError(f"no FLOP formula for op {op!r}; known: {ATTENTION_OPS}")
    return attn + 2 * proj if backward else proj + attn


# ------------------------------------------------------------------------------------ cost model


def cost(op: str, s: Shape) -> dict[str, float]:
    """FLOPs of forward and backward and HBM bytes of the forward of one attention part."""
    bh, n, d, e = s.batch * s.heads, s.n, s.head_dim, s.elt
    tiles = -(-n // BLOCK_M)
    if op == "local":  # the scores inside the window only, as the kernels skip the rest
        keys = min(n, local_reach(s) * (1 if s.causal else 2) + 1)
        fwd = 2 * bh * n * keys * 2 * d
        bwd = 2.5 * fwd
        compulsory = e * bh * n * (3 * d + d) + 4 * bh * n
        streamed = e * bh * tiles * min(n, keys + BLOCK_M) * (2 * d)  # the window's k, v tiles
        return {"fwd_flop": fwd, "bwd_flop": bwd, "fwd_bytes": compulsory + streamed}
    flops_of = "scaled_dot" if op == "forgetting" else op  # the key bias add is elementwise
    fwd = op_flops(flops_of, s.batch, s.heads, n, d, s.causal)
    bwd = op_flops(flops_of, s.batch, s.heads, n, d, s.causal, backward=True)
    if op == "scaled_dot":
        compulsory = e * bh * n * (3 * d + d) + 4 * bh * n  # q, k, v in; out, lse out
        streamed = e * bh * tiles * n * (2 * d)  # k and v tiles per query tile
    elif op == "forgetting":  # scaled_dot's traffic plus the fp32 key bias, with every key tile
        compulsory = e * bh * n * (3 * d + d) + 4 * bh * n + 4 * bh * n  # q, k, v, bias; out, lse
        streamed = (e * 2 * d + 4) * bh * tiles * n  # k, v and bias tiles per query tile
    elif op == "sigmoid":  # scaled_dot's traffic without the lse (no row statistics)
        compulsory = e * bh * n * (3 * d + d)
        streamed = e * bh * tiles * n * (2 * d)
    elif op == "quadratic":
        big_d = s.width
        compulsory = e * (s.batch * n * big_d + s.heads * big_d**2)  # x and U
        compulsory += e * bh * n * (2 * big_d + 2 * d) + 4 * bh * n  # q out + in, v in, o out
        streamed = e * bh * tiles * n * (big_d + d)  # x (as k) and v tiles per query tile
    else:  # metric
        compulsory = e * (bh * n * 2 * d + s.heads * d * d) + 4 * bh * n  # p and M in; out, lse
        streamed = e * bh * tiles * n * d  # one p tile serves as key and value
    return {"fwd_flop": fwd, "bwd_flop": bwd, "fwd_bytes": compulsory + streamed}


# ------------------------------------------------------------------------------------ what a user would write

# Module-level functions, so that the validation checks exactly what the timing runs.


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


def local_reach(s: Shape) -> int:
    """How many keys back (and forward, bidirectional) local's window reaches at shape s."""
    return max(1, min(LOCAL_WINDOW, s.n // 4))


def local_window(s: Shape) -> tuple[int, int]:
    """The `window=(left, right)` of the windowed op for local at shape s."""
    reach = local_reach(s)
    return (reach, 0 if s.causal else reach)


def sdpa_band(q, k, v, window: tuple[int, int]):
    """`sdpa(q, k, v, attn_mask=band)`: query i sees keys i - left ..= i + right."""
    n = q.shape[-2]
    i = torch.arange(n, device=q.device)
    offset_nn = i[None, :] - i[:, None]  # key - query
    band_nn = (offset_nn >= -window[0]) & (offset_nn <= window[1])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=band_nn)


def sigmoid_bias(s: Shape) -> float:
    """The sigmoid part's bias: −log N, the sigmoid mixer's default (the paper's)."""
    return -math.log(s.n)


def sigmoid_op(q, k, v, causal: bool, bias: float, impl: str = "torch"):
    """attnzoo's sigmoid attention at the default scale 1/sqrt(dk); impl "torch" is its
    reference, the path impl="auto" takes where the kernel is not chosen."""
    return ops.sigmoid_attention(q, k, v, causal=causal, bias=bias, impl=impl)


def sigmoid_truth(q, k, v, causal: bool, bias: float):
    """The reference in float64: the validation's truth for the sigmoid part."""
    q, k, v = q.double(), k.double(), v.double()
    return naive.sigmoid_attention(q, k, v, causal, None, 1.0 / math.sqrt(q.shape[-1]), bias)


def forgetting_key_bias(log_f_bnh):
    """The op's key bias -cumsum(log f) over the tokens, (B, H, N), as the mixer forms it."""
    return -heads_first(log_f_bnh).cumsum(dim=-1)


def forgetting_op(q_bnhk, k_bnhk, v_bnhv, log_f_bnh, impl: str = "torch"):
    """attnzoo's scaled-dot op, causal, with the Forgetting Transformer's key bias, on (B, N, H, ...)
    inputs read as (B, H, N, ...) views, at the default scale 1/sqrt(dk); impl "torch" is its
    reference, the path impl="auto" takes where the kernel is not chosen (SDPA takes no key bias)."""
    qkv = (heads_first(q_bnhk), heads_first(k_bnhk), heads_first(v_bnhv))
    return ops.scaled_dot_attention(
        *qkv, causal=True, impl=impl, key_bias=forgetting_key_bias(log_f_bnh)
    )


def fla_forgetting():
    """flash-linear-attention's forgetting attention on (B, N, H, ...) tensors, or None and why it
    is not there: `parallel_forgetting_attn(q, k, v, g, scale)` takes the log forget gates
    g = log f (B, N, H), sums them itself and is causal; its o (B, N, H, V) comes back as the op's
    (B, H, N, V)."""
    fn, keywords, why = fla_function("fla.ops.forgetting_attn", "parallel_forgetting_attn")
    if fn is None:
        return None, why

    def run(q_bnhk, k_bnhk, v_bnhv, log_f_bnh, scale: float):
        return heads_first(fn(q_bnhk, k_bnhk, v_bnhv, log_f_bnh, scale=scale, **keywords))

    return run, ""


def forgetting_truth(q_bnhk, k_bnhk, v_bnhv, log_f_bnh):
    """The Forgetting Transformer's formula in float64, the validation's truth for the forgetting
    part: softmax_j(q_i·k_j / sqrt(dk) + c_i - c_j) v over the keys j <= i, c = cumsum(log f) (the
    paper's decay D_ij, the row's own c_i kept, which the op's key bias leaves to the softmax)."""
    q, k, v = (heads_first(t).double() for t in (q_bnhk, k_bnhk, v_bnhv))
    c_bhn = heads_first(log_f_bnh).double().cumsum(dim=-1)
    scores_bhnn = q @ k.mT / math.sqrt(q.shape[-1]) + c_bhn[..., :, None] - c_bhn[..., None, :]
    n = q.shape[-2]
    future_nn = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores_bhnn.masked_fill(future_nn, -math.inf), dim=-1) @ v


# ------------------------------------------------------------------------------------ inputs, candidates


def qkv(s: Shape, device: str, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """q, k, v of (B, H, N, dk): scaled_dot's, local's and sigmoid's inputs."""
    gen = seeded(seed)
    b, h, n, d = s.batch, s.heads, s.n, s.head_dim
    return tuple(randn_leaf(gen, device, dtype, b, h, n, d) for _ in range(3))


def forgetting_inputs(s: Shape, device: str, dtype: torch.dtype, seed: int = 0):
    """q, k, v (B, N, H, dk) and the log forget gates log f = logsigmoid(x), x ~ N(0, 1), (B, N, H)
    in fp32, as the mixer computes them."""
    gen = seeded(seed)
    b, h, n, d = s.batch, s.heads, s.n, s.head_dim
    q, k, v = (randn_leaf(gen, device, dtype, b, n, h, d) for _ in range(3))
    log_f = F.logsigmoid(torch.randn(b, n, h, generator=gen)).to(device).requires_grad_(True)
    return q, k, v, log_f


def metric_inputs(s: Shape, device: str, dtype: torch.dtype, seed: int = 0):
    """p (B, H, N, dk) and a symmetric M (H, dk, dk)."""
    gen = seeded(seed)
    b, h, n, d = s.batch, s.heads, s.n, s.head_dim
    c = torch.randn(h, d, d, generator=gen) / d**0.5
    m = ((c + c.mT) / 2).to(device=device, dtype=dtype).requires_grad_(True)
    return randn_leaf(gen, device, dtype, b, h, n, d), m


def quadratic_inputs(s: Shape, device: str, dtype: torch.dtype, seed: int = 0):
    """x (B, N, D), U (H, D, D) and v (B, H, N, dk)."""
    gen = seeded(seed)
    b, h, n, d, w = s.batch, s.heads, s.n, s.head_dim, s.width
    return (
        randn_leaf(gen, device, dtype, b, n, w),
        randn_leaf(gen, device, dtype, h, w, w, scale=w**-0.5),
        randn_leaf(gen, device, dtype, b, h, n, d),
    )


def scaled_dot_candidates(s, impl, window, backends=BACKENDS, device="cuda"):
    c = s.causal
    ours = Candidate(
        "attnzoo", lambda q, k, v: ops.scaled_dot_attention(q, k, v, causal=c, impl=impl)
    )
    theirs = [
        Candidate(f"sdpa {be}", lambda q, k, v: sdpa_scaled_dot(q, k, v, c), be) for be in backends
    ]
    return [ours, *theirs]


def metric_candidates(s, impl, window, backends=BACKENDS, device="cuda"):
    c = s.causal
    ours = Candidate("attnzoo", lambda p, m: ops.metric_attention(p, m, causal=c, impl=impl))
    theirs = [
        Candidate(f"sdpa(p@M,p,p) {be}", lambda p, m: sdpa_metric(p, m, c), be) for be in backends
    ]
    return [ours, *theirs]


def quadratic_candidates(s, impl, window, backends=BACKENDS, device="cuda"):
    c = s.causal
    ours = Candidate(
        "attnzoo", lambda x, u, v: ops.quadratic_attention(x, u, v, causal=c, impl=impl)
    )
    theirs = [
        Candidate(f"sdpa(x@U,x,v) {be}", lambda x, u, v: sdpa_quadratic(x, u, v, c), be)
        for be in backends
    ]
    return [ours, *theirs]


def local_candidates(s, impl, window, backends=BACKENDS, device="cuda"):
    c, w = s.causal, local_window(s)
    ours = Candidate(
        "attnzoo",
        lambda q, k, v: ops.scaled_dot_attention(q, k, v, causal=c, impl=impl, window=w),
    )
    theirs = [
        Candidate(f"sdpa(band) {be}", lambda q, k, v: sdpa_band(q, k, v, w), be) for be in backends
    ]
    return [ours, *theirs]


def sigmoid_candidates(s, impl, window, backends=BACKENDS, device="cuda"):
    c, bias = s.causal, sigmoid_bias(s)
    ours = Candidate("attnzoo", lambda q, k, v: sigmoid_op(q, k, v, c, bias, impl))
    return [ours, Candidate(TORCH_PATH, lambda q, k, v: sigmoid_op(q, k, v, c, bias))]


def sigmoid_truth_of(s: Shape):
    c, bias = s.causal, sigmoid_bias(s)
    return "float64 reference", lambda q, k, v: sigmoid_truth(q, k, v, c, bias)


def forgetting_candidates(s, impl, window, backends=BACKENDS, device="cuda"):
    scale = 1.0 / math.sqrt(s.head_dim)  # the op's default, given to fla's too
    ours = Candidate("attnzoo", lambda q, k, v, log_f: forgetting_op(q, k, v, log_f, impl))
    torch_path = Candidate(TORCH_PATH, forgetting_op)
    fla, why = fla_here(*fla_forgetting(), device, backends)
    run = (lambda q, k, v, log_f: fla(q, k, v, log_f, scale)) if fla else skipped
    return [ours, torch_path, Candidate(FLA_FORGETTING, run, skip=why)]


def forgetting_truth_of(s: Shape):
    return "float64 FoX formula", forgetting_truth


# ------------------------------------------------------------------------------------ targets


def best_sdpa(results: list[Result], part: str, shape: str, mode: str = "fwd+bwd") -> Result | None:
    """The fastest SDPA formulation (any backend) of one part at one shape."""
    found = [
        r
        for r in results
        if (r.part, r.shape, r.mode) == (part, shape, mode)
        and r.candidate.startswith("sdpa")
        and r.device_ms
    ]
    return min(found, key=lambda r: r.device_ms, default=None)


def shapes_at(n_target: int) -> list[str]:
    return [f"N{n_target}-{mode}" for mode in ("causal", "bidirectional")]


def scaled_dot_targets(results: list[Result], n_target: int) -> list[Verdict]:
    """fwd+bwd >= 1.0x flash SDPA at N = 4096, causal and bidirectional (goal 1.6x: cuDNN's);
    at the training shape <= 1.2x flash's time."""
    get, out = lookup(results), []
    for shape in shapes_at(n_target):
        ours, flash = get("scaled_dot", shape, "attnzoo"), get("scaled_dot", shape, "sdpa flash")
        cudnn = get("scaled_dot", shape, "sdpa cudnn")
        extra = f" (cuDNN {speedup(ours, cudnn):.2f}×)" if speedup(ours, cudnn) else ""
        out.append(
            judged(
                f"scaled_dot fwd+bwd vs flash SDPA, {shape}",
                speedup(ours, flash),
                1.0,
                "≥ 1.0× (goal 1.6×, cuDNN's)",
                extra,
            )
        )
    ours, flash = get("scaled_dot", "train", "attnzoo"), get("scaled_dot", "train", "sdpa flash")
    sp = speedup(ours, flash)  # time ratio ≤ 1.2 is speedup ≥ 1/1.2
    target, goal = "scaled_dot fwd+bwd at the training shape", "≤ 1.2× flash's time"
    if sp is None:
        out.append(Verdict(target, "–", goal, "not measured"))
    else:
        out.append(
            Verdict(
                target, f"{1 / sp:.2f}× flash's time", goal, "met" if 1 / sp <= 1.2 else "MISSED"
            )
        )
    return out


def host_targets(results: list[Result], n_target: int) -> list[Verdict]:
    """Host time per call (fwd, and fwd+bwd) <= 1.5x SDPA's at the training shape."""
    get, out = lookup(results), []
    for mode in ("fwd", "fwd+bwd"):
        ours = get("scaled_dot", "train", "attnzoo", mode)
        flash = get("scaled_dot", "train", "sdpa flash", mode)
        ratio = None if ours is None or flash is None else ours.host_us / flash.host_us
        out.append(
            Verdict(
                f"host time per {mode} call at the training shape, vs SDPA",
                "–"
                if ratio is None
                else f"{ratio:.2f}× ({ours.host_us:.0f} vs {flash.host_us:.0f} µs)",
                "≤ 1.5×",
                "not measured" if ratio is None else ("met" if ratio <= 1.5 else "MISSED"),
            )
        )
    return out


def metric_targets(results: list[Result], n_target: int) -> list[Verdict]:
    """fwd+bwd >= 1.0x the best SDPA formulation at N = 4096 (goal 1.3x)."""
    get, out = lookup(results), []
    for shape in shapes_at(n_target):
        best = best_sdpa(results, "metric", shape)
        out.append(
            judged(
                f"metric fwd+bwd vs best sdpa(p@M,p,p), {shape}",
                speedup(get("metric", shape, "attnzoo"), best),
                1.0,
                "≥ 1.0× (goal 1.3×)",
                f" (best: {best.candidate})" if best else "",
            )
        )
    return out


def quadratic_targets(results: list[Result], n_target: int) -> list[Verdict]:
    """fwd+bwd >= 1.0x its SDPA formulation and >= 50% of scaled_dot's TFLOP/s, N = 4096."""
    get, out = lookup(results), []
    for shape in shapes_at(n_target):
        best = best_sdpa(results, "quadratic", shape)
        ours = get("quadratic", shape, "attnzoo")
        out.append(
            judged(
                f"quadratic fwd+bwd vs sdpa(x@U,x,v), {shape}",
                speedup(ours, best),
                1.0,
                "≥ 1.0×",
                f" (best: {best.candidate})" if best else "",
            )
        )
        sd = get("scaled_dot", shape, "attnzoo")
        share = None if ours is None or sd is None else ours.rate / sd.rate
        out.append(
            Verdict(
                f"quadratic TFLOP/s vs scaled_dot's, {shape}",
                "–" if share is None else f"{share:.0%}",
                "≥ 50%",
                "not measured" if share is None else ("met" if share >= 0.5 else "MISSED"),
            )
        )
    return out


def local_targets(results: list[Result], n_target: int) -> list[Verdict]:
    """fwd+bwd >= 1.0x the best `sdpa(band)` at N = 4096, causal and bidirectional."""
    get, out = lookup(results), []
    for shape in shapes_at(n_target):
        best = best_sdpa(results, "local", shape)
        out.append(
            judged(
                f"local fwd+bwd vs best sdpa(band), {shape}",
                speedup(get("local", shape, "attnzoo"), best),
                1.0,
                "≥ 1.0×",
                f" (best: {best.candidate})" if best else "",
            )
        )
    return out


def sigmoid_targets(results: list[Result], n_target: int) -> list[Verdict]:
    """fwd+bwd >= 1.0x its PyTorch path (the reference, which forms the N x N weights) at
    N = 4096, causal and bidirectional."""
    get = lookup(results)
    return [
        judged(
            f"sigmoid fwd+bwd vs its PyTorch path, {shape}",
            speedup(get("sigmoid", shape, "attnzoo"), get("sigmoid", shape, TORCH_PATH)),
            1.0,
            "≥ 1.0×",
        )
        for shape in shapes_at(n_target)
    ]


def forgetting_targets(results: list[Result], n_target: int) -> list[Verdict]:
    """fwd+bwd >= 1.0x its PyTorch path (the reference, which forms the N x N weights) and
    >= 1.0x flash-linear-attention's parallel_forgetting_attn (where fla-core was importable;
    else "not measured" with the reason), at N = 4096, causal."""
    get, shape = lookup(results), f"N{n_target}-causal"
    ours, out = get("forgetting", shape, "attnzoo"), []
    for name, what in (
        (TORCH_PATH, "its PyTorch path"),
        (FLA_FORGETTING, "flash-linear-attention"),
    ):
        target = f"forgetting fwd+bwd vs {what}, {shape}"
        skip = next(
            (r for r in results if (r.part, r.shape, r.candidate) == ("forgetting", shape, name)),
            None,
        )
        ratio = speedup(ours, get("forgetting", shape, name))
        if ratio is None and skip is not None and skip.note.startswith("skipped"):
            out.append(Verdict(target, f"– ({skip.note})", "≥ 1.0×", "not measured"))
        else:
            out.append(judged(target, ratio, 1.0, "≥ 1.0×"))
    return out


def _auto(op: str):
    return lambda: ops.AUTO_TRITON[op]


PARTS = [
    Part(
        "scaled_dot",
        order=10,
        op="scaled_dot_attention",
        share_s=20,
        inputs=qkv,
        candidates=scaled_dot_candidates,
        cost=lambda s, window: cost("scaled_dot", s),
        targets=scaled_dot_targets,
        closing_targets=host_targets,
        auto_triton=_auto("scaled_dot_attention"),
    ),
    Part(
        "metric",
        order=20,
        op="metric_attention",
        share_s=18,
        inputs=metric_inputs,
        candidates=metric_candidates,
        cost=lambda s, window: cost("metric", s),
        targets=metric_targets,
        auto_triton=_auto("metric_attention"),
    ),
    Part(
        "quadratic",
        order=30,
        op="quadratic_attention",
        share_s=22,
        inputs=quadratic_inputs,
        candidates=quadratic_candidates,
        cost=lambda s, window: cost("quadratic", s),
        targets=quadratic_targets,
        auto_triton=_auto("quadratic_attention"),
    ),
    Part(
        "local",
        order=60,
        op="scaled_dot_attention",  # windowed
        share_s=16,
        inputs=qkv,
        candidates=local_candidates,
        cost=lambda s, window: cost("local", s),
        targets=local_targets,
        auto_triton=_auto("scaled_dot_attention"),
    ),
    Part(
        "sigmoid",
        order=90,
        op="sigmoid_attention",
        share_s=14,
        inputs=qkv,
        candidates=sigmoid_candidates,
        cost=lambda s, window: cost("sigmoid", s),
        truth=sigmoid_truth_of,
        targets=sigmoid_targets,
        auto_triton=_auto("sigmoid_attention"),
    ),
    Part(
        "forgetting",
        order=95,
        op="scaled_dot_attention",  # with a key bias
        share_s=14,
        inputs=forgetting_inputs,
        candidates=forgetting_candidates,
        cost=lambda s, window: cost("forgetting", s),
        truth=forgetting_truth_of,
        targets=forgetting_targets,
        auto_triton=_auto("scaled_dot_attention"),
        modes=(True,),  # the decay runs from a key to the later queries
        not_auto=(FLA_FORGETTING,),
    ),
]
