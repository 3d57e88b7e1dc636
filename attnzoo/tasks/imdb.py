"""Binary sentiment classification on IMDB (the Large Movie Review Dataset, Maas et al. 2011).

The corpus is read in its original layout, `aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt`,
from any of (under `data_dir/imdb/`): the extracted `aclImdb/` folder, the original
`aclImdb_v1.tar.gz`, or `aclImdb_labeled.tar.gz` (the same layout without the unlabelled
reviews); failing those, the original archive is downloaded into the cache and checked by sha256.
`train` is the 25,000 training reviews, `val` the 25,000 test reviews. Each review keeps its first
`seq_len` tokens; batches are padded to their longest review with a key padding mask.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import zlib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import numpy as np
import torch

from attnzoo.tasks import Batch, Task, register_task
from attnzoo.tasks._data import CorpusError, Remote, atomic_path, cache_dir, fetch, verify
from attnzoo.tasks._tokenizer import get_encoding

ACL_IMDB = Remote(
    name="IMDB (aclImdb_v1.tar.gz)",
    filename="imdb/aclImdb_v1.tar.gz",
    url="https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
    sha256="c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
    env="IMDB",
    homepage="https://ai.stanford.edu/~amaas/data/sentiment/",
)
# The labelled-only repack of the same reviews that the project's shared data folder holds.
ACL_IMDB_LABELED = Remote(
    name="IMDB (aclImdb_labeled.tar.gz, labelled reviews only)",
    filename="imdb/aclImdb_labeled.tar.gz",
    url=ACL_IMDB.url,
    sha256="4cc06ea1c4131f27d30484278c4f6dd8d4bfb7e1ddbb5893ba30e55062cd2a9c",
    env="IMDB_LABELED",
    homepage=ACL_IMDB.homepage,
)
SPLITS = {"train": "train", "val": "test"}  # task split -> aclImdb folder
LABELS = {"neg": 0, "pos": 1}
REVIEW = re.compile(r"(?:^|/)aclImdb/(train|test)/(pos|neg)/(\d+)_(\d+)\.txt$")
CACHE_FORMAT = 1

Reviews = dict[str, list[tuple[str, int]]]  # aclImdb folder -> [(text, label)]


def clean(text: str) -> str:
    """The review as plain text: the corpus marks line breaks with HTML `<br />` tags."""
    return text.replace("<br />", "\n")


def _collect(items: Iterator[tuple[str, bytes]], source: Path) -> Reviews:
    """Reviews from (path, bytes) pairs, in a fixed order (split, label, review id)."""
    found: dict[str, list[tuple[int, int, str]]] = {"train": [], "test": []}
    for name, data in items:
        match = REVIEW.search(name)
        if match is None:
            continue
        folder, label, review_id, _rating = match.groups()
        text = clean(data.decode("utf-8", errors="replace"))
        found[folder].append((LABELS[label], int(review_id), text))
    reviews: Reviews = {}
    for folder, rows in found.items():
        counts = {lab: sum(1 for r in rows if r[0] == LABELS[lab]) for lab in LABELS}
        if min(counts.values()) == 0:
            raise CorpusError(
                f"{source} holds no reviews in aclImdb/{folder}/"
                f"{'/, '.join(k for k, v in counts.items() if v == 0)}/: it is not the aclImdb "
                f"layout, or it is truncated. {ACL_IMDB.how_to_obtain(source.parent.parent)}"
            )
        reviews[folder] = [(text, label) for label, _, text in sorted(rows)]
    return reviews


def _from_tar(path: Path) -> Reviews:
    def members() -> Iterator[tuple[str, bytes]]:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                if member.isfile() and REVIEW.search(member.name):
                    handle = archive.extractfile(member)
                    assert handle is not None
                    yield member.name, handle.read()

    try:
        return _collect(members(), path)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        raise CorpusError(
            f"{path} is not a readable .tar.gz ({err}): it is truncated or corrupt. "
            f"Delete it and run again to re-download. {ACL_IMDB.how_to_obtain(path.parent.parent)}"
        ) from err


def _from_folder(root: Path) -> Reviews:
    def files() -> Iterator[tuple[str, bytes]]:
        for path in root.glob("*/*/*.txt"):
            yield path.relative_to(root.parent).as_posix(), path.read_bytes()

    return _collect(files(), root)


def locate(data_dir: str | Path, download: bool) -> tuple[Path, str]:
    """Where the corpus is, and a key identifying its content (for caches)."""
    base = Path(data_dir) / "imdb"
    folder = base / "aclImdb"
    if folder.is_dir():
        listing = sorted(
            (p.relative_to(folder).as_posix(), p.stat().st_size) for p in folder.glob("*/*/*.txt")
        )
        return folder, "folder:" + hashlib.sha256(repr(listing).encode()).hexdigest()
    for remote in (ACL_IMDB, ACL_IMDB_LABELED):
        archive = Path(data_dir) / remote.filename
        if archive.exists():
            return verify(archive, remote, data_dir), remote.current_sha256
    return fetch(ACL_IMDB, data_dir, allow_download=download), ACL_IMDB.current_sha256


@register_task("imdb")
class IMDB(Task):
    """Positive or negative, from the first `seq_len` tokens of a movie review."""

    head = "classify"
    causal = False
    metric = "accuracy"

    def __init__(
        self,
        data_dir: str,
        seed: int,
        seq_len: int = 256,
        download: bool = True,
        tokenizer: str = "auto",
        bpe_vocab_size: int = 8192,
    ) -> None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"task.seq_len must be a positive int, got {seq_len!r}")
        source, key = locate(data_dir, download)

        @cache
        def reviews() -> Reviews:
            return _from_folder(source) if source.is_dir() else _from_tar(source)

        self.encoding = get_encoding(
            tokenizer,
            "imdb",
            f"{key}:train",
            lambda: [text for text, _ in reviews()["train"]],
            bpe_vocab_size,
        )
        self.tokenizer_name = self.encoding.name
        self.seq_len = seq_len
        self.vocab_size = self.encoding.n_vocab
        self.out_features = len(LABELS)
        self.max_len = seq_len
        self.data = self._tokenised(key, reviews)

    def _tokenised(self, key: str, reviews) -> dict[str, tuple[torch.Tensor, ...]]:
        """Per split: token ids (flat), offsets (reviews + 1) and labels, cached on disk since
        tokenising 50,000 reviews takes a while."""
        digest = hashlib.sha256(
            f"{CACHE_FORMAT}:{key}:{self.encoding.name}:{self.seq_len}".encode()
        ).hexdigest()[:16]
        path = cache_dir() / "imdb" / f"tokens-{digest}.npz"
        arrays: dict[str, np.ndarray] = {}
        if path.exists():
            try:
                with np.load(path) as npz:
                    arrays = {name: npz[name] for name in npz.files}
            except (OSError, ValueError, zlib.error, EOFError):  # a damaged cache: rebuild it
                arrays = {}
        if not arrays:
            for split, folder in SPLITS.items():
                texts = [text for text, _ in reviews()[folder]]
                ids = self.encoding.encode_ordinary_batch(texts, num_threads=2)
                ids = [row[: self.seq_len] for row in ids]
                lengths = np.array([len(row) for row in ids], dtype=np.int64)
                arrays[f"{split}_tokens"] = np.fromiter(
                    (t for row in ids for t in row), dtype=np.int32, count=int(lengths.sum())
                )
                arrays[f"{split}_offsets"] = np.concatenate([[0], np.cumsum(lengths)])
                arrays[f"{split}_labels"] = np.array(
                    [label for _, label in reviews()[folder]], dtype=np.int64
                )
            buffer = io.BytesIO()
            np.savez(buffer, **arrays)
            with atomic_path(path) as tmp:
                tmp.write_bytes(buffer.getvalue())
        return {
            split: tuple(
                torch.from_numpy(arrays[f"{split}_{part}"].astype(np.int64))
                for part in ("tokens", "offsets", "labels")
            )
            for split in SPLITS
        }

    def num_examples(self, split: str) -> int:
        return self.data[split][2].numel()

    def batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is not one of {tuple(SPLITS)}")
        tokens, offsets, labels = self.data[split]
        rows = torch.randint(0, labels.numel(), (batch_size,), generator=generator)
        starts, ends = offsets[rows], offsets[rows + 1]
        lengths_b = (ends - starts).clamp_min(1)  # an empty review keeps one (padding) slot
        width = int(lengths_b.max())
        pos_bn = torch.arange(width)[None, :]
        real_bn = pos_bn < (ends - starts)[:, None]
        index_bn = (starts[:, None] + pos_bn).clamp_max(max(tokens.numel() - 1, 0))
        inputs_bn = torch.where(real_bn, tokens[index_bn], torch.zeros((), dtype=torch.long))
        return Batch(inputs=inputs_bn, targets=labels[rows], key_padding_mask=~real_bn)
