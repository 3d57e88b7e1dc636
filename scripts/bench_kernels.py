"""Benchmark the attention kernels against PyTorch's SDPA, or print the cost model without a GPU.

On a CUDA machine: times the forward and the forward+backward of scaled_dot, quadratic and metric
attention (Triton, `impl="triton"`) and of `torch.nn.functional.scaled_dot_product_attention`
(flash backend where available) with `triton.testing.do_bench` (median), at N = 512 … 8192,
head dim 64, bf16, and prints TFLOP/s and the ratio to SDPA. Targets (issue 3):

- scaled_dot forward+backward ≥ 0.8× PyTorch's flash SDPA at N = 4096;
- metric forward+backward ≥ 1.0× scaled_dot at the same shape.

On a CPU machine: prints the FLOP and byte counts per op (the model behind those ratios) and says
that timings need a GPU.

    python scripts/bench_kernels.py                      # N = 512 1024 2048 4096 8192
    python scripts/bench_kernels.py --n 4096 --causal --batch 4 --heads 16

FLOPs follow the FlashAttention papers' convention: the forward counts its matmuls (2 FLOPs per
multiply-add), the backward 2.5× the attention forward (five N×N matmuls against two), causal
halves the N×N terms. The byte model counts one read of each input and one write of each output
(compulsory traffic) plus the key/value tiles streamed once per 128-query tile.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

import torch

BLOCK_M = 128  # query tile of the byte model


@dataclass(frozen=True)
class Shape:
    batch: int
    heads: int
    n: int
    head_dim: int
    causal: bool
    elt: int = 2  # bytes per element (bf16)

    @property
    def width(self) -> int:
        """Model width D = heads × head_dim: the quadratic op's q/k width."""
        return self.heads * self.head_dim


def cost(op: str, s: Shape) -> dict[str, float]:
    """FLOPs of forward and backward and HBM bytes of the forward, by the model in the docstring."""
    bh, n, d, e = s.batch * s.heads, s.n, s.head_dim, s.elt
    frac = 0.5 if s.causal else 1.0
    tiles = -(-n // BLOCK_M)
    if op in ("scaled_dot", "sdpa"):
        attn = 2 * bh * n * n * (d + d) * frac
        fwd, bwd = attn, 2.5 * attn
        compulsory = e * bh * n * (3 * d + d) + 4 * bh * n  # q, k, v in; out, lse out
        streamed = e * bh * tiles * n * (2 * d)  # k and v tiles per query tile
    elif op == "quadratic":
        big_d = s.width
        proj = 2 * bh * n * big_d * big_d  # q = x U[h], one batched matmul
        attn = 2 * bh * n * n * (big_d + d) * frac
        fwd, bwd = proj + attn, 2.5 * attn + 2 * proj
        compulsory = e * (s.batch * n * big_d + s.heads * big_d**2)  # x and U
        compulsory += e * bh * n * (2 * big_d + 2 * d) + 4 * bh * n  # q out + in, v in, o out
        streamed = e * bh * tiles * n * (big_d + d)  # x (as k) and v tiles per query tile
    elif op == "metric":
        proj = 2 * bh * n * d * d  # q = p M, in registers
        attn = 2 * bh * n * n * (d + d) * frac
        fwd, bwd = proj + attn, 2.5 * attn + 2 * proj
        compulsory = e * (bh * n * 2 * d + s.heads * d * d) + 4 * bh * n  # p and M in; out, lse
        streamed = e * bh * tiles * n * d  # one p tile serves as key and value
    else:
        raise ValueError(f"unknown op {op!r}")
    return {"fwd_flop": fwd, "bwd_flop": bwd, "fwd_bytes": compulsory + streamed}


OPS = ("sdpa", "scaled_dot", "quadratic", "metric")


def print_model(shapes: list[Shape]) -> None:
    print("| op | N | fwd GFLOP | fwd+bwd GFLOP | fwd bytes (MB) | fwd FLOP/byte |")
    print("|---|---|---|---|---|---|")
    for s in shapes:
        for op in OPS[1:]:
            c = cost(op, s)
            print(
                f"| {op} | {s.n} | {c['fwd_flop'] / 1e9:.1f} | "
                f"{(c['fwd_flop'] + c['bwd_flop']) / 1e9:.1f} | {c['fwd_bytes'] / 1e6:.1f} | "
                f"{c['fwd_flop'] / c['fwd_bytes']:.0f} |"
            )


def make_inputs(op: str, s: Shape, device: str) -> tuple:
    dt = torch.bfloat16
    kw = {"device": device, "dtype": dt, "requires_grad": True}
    b, h, n, d = s.batch, s.heads, s.n, s.head_dim
    if op in ("sdpa", "scaled_dot"):
        return tuple(torch.randn(b, h, n, d, **kw) for _ in range(3))
    if op == "quadratic":
        big_d = s.width
        u = (torch.randn(h, big_d, big_d, device=device) / big_d).to(dt).requires_grad_()
        return torch.randn(b, n, big_d, **kw), u, torch.randn(b, h, n, d, **kw)
    c = torch.randn(h, d, d, device=device) / d**0.5
    return torch.randn(b, h, n, d, **kw), ((c + c.transpose(1, 2)) / 2).to(dt).requires_grad_()


def run_op(op: str, inputs: tuple, causal: bool) -> torch.Tensor:
    from attnzoo import kernels

    if op == "sdpa":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(*inputs, is_causal=causal)
    fn = getattr(kernels, f"{op}_attention")
    return fn(*inputs, causal=causal, impl="triton")


def bench_gpu(shapes: list[Shape]) -> None:
    from triton.testing import do_bench

    name = torch.cuda.get_device_name()
    print(f"GPU: {name}; bf16, head dim {shapes[0].head_dim}, median of triton.testing.do_bench\n")
    print(
        "| op | N | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | "
        "fwd+bwd vs SDPA | fwd+bwd vs scaled_dot |"
    )
    print("|---|---|---|---|---|---|---|---|")
    results: dict[tuple[str, int], float] = {}
    for s in shapes:
        for op in OPS:
            inputs = make_inputs(op, s, "cuda")
            grad = torch.randn_like(run_op(op, inputs, s.causal))
            causal = s.causal
            fwd_ms = do_bench(
                lambda op=op, inputs=inputs, causal=causal: run_op(op, inputs, causal),
                return_mode="median",
            )

            def step(op=op, inputs=inputs, grad=grad, causal=causal):
                for t in inputs:
                    t.grad = None
                run_op(op, inputs, causal).backward(grad)

            both_ms = do_bench(step, return_mode="median")
            results[(op, s.n)] = both_ms
            c = cost(op, s)
            vs_sdpa = results[("sdpa", s.n)] / both_ms
            sd_ms = results.get(("scaled_dot", s.n))
            vs_sd = f"{sd_ms / both_ms:.2f}×" if sd_ms is not None else "–"
            print(
                f"| {op} | {s.n} | {fwd_ms:.3f} | {c['fwd_flop'] / fwd_ms / 1e9:.1f} | "
                f"{both_ms:.3f} | {(c['fwd_flop'] + c['bwd_flop']) / both_ms / 1e9:.1f} | "
                f"{vs_sdpa:.2f}× | {vs_sd} |"
            )
            del inputs, grad
    print()
    n_target = 4096
    if ("scaled_dot", n_target) in results:
        r1 = results[("sdpa", n_target)] / results[("scaled_dot", n_target)]
        r2 = results[("scaled_dot", n_target)] / results[("metric", n_target)]
        print(f"target scaled_dot fwd+bwd ≥ 0.80× SDPA at N={n_target}: {r1:.2f}× "
              f"{'met' if r1 >= 0.8 else 'MISSED'}")  # fmt: skip
        print(f"target metric fwd+bwd ≥ 1.00× scaled_dot at N={n_target}: {r2:.2f}× "
              f"{'met' if r2 >= 1.0 else 'MISSED'}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args(argv)
    for name, value in (("--batch", args.batch), ("--heads", args.heads)):
        if value < 1:
            raise SystemExit(f"{name} must be ≥ 1, got {value}")
    if not 16 <= args.head_dim <= 128:
        raise SystemExit(f"--head-dim must be in 16..128, got {args.head_dim}")
    shapes = [Shape(args.batch, args.heads, n, args.head_dim, args.causal) for n in args.n]
    print(
        "Targets: scaled_dot fwd+bwd ≥ 0.8× PyTorch flash SDPA at N=4096; "
        "metric fwd+bwd ≥ 1.0× scaled_dot at the same shape.\n"
    )
    print(
        f"Cost model: batch {args.batch}, heads {args.heads}, head dim {args.head_dim}, bf16, "
        f"{'causal' if args.causal else 'bidirectional'} (quadratic's q/k width D = "
        f"{args.heads * args.head_dim}).\n"
    )
    print_model(shapes)
    print()
    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        print("No CUDA device (or TRITON_INTERPRET=1): timings need a GPU; the table above is the")
        print("FLOP and byte model behind the ratios the GPU run would measure.")
        return 0
    bench_gpu(shapes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
