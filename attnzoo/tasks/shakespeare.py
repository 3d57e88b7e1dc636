"""Language modelling on Tiny Shakespeare (Karpathy's char-rnn corpus), by characters or by
subword tokens.

The file is split on characters, before tokenising, so the two tasks see the same text
(`task.splits`):
- `train_val_test` (the default): the first 90% trains, the next 5% validates, the last 5% tests;
- `nanogpt`: nanoGPT's split, the first 90% trains and the last 10% validates (no test split),
  for comparisons with nanoGPT's published validation losses.
The training text is the same first 90% either way. A training or sampled validation batch is
`batch_size` windows of `seq_len` tokens at random offsets, each target the next token; the whole
split (`whole_split`) is the split cut into consecutive windows, so that every token but the
first is predicted exactly once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import torch

from attnzoo.tasks import Batch, Batches, Task, register_task
from attnzoo.tasks._data import CorpusError, Remote, fetch
from attnzoo.tasks._tokenizer import get_encoding

TINY_SHAKESPEARE = Remote(
    name="Tiny Shakespeare",
    filename="tinyshakespeare/input.txt",
    url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
    sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    env="TINYSHAKESPEARE",
    homepage="https://github.com/karpathy/char-rnn",
)
# task.splits -> (split, where it ends as a fraction of the file's characters), in file order
SPLIT_SCHEMES: dict[str, tuple[tuple[str, float], ...]] = {
    "train_val_test": (("train", 0.9), ("val", 0.95), ("test", 1.0)),
    "nanogpt": (("train", 0.9), ("val", 1.0)),
}


def load_text(data_dir: str | Path, download: bool = True) -> tuple[str, str]:
    """The verified corpus and its sha256 (downloaded into the cache if `data_dir` lacks it)."""
    path = fetch(TINY_SHAKESPEARE, data_dir, allow_download=download)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:  # only reachable with a user-supplied checksum override
        raise CorpusError(f"{path} is not UTF-8 text: {err}") from err
    return text, TINY_SHAKESPEARE.current_sha256


def split_bounds(n_chars: int, splits: str = "train_val_test") -> dict[str, tuple[int, int]]:
    """{split: (start, end)} in characters of a file of `n_chars`: consecutive, covering it."""
    if splits not in SPLIT_SCHEMES:
        raise ValueError(f"task.splits={splits!r} is not one of {sorted(SPLIT_SCHEMES)}")
    bounds, start = {}, 0
    for name, fraction in SPLIT_SCHEMES[splits]:
        end = int(n_chars * fraction)
        bounds[name], start = (start, end), end
    return bounds


def split_text(text: str, splits: str = "train_val_test") -> dict[str, str]:
    """The text of each split (see the module's docstring)."""
    return {k: text[a:b] for k, (a, b) in split_bounds(len(text), splits).items()}


class LanguageModelTask(Task):
    """Next-token prediction on a 1-D stream of token ids per split.

    Subclasses fill `self.ids` (split -> 1-D int64 tensor) and `self.splits`, and implement
    `decode`; `bytes_per_token` (vocab,) converts a loss per token into bits per character.
    """

    head = "lm"
    causal = True
    metric = "accuracy"
    ids: dict[str, torch.Tensor]
    bytes_per_token: torch.Tensor | None = None
    unit = "char"

    def _split(self, text: str, splits: str) -> None:
        """Record the split scheme `task.splits` names (an error for an unknown one)."""
        self.bounds = split_bounds(len(text), splits)
        self.scheme, self.splits = splits, tuple(self.bounds)

    def _setup(self, seq_len: int, vocab_size: int) -> None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"task.seq_len must be a positive int, got {seq_len!r}")
        for split in self.splits:
            if self.ids[split].numel() <= seq_len + 1:
                raise ValueError(
                    f"task.seq_len={seq_len} is too long for the {split} split "
                    f"({self.ids[split].numel()} tokens)"
                )
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.out_features = vocab_size
        self.max_len = seq_len

    def _ids(self, split: str) -> torch.Tensor:
        if split not in self.splits:
            raise ValueError(f"split={split!r} is not one of {self.splits}")
        return self.ids[split]

    def batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        if split == "test":
            raise ValueError("split='test' is read only whole, by the final evaluation")
        ids = self._ids(split)
        starts = torch.randint(0, ids.numel() - self.seq_len, (batch_size,), generator=generator)
        window_bn = starts[:, None] + torch.arange(self.seq_len + 1)[None, :]
        tokens_bn = ids[window_bn]
        return Batch(inputs=tokens_bn[:, :-1].contiguous(), targets=tokens_bn[:, 1:].contiguous())

    def whole_split(self, split: str, batch_size: int) -> Batches:
        """The split as consecutive windows of `seq_len` tokens, in order, each target the next
        token: every token but the first is a target exactly once, with as context the tokens
        before it in its window (as in a training window). The last, shorter window comes in a
        batch of its own, so nothing is padded."""
        if split == "train":
            raise ValueError("the whole-split evaluation reads 'val' or 'test', not 'train'")
        ids = self._ids(split)
        full, tail = divmod(ids.numel() - 1, self.seq_len)  # predicted tokens: windows and rest
        count = len(range(0, full, batch_size)) + bool(tail)
        return Batches(self._windows(ids, full, tail, batch_size), count)

    def _windows(self, ids: torch.Tensor, full: int, tail: int, batch_size: int) -> Iterator[Batch]:
        windows = ids[: full * self.seq_len + 1]
        for first in range(0, full, batch_size):
            rows = torch.arange(first, min(first + batch_size, full))
            window_bn = rows[:, None] * self.seq_len + torch.arange(self.seq_len + 1)[None, :]
            tokens_bn = windows[window_bn]
            yield Batch(tokens_bn[:, :-1].contiguous(), tokens_bn[:, 1:].contiguous())
        if tail:
            tail_1n = ids[full * self.seq_len :][None, :]
            yield Batch(tail_1n[:, :-1].contiguous(), tail_1n[:, 1:].contiguous())

    def count(self, batch: Batch) -> int:
        """Predicted tokens: for language modelling `<split>/n` counts tokens, not windows."""
        return int((batch.targets != -100).sum())

    def totals(self, logits: torch.Tensor, batch: Batch) -> dict[str, tuple[torch.Tensor, int]]:
        """Loss (nats per token), accuracy, and the loss in bits: per character
        (`bits_per_char`), and for subword tokens also per token (`bits_per_token`)."""
        flat_logits = logits.reshape(-1, logits.shape[-1]).float()
        targets = batch.targets.reshape(-1)
        n = targets.numel()
        nats = torch.nn.functional.cross_entropy(flat_logits, targets, reduction="sum")
        bits = nats / math.log(2)
        out = {"loss": (nats, n), "accuracy": ((flat_logits.argmax(-1) == targets).sum(), n)}
        if self.bytes_per_token is None:
            out["bits_per_char"] = (bits, n)
        else:
            chars = int(self.bytes_per_token.to(targets.device)[targets].sum())
            out["bits_per_token"] = (bits, n)
            out["bits_per_char"] = (bits, chars)
        return out

    def describe_splits(self) -> dict[str, dict[str, object]]:
        return {
            split: {"chars": [a, b], "tokens": self.ids[split].numel(), "scheme": self.scheme}
            for split, (a, b) in self.bounds.items()
        }

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def prompt(self) -> list[int]:
        raise NotImplementedError

    @torch.no_grad()
    def sample_text(
        self,
        model: torch.nn.Module,
        generator: torch.Generator,
        length: int | None = None,
        temperature: float = 1.0,
    ) -> str:
        """`length` tokens sampled from `model` after a newline, at `temperature`; sampling runs
        on the CPU with `generator`, so the text is reproducible on any device."""
        length = self.sample_tokens if length is None else length
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        try:
            ids = self.prompt()
            out: list[int] = []
            for _ in range(length):
                context = torch.tensor([(ids + out)[-self.seq_len :]], device=device)
                logits_v = model(context)[0, -1].float().cpu()
                probs_v = torch.softmax(logits_v / temperature, dim=-1)
                out.append(int(torch.multinomial(probs_v, 1, generator=generator)))
        finally:
            model.train(was_training)
        return self.decode(out)


@register_task("shakespeare_char")
class ShakespeareChar(LanguageModelTask):
    """Tiny Shakespeare by characters: the vocabulary is the file's 65 distinct characters."""

    def __init__(
        self,
        data_dir: str,
        seed: int,
        seq_len: int = 64,
        download: bool = True,
        sample_tokens: int = 200,
        splits: Literal["train_val_test", "nanogpt"] = "train_val_test",
    ) -> None:
        text, _ = load_text(data_dir, download)
        self._split(text, splits)
        self.chars = sorted(set(text))
        self.index = {ch: i for i, ch in enumerate(self.chars)}
        self.sample_tokens = sample_tokens
        self.tokenizer_name = "char"
        self.ids = {
            split: torch.tensor([self.index[ch] for ch in part], dtype=torch.long)
            for split, part in split_text(text, splits).items()
        }
        self._setup(seq_len, len(self.chars))

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def prompt(self) -> list[int]:
        return [self.index["\n"]]


@register_task("shakespeare_bpe")
class ShakespeareBPE(LanguageModelTask):
    """Tiny Shakespeare in subword tokens of a tiktoken encoding: GPT-2's where tiktoken can load
    it, else a byte-level BPE of `bpe_vocab_size` tokens trained on the training split."""

    def __init__(
        self,
        data_dir: str,
        seed: int,
        seq_len: int = 64,
        download: bool = True,
        tokenizer: str = "auto",
        bpe_vocab_size: int = 2048,
        sample_tokens: int = 60,
        splits: Literal["train_val_test", "nanogpt"] = "train_val_test",
    ) -> None:
        text, sha = load_text(data_dir, download)
        self._split(text, splits)
        parts = split_text(text, splits)
        self.encoding = get_encoding(
            tokenizer, "tinyshakespeare", f"{sha}:train90", lambda: [parts["train"]], bpe_vocab_size
        )
        self.tokenizer_name = self.encoding.name
        self.sample_tokens = sample_tokens
        self.ids = {
            split: torch.tensor(self.encoding.encode_ordinary(part), dtype=torch.long)
            for split, part in parts.items()
        }
        vocab = self.encoding.n_vocab
        self.bytes_per_token = torch.tensor(
            [len(self.encoding.decode_single_token_bytes(i)) for i in range(vocab)],
            dtype=torch.float32,
        )
        self._setup(seq_len, vocab)

    def decode(self, ids: list[int]) -> str:
        return self.encoding.decode(ids, errors="replace")

    def prompt(self) -> list[int]:
        return self.encoding.encode_ordinary("\n")
