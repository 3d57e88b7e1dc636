"""linear_attention in the kernel benchmark (kernels/bench), against what a user would write
instead:

| part | attnzoo op | what a user would write instead |
|---|---|---|
| linear | `linear_attention(q, k, v)` | its PyTorch path (`impl="torch"`, chunked einsums); causal: the cumsum/einsum formulation, and flash-linear-attention's `chunk_linear_attn` where `fla-core` is importable |

q and k are non-negative features (elu + 1) of width F = head dim, laid out (batch, N, heads, F)
as a mixer's projection gives them (the attnzoo op and PyTorch read them through strides,
fla-core takes that layout as it is). The cumsum formulation and fla-core are timed for the
targets and the results table, but impl="auto" would not run them instead of the kernel.

**FLOPs** (2 per multiply-add, as for attention; kernels/attention/bench.py has the convention):
q, k of width F, v of width dv; the F × dv state products and, causal, the chunk × chunk blocks
(chunks of C = 64 tokens, half counted like causal scores): per head, forward 4 N F dv
(+ N C (F + dv) causal), backward 10 N F dv (+ 3 N C (F + dv) causal), where the kernels rebuild
the forward's state S once and walk the chunk blocks three times. With `recompute=False`, the
model's work of the recurrent form: 4 N F dv forward, 8 N F dv backward (dq, the state's
gradient, dk, dv), causal or not. The normaliser's vector products (q·z, g·y, O(N (F + dv)) per
head) are left out, as softmax is. **Bytes**: q, k, v in, out and the fp32 normaliser out; no
tile is read twice.
"""

from __future__ import annotations

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
from . import ops

LINEAR_EPS = 1e-6  # the op's default
LINEAR_CHUNK = 64  # the chunk of the kernels (and of the causal reference)
FLA = "fla chunk_linear_attn"
CUMSUM = "cumsum/einsum"


def linear_attention_flops(
    batch: int,
    heads: int,
    n: int,
    f: int,
    dv: int,
    causal: bool,
    backward: bool = False,
    *,
    recompute: bool = True,
    chunk: int = LINEAR_CHUNK,
) -> float:
    """FLOPs of normalised linear attention over `batch × heads` sequences of `n` tokens, q and k
    of width `f`, v of width `dv`: what the chunked kernels execute, or with `recompute=False`
    the model's work of the recurrent form (the module docstring has the counts)."""
    bh = batch * heads
    state = 2 * bh * n * f * dv  # one product of n tokens with an f × dv state
    if not recompute:
        return (4 if backward else 2) * state
    blocks = bh * n * chunk * (f + dv) if causal else 0  # chunk blocks, half counted
    if backward:
        return 5 * state + 3 * blocks
    return 2 * state + blocks


def cost(s: Shape, window: int = 3) -> dict[str, float]:
    """F = dv = head dim; q, k, v in, out out, the normaliser (fp32) out."""
    bh, n, d, e = s.batch * s.heads, s.n, s.head_dim, s.elt
    return {
        "fwd_flop": linear_attention_flops(s.batch, s.heads, n, d, d, s.causal),
        "bwd_flop": linear_attention_flops(s.batch, s.heads, n, d, d, s.causal, backward=True),
        "fwd_bytes": e * bh * n * 4 * d + 4 * bh * n,
    }


def linear_in_torch_layout(q_bnhf, k_bnhf, v_bnhv, causal: bool, impl: str = "torch"):
    """attnzoo's linear attention on (B, N, H, F) inputs, read as (B, H, N, F) views; impl
    "torch" is the path impl="auto" takes where the kernel is not chosen."""
    qkv = (heads_first(q_bnhf), heads_first(k_bnhf), heads_first(v_bnhv))
    return ops.linear_attention(*qkv, causal=causal, eps=LINEAR_EPS, impl=impl)


def cumsum_linear(q_bnhf, k_bnhf, v_bnhv):
    """Causal normalised linear attention as one would write it: the running state as a cumsum
    of the outer products k vᵀ, then einsums: -> (B, H, N, dv)."""
    s_bnhfv = torch.einsum("bnhf,bnhv->bnhfv", k_bnhf, v_bnhv).cumsum(dim=1)
    num_bnhv = torch.einsum("bnhf,bnhfv->bnhv", q_bnhf, s_bnhfv)
    den_bnh = torch.einsum("bnhf,bnhf->bnh", q_bnhf, k_bnhf.cumsum(dim=1))
    return heads_first(num_bnhv / (den_bnh[..., None] + LINEAR_EPS))


def fla_linear():
    """flash-linear-attention's chunked linear attention, or None and why it is not there."""
    chunk_linear_attn, keywords, why = fla_function("fla.ops.linear_attn", "chunk_linear_attn")
    if chunk_linear_attn is None:
        return None, why
    keywords = {"scale": 1.0, "normalize": True, **keywords}

    def run(q_bnhf, k_bnhf, v_bnhv):
        return heads_first(chunk_linear_attn(q_bnhf, k_bnhf, v_bnhv, **keywords)[0])

    return run, ""


def inputs(s: Shape, device: str, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Non-negative features q, k and v, (B, N, H, F) as a projection leaves them."""
    gen = seeded(seed)
    b, h, n, d = s.batch, s.heads, s.n, s.head_dim

    def feature() -> torch.Tensor:
        t = F.elu(torch.randn(b, n, h, d, generator=gen)) + 1
        return t.to(device=device, dtype=dtype).requires_grad_(True)

    return feature(), feature(), randn_leaf(gen, device, dtype, b, n, h, d)


def candidates(s, impl, window, backends=BACKENDS, device="cuda") -> list[Candidate]:
    c = s.causal
    ours = Candidate("attnzoo", lambda q, k, v: linear_in_torch_layout(q, k, v, c, impl))
    theirs = [Candidate(TORCH_PATH, lambda q, k, v: linear_in_torch_layout(q, k, v, c))]
    if c:
        theirs.append(Candidate(CUMSUM, cumsum_linear))
        fla, why = fla_here(*fla_linear(), device, backends)
        theirs.append(Candidate(FLA, fla or skipped, skip=why))
    else:
        why = "causal only (bidirectional, the PyTorch path already is q (kᵀ v))"
        theirs.append(Candidate(CUMSUM, skipped, skip=why))
        theirs.append(Candidate(FLA, skipped, skip="flash-linear-attention's is causal only"))
    return [ours, *theirs]


def targets(results: list[Result], n_target: int) -> list[Verdict]:
    """fwd+bwd >= 1.0x its PyTorch path at N = 4096, causal and bidirectional, and, causal,
    >= 1.0x the cumsum/einsum formulation and flash-linear-attention's chunked kernel (where
    fla-core was importable; else "not measured" with the reason)."""
    get, out = lookup(results), []
    for mode in ("causal", "bidirectional"):
        shape = f"N{n_target}-{mode}"
        out.append(
            judged(
                f"linear fwd+bwd vs its PyTorch path, {shape}",
                speedup(get("linear", shape, "attnzoo"), get("linear", shape, TORCH_PATH)),
                1.0,
                "≥ 1.0×",
            )
        )
    shape = f"N{n_target}-causal"
    ours = get("linear", shape, "attnzoo")
    for name, what in ((CUMSUM, "the cumsum/einsum formulation"), (FLA, "flash-linear-attention")):
        target = f"linear fwd+bwd vs {what}, {shape}"
        skip = next(
            (r for r in results if (r.part, r.shape, r.candidate) == ("linear", shape, name)), None
        )
        ratio = speedup(ours, get("linear", shape, name))
        if ratio is None and skip is not None and skip.note.startswith("skipped"):
            out.append(Verdict(target, f"– ({skip.note})", "≥ 1.0×", "not measured"))
        else:
            out.append(judged(target, ratio, 1.0, "≥ 1.0×"))
    return out


PARTS = [
    Part(
        "linear",
        order=50,
        op="linear_attention",
        share_s=18,
        inputs=inputs,
        candidates=candidates,
        cost=lambda s, window: cost(s, window),
        targets=targets,
        auto_triton=lambda: ops.AUTO_TRITON,
        not_auto=(CUMSUM, FLA),
    )
]
