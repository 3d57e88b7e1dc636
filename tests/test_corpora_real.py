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
DOCS_DATA = Path(__file__).resolve().parents[1] / "docs" / "data.md"

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


# the validation reviews of the default split (task.val_size=2500, task.split_seed=0): sha256 of
# their names, sorted, one a line; docs/data.md says how to recompute it
IMDB_VAL_SHA256 = "d85b08aef5ac20ef97bc160e528ebb74d70340f2eb3633b7b548cfc26c167817"


@needs_shakespeare
def test_shakespeare_char_real() -> None:
    task = build_task("shakespeare_char", str(SHARED), 0, seq_len=64)
    text = SHAKESPEARE.read_text()
    assert task.vocab_size == len(set(text)) == 65
    sizes = [task.ids[s].numel() for s in ("train", "val", "test")]
    assert sizes == [1_003_854, 55_770, 55_770] and sum(sizes) == len(text)
    assert int(len(text) * 0.9) == 1_003_854
    assert task.decode(task.ids["val"][:20].tolist()) == text[1_003_854 : 1_003_854 + 20]
    assert task.decode(task.ids["test"][-20:].tolist()) == text[-20:]
    nanogpt = build_task("shakespeare_char", str(SHARED), 0, seq_len=64, splits="nanogpt")
    assert nanogpt.splits == ("train", "val")  # nanoGPT's: the first 90% and the last 10%
    assert torch.equal(nanogpt.ids["train"], task.ids["train"])
    assert nanogpt.ids["val"].numel() == 111_540
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
    cut, cut_test = int(len(text) * 0.9), int(len(text) * 0.95)
    assert task.encoding.decode(task.ids["train"].tolist()) == text[:cut]
    assert task.encoding.decode(task.ids["val"].tolist()) == text[cut:cut_test]
    assert task.encoding.decode(task.ids["test"].tolist()) == text[cut_test:]
    chars_per_token = len(text) / sum(task.ids[s].numel() for s in task.splits)
    assert 2.5 < chars_per_token < 4.0  # a 2048-token BPE compresses English plays ~3x


@needs_imdb
@pytest.mark.slow  # trains the 2048-token BPE on IMDB (~30 s)
def test_imdb_real(imdb_task) -> None:
    task = imdb_task
    sizes = {"train": 22_500, "val": 2_500, "test": 25_000}
    for split, size in sizes.items():
        tokens, offsets, labels = task.data[split]
        assert labels.numel() == size and int(labels.sum()) == size // 2  # half positive
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
@pytest.mark.slow  # shares test_imdb_real's tokenizer training
def test_imdb_val_is_the_documented_stratified_slice_of_train(imdb_task) -> None:
    """The validation reviews are the ones docs/data.md names (their digest), 1,250 of each
    label chosen from aclImdb/train, none of them in train."""
    task = imdb_task
    assert task.val_digest == IMDB_VAL_SHA256 and IMDB_VAL_SHA256 in DOCS_DATA.read_text()
    assert task.val_index.unique().numel() == 2_500 and int(task.val_index.max()) < 25_000
    assert task.describe_splits()["val"] == {
        "reviews": 2_500,
        "from": "aclImdb/train",
        "split_seed": 0,
        "sha256": IMDB_VAL_SHA256,
    }


@needs_imdb
@pytest.mark.slow  # shares test_imdb_real's tokenizer training
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
