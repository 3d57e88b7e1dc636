"""FLOPs of one call of an attention op of attnzoo.kernels, the figure benchmark rates divide.

Convention (the FlashAttention papers', and attnzoo/flops.py's for the forward):

- Only matrix multiplications count: a multiply-add is 2 FLOPs, so a product of an (m, k) and a
  (k, n) matrix costs `2 m k n`. Softmax, scaling, masks and dropout are left out.
- Causal counts half of the N × N score and weight products (N²/2 pairs per head; the exact
  count with the diagonal is N(N+1)/2, a difference of 1/N).
- The backward of the attention core is 2.5 × its forward: five N × N products (the scores
  recomputed, dV, dP, dQ, dK) against the forward's two — what a flash kernel executes. With
  `recompute=False` it is 2 × (one product per operand gradient, no recomputation): the model's
  work, the convention of attnzoo/flops.py. The in-op projections of quadratic (`q = x U⁽ʰ⁾`)
  and metric (`q = p M⁽ʰ⁾`) are plain matmuls: backward 2 × forward either way.

One call, all heads, per op (B batch, H heads, N tokens, dk head dim, D = H dk):

    scaled_dot_attention(q, k, v)   attention_flops(B, H, N, dk, causal)
    sigmoid_attention(q, k, v)      attention_flops(B, H, N, dk, causal)  (σ in softmax's place)
    metric_attention(p, M)          2 B H N dk²  +  attention_flops(B, H, N, dk, causal)
    quadratic_attention(x, U, v)    2 B H N D²   +  attention_flops(B, H, N, D, causal, dv=dk)
    pool_mix(x, window)             0 (window sums are additions)
    linear_attention(q, k, v)       linear_attention_flops(B, H, N, F, dv, causal)

Linear attention (q, k of width F, v of width dv) counts its F × dv state products and, causal,
its chunk × chunk blocks (chunks of C = 64 tokens, half counted like causal scores): per head,
forward 4 N F dv (+ N C (F + dv) causal), backward 10 N F dv (+ 3 N C (F + dv) causal), where
the kernels rebuild the forward's state S once and walk the chunk blocks three times. With
`recompute=False`, the model's work of the recurrent form: 4 N F dv forward, 8 N F dv backward
(dq, the state's gradient, dk, dv), causal or not. The normaliser's vector products (q·z,
g·y, O(N (F + dv)) per head) are left out, as softmax is.
"""

from __future__ import annotations

ATTENTION_OPS = ("scaled_dot", "metric", "quadratic", "sigmoid")


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
    """FLOPs of one call of `op` ("scaled_dot", "metric", "quadratic", "sigmoid" or "linear"),
    forward or backward, by the table in the module docstring; quadratic's width is
    D = heads × head_dim, linear's F = dv = head_dim."""
    bh, d = batch * heads, head_dim
    if op == "linear":
        return linear_attention_flops(batch, heads, n, d, d, causal, backward, recompute=recompute)
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


LINEAR_CHUNK = 64  # the chunk of kernels/linear (and of the causal reference)


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
