"""Train / val / test for every task: what each split holds, that val and test never share an
example (memorize aside, by design), that the splits are the same in every run, and that the
whole-split batches cover a split exactly once. On small stand-in corpora with the real layouts."""

from __future__ import annotations

import hashlib
import io
import json
import math
import tarfile
import time
from pathlib import Path

import pytest
import torch

from attnzoo.tasks import build_task
from attnzoo.tasks.imdb import val_digest, val_key
from attnzoo.tasks.shakespeare import split_text

PLAY = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n" * 30
)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("ATTNZOO_CACHE_DIR", str(cache))
    monkeypatch.setenv("ATTNZOO_OFFLINE", "1")
    return cache


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def play_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "play" / "tinyshakespeare" / "input.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(PLAY.encode())
    monkeypatch.setenv("ATTNZOO_TINYSHAKESPEARE_SHA256", sha(PLAY.encode()))
    return tmp_path / "play"


def review(folder: str, label: str, i: int) -> str:
    word = "great" if label == "pos" else "poor"
    return f"Review {folder} {label} {i}: a {word} film" + " indeed" * (i % 5)


def imdb_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, train: int = 10, test: int = 3):
    """A data_dir with an aclImdb archive of `train` reviews of each label in train/ and `test`
    of each in test/, every review's text distinct."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for folder, count in (("train", train), ("test", test)):
            for label in ("pos", "neg"):
                for i in range(count):
                    data = review(folder, label, i).encode()
                    info = tarfile.TarInfo(
                        f"aclImdb/{folder}/{label}/{i}_{7 if label == 'pos' else 2}.txt"
                    )
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "imdb" / "aclImdb_v1.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    monkeypatch.setenv("ATTNZOO_IMDB_SHA256", sha(buffer.getvalue()))
    return tmp_path


def imdb_texts(task, split: str) -> list[str]:
    tokens, offsets, _ = task.data[split]
    return [
        task.encoding.decode(tokens[offsets[i] : offsets[i + 1]].tolist())
        for i in range(len(offsets) - 1)
    ]


IMDB_OPTS = {"seq_len": 64, "tokenizer": "bpe", "bpe_vocab_size": 300}


# --- IMDB -------------------------------------------------------------------------------------


def test_imdb_val_is_a_stratified_slice_of_train_and_test_is_the_test_folder(tmp_path, monkeypatch):
    data = imdb_dir(tmp_path, monkeypatch)
    task = build_task("imdb", str(data), 0, val_size=6, **IMDB_OPTS)
    assert [task.num_examples(s) for s in ("train", "val", "test")] == [14, 6, 6]
    assert task.data["val"][2].tolist().count(1) == 3 == task.data["val"][2].tolist().count(0)
    train, val, test = (imdb_texts(task, s) for s in ("train", "val", "test"))
    everything = {review("train", lab, i) for lab in ("pos", "neg") for i in range(10)}
    assert set(train) | set(val) == everything and not set(train) & set(val)  # a partition
    assert set(test) == {review("test", lab, i) for lab in ("pos", "neg") for i in range(3)}
    for text, label in zip(val, task.data["val"][2].tolist(), strict=True):
        assert (" pos " in text) == (label == 1)  # each review keeps its own label
    # the rule docs/data.md states: of each label, the smallest sha256("<seed>:<label>/<file>")
    for label, rating in (("pos", 7), ("neg", 2)):
        names = [f"{label}/{i}_{rating}.txt" for i in range(10)]
        chosen = sorted(names, key=lambda n: val_key(0, n))[:3]
        assert {review("train", label, int(n.split("/")[1].split("_")[0])) for n in chosen} <= set(
            val
        )
    all_chosen = [
        n
        for lab, r in (("pos", 7), ("neg", 2))
        for n in sorted((f"{lab}/{i}_{r}.txt" for i in range(10)), key=lambda n: val_key(0, n))[:3]
    ]
    assert task.val_digest == val_digest(all_chosen) == task.describe_splits()["val"]["sha256"]


def test_imdb_val_is_the_same_in_every_run_and_moves_with_split_seed(tmp_path, monkeypatch):
    data = imdb_dir(tmp_path, monkeypatch)
    a = build_task("imdb", str(data), 0, val_size=6, **IMDB_OPTS)
    b = build_task("imdb", str(data), 7, val_size=6, **IMDB_OPTS)  # another train.seed
    assert torch.equal(a.val_index, b.val_index) and a.val_digest == b.val_digest
    default = build_task("imdb", str(data), 0, **IMDB_OPTS)  # a tenth of the 20: one of each
    assert default.num_examples("val") == 2 and default.data["val"][2].tolist() == [0, 1]
    c = build_task("imdb", str(data), 0, val_size=6, split_seed=1, **IMDB_OPTS)
    assert not torch.equal(a.val_index, c.val_index) and set(imdb_texts(a, "val")) != set(
        imdb_texts(c, "val")
    )


def test_imdb_token_cache_is_keyed_on_the_split_definition(tmp_path, monkeypatch, _isolated_cache):
    """A tokenised cache is only read for the splits it was made for: another val_size (or
    split_seed) makes another file, never the old one's splits."""
    data = imdb_dir(tmp_path, monkeypatch)

    def caches() -> set[Path]:
        return set((_isolated_cache / "imdb").glob("tokens-*.npz"))

    first = build_task("imdb", str(data), 0, val_size=6, **IMDB_OPTS)
    made = caches()
    again = build_task("imdb", str(data), 0, val_size=6, **IMDB_OPTS)  # read from the cache
    assert caches() == made and len(made) == 1
    assert torch.equal(again.val_index, first.val_index)
    other = build_task("imdb", str(data), 0, val_size=4, **IMDB_OPTS)
    moved = build_task("imdb", str(data), 0, val_size=6, split_seed=1, **IMDB_OPTS)
    assert len(caches()) == 3
    assert other.num_examples("val") == 4 and other.num_examples("train") == 16
    assert moved.val_digest != first.val_digest
    # a file in the old layout (train, and val = the test reviews) under the name is not read
    (cached,) = made
    import numpy as np

    old_layout = {
        f"{split}_{part}": np.zeros(3, dtype=np.int64)
        for split in ("train", "val")
        for part in ("tokens", "offsets", "labels")
    }
    with open(cached, "wb") as f:
        np.savez(f, **old_layout)
    rebuilt = build_task("imdb", str(data), 0, val_size=6, **IMDB_OPTS)
    assert (
        imdb_texts(rebuilt, "val") == imdb_texts(first, "val") and rebuilt.num_examples("test") == 6
    )


@pytest.mark.parametrize(
    ("val_size", "match"), [(5, "even"), (0, "even int"), (20, "only 10"), (True, "even int")]
)
def test_imdb_bad_val_size_names_the_key(tmp_path, monkeypatch, val_size, match):
    data = imdb_dir(tmp_path, monkeypatch)
    with pytest.raises(ValueError, match=match) as err:
        build_task("imdb", str(data), 0, val_size=val_size, **IMDB_OPTS)
    assert "task.val_size" in str(err.value)


def test_imdb_test_is_never_sampled_and_whole_split_covers_it_once(tmp_path, monkeypatch):
    data = imdb_dir(tmp_path, monkeypatch, test=5)
    task = build_task("imdb", str(data), 0, val_size=6, **IMDB_OPTS)
    with pytest.raises(ValueError, match="split"):
        task.batch("test", 4, torch.Generator())
    batches = list(task.whole_split("test", 4))
    assert [b.inputs.shape[0] for b in batches] == [4, 4, 2]
    assert len(task.whole_split("test", 4)) == 3  # the final evaluation's bar total
    tokens, offsets, labels = task.data["test"]
    seen = []
    for b in batches:
        for row, pad in zip(b.inputs, b.key_padding_mask, strict=True):
            assert not pad[: int((~pad).sum())].any()  # right padding, masked
            seen.append(row[~pad].tolist())
    assert seen == [tokens[offsets[i] : offsets[i + 1]].tolist() for i in range(10)]
    assert torch.equal(torch.cat([b.targets for b in batches]), labels)


# --- Tiny Shakespeare -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["shakespeare_char", "shakespeare_bpe"])
def test_shakespeare_splits_partition_the_text_and_nanogpt_keeps_the_old_split(play_dir, name):
    opts = {"seq_len": 8} | ({"bpe_vocab_size": 300} if name == "shakespeare_bpe" else {})
    task = build_task(name, str(play_dir), 0, **opts)
    nano = build_task(name, str(play_dir), 0, splits="nanogpt", **opts)
    assert task.splits == ("train", "val", "test") and nano.splits == ("train", "val")
    text = {s: task.decode(task.ids[s].tolist()) for s in task.splits}
    assert text["train"] + text["val"] + text["test"] == PLAY
    cut = int(len(PLAY) * 0.9)
    assert text["train"] == PLAY[:cut] and text["val"] == PLAY[cut : int(len(PLAY) * 0.95)]
    assert nano.decode(nano.ids["train"].tolist()) == PLAY[:cut]  # nanoGPT's 90 / 10
    assert nano.decode(nano.ids["val"].tolist()) == PLAY[cut:]
    assert torch.equal(task.ids["train"], nano.ids["train"])
    assert split_text(PLAY, "nanogpt") == {"train": PLAY[:cut], "val": PLAY[cut:]}
    with pytest.raises(ValueError, match="split"):
        nano.batch("test", 2, torch.Generator())
    with pytest.raises(ValueError, match="task.splits"):
        build_task(name, str(play_dir), 0, splits="90-10", **opts)


def test_shakespeare_whole_split_predicts_every_token_once(play_dir):
    task = build_task("shakespeare_char", str(play_dir), 0, seq_len=16)
    for split in ("val", "test"):
        ids = task.ids[split]
        batches = list(task.whole_split(split, 5))
        assert len(task.whole_split(split, 5)) == len(batches)  # the final evaluation's bar total
        targets = torch.cat([b.targets.flatten() for b in batches])
        assert torch.equal(targets, ids[1:])  # every token but the first, once, in order
        assert sum(task.count(b) for b in batches) == ids.numel() - 1
        for b in batches:
            assert torch.equal(b.inputs[:, 1:], b.targets[:, :-1]) and b.key_padding_mask is None
        full, tail = divmod(ids.numel() - 1, 16)  # the last, shorter window: a batch of its own
        shapes = [(min(5, full - k), 16) for k in range(0, full, 5)] + ([(1, tail)] if tail else [])
        assert [tuple(b.inputs.shape) for b in batches] == shapes and tail


# --- synthetic tasks --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sort", "convex_hull", "circle"])
def test_synthetic_test_set_is_fixed_and_disjoint_from_val(name):
    task = build_task(name, data_dir="", seed=3, val_size=64, test_size=48)
    val, test = task.fixed_set("val"), task.fixed_set("test")
    assert val.inputs.shape[0] == 64 and test.inputs.shape[0] == 48
    val_rows = {tuple(r.flatten().tolist()) for r in val.inputs}
    assert not any(tuple(r.flatten().tolist()) in val_rows for r in test.inputs)
    again = build_task(name, data_dir="", seed=3, val_size=64, test_size=48).fixed_set("test")
    assert torch.equal(again.inputs, test.inputs) and torch.equal(again.targets, test.targets)
    other = build_task(name, data_dir="", seed=4, val_size=64, test_size=48).fixed_set("test")
    assert not torch.equal(other.inputs, test.inputs)
    whole = list(task.whole_split("test", 10))
    assert [b.inputs.shape[0] for b in whole] == [10, 10, 10, 10, 8]
    assert len(task.whole_split("test", 10)) == 5  # the final evaluation's bar total
    assert torch.equal(torch.cat([b.inputs for b in whole]), test.inputs)
    with pytest.raises(ValueError, match="split"):
        task.batch("test", 4, torch.Generator())


def test_sort_test_set_skips_val_inputs_in_a_small_space():
    """3 labels in 4 positions: 81 sequences, so independent draws would share many; the test
    set leaves out every validation input, and a space too small for both sets is an error."""
    task = build_task(
        "sort", data_dir="", seed=0, seq_len=4, vocab_size=3, val_size=40, test_size=30
    )
    val = {tuple(r.tolist()) for r in task.fixed_set("val").inputs}
    test = [tuple(r.tolist()) for r in task.fixed_set("test").inputs]
    assert len(test) == 30 and not set(test) & val
    full = build_task(
        "sort", data_dir="", seed=0, seq_len=2, vocab_size=2, val_size=64, test_size=4
    )
    with pytest.raises(ValueError, match="task.test_size"):
        full.fixed_set("test")


def test_memorize_splits_are_the_memorised_set():
    task = build_task("memorize", data_dir="", seed=0, num_sequences=20)
    for split in ("val", "test"):
        data = task.fixed_set(split)
        assert torch.equal(data.inputs, task._data.inputs) and data.inputs.shape[0] == 20


# --- the final evaluation ---------------------------------------------------------------------

TINY = [
    "model.dim=16",
    "model.depth=1",
    "model.heads=2",
    "train.batch_size=8",
    "train.max_steps=12",
    "train.warmup_steps=2",
    "train.log_every=4",
    "train.eval_every=8",
    "train.eval_batches=1",
    "train.ckpt_every=4",
    "train.probe_batch_size=4",
    "train.eval_batch_size=7",  # divides no split: the last batch is a short one
    "train.progress=false",
    "train.threads=1",
    "logger.mode=disabled",
    "task.val_size=50",
    "task.test_size=30",
]


@pytest.fixture
def count_final(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of the whole-split evaluation (the trainer's one entry to it)."""
    from attnzoo.train import trainer

    calls: list[int] = []
    original = trainer.evaluate_splits

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(trainer, "evaluate_splits", counted)
    return calls


def trained_model(cfg, run_dir: Path):
    """The model of the run's last checkpoint (the weights the final evaluation scored)."""
    from attnzoo.checkpoint import read_checkpoint
    from attnzoo.train import build_task_and_model

    task, model = build_task_and_model(cfg, Path(cfg.data_dir or "."))
    model.load_state_dict(read_checkpoint(run_dir / "checkpoints" / "last.pt")["model"])
    return task, model.eval()


@torch.no_grad()
def one_by_one(model, task, split: str) -> dict[str, float]:
    """The loss and accuracy over a split, brute force: one example at a time, unpadded,
    averaged over every labelled position (token tasks) or every example (classification)."""
    nats, correct, count, sequences, examples = 0.0, 0, 0, 0, 0
    for batch in task.whole_split(split, 1):
        mask = batch.key_padding_mask
        inputs = batch.inputs if mask is None else batch.inputs[~mask][None]
        logits = model(inputs).reshape(-1, task.out_features).double()
        targets = batch.targets.reshape(-1)
        nats += torch.nn.functional.cross_entropy(logits, targets, reduction="sum").item()
        right = logits.argmax(-1) == targets
        correct, count = correct + int(right.sum()), count + targets.numel()
        sequences, examples = sequences + int(right.all()), examples + 1
    return {"loss": nats / count, "accuracy": correct / count, "all_right": sequences / examples}


def test_final_evaluation_scores_whole_splits_once(tmp_path, monkeypatch, count_final):
    from attnzoo.tracking import WandbRun, read_metrics
    from attnzoo.train import compose, run

    wandb_summary: dict = {}
    monkeypatch.setattr(WandbRun, "summary", lambda self, data: wandb_summary.update(data))
    cfg = compose(TINY)
    summary = run(cfg, tmp_path)
    assert summary["status"] == "completed" and len(count_final) == 1
    final = summary["final"]
    assert (final["val/n"], final["test/n"]) == (50, 30)  # every example of each split, once
    task, model = trained_model(cfg, tmp_path)
    for split in ("val", "test"):
        brute = one_by_one(model, task, split)
        assert final[f"{split}/loss"] == pytest.approx(brute["loss"], rel=1e-5)
        assert final[f"{split}/accuracy"] == pytest.approx(brute["accuracy"], abs=1e-9)
        assert final[f"{split}/sequence_accuracy"] == pytest.approx(brute["all_right"], abs=1e-9)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 4, 8, 12]  # no extra line
    assert {k for k in records[-1] if k.startswith("final/")} == {
        f"final/{s}/{m}"
        for s in ("val", "test")
        for m in ("loss", "accuracy", "sequence_accuracy", "n")
    }
    # the sampled evaluations keep their names; summary.json's val/test numbers are whole-split
    assert records[-1]["val/loss"] != final["val/loss"] and "test/loss" not in records[-1]
    assert summary["time"]["final_eval_s"] > 0
    assert {k: wandb_summary[f"final/{k}"] for k in final if k.startswith(("val/", "test/"))} == {
        k: v for k, v in final.items() if k.startswith(("val/", "test/"))
    }
    assert (
        summary["splits"]["test"]["examples"] == 30
        and summary["splits"]["test"]["excludes"] == "val"
    )


def test_a_resumed_run_writes_the_final_evaluation_of_an_uninterrupted_one(
    tmp_path, monkeypatch, count_final
):
    from attnzoo.tasks.synthetic import Sort
    from attnzoo.train import compose, run

    whole = run(compose(TINY), tmp_path / "whole")
    original, calls = Sort.batch, {"train": 0}

    def crash(self, split, batch_size, generator):
        if split == "train":
            calls["train"] += 1
            if calls["train"] == 10:
                raise RuntimeError("simulated crash")
        return original(self, split, batch_size, generator)

    with monkeypatch.context() as m:
        m.setattr(Sort, "batch", crash)
        with pytest.raises(RuntimeError, match="simulated"):
            run(compose(TINY), tmp_path / "cut")
    assert "test/n" not in json.loads((tmp_path / "cut" / "summary.json").read_text())["final"]
    count_final.clear()
    resumed = run(compose([*TINY, "train.resume=true"]), tmp_path / "cut")
    assert resumed["status"] == "completed" and resumed["resumed_from"] == 8
    assert len(count_final) == 1
    keys = [k for k in whole["final"] if k.startswith(("val/", "test/"))]
    assert {k: resumed["final"][k] for k in keys} == {k: whole["final"][k] for k in keys}
    # started again at its end, the run keeps its final evaluation instead of redoing it
    count_final.clear()
    again = run(compose([*TINY, "train.resume=true"]), tmp_path / "cut")
    assert not count_final and {k: again["final"][k] for k in keys} == {
        k: whole["final"][k] for k in keys
    }


def test_a_run_stopped_by_its_budget_is_evaluated_whole(tmp_path, count_final):
    from attnzoo.train import compose, run

    cfg = compose([*TINY, "train.max_steps=100000", "train.max_seconds=0.3"])
    summary = run(cfg, tmp_path)
    assert summary["status"] == "completed" and summary["compute"]["stopped_by"] == "seconds"
    assert summary["step"] < 100000 and len(count_final) == 1
    assert (summary["final"]["val/n"], summary["final"]["test/n"]) == (50, 30)


def test_seconds_that_run_out_after_a_steps_check_still_say_the_budget_stopped_it(
    tmp_path, monkeypatch
):
    """The seconds may run out between the step's own check and the loop's (in the step's
    logging): the run is still stopped by its seconds, not by nothing."""
    from attnzoo.train import compose, run, trainer

    check = trainer.Trainer.check_nonfinite

    def slow_check(self):  # the logging of step 1 outlasts the whole budget
        if self.state.step == 1:
            time.sleep(0.4)
        return check(self)

    monkeypatch.setattr(trainer.Trainer, "check_nonfinite", slow_check)
    cfg = compose([*TINY, "train.max_steps=100000", "train.max_seconds=0.3", "train.log_every=1"])
    summary = run(cfg, tmp_path)
    assert summary["status"] == "completed" and summary["compute"]["stopped_by"] == "seconds"
    assert summary["step"] == 1


def test_a_diverged_run_has_no_final_evaluation(tmp_path, monkeypatch, count_final):
    from attnzoo.tasks.synthetic import Sort
    from attnzoo.train import compose, run

    original, calls = Sort.loss, {"n": 0}

    def loss(self, logits, batch):  # NaN at the 10th training step
        calls["n"] += logits.requires_grad
        value = original(self, logits, batch)
        return value * float("nan") if calls["n"] == 10 and logits.requires_grad else value

    monkeypatch.setattr(Sort, "loss", loss)
    summary = run(compose(TINY), tmp_path)
    assert summary["status"] == "diverged" and not count_final
    assert not any(k.endswith("/n") or k.startswith("test/") for k in summary["final"])


def test_imdb_final_evaluation_masks_padding_and_counts_every_review(
    tmp_path, monkeypatch, count_final
):
    from attnzoo.train import compose, run

    data = imdb_dir(tmp_path / "data", monkeypatch, train=8, test=5)
    cfg = compose(
        [
            *TINY[:-2],
            "task=imdb",
            f"data_dir={data}",
            "task.val_size=4",
            "task.seq_len=16",
            "task.tokenizer=bpe",
            "task.bpe_vocab_size=300",
            "train.eval_batch_size=3",
        ]
    )
    summary = run(cfg, tmp_path / "run")
    final = summary["final"]
    assert (final["val/n"], final["test/n"]) == (4, 10) and len(count_final) == 1
    task, model = trained_model(cfg, tmp_path / "run")
    for split in ("val", "test"):
        brute = one_by_one(model, task, split)  # each review alone: no padding at all
        assert final[f"{split}/loss"] == pytest.approx(brute["loss"], rel=1e-5)
        assert final[f"{split}/accuracy"] == pytest.approx(brute["accuracy"], abs=1e-9)
    assert summary["splits"]["val"]["sha256"] == task.val_digest


def test_language_model_final_evaluation_counts_predicted_tokens(play_dir):
    from attnzoo.model import Model, ModelConfig
    from attnzoo.train import evaluate_splits

    task = build_task("shakespeare_char", str(play_dir), 0, seq_len=16)
    model = Model(
        ModelConfig(dim=16, depth=1, heads=2, causal=True),
        task.vocab_size,
        16,
        vocab_size=task.vocab_size,
        head="lm",
    ).eval()
    five = evaluate_splits(model, task, 5, torch.device("cpu"))
    one = evaluate_splits(model, task, 1, torch.device("cpu"))
    for split in ("val", "test"):
        assert five[f"{split}/n"] == task.ids[split].numel() - 1  # tokens, not windows
        for metric in ("loss", "accuracy", "bits_per_char"):
            assert five[f"{split}/{metric}"] == pytest.approx(one[f"{split}/{metric}"], rel=1e-5)
        assert five[f"{split}/bits_per_char"] == pytest.approx(five[f"{split}/loss"] / math.log(2))
    nano = build_task("shakespeare_char", str(play_dir), 0, seq_len=16, splits="nanogpt")
    assert set(evaluate_splits(model, nano, 8, torch.device("cpu"))) == {
        "val/loss",
        "val/accuracy",
        "val/bits_per_char",
        "val/n",
    }


def test_a_run_resumed_with_its_budget_spent_is_evaluated_on_its_last_line(
    tmp_path, monkeypatch, count_final
):
    """Cut at step 9 (checkpoint at 8), then resumed with a wall-time budget already used up:
    no step is taken, the run completes, and the final evaluation joins step 8's line."""
    from attnzoo.tasks.synthetic import Sort
    from attnzoo.tracking import read_metrics
    from attnzoo.train import compose, run

    original = Sort.batch
    calls = {"train": 0}

    def crash(self, split, batch_size, generator):
        calls["train"] += split == "train"
        if calls["train"] == 9 and split == "train":
            raise RuntimeError("simulated crash")
        return original(self, split, batch_size, generator)

    with monkeypatch.context() as m:
        m.setattr(Sort, "batch", crash)
        with pytest.raises(RuntimeError, match="simulated"):
            run(compose(TINY), tmp_path)
    count_final.clear()
    spent = ["train.resume=true", "train.extend=true", "train.max_seconds=1e-9"]
    summary = run(compose([*TINY, *spent]), tmp_path)
    assert summary["status"] == "completed" and summary["step"] == 8 and len(count_final) == 1
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 4, 8]  # one line per step still
    assert records[-1]["final/test/n"] == summary["final"]["test/n"] == 30
    assert "train/loss" in records[-1]  # the step's own numbers kept beside the final ones


def test_a_tuning_run_can_leave_test_unread(tmp_path, count_final):
    from attnzoo.config import ConfigError
    from attnzoo.train import compose, run

    summary = run(compose([*TINY, "train.final_splits=[val]"]), tmp_path)
    assert len(count_final) == 1 and summary["final"]["val/n"] == 50
    assert not any(k.startswith("test/") for k in summary["final"])
    for bad, match in (
        ("[val,train]", "train.final_splits.*'train'"),
        ("[val,val]", "no split twice"),
    ):
        with pytest.raises(ConfigError, match=match):
            run(compose([*TINY, f"train.final_splits={bad}"]), tmp_path / "bad")
