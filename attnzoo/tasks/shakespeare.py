"""Language modelling on Tiny Shakespeare (Karpathy's char-rnn corpus), by characters or by
subword tokens.

The split is the customary one: the first 90% of the file trains, the last 10% validates (split
on characters, before tokenising, so the two tasks see the same text). A batch is `batch_size`
windows of `seq_len` tokens at random offsets, each target the next token.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from attnzoo.tasks import Batch, Task, register_task
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
SPLITS = ("train", "val")
TRAIN_FRACTION = 0.9


def load_text(data_dir: str | Path, download: bool = True) -> tuple[str, str]:
    """The verified corpus and its sha256 (downloaded into the cache if `data_dir` lacks it)."""
    path = fetch(TINY_SHAKESPEARE, data_dir, allow_download=download)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:  # only reachable with a user-supplied checksum override
        raise CorpusError(f"{path} is not UTF-8 text: {err}") from err
    return text, TINY_SHAKESPEARE.current_sha256


def split_text(text: str) -> dict[str, str]:
    cut = int(len(text) * TRAIN_FRACTION)
    return {"train": text[:cut], "val": text[cut:]}


class LanguageModelTask(Task):
    """Next-token prediction on a 1-D stream of token ids per split.

    Subclasses fill `self.ids` ({"train", "val"} -> 1-D int64 tensor) and implement `decode`;
    `bytes_per_token` (vocab,) converts a loss per token into bits per character.
    """

    head = "lm"
    causal = True
    metric = "accuracy"
    ids: dict[str, torch.Tensor]
    bytes_per_token: torch.Tensor | None = None
    unit = "char"

    def _setup(self, seq_len: int, vocab_size: int) -> None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"task.seq_len must be a positive int, got {seq_len!r}")
        for split in SPLITS:
            if self.ids[split].numel() <= seq_len + 1:
                raise ValueError(
                    f"task.seq_len={seq_len} is too long for the {split} split "
                    f"({self.ids[split].numel()} tokens)"
                )
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.out_features = vocab_size
        self.max_len = seq_len

    def batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is not one of {SPLITS}")
        ids = self.ids[split]
        starts = torch.randint(0, ids.numel() - self.seq_len, (batch_size,), generator=generator)
        window_bn = starts[:, None] + torch.arange(self.seq_len + 1)[None, :]
        tokens_bn = ids[window_bn]
        return Batch(inputs=tokens_bn[:, :-1].contiguous(), targets=tokens_bn[:, 1:].contiguous())

    def metrics(self, logits: torch.Tensor, batch: Batch) -> dict[str, float]:
        """Accuracy, and the loss in bits: per character (`bits_per_char`), and for subword
        tokens also per token (`bits_per_token`)."""
        flat_logits = logits.reshape(-1, logits.shape[-1]).float()
        targets = batch.targets.reshape(-1)
        nats = torch.nn.functional.cross_entropy(flat_logits, targets, reduction="sum")
        bits = nats.item() / math.log(2)
        out = {"accuracy": (flat_logits.argmax(-1) == targets).float().mean().item()}
        if self.bytes_per_token is None:
            out["bits_per_char"] = bits / targets.numel()
        else:
            chars = self.bytes_per_token.to(targets.device)[targets].sum().item()
            out["bits_per_token"] = bits / targets.numel()
            out["bits_per_char"] = bits / max(chars, 1)
        return out

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
    ) -> None:
        text, _ = load_text(data_dir, download)
        self.chars = sorted(set(text))
        self.index = {ch: i for i, ch in enumerate(self.chars)}
        self.sample_tokens = sample_tokens
        self.tokenizer_name = "char"
        self.ids = {
            split: torch.tensor([self.index[ch] for ch in part], dtype=torch.long)
            for split, part in split_text(text).items()
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
    ) -> None:
        text, sha = load_text(data_dir, download)
        parts = split_text(text)
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
