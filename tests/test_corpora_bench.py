"""scripts/bench_train.py (attnzoo.bench.train) at a tiny size: the plain GPT baseline has exactly
the shape of attnzoo's scaled_dot model, the schedule is the recipe's, and a short run prints both
tables."""

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
    """scripts/bench_train.py as a module: its command line (`_parser`, `DEFAULT_DATA`)."""
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
    from attnzoo.bench.plain_gpt import PlainGPT

    causal = head == "lm"
    out = 65 if causal else 2
    plain = PlainGPT(65, out, 64, dim=32, depth=2, heads=4, head=head)
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


def test_the_plain_gpt_is_probed_for_rank_like_attnzoo_models() -> None:
    """The benchmark measures the baseline's final rank with the trainer's probe: its blocks have
    no `mixer` (so no output gate to capture), and the profile still has a value per state."""
    from attnzoo.bench.plain_gpt import PlainGPT
    from attnzoo.rank import rank_profile

    plain = PlainGPT(65, 65, 64, dim=32, depth=2, heads=4, head="lm")
    # an attention measure hooks the mixers too: a model without them has no weights to read
    measures = ("relative_residual", "attention_entropy")
    profile = rank_profile(plain, torch.randint(0, 65, (2, 10)), None, measures=measures)
    assert len(profile.mean) == 3 and all(0 < float(r) <= 2 for r in profile.mean)
    assert "gate_mean" not in profile.weights


def test_recipes_are_the_experiment_configs_with_the_flags_as_overrides() -> None:
    """`--tasks shakespeare` trains what `python -m attnzoo.train experiment=shakespeare_char`
    trains (nanoGPT's CPU recipe), and each flag overrides its config key."""
    from attnzoo.bench.train import SPLITS
    from attnzoo.train import compose

    bench = load_bench()
    args = bench._parser().parse_args([])
    quiet = ["logger.mode=disabled", "train.progress=false", f"data_dir={bench.DEFAULT_DATA}"]
    for key, experiment in bench.EXPERIMENTS.items():
        split = [f"task.splits={SPLITS[key]}"] if key in SPLITS else []
        want = compose([f"experiment={experiment}", "mixer=metric", *split, *quiet])
        assert bench.recipe(key, args, "metric") == want
    r = bench.recipe("shakespeare", args)
    assert str(r.task.splits.value) == "nanogpt"  # nanoGPT's reference figures are on its own split
    t, m = r.train, r.model
    assert (t.max_steps, t.batch_size, m.dim, m.depth, m.heads, r.task.seq_len) == (
        2000,
        12,
        128,
        4,
        4,
        64,
    )
    assert (t.lr, t.lr * t.min_lr_ratio, t.warmup_steps) == pytest.approx((1e-3, 1e-4, 100))
    assert ((t.beta1, t.beta2), t.weight_decay, t.grad_clip) == ((0.9, 0.99), 0.1, 1.0)
    flags = ["--steps", "7", "--dim", "32", "--seq-len", "16", "--batch", "3", "--no-compile"]
    r = bench.recipe("shakespeare_gpu", bench._parser().parse_args([*flags, "--device", "cpu"]))
    assert (r.train.max_steps, r.model.dim, r.task.seq_len, r.train.batch_size) == (7, 32, 16, 3)
    assert r.train.compile is False and r.train.device.value == "cpu"
    assert r.model.dropout == 0.2 and r.mixer.attn_dropout == 0.2  # the recipe's own


def test_bench_trains_bit_for_bit_like_the_trainer(tmp_path: Path) -> None:
    """The benchmark's figures are the trainer's: one config and seed give the same losses, to
    the bit, through the benchmark's step and through `attnzoo.train.run`."""
    from attnzoo.bench import train as bench
    from attnzoo.tracking import read_metrics
    from attnzoo.train import compose, run

    overrides = [
        "model.dim=16",
        "model.depth=2",
        "model.heads=2",
        "model.dropout=0.1",  # the models draw the same dropout masks too
        "train.batch_size=4",
        "train.max_steps=8",
        "train.warmup_steps=2",
        "train.log_every=1",
        "train.eval_every=100",
        "train.eval_batches=1",
        "train.threads=1",
        "train.device=cpu",
        "train.progress=false",
        "logger.mode=disabled",
    ]
    cfg = compose(overrides)
    run(cfg, tmp_path / "run")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    trained = [r["train/loss"] for r in records if "train/loss" in r]
    task = bench._task(cfg)
    model = bench.build("scaled_dot", task, cfg)
    for step in range(8):
        bench.train_step(model, task, cfg, step)
    assert len(trained) == 8 and model.losses == trained


@pytest.mark.skipif(
    not (SHARED / "tinyshakespeare" / "input.txt").exists(), reason=f"no real corpora in {SHARED}"
)
@pytest.mark.slow  # a subprocess run of the benchmark; bit-for-bit with the trainer stays
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
    for row in rows[1:]:  # probe share: the relative residual alone, then every measure
        alone, every = (float(x.strip(" %")) for x in row.split("|")[9].split("/"))
        assert 0 < alone <= every < 100
    for row in rows[1:]:
        val_loss = float(row.split("|")[3])
        assert math.isfinite(val_loss) and 3.0 < val_loss < 4.5  # ~ln(65)=4.17 after 3 steps


@pytest.mark.skipif(
    not (SHARED / "tinyshakespeare" / "input.txt").exists(), reason=f"no real corpora in {SHARED}"
)
@pytest.mark.slow  # subprocess runs of the benchmark; bit-for-bit with the trainer stays
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
@pytest.mark.slow  # a subprocess run of the GPU recipe's code path
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
