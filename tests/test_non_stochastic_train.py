"""The mixers whose weights are not a distribution train through the trainer on each kind of
task: DeltaNet (both forms) and sigmoid attention on sorting, Tiny Shakespeare (a small play
written here) and MQAR, and the two sink options on every softmax mixer; each run logs its
layers' mean row sum and sink share beside the collapse measures."""

from __future__ import annotations

import hashlib
import math

import pytest

from attnzoo.rank import WEIGHT_STATS
from attnzoo.tracking import read_metrics
from attnzoo.train import compose, run

PLAY = "".join(
    f"ROMEO {i}:\nBut soft, what light through yonder window breaks?\n" for i in range(60)
)
TASKS = {
    "sort": ["task=sort", "task.seq_len=8", "task.val_size=64", "task.test_size=64"],
    "shakespeare": ["task=shakespeare_char", "task.seq_len=16", "task.download=false"],
    "mqar": [
        "task=mqar",
        "task.vocab_size=16",
        "task.seq_len=12",
        "task.num_kv_pairs=3",
        "task.val_size=32",
        "task.test_size=32",
    ],
}
MIXERS = {
    "deltanet": ["mixer=deltanet"],
    "gated deltanet": ["mixer=deltanet", "mixer.gated=true"],
    "sigmoid": ["mixer=sigmoid"],
}
# each softmax mixer with each sink, the tasks taken in turn
SINKS = [
    (mixer, sink, task)
    for i, (mixer, sink) in enumerate(
        (m, s)
        for m in ("scaled_dot", "quadratic", "metric", "local")
        for s in ("learned", "zero_kv")
    )
    for task in [list(TASKS)[i % len(TASKS)]]
]


@pytest.fixture
def play(tmp_path, monkeypatch):
    path = tmp_path / "data" / "tinyshakespeare" / "input.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(PLAY.encode())
    monkeypatch.setenv("ATTNZOO_TINYSHAKESPEARE_SHA256", hashlib.sha256(PLAY.encode()).hexdigest())
    return tmp_path / "data"


def train(mixer: list[str], task: str, data, tmp_path) -> list[dict]:
    overrides = [
        *TASKS[task],
        *mixer,
        f"data_dir={data}",
        "model.dim=16",
        "model.depth=2",
        "model.heads=2",
        "train.batch_size=8",
        "train.max_steps=4",
        "train.warmup_steps=1",
        "train.log_every=2",
        "train.eval_every=4",
        "train.eval_batches=1",
        "train.eval_batch_size=512",  # the final evaluation in a few batches
        "train.probe_batch_size=4",
        "train.progress=false",
        "logger.mode=disabled",
    ]
    out = tmp_path / "run"
    out.mkdir()
    summary = run(compose(overrides), out)
    assert summary["status"] == "completed" and summary["step"] == 4
    assert math.isfinite(summary["final"]["test/loss"])
    return read_metrics(out / "metrics.jsonl")


def logged_weights(rows: list[dict]) -> dict[str, float]:
    last = [r for r in rows if "attention/row_sum/layer_1" in r][-1]
    return {k: v for k, v in last.items() if k.startswith("attention/")}


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("mixer", list(MIXERS))
@pytest.mark.sample(2)
def test_deltanet_and_sigmoid_train_on_each_task_and_log_row_sums(mixer, task, play, tmp_path):
    weights = logged_weights(train(MIXERS[mixer], task, play, tmp_path))
    assert set(weights) == {f"attention/{s}/layer_{k}" for s in WEIGHT_STATS for k in (1, 2)}
    assert all(math.isfinite(v) for v in weights.values())
    assert all(0 <= weights[f"attention/sink_share/layer_{k}"] <= 1 for k in (1, 2))


@pytest.mark.parametrize(("mixer", "sink", "task"), SINKS)
@pytest.mark.sample(3)
def test_every_softmax_mixer_trains_with_each_sink(mixer, sink, task, play, tmp_path):
    """A sink takes some of each row's mass: the logged row sums are below 1, never above."""
    rows = train([f"mixer={mixer}", f"mixer.sink={sink}"], task, play, tmp_path)
    weights = logged_weights(rows)
    sums = [weights[f"attention/row_sum/layer_{k}"] for k in (1, 2)]
    assert all(0 < s < 1 for s in sums), sums


@pytest.mark.parametrize(
    ("mixer", "says"),
    [
        (["mixer=sigmoid"], "the rows of SigmoidAttention's weights need not sum to 1"),
        (["mixer=scaled_dot", "mixer.sink=learned"], "its sink (learned) takes part of each row"),
    ],
)
def test_the_entropy_note_says_why_the_rows_are_not_distributions(
    mixer, says, play, tmp_path, capsys
):
    """Neither mixer has a hidden attention matrix (a recurrent mixer's): the note at the start
    of the run says what they have instead."""
    train(mixer, "sort", play, tmp_path)
    err = capsys.readouterr().err
    assert f"rank/attention_entropy: not available for this mixer ({says}" in err, err
    assert "hidden attention matrix" not in err
