"""The synthetic tasks of Dong, Cordonnier & Loukas (2021): sorting, convex hull, the circle and
memorisation. Every example is generated from the seed (no files, no download), so two runs with
the same seed see the same data, and a resumed run sees the same batches as an uninterrupted one
(the trainer checkpoints the generator it passes to `batch`).

Train batches are drawn fresh from the trainer's generator (an endless stream). Validation and
test are fixed sets of `val_size` and `test_size` examples, each drawn once from the seed on a
stream of its own; the test set leaves out any example whose input is also in the validation set
(only possible for token inputs, in a small input space), so the two never share an example.
Evaluations during training sample the validation set; the final evaluation scores both sets
whole.
"""

from __future__ import annotations

import math

import torch

from attnzoo.tasks import Batch, Batches, Task, register_task

# The validation and test sets are drawn from streams of their own, so that they never depend on
# the training stream's state, whatever the trainer's generator does.
_VAL_STREAM = 0x5EED
_TEST_STREAM = 0x7E57
_TEST_ROUNDS = 64  # draws of `test_size` candidates before a too-small input space is an error


def _stream(seed: int, stream: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + stream)


def _check_positive(**values: int) -> None:
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"task.{key} must be a positive int, got {value!r}")


class _FixedSetsTask(Task):
    """A task whose validation and test splits are fixed sets drawn once from the seed."""

    val_size: int
    test_size: int
    seed: int

    def _make(self, n: int, generator: torch.Generator) -> Batch:
        raise NotImplementedError

    def _val_set(self) -> Batch:
        if not hasattr(self, "_val"):
            self._val = self._make(self.val_size, _stream(self.seed, _VAL_STREAM))
        return self._val

    def _test_set(self) -> Batch:
        """`test_size` examples from the test stream, skipping any whose input is in the
        validation set."""
        if not hasattr(self, "_test"):
            val_inputs = {row.numpy().tobytes() for row in self._val_set().inputs}
            g = _stream(self.seed, _TEST_STREAM)
            inputs, targets, kept = [], [], 0
            for _ in range(_TEST_ROUNDS):
                draw = self._make(self.test_size, g)
                fresh = torch.tensor(
                    [row.numpy().tobytes() not in val_inputs for row in draw.inputs],
                    dtype=torch.bool,
                )
                inputs.append(draw.inputs[fresh])
                targets.append(draw.targets[fresh])
                kept += int(fresh.sum())
                if kept >= self.test_size:
                    break
            else:
                raise ValueError(
                    f"task.test_size={self.test_size}: only {kept} examples outside the "
                    f"validation set (task.val_size={self.val_size}) were drawn; the input space "
                    "is too small for both sets: lower task.val_size or task.test_size, or make "
                    "the inputs longer or their vocabulary larger"
                )
            self._test = Batch(
                torch.cat(inputs)[: self.test_size], torch.cat(targets)[: self.test_size]
            )
        return self._test

    def fixed_set(self, split: str) -> Batch:
        """The whole validation or test set."""
        if split == "val":
            return self._val_set()
        if split == "test":
            return self._test_set()
        raise ValueError(f"split must be 'val' or 'test' (fixed sets), got {split!r}")

    def batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        if split == "train":
            return self._make(batch_size, generator)
        if split == "val":
            # Draw val examples with `generator` so the trainer decides which ones (it reseeds the
            # generator at every evaluation, so each evaluation sees the same examples).
            val = self._val_set()
            idx = torch.randint(0, val.inputs.shape[0], (batch_size,), generator=generator)
            return Batch(val.inputs[idx], val.targets[idx])
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")

    def whole_split(self, split: str, batch_size: int) -> Batches:
        data = self.fixed_set(split)
        starts = range(0, data.inputs.shape[0], batch_size)
        rows = (slice(i, i + batch_size) for i in starts)
        return Batches((Batch(data.inputs[r], data.targets[r]) for r in rows), len(starts))

    def describe_splits(self) -> dict[str, dict[str, object]]:
        return {
            "train": {"examples": "drawn afresh at every step from train.seed"},
            "val": {"examples": self.val_size, "seed": self.seed, "stream": _VAL_STREAM},
            "test": {
                "examples": self.test_size,
                "seed": self.seed,
                "stream": _TEST_STREAM,
                "excludes": "val",
            },
        }


@register_task("sort")
class Sort(_FixedSetsTask):
    """Sort a sequence of `seq_len` labels from `vocab_size`: at each position predict the label
    the sorted sequence has there (per-token classification, no causal mask)."""

    head = "token"
    metric = "accuracy"

    def __init__(
        self,
        data_dir: str = "",
        seed: int = 0,
        seq_len: int = 8,
        vocab_size: int = 10,
        val_size: int = 4096,
        test_size: int = 4096,
    ) -> None:
        _check_positive(
            seq_len=seq_len, vocab_size=vocab_size, val_size=val_size, test_size=test_size
        )
        self.seed, self.seq_len, self.val_size, self.test_size = seed, seq_len, val_size, test_size
        self.vocab_size = vocab_size
        self.out_features = vocab_size
        self.max_len = seq_len

    def _make(self, n: int, generator: torch.Generator) -> Batch:
        x_bn = torch.randint(0, self.vocab_size, (n, self.seq_len), generator=generator)
        return Batch(x_bn, x_bn.sort(dim=1).values)

    def totals(self, logits: torch.Tensor, batch: Batch) -> dict[str, tuple[torch.Tensor, int]]:
        """Loss and accuracy per position, and `sequence_accuracy`: the share of sequences
        sorted right at every position."""
        out = super().totals(logits, batch)
        correct_bn = logits.argmax(-1) == batch.targets
        out["sequence_accuracy"] = (correct_bn.all(dim=1).sum(), correct_bn.shape[0])
        return out


def hull_membership(points_bn2: torch.Tensor) -> torch.Tensor:
    """(B, N) bool: True where a point is a vertex of its set's convex hull (Andrew's monotone
    chain; collinear points on an edge are not vertices)."""
    out = torch.zeros(points_bn2.shape[:2], dtype=torch.bool)
    for b, pts in enumerate(points_bn2.tolist()):
        order = sorted(range(len(pts)), key=lambda i: (pts[i][0], pts[i][1]))

        def cross(o: int, a: int, c: int, pts: list = pts) -> float:
            return (pts[a][0] - pts[o][0]) * (pts[c][1] - pts[o][1]) - (pts[a][1] - pts[o][1]) * (
                pts[c][0] - pts[o][0]
            )

        def chain(idx: list[int]) -> list[int]:
            kept: list[int] = []
            for i in idx:
                while len(kept) >= 2 and cross(kept[-2], kept[-1], i) <= 0:
                    kept.pop()
                kept.append(i)
            return kept

        for i in chain(order) + chain(order[::-1]):
            out[b, i] = True
    return out


@register_task("convex_hull")
class ConvexHull(_FixedSetsTask):
    """`num_points` points uniform in the unit square; for each, predict whether it is a vertex of
    the set's convex hull (per-point binary classification, inputs are 2-d vectors)."""

    head = "token"
    metric = "accuracy"

    def __init__(
        self,
        data_dir: str = "",
        seed: int = 0,
        num_points: int = 10,
        val_size: int = 4096,
        test_size: int = 4096,
    ) -> None:
        _check_positive(num_points=num_points, val_size=val_size, test_size=test_size)
        if num_points < 3:
            raise ValueError(f"task.num_points must be at least 3, got {num_points}")
        self.seed, self.num_points = seed, num_points
        self.val_size, self.test_size = val_size, test_size
        self.in_features, self.out_features = 2, 2
        self.max_len = num_points

    def _make(self, n: int, generator: torch.Generator) -> Batch:
        pts_bn2 = torch.rand(n, self.num_points, 2, generator=generator)
        return Batch(pts_bn2, hull_membership(pts_bn2).long())


@register_task("circle")
class Circle(_FixedSetsTask):
    """`num_points` points at random angles on a circle (random centre and radius), given in random
    order; for each point, regress the coordinates of the next point counter-clockwise. Solving it
    needs tokens to look at each other, and run with a recurrent one-layer model
    (`experiment=circle`) it shows whether repeated mixing drives the points to one place.

    Loss: mean squared error. Metric: `successor_accuracy`, the share of points whose prediction is
    closest to the right successor among the set's points (higher is better); `mse` is logged too.
    """

    head = "token"
    metric = "successor_accuracy"

    def __init__(
        self,
        data_dir: str = "",
        seed: int = 0,
        num_points: int = 8,
        val_size: int = 4096,
        test_size: int = 4096,
    ) -> None:
        _check_positive(num_points=num_points, val_size=val_size, test_size=test_size)
        if num_points < 2:
            raise ValueError(f"task.num_points must be at least 2, got {num_points}")
        self.seed, self.num_points = seed, num_points
        self.val_size, self.test_size = val_size, test_size
        self.in_features, self.out_features = 2, 2
        self.max_len = num_points

    def _make(self, n: int, generator: torch.Generator) -> Batch:
        k = self.num_points
        angle_bk = torch.rand(n, k, generator=generator) * (2 * math.pi)
        centre_b12 = (torch.rand(n, 1, 2, generator=generator) - 0.5) * 2
        radius_b11 = 0.5 + torch.rand(n, 1, 1, generator=generator)
        pts_bk2 = centre_b12 + radius_b11 * torch.stack([angle_bk.cos(), angle_bk.sin()], -1)
        order_bk = angle_bk.argsort(dim=1)
        # successor of the point with rank r in angular order is the point with rank r+1 (cyclic)
        succ_bk = torch.empty_like(order_bk)
        succ_bk.scatter_(1, order_bk, order_bk.roll(-1, dims=1))
        target_bk2 = torch.gather(pts_bk2, 1, succ_bk[..., None].expand(-1, -1, 2))
        return Batch(pts_bk2, target_bk2)

    def loss(self, logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        return torch.nn.functional.mse_loss(logits.float(), batch.targets.float())

    def totals(self, logits: torch.Tensor, batch: Batch) -> dict[str, tuple[torch.Tensor, int]]:
        pred_bk2, pts_bk2, target_bk2 = logits.float(), batch.inputs.float(), batch.targets.float()
        nearest_bk = torch.cdist(pred_bk2, pts_bk2).argmin(-1)
        true_bk = torch.cdist(target_bk2, pts_bk2).argmin(-1)
        squared = ((pred_bk2 - target_bk2) ** 2).sum()
        return {
            "loss": (squared, pred_bk2.numel()),
            "successor_accuracy": ((nearest_bk == true_bk).sum(), nearest_bk.numel()),
            "mse": (squared, pred_bk2.numel()),
        }


@register_task("memorize")
class Memorize(_FixedSetsTask):
    """Memorise random labels: `num_sequences` random token sequences, each with a random class out
    of `num_classes`. The validation and test splits are the training set itself — the task
    measures how much a model can store, not how it generalises (the one task whose test is not
    disjoint from its validation set)."""

    head = "classify"
    metric = "accuracy"

    def __init__(
        self,
        data_dir: str = "",
        seed: int = 0,
        num_sequences: int = 512,
        seq_len: int = 16,
        vocab_size: int = 16,
        num_classes: int = 2,
    ) -> None:
        _check_positive(
            num_sequences=num_sequences,
            seq_len=seq_len,
            vocab_size=vocab_size,
            num_classes=num_classes,
        )
        self.seed, self.seq_len = seed, seq_len
        self.vocab_size, self.out_features, self.max_len = vocab_size, num_classes, seq_len
        g = _stream(seed, _VAL_STREAM)
        self._data = Batch(
            torch.randint(0, vocab_size, (num_sequences, seq_len), generator=g),
            torch.randint(0, num_classes, (num_sequences,), generator=g),
        )
        self.val_size = self.test_size = num_sequences

    def _val_set(self) -> Batch:
        return self._data

    def _test_set(self) -> Batch:
        return self._data

    def describe_splits(self) -> dict[str, dict[str, object]]:
        same = {"examples": self.val_size, "seed": self.seed, "stream": _VAL_STREAM}
        return {"train": same, "val": same, "test": same}

    def batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        idx = torch.randint(0, self._data.inputs.shape[0], (batch_size,), generator=generator)
        return Batch(self._data.inputs[idx], self._data.targets[idx])
