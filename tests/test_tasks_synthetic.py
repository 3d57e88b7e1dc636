"""The paper's synthetic tasks: shapes, determinism from the seed, and metrics that score the right
answer as right."""

import pytest
import torch

from attnzoo.tasks import TASKS, build_task
from attnzoo.tasks.synthetic import hull_membership

SYNTHETIC = ("sort", "convex_hull", "circle", "memorize")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name", SYNTHETIC)
def test_registered_shapes_and_determinism(name):
    assert name in TASKS
    task = build_task(name, data_dir="", seed=3)
    for split in ("train", "val"):
        a = task.batch(split, 5, _gen(1))
        b = build_task(name, data_dir="", seed=3).batch(split, 5, _gen(1))
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
        assert a.inputs.shape[:2] == (5, task.max_len)
        if task.vocab_size is not None:
            assert a.inputs.dtype == torch.long and int(a.inputs.max()) < task.vocab_size
        else:
            assert a.inputs.shape[-1] == task.in_features
        if task.head == "classify":
            assert a.targets.shape == (5,)
        else:
            assert a.targets.shape[:2] == (5, task.max_len)
    # another generator state gives other training examples
    c = task.batch("train", 5, _gen(2))
    assert not torch.equal(c.inputs, task.batch("train", 5, _gen(1)).inputs)


@pytest.mark.parametrize("name", ("sort", "convex_hull", "circle"))
def test_val_set_depends_on_seed_only(name):
    a = build_task(name, data_dir="", seed=0).batch("val", 8, _gen(5))
    b = build_task(name, data_dir="", seed=1).batch("val", 8, _gen(5))
    assert not torch.equal(a.inputs, b.inputs)


def _one_hot_logits(targets: torch.Tensor, classes: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(targets, classes).float() * 10


def test_sort_targets_and_metric():
    task = build_task("sort", data_dir="", seed=0, seq_len=6, vocab_size=7)
    batch = task.batch("train", 16, _gen())
    assert torch.equal(batch.targets, batch.inputs.sort(dim=1).values)
    perfect = task.metrics(_one_hot_logits(batch.targets, 7), batch)
    assert perfect == {"accuracy": 1.0, "sequence_accuracy": 1.0}
    wrong = batch.targets.clone()
    wrong[:, 0] = (wrong[:, 0] + 1) % 7
    m = task.metrics(_one_hot_logits(wrong, 7), batch)
    assert m["accuracy"] == pytest.approx(5 / 6) and m["sequence_accuracy"] == 0.0


def test_convex_hull_membership_on_known_sets():
    square_and_centre = torch.tensor([[[0.0, 0], [1, 0], [1, 1], [0, 1], [0.5, 0.5]]])
    assert hull_membership(square_and_centre).tolist() == [[True, True, True, True, False]]
    triangle_with_edge_point = torch.tensor([[[0.0, 0], [2, 0], [1, 2], [1, 0], [1, 0.5]]])
    assert hull_membership(triangle_with_edge_point).tolist() == [[True, True, True, False, False]]
    task = build_task("convex_hull", data_dir="", seed=0)
    batch = task.batch("train", 32, _gen())
    # at least 3 hull vertices per set, and never all 10 for uniform points... on average
    per_set = batch.targets.sum(1)
    assert bool((per_set >= 3).all()) and float(per_set.float().mean()) < task.num_points
    assert task.metrics(_one_hot_logits(batch.targets, 2), batch)["accuracy"] == 1.0


def test_circle_successor_is_next_counter_clockwise():
    task = build_task("circle", data_dir="", seed=0, num_points=5)
    batch = task.batch("train", 4, _gen())
    pts, tgt = batch.inputs, batch.targets
    centre = pts.mean(1, keepdim=True)  # not the circle's centre, but a point inside the polygon
    angle = torch.atan2(*(pts - centre).unbind(-1)[::-1])
    for b in range(4):
        order = angle[b].argsort().tolist()
        for r, i in enumerate(order):
            assert torch.allclose(tgt[b, i], pts[b, order[(r + 1) % 5]])
    perfect = task.metrics(tgt.clone(), batch)
    assert perfect["successor_accuracy"] == 1.0 and perfect["mse"] == 0.0
    assert task.loss(tgt.clone(), batch).item() == 0.0
    stay = task.metrics(pts.clone(), batch)  # predicting the point itself is always wrong
    assert stay["successor_accuracy"] == 0.0 and stay["mse"] > 0
    assert task.higher_is_better


def test_memorize_val_is_the_training_set():
    task = build_task("memorize", data_dir="", seed=0, num_sequences=20, num_classes=3)
    train = task.batch("train", 500, _gen(1))
    val = task.batch("val", 500, _gen(2))
    label = {
        tuple(x): y for x, y in zip(train.inputs.tolist(), train.targets.tolist(), strict=True)
    }
    assert len(label) == 20  # 500 draws from 20 sequences see all of them
    for x, y in zip(val.inputs.tolist(), val.targets.tolist(), strict=True):
        assert label[tuple(x)] == y  # every val sequence is a training one, with its label
    assert task.metrics(_one_hot_logits(val.targets, 3), val)["accuracy"] == 1.0


@pytest.mark.parametrize(
    "name,bad",
    [
        ("sort", {"seq_len": 0}),
        ("convex_hull", {"num_points": 2}),
        ("memorize", {"num_classes": -1}),
    ],
)
def test_bad_options_name_the_key(name, bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        build_task(name, data_dir="", seed=0, **bad)
