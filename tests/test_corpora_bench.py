"""scripts/bench_train.py at a tiny size: the plain GPT baseline has exactly the shape of attnzoo's
scaled_dot model, the schedule is the recipe's, and a short run prints both tables."""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnzoo.model import Model, ModelConfig

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def load_bench():
    """scripts/bench_train.py as a module (its dataclasses need it in sys.modules)."""
    if "bench_train" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "bench_train", ROOT / "scripts/bench_train.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_train"] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_train"]


@pytest.mark.parametrize("head", ["lm", "classify"])
def test_plain_gpt_has_the_shape_of_scaled_dot_model(head: str) -> None:
    bench = load_bench()
    causal = head == "lm"
    out = 65 if causal else 2
    plain = bench.PlainGPT(65, out, 64, dim=32, depth=2, heads=4, head=head)
    ours = Model(
        ModelConfig(dim=32, depth=2, heads=4, causal=causal), out, 64, vocab_size=65, head=head
    )
    assert plain.num_parameters() == ours.num_parameters()
    shapes = sorted(tuple(p.shape) for p in plain.parameters())
    assert shapes == sorted(tuple(p.shape) for p in ours.parameters())
    idx = torch.randint(0, 65, (3, 10))
    mask = (
        None if causal else torch.arange(10)[None].expand(3, 10) >= torch.tensor([[10], [4], [1]])
    )
    logits, hidden = plain(idx, mask, return_hidden=True)
    assert logits.shape == ((3, 10, out) if causal else (3, out)) and len(hidden) == 3
    if causal:  # causal: a later token never changes an earlier logit
        changed = idx.clone()
        changed[:, -1] = (changed[:, -1] + 1) % 65
        torch.testing.assert_close(plain(changed)[:, :-1], logits[:, :-1])
    else:  # padding: what sits under the mask never changes the output
        changed = torch.where(mask, (idx + 1) % 65, idx)
        torch.testing.assert_close(plain(changed, mask), logits)


def test_recipe_and_schedule_are_the_readme_recipe_on_the_trainer_schedule() -> None:
    bench = load_bench()
    r = bench.RECIPES["shakespeare"]
    assert (r.steps, r.batch_size, r.dim, r.depth, r.heads) == (2000, 12, 128, 4, 4)
    assert (r.lr, r.min_lr, r.warmup, r.betas, r.weight_decay, r.grad_clip) == (
        1e-3,
        1e-4,
        100,
        (0.9, 0.99),
        0.1,
        1.0,
    )
    assert bench.lr_at(0, r) < r.lr / 50  # warming up
    assert bench.lr_at(r.warmup, r) == pytest.approx(r.lr)
    mid = r.warmup + (r.steps - r.warmup) // 2
    assert bench.lr_at(mid, r) == pytest.approx((r.lr + r.min_lr) / 2, rel=1e-3)
    assert bench.lr_at(r.steps, r) == pytest.approx(r.min_lr)
    assert all(bench.lr_at(s + 1, r) <= bench.lr_at(s, r) for s in range(r.warmup, r.steps))


def test_experiment_configs_carry_the_bench_recipes() -> None:
    """`python -m attnzoo.train experiment=...` trains what the bench trains."""
    from attnzoo.train import compose

    bench = load_bench()
    for key, experiment in bench.EXPERIMENTS.items():
        r, cfg = bench.RECIPES[key], compose([f"experiment={experiment}"])
        t, m = cfg.train, cfg.model
        assert cfg.task.name == r.task and cfg.task.seq_len == r.task_options["seq_len"]
        assert (m.dim, m.depth, m.heads) == (r.dim, r.depth, r.heads)
        assert (t.max_steps, t.batch_size, t.lr, t.warmup_steps) == (
            r.steps,
            r.batch_size,
            r.lr,
            r.warmup,
        )
        assert t.lr * t.min_lr_ratio == pytest.approx(r.min_lr)
        assert ((t.beta1, t.beta2), t.weight_decay, t.grad_clip) == (
            r.betas,
            r.weight_decay,
            r.grad_clip,
        )
        assert (m.dropout, t.compile) == (r.dropout, r.compile)
    gpu, cfg = bench.RECIPES["shakespeare_gpu"], compose(["experiment=shakespeare_char_gpu"])
    assert (gpu.steps, gpu.batch_size, gpu.dim, gpu.depth, gpu.heads) == (5000, 64, 384, 6, 6)
    assert (gpu.dropout, gpu.attn_dropout, gpu.compile, gpu.device) == (0.2, 0.2, True, "cuda")
    assert (cfg.train.eval_every, cfg.train.eval_batches) == (gpu.eval_every, gpu.eval_batches)
    assert cfg.mixer.attn_dropout == gpu.attn_dropout


@pytest.mark.skipif(
    not (SHARED / "tinyshakespeare" / "input.txt").exists(), reason=f"no real corpora in {SHARED}"
)
def test_quick_bench_prints_a_table(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        str(ROOT / "scripts/bench_train.py"),
        "--tasks",
        "shakespeare",
        "--mixers",
        "scaled_dot,pooling,gpt",
        "--steps",
        "3",
        "--eval-batches",
        "2",
    ]
    env = {**os.environ, "ATTNZOO_CACHE_DIR": str(tmp_path), "ATTNZOO_OFFLINE": "1"}
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=300)
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    names = [row.split("|")[1].strip() for row in rows[1:]]
    assert names == ["scaled_dot", "pooling", "gpt"]
    gpt = rows[-1].split("|")
    assert gpt[7].strip() == "1.00x"  # the time ratio column
    assert all(float(row.split("|")[9].strip(" %")) < 100 for row in rows[1:])  # probe share
    for row in rows[1:]:
        val_loss = float(row.split("|")[3])
        assert math.isfinite(val_loss) and 3.0 < val_loss < 4.5  # ~ln(65)=4.17 after 3 steps


@pytest.mark.skipif(
    not (SHARED / "tinyshakespeare" / "input.txt").exists(), reason=f"no real corpora in {SHARED}"
)
def test_quick_bench_through_the_trainer(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        str(ROOT / "scripts/bench_train.py"),
        "--tasks",
        "shakespeare",
        "--mixers",
        "identity",
        "--steps",
        "3",
        "--trainer",
    ]
    env = {**os.environ, "ATTNZOO_CACHE_DIR": str(tmp_path), "ATTNZOO_OFFLINE": "1"}
    done = subprocess.run(
        cmd, check=True, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    rows = [line for line in done.stdout.splitlines() if line.startswith("| identity")]
    assert len(rows) == 1
    val_loss = float(rows[0].split("|")[3])
    assert 3.0 < val_loss < 4.5


@pytest.mark.skipif(
    not (SHARED / "tinyshakespeare" / "input.txt").exists(), reason=f"no real corpora in {SHARED}"
)
def test_gpu_recipe_runs_at_a_tiny_size_on_cpu(tmp_path: Path) -> None:
    """The GPU recipe's code path (models one after another, windows of steps, evaluations
    during training, the best kept) on CPU at a tiny shape; its figures need a GPU."""
    cmd = [
        sys.executable,
        str(ROOT / "scripts/bench_train.py"),
        "--tasks",
        "shakespeare_gpu",
        "--mixers",
        "scaled_dot,pooling,gpt",
        "--device",
        "cpu",
        "--no-compile",
        "--steps",
        "20",
        "--eval-every",
        "10",
        "--eval-batches",
        "2",
        "--dim",
        "32",
        "--depth",
        "1",
        "--heads",
        "2",
        "--seq-len",
        "16",
        "--batch",
        "4",
    ]
    env = {**os.environ, "ATTNZOO_CACHE_DIR": str(tmp_path), "ATTNZOO_OFFLINE": "1"}
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=300)
    assert "compile=False, dropout=0.2" in done.stdout
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [c.strip() for c in rows[0]][2:] == [
        "wall (s)",
        "steady ms/step",
        "tokens/s",
        "best val loss (step)",
        "wall vs gpt",
    ]
    assert [row[0].strip() for row in rows[1:]] == ["scaled_dot", "pooling", "gpt"]
    for row in rows[1:]:
        wall, ms, tokens = float(row[2]), float(row[3]), float(row[4].replace(",", ""))
        # ms/step is printed to 2 decimals: its rounding alone moves tokens/s by up to 0.005/ms
        assert wall > 0 and ms > 0
        assert tokens == pytest.approx(4 * 16 / (ms / 1e3), rel=0.01 + 0.005 / ms)
        best, step = row[5].split()
        assert 3.0 < float(best) < 4.5 and step in ("(10)", "(20)")
    assert rows[-1][6].strip() == "1.00x"
    assert done.stderr.count("val loss") == 6  # at steps 10 and 20, for each model
