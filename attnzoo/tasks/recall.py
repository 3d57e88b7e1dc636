"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology", arXiv 2312.04927), laid
out as Zoology's `multiquery_ar` lays it out.

A sequence of `seq_len` tokens starts with `num_kv_pairs` key-value pairs, `k1 v1 k2 v2 ...`:
keys are drawn without replacement from the lower half of the vocabulary (token 0 left out),
values without replacement from the upper half. The rest of the sequence holds the queries:
`num_queries` of the keys (all of them by default, each once), each at an even offset from the
end of the pairs, offset 2·g for a gap g drawn without replacement from 0 .. space-1,
space = (seq_len - 2·num_kv_pairs) // 2, with probability proportional to a·(g+1)^(a-1)
(`power_a`, Zoology's 0.01: small gaps likelier). The queried pairs (a uniform choice of
`num_queries`), in the order they appear, take the gaps in the order drawn, as Zoology's do: with
every key queried, the i-th pair's key is queried at the i-th gap drawn. The model reads left to right (causal) and at a query's position predicts
that key's value; every other position has target -100 and carries no loss and no score. The
positions that are neither pairs nor queries hold random tokens from the whole vocabulary
(`random_non_queries`, Zoology's default), or 0.

Splits as the other synthetic tasks: validation and test are fixed sets drawn once from streams
of their own (derived from `train.seed`), the test set leaves out any example in the validation
set, and here training batches also redraw any example that is in either set, so that no
held-out example is ever trained on, however small the space.
"""

from __future__ import annotations

import torch

from attnzoo.tasks import Batch, register_task
from attnzoo.tasks.synthetic import _check_positive, _FixedSetsTask

_TRAIN_ROUNDS = 64  # redraws of held-out examples before a too-small space is an error


@register_task("mqar")
class MultiQueryAR(_FixedSetsTask):
    """Multi-query associative recall: key-value pairs, then queries of those keys; at each query
    predict its key's value (causal; loss and accuracy on the queried positions only)."""

    head = "lm"
    causal = True
    metric = "accuracy"

    def __init__(
        self,
        data_dir: str = "",
        seed: int = 0,
        vocab_size: int = 256,
        seq_len: int = 64,
        num_kv_pairs: int = 8,
        num_queries: int | None = None,
        power_a: float = 0.01,
        random_non_queries: bool = True,
        val_size: int = 4096,
        test_size: int = 4096,
    ) -> None:
        if num_queries is None:
            num_queries = num_kv_pairs
        _check_positive(
            vocab_size=vocab_size,
            seq_len=seq_len,
            num_kv_pairs=num_kv_pairs,
            num_queries=num_queries,
            val_size=val_size,
            test_size=test_size,
        )
        keys, values = vocab_size // 2 - 1, vocab_size - vocab_size // 2
        if num_kv_pairs > min(keys, values):
            raise ValueError(
                f"task.vocab_size={vocab_size} is too small for task.num_kv_pairs={num_kv_pairs} "
                f"distinct keys (tokens 1..vocab_size//2-1: {keys}) and distinct values (tokens "
                f"vocab_size//2..vocab_size-1: {values}); allowed: vocab_size >= "
                f"{2 * num_kv_pairs + 2}, or fewer pairs"
            )
        if num_queries > num_kv_pairs:
            raise ValueError(
                f"task.num_queries={num_queries} is more than task.num_kv_pairs={num_kv_pairs}: "
                "each key is queried at most once; allowed: 1..num_kv_pairs (null: all of them)"
            )
        space = (seq_len - 2 * num_kv_pairs) // 2
        if num_queries > space:
            raise ValueError(
                f"task.seq_len={seq_len} is too short for task.num_kv_pairs={num_kv_pairs} and "
                f"task.num_queries={num_queries}: the pairs take 2*num_kv_pairs tokens and each "
                f"query an even slot after them; allowed: seq_len >= "
                f"{2 * num_kv_pairs + 2 * num_queries} (2*num_kv_pairs + 2*num_queries)"
            )
        if isinstance(power_a, bool) or not isinstance(power_a, (int, float)) or power_a <= 0:
            raise ValueError(f"task.power_a must be a positive number, got {power_a!r}")
        self.seed, self.seq_len, self.val_size, self.test_size = seed, seq_len, val_size, test_size
        self.num_kv_pairs, self.num_queries = num_kv_pairs, num_queries
        self.power_a, self.random_non_queries = float(power_a), bool(random_non_queries)
        self.vocab_size = self.out_features = vocab_size
        self.max_len = seq_len
        gap = torch.arange(1, space + 1, dtype=torch.float64)
        self.gap_probs = (self.power_a * gap ** (self.power_a - 1)).float()  # unnormalised

    def _make(self, n: int, generator: torch.Generator) -> Batch:
        kv, nq, half = self.num_kv_pairs, self.num_queries, self.vocab_size // 2
        # a uniform ordered sample without replacement: the top kv of iid uniforms, per row
        keys_bk = torch.rand(n, half - 1, generator=generator).topk(kv, dim=1).indices + 1
        values_bk = (
            torch.rand(n, self.vocab_size - half, generator=generator).topk(kv, dim=1).indices
            + half
        )
        gaps_bq = torch.multinomial(
            self.gap_probs.expand(n, -1), nq, replacement=False, generator=generator
        )
        # which pairs are queried (all by default), in context order: the i-th takes gap i
        pairs_bq = torch.rand(n, kv, generator=generator).topk(nq, dim=1).indices.sort(1).values
        query_pos_bq = 2 * kv + 2 * gaps_bq
        inputs_bn = torch.zeros(n, self.seq_len, dtype=torch.long)
        inputs_bn[:, 0 : 2 * kv : 2], inputs_bn[:, 1 : 2 * kv : 2] = keys_bk, values_bk
        inputs_bn.scatter_(1, query_pos_bq, keys_bk.gather(1, pairs_bq))
        targets_bn = torch.full_like(inputs_bn, -100)
        targets_bn.scatter_(1, query_pos_bq, values_bk.gather(1, pairs_bq))
        if self.random_non_queries:
            noise_bn = torch.randint(0, self.vocab_size, inputs_bn.shape, generator=generator)
            filler_bn = torch.ones_like(inputs_bn, dtype=torch.bool)
            filler_bn[:, : 2 * kv] = False
            filler_bn.scatter_(1, query_pos_bq, False)
            inputs_bn = torch.where(filler_bn, noise_bn, inputs_bn)
        return Batch(inputs_bn, targets_bn)

    def _held_out(self) -> set[bytes]:
        if not hasattr(self, "_held_out_inputs"):
            self._held_out_inputs = {
                row.tobytes()
                for split in ("val", "test")
                for row in self.fixed_set(split).inputs.numpy()
            }
        return self._held_out_inputs

    def batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        """Training batches are fresh draws, any held-out (val or test) example redrawn."""
        if split != "train":
            return super().batch(split, batch_size, generator)
        held_out = self._held_out()
        out = self._make(batch_size, generator)
        for _ in range(_TRAIN_ROUNDS):
            rows = out.inputs.numpy()
            seen = [i for i in range(batch_size) if rows[i].tobytes() in held_out]
            if not seen:
                return out
            again = self._make(len(seen), generator)
            out.inputs[seen], out.targets[seen] = again.inputs, again.targets
        raise ValueError(
            f"task.val_size={self.val_size} and task.test_size={self.test_size} hold nearly every "
            "possible sequence, so training examples outside them could not be drawn: lower "
            "task.val_size or task.test_size, or make task.vocab_size or task.seq_len larger"
        )

    def describe_splits(self) -> dict[str, dict[str, object]]:
        out = super().describe_splits()
        out["train"] = {
            "examples": "drawn afresh at every step from train.seed",
            "excludes": "val, test",
        }
        return out
