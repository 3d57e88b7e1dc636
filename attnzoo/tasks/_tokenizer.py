"""Subword tokenisation for the real corpora, always as a `tiktoken.Encoding`.

`tokenizer="gpt2"` is tiktoken's GPT-2 encoding, which tiktoken downloads on first use. Where it
cannot (no network), `tokenizer="bpe"` trains a byte-level BPE on the task's training split with
the `tokenizers` library, writes it in tiktoken's own file format (one `base64(token) rank` line
per token) and loads it back with `tiktoken.load.load_tiktoken_bpe`: the tasks see one tokenizer
type either way. `tokenizer="auto"` takes gpt2 when it loads within a short timeout and the
trained BPE otherwise; the choice made is recorded on the task (`tokenizer_name`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import tiktoken
from tiktoken.load import load_tiktoken_bpe

from attnzoo.tasks._data import atomic_path, cache_dir, offline, said

TOKENIZERS = ("auto", "gpt2", "bpe")

# GPT-2's pre-tokenisation pattern, which the byte-level pre-tokenizer of `tokenizers` also uses:
# the trained merges and tiktoken's splitting agree.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Bump when the training recipe changes, so that old cached files are not reused.
BPE_FORMAT = 1


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters, which the
    byte-level models of `tokenizers` use to spell tokens."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def gpt2_encoding(timeout: float | None = None) -> tiktoken.Encoding | None:
    """tiktoken's gpt2 encoding, or None if it cannot be had within `timeout` seconds.

    tiktoken fetches the vocabulary over HTTPS without a timeout of its own, so the load runs in
    a daemon thread that is abandoned when it takes too long (it may still finish and fill
    tiktoken's cache for the next run). $ATTNZOO_OFFLINE skips the attempt entirely.
    """
    if offline():
        return None
    if timeout is None:
        timeout = float(os.environ.get("ATTNZOO_TIKTOKEN_TIMEOUT", "10"))
    result: list[tiktoken.Encoding] = []

    def load() -> None:
        # No network, a DNS failure or an HTTP error all mean: fall back.
        with contextlib.suppress(Exception):
            result.append(tiktoken.get_encoding("gpt2"))

    thread = threading.Thread(target=load, daemon=True, name="attnzoo-tiktoken-gpt2")
    thread.start()
    thread.join(timeout)
    return result[0] if result else None


def train_bpe(texts: Iterable[str], vocab_size: int) -> dict[bytes, int]:
    """Byte-level BPE merges learned from `texts`, as tiktoken's token -> rank table.

    Every one of the 256 bytes is in the table (so any input can be encoded), and a merged token's
    rank is higher than its parts', which is the order tiktoken applies merges in.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    if vocab_size < 257:
        raise ValueError(
            f"bpe vocab_size must be at least 257 (256 bytes + merges), got {vocab_size}"
        )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    decode = {ch: b for b, ch in _byte_to_unicode().items()}
    ranks: dict[bytes, int] = {}
    for token, rank in sorted(tok.get_vocab().items(), key=lambda kv: kv[1]):
        ranks[bytes(decode[ch] for ch in token)] = rank
    missing = set(range(256)) - {t[0] for t in ranks if len(t) == 1}
    if missing:  # pragma: no cover - the initial alphabet guarantees all bytes
        raise RuntimeError(f"trained BPE lacks bytes {sorted(missing)[:8]}")
    return ranks


def write_tiktoken_file(path: Path, ranks: dict[bytes, int]) -> None:
    """Write `ranks` in tiktoken's file format, atomically."""
    import base64

    lines = [
        base64.b64encode(token) + b" " + str(rank).encode()
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])
    ]
    with atomic_path(path) as tmp:
        tmp.write_bytes(b"\n".join(lines) + b"\n")


def load_bpe(path: Path, name: str) -> tiktoken.Encoding:
    """A tiktoken.Encoding from a tiktoken-format file written by `write_tiktoken_file`."""
    data = path.read_bytes()
    ranks = load_tiktoken_bpe(str(path), expected_hash=hashlib.sha256(data).hexdigest())
    return tiktoken.Encoding(
        name=name, pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )


def trained_bpe(
    corpus: str, key: str, texts: Callable[[], Iterable[str]], vocab_size: int
) -> tiktoken.Encoding:
    """The BPE trained on `texts()`, from the cache if it was trained before (then `texts` is
    never called, which spares reading the corpus).

    `key` identifies the training text (e.g. the corpus file's sha256 and the split), so a cached
    tokenizer is reused only for the same data and vocabulary size.
    """
    digest = hashlib.sha256(f"{BPE_FORMAT}:{key}:{vocab_size}".encode()).hexdigest()[:16]
    name = f"attnzoo-{corpus}-bpe{vocab_size}-{digest}"
    path = cache_dir() / "tokenizers" / f"{name}.tiktoken"
    if not path.exists():
        with said(f"training a {vocab_size}-token BPE on {corpus}'s training split", path):
            write_tiktoken_file(path, train_bpe(texts(), vocab_size))
    return load_bpe(path, name)


def get_encoding(
    tokenizer: str,
    corpus: str,
    key: str,
    texts: Callable[[], Iterable[str]],
    bpe_vocab_size: int,
) -> tiktoken.Encoding:
    """The encoding `tokenizer` ("auto", "gpt2" or "bpe") names for a corpus; `texts()` (the
    training split) is only called when a BPE has to be trained."""
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer={tokenizer!r} is not one of {TOKENIZERS}")
    if tokenizer in ("auto", "gpt2"):
        enc = gpt2_encoding(timeout=None if tokenizer == "auto" else 600.0)
        if enc is not None:
            return enc
        if tokenizer == "gpt2":
            raise ValueError(
                "tokenizer='gpt2' needs tiktoken to download the GPT-2 vocabulary, which failed "
                "(no network, or ATTNZOO_OFFLINE is set); use tokenizer='bpe' or 'auto' to train "
                "a byte-level BPE on the training split instead"
            )
    return trained_bpe(corpus, key, texts, bpe_vocab_size)
