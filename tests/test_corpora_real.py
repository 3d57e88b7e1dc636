"""The tasks on the real corpora in ../shared/data (skipped where that folder is absent).

Tokenisations are cached under pytest's cache folder (.pytest_cache/d/attnzoo-corpora), so only
the first run trains the IMDB tokenizer and tokenises its 50,000 reviews (about 10 s).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import tiktoken
import torch

from attnzoo.tasks import build_task

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SHAKESPEARE = SHARED / "tinyshakespeare" / "input.txt"
IMDB = SHARED / "imdb" / "aclImdb_labeled.tar.gz"

needs_shakespeare = pytest.mark.skipif(
    not SHAKESPEARE.exists(), reason=f"real corpus not present: {SHAKESPEARE}"
)
needs_imdb = pytest.mark.skipif(not IMDB.exists(), reason=f"real corpus not present: {IMDB}")


@pytest.fixture(scope="session")
def corpus_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's cache folder, kept between runs; a temporary one under `-p no:cacheprovider`."""
    cache = getattr(request.config, "cache", None)
    if cache is None:
        return tmp_path_factory.mktemp("attnzoo-corpora")
    return cache.mkdir("attnzoo-corpora")


@pytest.fixture(autouse=True)
def _cache(corpus_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNZOO_CACHE_DIR", str(corpus_cache))
    monkeypatch.setenv("ATTNZOO_OFFLINE", "1")


@pytest.fixture(scope="module")
def imdb_task(corpus_cache: Path):
    """The real IMDB task, built once for the module (the per-test `_cache` is not active in a
    module-scoped fixture, hence its own environment)."""
    if not IMDB.exists():
        pytest.skip(f"real corpus not present: {IMDB}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTNZOO_OFFLINE", "1")
        mp.setenv("ATTNZOO_CACHE_DIR", str(corpus_cache))
        return build_task("imdb", str(SHARED), 0, seq_len=128, tokenizer="bpe")


@needs_shakespeare
def test_shakespeare_char_real() -> None:
    task = build_task("shakespeare_char", str(SHARED), 0, seq_len=64)
    text = SHAKESPEARE.read_text()
    assert task.vocab_size == len(set(text)) == 65
    assert task.ids["train"].numel() == int(len(text) * 0.9) == 1_003_854
    assert task.ids["val"].numel() == 111_540
    assert task.decode(task.ids["val"][:20].tolist()) == text[1_003_854 : 1_003_854 + 20]
    batch = task.batch("val", 12, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (12, 64) and torch.equal(
        batch.inputs[:, 1:], batch.targets[:, :-1]
    )
    m = task.metrics(torch.zeros(12, 64, 65), batch)
    assert m["bits_per_char"] == pytest.approx(math.log2(65), rel=1e-6)


@needs_shakespeare
def test_shakespeare_bpe_real_round_trip() -> None:
    task = build_task("shakespeare_bpe", str(SHARED), 0, seq_len=64, tokenizer="bpe")
    assert isinstance(task.encoding, tiktoken.Encoding) and task.vocab_size == 2048
    text = SHAKESPEARE.read_text()
    cut = int(len(text) * 0.9)
    assert task.encoding.decode(task.ids["train"].tolist()) == text[:cut]
    assert task.encoding.decode(task.ids["val"].tolist()) == text[cut:]
    chars_per_token = len(text) / (task.ids["train"].numel() + task.ids["val"].numel())
    assert 2.5 < chars_per_token < 4.0  # a 2048-token BPE compresses English plays ~3x


@needs_imdb
def test_imdb_real(imdb_task) -> None:
    task = imdb_task
    for split in ("train", "val"):
        tokens, offsets, labels = task.data[split]
        assert labels.numel() == 25_000 and int(labels.sum()) == 12_500
        lengths = offsets[1:] - offsets[:-1]
        assert int(lengths.max()) == 128 and int(lengths.min()) >= 1
        assert float((lengths == 128).float().mean()) > 0.5  # most reviews are longer than 128
    batch = task.batch("val", 32, torch.Generator().manual_seed(1))
    again = task.batch("val", 32, torch.Generator().manual_seed(1))
    assert torch.equal(batch.inputs, again.inputs) and torch.equal(batch.targets, again.targets)
    mask = batch.key_padding_mask
    real = (~mask).sum(1)
    assert batch.inputs.shape == mask.shape and batch.inputs.shape[1] == int(real.max()) <= 128
    assert (batch.inputs[mask] == 0).all()
    assert torch.equal(mask, torch.arange(mask.shape[1])[None] >= real[:, None])  # right padding


@needs_imdb
def test_imdb_bpe_round_trips_reviews(imdb_task) -> None:
    enc = imdb_task.encoding
    samples = [
        "This movie was <i>fantastic</i>... 10/10 — would watch again! Café, naïve, 東京 🎬",
        "I've seen worse; it's not THAT bad.\n\nSeriously though: 2 stars.",
    ]
    for text in samples:
        ids = enc.encode_ordinary(text)
        assert enc.decode(ids) == text and max(ids) < enc.n_vocab
    assert len(enc.encode_ordinary(samples[1])) < len(samples[1]) / 2.5
