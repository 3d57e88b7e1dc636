"""Training speed of every mixer at one shape, next to a plain PyTorch GPT of the same shape, and the
cost of the rank probe the trainer runs at every evaluation.

A step is what the trainer does per step: forward, cross-entropy, backward, gradient clipping and
an AdamW update (bf16 autocast on CUDA, float32 on CPU). The plain GPT uses the same block layout
(pre-norm, bias-free qkv and output projections, GELU MLP of ratio 4) with
`F.scaled_dot_product_attention`; targets: scaled_dot within 1.1x of it (on GPU), and the rank
probe under 5% of training time at the default evaluation interval.

    python scripts/bench_train.py                                   # CPU, small: ~1 minute
    python scripts/bench_train.py --dim 256 --depth 6 --seq-len 256 --batch 32   # a GPU shape
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from attnzoo import MIXERS, Model, ModelConfig
from attnzoo.tasks import Batch
from attnzoo.train import rank_record


class PlainBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x_bnd: torch.Tensor) -> torch.Tensor:
        q, k, v = rearrange(
            self.qkv(self.norm1(x_bnd)), "b n (three h k) -> three b h n k", three=3, h=self.heads
        )
        out_bhnk = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x_bnd = x_bnd + self.proj(rearrange(out_bhnk, "b h n k -> b n (h k)"))
        return x_bnd + self.mlp(self.norm2(x_bnd))


class PlainGPT(nn.Module):
    """The baseline: nanoGPT's layout in a dozen lines."""

    def __init__(self, vocab: int, dim: int, depth: int, heads: int, max_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(max_len, dim))
        self.blocks = nn.ModuleList([PlainBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens_bn: torch.Tensor) -> torch.Tensor:
        x_bnd = self.embed(tokens_bn) + self.pos[: tokens_bn.shape[1]]
        for block in self.blocks:
            x_bnd = block(x_bnd)
        return self.head(self.norm(x_bnd))


def time_steps(model: nn.Module, args: argparse.Namespace, device: torch.device) -> float:
    """Median milliseconds per training step."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len + 1), generator=gen).to(device)
    x, y = tokens[:, :-1], tokens[:, 1:]
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if device.type == "cuda"
        else contextlib.nullcontext()
    )
    times = []
    for i in range(args.warmup + args.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with autocast:
            logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def time_probe(model: Model, args: argparse.Namespace, device: torch.device) -> float:
    """Milliseconds for one rank probe (the trainer's `rank_record` on its probe batch size)."""
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, args.vocab, (args.probe_batch, args.seq_len), generator=gen)
    probe = Batch(tokens, tokens).to(device)
    rank_record(model, probe)  # warm-up
    times = []
    for _ in range(5):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        rank_record(model, probe)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--probe-batch", type=int, default=16, help="train.probe_batch_size")
    parser.add_argument("--eval-every", type=int, default=100, help="train.eval_every")
    parser.add_argument("--impl", default="auto", choices=["auto", "torch", "triton"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--mixers", nargs="+", default=list(MIXERS), choices=list(MIXERS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    torch.manual_seed(0)
    plain = PlainGPT(args.vocab, args.dim, args.depth, args.heads, args.seq_len).to(device)
    plain_ms = time_steps(plain, args, device)
    name = (
        torch.cuda.get_device_name() if device.type == "cuda" else f"CPU, {args.threads} thread(s)"
    )
    print(
        f"{name}; dim {args.dim}, depth {args.depth}, heads {args.heads}, {args.batch} x "
        f"{args.seq_len} tokens, causal LM, impl={args.impl}; median of {args.steps} steps\n"
    )
    print(
        "| model | params | ms/step | vs plain GPT | rank probe (ms) | probe overhead at eval_every |"
    )
    print("|---|---|---|---|---|---|")
    n_plain = sum(p.numel() for p in plain.parameters())
    print(f"| plain PyTorch GPT | {n_plain:,} | {plain_ms:.2f} | 1.00x | – | – |")
    for mixer in args.mixers:
        torch.manual_seed(0)
        cfg = ModelConfig(
            dim=args.dim,
            depth=args.depth,
            heads=args.heads,
            mixer=mixer,
            causal=True,
            impl=args.impl,
        )
        model = Model(cfg, args.vocab, args.seq_len, vocab_size=args.vocab, head="lm").to(device)
        ms = time_steps(model, args, device)
        probe_ms = time_probe(model, args, device)
        overhead = probe_ms / (probe_ms + args.eval_every * ms)
        print(
            f"| {mixer} | {model.num_parameters():,} | {ms:.2f} | {ms / plain_ms:.2f}x | "
            f"{probe_ms:.2f} | {100 * overhead:.2f}% (every {args.eval_every} steps) |"
        )


if __name__ == "__main__":
    main()
