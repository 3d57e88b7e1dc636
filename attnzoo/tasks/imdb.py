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
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path

import numpy as np
import torch

from attnzoo.tasks import Batch, Batches, Task, register_task
from attnzoo.tasks._data import (
    CorpusError,
    Remote,
    atomic_path,
    cache_dir,
    fetch,
    said,
    verify,
)
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
    original=ACL_IMDB,
)
SPLITS = ("train", "val", "test")
LABELS = {"neg": 0, "pos": 1}
REVIEW = re.compile(r"(?:^|/)aclImdb/(train|test)/(pos|neg)/(\d+)_(\d+)\.txt$")
CACHE_FORMAT = 2  # 1: val was the test reviews; 2: val is a stratified slice of the training ones

# aclImdb folder -> [(text, label, name)], name as "pos/123_8.txt", ordered by (label, review id)
Reviews = dict[str, list[tuple[str, int, str]]]


def val_key(split_seed: int, name: str) -> str:
    """The rank of training review `name` ("pos/123_8.txt") in the draw of the validation set:
    sha256 of "<split_seed>:<name>", so the choice depends on neither the library versions nor
    the order reviews are read in, and anyone can recompute it."""
    return hashlib.sha256(f"{split_seed}:{name}".encode()).hexdigest()


def default_val_size(n_train: int) -> int:
    """A tenth of `n_train` training reviews, rounded down to an even number, at least 2: 2,500
    of IMDB's 25,000."""
    return max(2, n_train // 20 * 2)


def check_val_size(val_size: int) -> None:
    """`task.val_size` is a positive even number (half of it of each label), else a ValueError."""
    if isinstance(val_size, bool) or not isinstance(val_size, int) or val_size < 2:
        raise ValueError(f"task.val_size must be an even int >= 2, got {val_size!r}")
    if val_size % 2:
        raise ValueError(
            f"task.val_size={val_size} must be even: the validation set holds as many positive "
            f"as negative reviews (e.g. {val_size + 1})"
        )


def choose_val(
    names: Sequence[str], labels: Sequence[int], val_size: int, split_seed: int
) -> list[int]:
    """Indices (ascending) into the training reviews `names` of the validation set: of each
    label, the `val_size // 2` reviews with the smallest `val_key`."""
    check_val_size(val_size)
    chosen: list[int] = []
    for label in sorted(set(LABELS.values())):
        rows = [i for i, lab in enumerate(labels) if lab == label]
        if len(rows) <= val_size // 2:
            raise ValueError(
                f"task.val_size={val_size} takes {val_size // 2} reviews of each label from the "
                f"training reviews, which have only {len(rows)} with label {label}: allowed, an "
                f"even number below {2 * len(rows)} (some must be left to train on)"
            )
        rows.sort(key=lambda i: val_key(split_seed, names[i]))
        chosen += rows[: val_size // 2]
    return sorted(chosen)


def val_digest(names: Sequence[str]) -> str:
    """sha256 of the validation reviews' names ("pos/123_8.txt"), sorted, one per line."""
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()


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
        folder, label, review_id, rating = match.groups()
        text = clean(data.decode("utf-8", errors="replace"))
        found[folder].append(
            (LABELS[label], int(review_id), text, f"{label}/{review_id}_{rating}.txt")
        )
    reviews: Reviews = {}
    for folder, rows in found.items():
        counts = {lab: sum(1 for r in rows if r[0] == LABELS[lab]) for lab in LABELS}
        if min(counts.values()) == 0:
            raise CorpusError(
                f"{source} holds no reviews in aclImdb/{folder}/"
                f"{'/, '.join(k for k, v in counts.items() if v == 0)}/: it is not the aclImdb "
                f"layout, or it is truncated. {ACL_IMDB.how_to_obtain(source.parent.parent)}"
            )
        reviews[folder] = [(text, label, name) for label, _, text, name in sorted(rows)]
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
        val_size: int | None = None,
        split_seed: int = 0,
    ) -> None:
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"task.seq_len must be a positive int, got {seq_len!r}")
        if val_size is not None:
            check_val_size(val_size)
        source, key = locate(data_dir, download)
        self.seq_len, self.val_size, self.split_seed = seq_len, val_size, split_seed
        # what the splits are, for the names of the cached tokenizer and token ids
        size = "tenth" if val_size is None else val_size
        self.split_definition = f"val{size}:seed{split_seed}:sha256-rank"

        @cache
        def reviews() -> Reviews:
            return _from_folder(source) if source.is_dir() else _from_tar(source)

        @cache
        def val_rows() -> list[int]:
            rows = reviews()["train"]
            size = default_val_size(len(rows)) if val_size is None else val_size
            return choose_val(
                [name for _, _, name in rows], [label for _, label, _ in rows], size, split_seed
            )

        def train_texts() -> list[str]:
            held_out = set(val_rows())
            rows = reviews()["train"]
            return [text for i, (text, _, _) in enumerate(rows) if i not in held_out]

        self.encoding = get_encoding(
            tokenizer, "imdb", f"{key}:train:{self.split_definition}", train_texts, bpe_vocab_size
        )
        self.tokenizer_name = self.encoding.name
        self.vocab_size = self.encoding.n_vocab
        self.out_features = len(LABELS)
        self.max_len = seq_len
        self.data, self.val_index, self.val_digest = self._tokenised(key, reviews, val_rows)

    def _tokenised(self, key: str, reviews, val_rows) -> tuple[dict, torch.Tensor, str]:
        """Per split: token ids (flat), offsets (reviews + 1) and labels; the validation reviews'
        indices among the training reviews, and their digest. Cached on disk, since tokenising
        50,000 reviews takes a while, under a name made of the corpus, the tokenizer, `seq_len`
        and the split definition: a cache of other splits is never read."""
        digest = hashlib.sha256(
            f"{CACHE_FORMAT}:{key}:{self.encoding.name}:{self.seq_len}:{self.split_definition}".encode()
        ).hexdigest()[:16]
        path = cache_dir() / "imdb" / f"tokens-{digest}.npz"
        arrays: dict[str, np.ndarray] = {}
        if path.exists():
            try:
                with np.load(path) as npz:
                    arrays = {name: npz[name] for name in npz.files}
            except (OSError, ValueError, zlib.error, EOFError):  # a damaged cache: rebuild it
                arrays = {}
        parts = ("tokens", "offsets", "labels")
        needed = {"val_index", "val_digest", *(f"{s}_{p}" for s in SPLITS for p in parts)}
        if not needed <= set(arrays):  # none, damaged, or not of this format
            with said("tokenising IMDB's reviews", path):
                arrays = self._tokenise(reviews(), val_rows())
            buffer = io.BytesIO()
            np.savez(buffer, **arrays)
            with atomic_path(path) as tmp:
                tmp.write_bytes(buffer.getvalue())
        data = {
            split: tuple(
                torch.from_numpy(arrays[f"{split}_{part}"].astype(np.int64)) for part in parts
            )
            for split in SPLITS
        }
        return data, torch.from_numpy(arrays["val_index"]), str(arrays["val_digest"])

    def _tokenise(self, reviews: Reviews, val_rows: list[int]) -> dict[str, np.ndarray]:
        held_out = set(val_rows)
        train_rows = [i for i in range(len(reviews["train"])) if i not in held_out]
        parts = {
            "train": [reviews["train"][i] for i in train_rows],
            "val": [reviews["train"][i] for i in val_rows],
            "test": reviews["test"],
        }
        arrays: dict[str, np.ndarray] = {}
        for split, rows in parts.items():
            ids = self.encoding.encode_ordinary_batch([text for text, _, _ in rows], num_threads=2)
            ids = [row[: self.seq_len] for row in ids]
            lengths = np.array([len(row) for row in ids], dtype=np.int64)
            arrays[f"{split}_tokens"] = np.fromiter(
                (t for row in ids for t in row), dtype=np.int32, count=int(lengths.sum())
            )
            arrays[f"{split}_offsets"] = np.concatenate([[0], np.cumsum(lengths)])
            arrays[f"{split}_labels"] = np.array([label for _, label, _ in rows], dtype=np.int64)
        arrays["val_index"] = np.array(val_rows, dtype=np.int64)
        arrays["val_digest"] = np.array(val_digest([reviews["train"][i][2] for i in val_rows]))
        return arrays

    def num_examples(self, split: str) -> int:
        return self.data[split][2].numel()

    def _rows(self, split: str, rows: torch.Tensor) -> Batch:
        """Reviews `rows` of `split`, padded on the right to the longest, with the mask."""
        if split not in SPLITS:
            raise ValueError(f"split={split!r} is not one of {SPLITS}")
        tokens, offsets, labels = self.data[split]
        starts, ends = offsets[rows], offsets[rows + 1]
        lengths_b = (ends - starts).clamp_min(1)  # an empty review keeps one (padding) slot
        width = int(lengths_b.max())
        pos_bn = torch.arange(width)[None, :]
        real_bn = pos_bn < (ends - starts)[:, None]
        index_bn = (starts[:, None] + pos_bn).clamp_max(max(tokens.numel() - 1, 0))
        inputs_bn = torch.where(real_bn, tokens[index_bn], torch.zeros((), dtype=torch.long))
        return Batch(inputs=inputs_bn, targets=labels[rows], key_padding_mask=~real_bn)

    def batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        if split not in ("train", "val"):
            raise ValueError(f"split={split!r} is not one of ('train', 'val')")
        rows = torch.randint(0, self.num_examples(split), (batch_size,), generator=generator)
        return self._rows(split, rows)

    def whole_split(self, split: str, batch_size: int) -> Batches:
        n = self.num_examples(split)
        starts = range(0, n, batch_size)
        rows = (self._rows(split, torch.arange(i, min(i + batch_size, n))) for i in starts)
        return Batches(rows, len(starts))

    def describe_splits(self) -> dict[str, dict[str, object]]:
        return {
            "train": {"reviews": self.num_examples("train"), "from": "aclImdb/train, less val"},
            "val": {
                "reviews": self.num_examples("val"),
                "from": "aclImdb/train",
                "split_seed": self.split_seed,
                "sha256": self.val_digest,
            },
            "test": {"reviews": self.num_examples("test"), "from": "aclImdb/test"},
        }
