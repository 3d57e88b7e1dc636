"""The corpus plumbing without the real corpora: downloads from a server on 127.0.0.1 (good file,
wrong checksum, server dying mid-transfer), files that are missing, empty, truncated or corrupt,
and the tasks on small stand-in corpora with the real layouts."""

from __future__ import annotations

import hashlib
import io
import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import pairwise
from pathlib import Path

import pytest
import torch

from attnzoo.tasks import build_task
from attnzoo.tasks._data import CorpusError, download
from attnzoo.tasks._tokenizer import get_encoding, gpt2_encoding
from attnzoo.tasks.shakespeare import TINY_SHAKESPEARE

PLAY = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved rather to die than to famish?\n\n"
) * 40


class Server:
    """Serves `files` (path -> bytes); a path in `dying` announces the full length, sends half
    and drops the connection, as a server that crashes mid-transfer does; a path in `stalling`
    sends half and then hangs until the server closes."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.dying: set[str] = set()
        self.stalling: set[str] = set()
        self.closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.path in server.dying | server.stalling:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    if self.path in server.stalling:
                        server.closing.wait(30)
                    self.close_connection = True
                    return
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own cache, offline (no attempt to fetch GPT-2's vocabulary)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ATTNZOO_CACHE_DIR", str(cache))
    monkeypatch.setenv("ATTNZOO_OFFLINE", "1")
    for var in ("URL", "SHA256"):
        for corpus in ("TINYSHAKESPEARE", "IMDB", "IMDB_LABELED"):
            monkeypatch.delenv(f"ATTNZOO_{corpus}_{var}", raising=False)
    return cache


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def leftovers(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


# --- download -------------------------------------------------------------------------------


def test_download_good_file_lands_whole(server: Server, tmp_path: Path) -> None:
    data = PLAY.encode()
    server.files["/input.txt"] = data
    dest = tmp_path / "dl" / "input.txt"
    assert download(server.url("/input.txt"), dest, sha(data)) == dest
    assert dest.read_bytes() == data
    assert leftovers(tmp_path / "dl") == [dest]  # no temporary file left behind


def test_download_wrong_sha_leaves_nothing(server: Server, tmp_path: Path) -> None:
    server.files["/input.txt"] = PLAY.encode()
    dest = tmp_path / "dl" / "input.txt"
    with pytest.raises(CorpusError, match="sha256"):
        download(server.url("/input.txt"), dest, sha(b"something else"))
    assert leftovers(tmp_path / "dl") == []


def test_download_cut_off_mid_transfer_leaves_nothing(server: Server, tmp_path: Path) -> None:
    data = PLAY.encode()
    server.files["/input.txt"] = data
    server.dying.add("/input.txt")
    dest = tmp_path / "dl" / "input.txt"
    with pytest.raises(CorpusError, match="input.txt"):
        download(server.url("/input.txt"), dest, sha(data))
    assert leftovers(tmp_path / "dl") == []
    server.dying.clear()  # the next attempt starts afresh and succeeds
    download(server.url("/input.txt"), dest, sha(data))
    assert dest.read_bytes() == data


def test_download_killed_mid_transfer_leaves_no_usable_file(
    server: Server, tmp_path: Path, _isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 during a download: the partial bytes sit in a temporary file that is never read,
    and the next run downloads afresh."""
    data = PLAY.encode() * 20
    server.files["/input.txt"] = data
    server.stalling.add("/input.txt")
    monkeypatch.delenv("ATTNZOO_OFFLINE")
    monkeypatch.setenv("ATTNZOO_TINYSHAKESPEARE_URL", server.url("/input.txt"))
    monkeypatch.setenv("ATTNZOO_TINYSHAKESPEARE_SHA256", sha(data))
    code = "from attnzoo.tasks import build_task; build_task('shakespeare_char', 'nowhere', 0)"
    child = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path)
    folder = _isolated_cache / "downloads" / "tinyshakespeare"
    deadline = time.monotonic() + 60
    while not any(p.stat().st_size for p in folder.glob("*.part")):
        assert time.monotonic() < deadline and child.poll() is None, "download never started"
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert not (folder / "input.txt").exists()
    (part,) = folder.glob("*.part")  # the partial bytes, under a temporary name
    server.stalling.clear()
    os.utime(part, (time.time() - 7200, time.time() - 7200))  # as if killed two hours ago
    task = build_task("shakespeare_char", str(tmp_path / "nowhere"), 0, seq_len=8)
    assert (folder / "input.txt").read_bytes() == data and task.vocab_size == len(set(PLAY))
    assert not part.exists()  # the next download cleared the dead one's leftovers


def test_download_http_error_and_unreachable_host(server: Server, tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="404"):
        download(server.url("/missing.txt"), tmp_path / "a.txt", sha(b""))
    gone = Server()
    port = gone.httpd.server_address[1]
    gone.close()
    with pytest.raises(CorpusError, match="failed"):
        download(f"http://127.0.0.1:{port}/x", tmp_path / "b.txt", sha(b""), timeout=5)
    assert leftovers(tmp_path) == []


# --- Tiny Shakespeare -----------------------------------------------------------------------


def test_shakespeare_downloads_into_cache_once(
    server: Server, tmp_path: Path, _isolated_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ATTNZOO_OFFLINE")
    data = PLAY.encode()
    server.files["/tinyshakespeare/input.txt"] = data
    monkeypatch.setenv("ATTNZOO_TINYSHAKESPEARE_URL", server.url("/tinyshakespeare/input.txt"))
    monkeypatch.setenv("ATTNZOO_TINYSHAKESPEARE_SHA256", sha(data))
    data_dir = tmp_path / "data"  # empty, and never written to
    task = build_task("shakespeare_char", str(data_dir), 0, seq_len=16)
    assert task.chars == sorted(set(PLAY))
    assert (_isolated_cache / "downloads" / "tinyshakespeare" / "input.txt").read_bytes() == data
    assert not data_dir.exists()
    server.files.clear()  # a second task reads the cached copy: no server needed
    again = build_task("shakespeare_char", str(data_dir), 0, seq_len=16)
    assert torch.equal(again.ids["val"], task.ids["val"])


def test_shakespeare_missing_offline_says_how_to_obtain(tmp_path: Path) -> None:
    with pytest.raises(CorpusError) as err:
        build_task("shakespeare_char", str(tmp_path), 0)
    message = str(err.value)
    assert TINY_SHAKESPEARE.url in message
    assert str(tmp_path / "tinyshakespeare" / "input.txt") in message
    assert "ATTNZOO_OFFLINE" in message


@pytest.mark.parametrize(
    ("content", "match"),
    [(b"", "is empty"), (PLAY.encode()[:1000], "sha256"), (b"\x00garbage" * 50, "sha256")],
    ids=["empty", "truncated", "corrupt"],
)
def test_shakespeare_bad_local_file(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "tinyshakespeare" / "input.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=match) as err:
        build_task("shakespeare_char", str(tmp_path), 0)
    assert TINY_SHAKESPEARE.url in str(err.value)


def test_a_data_dir_that_does_not_exist_says_so(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(CorpusError) as err:
        build_task("shakespeare_char", str(tmp_path / "nonexistent"), 0)
    assert str(err.value).startswith(f"data_dir {tmp_path / 'nonexistent'} does not exist")
    assert "tinyshakespeare/input.txt" in str(err.value)
    # without ATTNZOO_OFFLINE set, the message does not ask to unset it
    monkeypatch.delenv("ATTNZOO_OFFLINE")
    monkeypatch.setenv("ATTNZOO_TINYSHAKESPEARE_URL", "http://127.0.0.1:9/unreachable")
    with pytest.raises(CorpusError) as err:
        build_task("shakespeare_char", str(tmp_path / "nonexistent"), 0)
    assert "does not exist" in str(err.value) and "ATTNZOO_OFFLINE" not in str(err.value)


def test_a_bad_copy_gets_one_fix_naming_one_file(tmp_path: Path, _isolated_cache: Path) -> None:
    """The user's own file is to be replaced, not deleted; attnzoo's cached download is deleted
    and fetched again; the labelled repack of IMDB points at the original archive."""
    user = tmp_path / "tinyshakespeare" / "input.txt"
    user.parent.mkdir(parents=True)
    user.write_bytes(PLAY.encode()[:1000])
    with pytest.raises(CorpusError) as err:
        build_task("shakespeare_char", str(tmp_path), 0)
    assert "Replace it with a good copy" in str(err.value) and "Delete" not in str(err.value)
    user.unlink()
    cached = _isolated_cache / "downloads" / "tinyshakespeare" / "input.txt"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(PLAY.encode()[:1000])
    with pytest.raises(CorpusError, match=f"Delete {cached} and run again"):
        build_task("shakespeare_char", str(tmp_path), 0)
    repack = tmp_path / "imdb" / "aclImdb_labeled.tar.gz"
    repack.parent.mkdir(parents=True)
    repack.write_bytes(b"\x1f\x8b" + b"x" * 100)
    with pytest.raises(ValueError) as err:
        build_task("imdb", str(tmp_path), 0)
    message = str(err.value)
    assert str(repack) in message and str(tmp_path / "imdb" / "aclImdb_v1.tar.gz") in message
    assert "place it at " + str(repack) not in message  # not: the original under the repack's name


@pytest.fixture
def play_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data_dir holding a small stand-in for Tiny Shakespeare (its checksum declared)."""
    path = tmp_path / "play" / "tinyshakespeare" / "input.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(PLAY.encode())
    monkeypatch.setenv("ATTNZOO_TINYSHAKESPEARE_SHA256", sha(PLAY.encode()))
    return tmp_path / "play"


def test_shakespeare_char_split_batches_and_determinism(play_dir: Path) -> None:
    task = build_task("shakespeare_char", str(play_dir), 0, seq_len=16)
    cut, cut_test = int(len(PLAY) * 0.9), int(len(PLAY) * 0.95)
    assert task.decode(task.ids["train"].tolist()) == PLAY[:cut]
    assert task.decode(task.ids["val"].tolist()) == PLAY[cut:cut_test]
    assert task.decode(task.ids["test"].tolist()) == PLAY[cut_test:]
    assert (task.head, task.causal, task.max_len, task.vocab_size) == (
        "lm",
        True,
        16,
        len(set(PLAY)),
    )
    a = task.batch("train", 5, torch.Generator().manual_seed(3))
    b = task.batch("train", 5, torch.Generator().manual_seed(3))
    c = task.batch("train", 5, torch.Generator().manual_seed(4))
    assert a.inputs.shape == a.targets.shape == (5, 16) and a.key_padding_mask is None
    assert torch.equal(a.inputs, b.inputs) and not torch.equal(a.inputs, c.inputs)
    assert torch.equal(a.inputs[:, 1:], a.targets[:, :-1])  # targets are the next characters
    for row in task.decode(a.inputs[0].tolist()), task.decode(a.targets[0].tolist()):
        assert row in PLAY[:cut]
    for split in ("test", "validation"):  # test is read whole, once, at the end of a run
        with pytest.raises(ValueError, match="split"):
            task.batch(split, 2, torch.Generator())


def test_lm_metrics_in_bits(play_dir: Path) -> None:
    task = build_task("shakespeare_char", str(play_dir), 0, seq_len=8)
    batch = task.batch("val", 4, torch.Generator().manual_seed(0))
    uniform = torch.zeros(4, 8, task.vocab_size)
    m = task.metrics(uniform, batch)
    assert m["bits_per_char"] == pytest.approx(
        torch.log2(torch.tensor(float(len(set(PLAY))))).item(), rel=1e-5
    )
    perfect = torch.nn.functional.one_hot(batch.targets, task.vocab_size).float() * 50
    m = task.metrics(perfect, batch)
    assert m["accuracy"] == 1.0 and m["bits_per_char"] < 1e-6


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"seq_len": 0}, "seq_len"),
        ({"seq_len": 10**6}, "too long"),
        ({"tokenizer": "sentencepiece"}, "tokenizer"),
        ({"tokenizer": "gpt2"}, "tokenizer='bpe'"),
    ],
)
def test_shakespeare_bpe_bad_options(play_dir: Path, options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_task("shakespeare_bpe", str(play_dir), 0, bpe_vocab_size=300, **options)


def test_gpt2_offline_returns_none_without_network_attempt() -> None:
    assert gpt2_encoding() is None


def test_bpe_round_trip_and_cache(play_dir: Path, _isolated_cache: Path) -> None:
    calls = []

    def texts() -> list[str]:
        calls.append(1)
        return [PLAY]

    enc = get_encoding("bpe", "play", "k1", texts, 300)
    assert enc.n_vocab == 300
    for text in (PLAY, "naïve café — 東京 🎬\n\tzzz", ""):
        assert enc.decode(enc.encode_ordinary(text)) == text
    assert len(enc.encode_ordinary(PLAY)) < len(PLAY.encode()) / 2  # merges learned something
    again = get_encoding("bpe", "play", "k1", texts, 300)
    assert calls == [1] and again.encode_ordinary(PLAY) == enc.encode_ordinary(PLAY)
    (file,) = (_isolated_cache / "tokenizers").glob("*.tiktoken")
    first = file.read_text().splitlines()[0].split()
    assert len(first) == 2 and int(first[1]) == 0  # tiktoken's `base64 rank` lines


def test_shakespeare_bpe_task_and_sample(play_dir: Path) -> None:
    from attnzoo.model import Model, ModelConfig

    task = build_task("shakespeare_bpe", str(play_dir), 0, seq_len=12, bpe_vocab_size=300)
    assert task.vocab_size == 300 and task.tokenizer_name.startswith("attnzoo-tinyshakespeare")
    cut = int(len(PLAY) * 0.9)
    assert task.decode(task.ids["train"].tolist()) == PLAY[:cut]
    batch = task.batch("train", 3, torch.Generator().manual_seed(0))
    logits = torch.zeros(3, 12, 300)
    m = task.metrics(logits, batch)
    chars = sum(len(task.encoding.decode_single_token_bytes(t)) for t in batch.targets.flatten())
    assert m["bits_per_token"] == pytest.approx(torch.log2(torch.tensor(300.0)).item(), rel=1e-5)
    assert m["bits_per_char"] == pytest.approx(m["bits_per_token"] * 36 / chars, rel=1e-5)
    model = Model(
        ModelConfig(dim=16, depth=1, heads=2, causal=True), 300, 12, vocab_size=300, head="lm"
    )
    text_a = task.sample_text(model, torch.Generator().manual_seed(1), length=20)
    text_b = task.sample_text(model, torch.Generator().manual_seed(1), length=20)
    assert text_a == text_b and len(task.encoding.encode_ordinary(text_a)) >= 1
    assert model.training  # sampling restores the training mode


# --- IMDB -----------------------------------------------------------------------------------

REVIEWS = {
    ("train", "pos"): ["A wonderful film.<br /><br />Loved it!", "Great acting, great story " * 30],
    ("train", "neg"): ["Dull.", "Terrible plot and worse dialogue " * 20, "Meh."],
    ("test", "pos"): ["Brilliant and moving.", "Superb " * 100],
    ("test", "neg"): ["Awful.", "A waste of two hours."],
}


def imdb_tar(reviews: dict = REVIEWS, unsup: bool = True) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        items = [
            (f"aclImdb/{split}/{label}/{i}_{7 if label == 'pos' else 2}.txt", text)
            for (split, label), texts in reviews.items()
            for i, text in enumerate(texts)
        ]
        if unsup:
            items.append(("aclImdb/train/unsup/0_0.txt", "unlabelled, ignored"))
        items.append(("aclImdb/README", "readme"))
        for name, text in items:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def put_archive(data_dir: Path, data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    path = data_dir / "imdb" / "aclImdb_v1.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    monkeypatch.setenv("ATTNZOO_IMDB_SHA256", sha(data))


def test_imdb_from_archive_padding_and_truncation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_archive(tmp_path, imdb_tar(), monkeypatch)
    task = build_task("imdb", str(tmp_path), 0, seq_len=24, bpe_vocab_size=300, val_size=2)
    assert (task.head, task.causal, task.out_features, task.max_len) == ("classify", False, 2, 24)
    assert [task.num_examples(s) for s in ("train", "val", "test")] == [3, 2, 4]
    tokens, offsets, labels = task.data["test"]
    assert labels.tolist() == [0, 0, 1, 1]  # neg then pos, ordered by review id
    first_neg = task.encoding.decode(tokens[offsets[0] : offsets[1]].tolist())
    assert first_neg == "Awful."

    def texts(split: str) -> list[str]:
        tokens, offsets, _ = task.data[split]
        return [task.encoding.decode(tokens[a:b].tolist()) for a, b in pairwise(offsets)]

    wonderful = [t for split in ("train", "val") for t in texts(split) if "wonderful" in t]
    assert wonderful[0].startswith("A wonderful film.\n\nLoved")  # <br /> became line breaks
    tokens, offsets, labels = task.data["train"]
    lengths = (offsets[1:] - offsets[:-1]).tolist()
    assert max(lengths) == 24 and min(lengths) < 24  # long reviews cut at seq_len
    batch = task.batch("train", 16, torch.Generator().manual_seed(0))
    again = task.batch("train", 16, torch.Generator().manual_seed(0))
    assert torch.equal(batch.inputs, again.inputs) and torch.equal(batch.targets, again.targets)
    mask = batch.key_padding_mask
    assert mask is not None and mask.dtype == torch.bool and mask.shape == batch.inputs.shape
    assert batch.inputs.shape[1] == 24 and batch.targets.shape == (16,)
    assert (batch.inputs[mask] == 0).all() and (~mask).sum(1).min() >= 1
    # every row is its review's tokens followed by padding
    for row, m, label in zip(batch.inputs, mask, batch.targets, strict=True):
        text = task.encoding.decode(row[~m].tolist())
        assert not m[: (~m).sum()].any()
        matches = [
            i for i in range(3) if tokens[offsets[i] : offsets[i + 1]].tolist() == row[~m].tolist()
        ]
        assert matches and labels[matches[0]] == label, text


def test_imdb_download_from_local_server(
    server: Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    _isolated_cache: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.delenv("ATTNZOO_OFFLINE")
    data = imdb_tar()
    server.files["/aclImdb_v1.tar.gz"] = data
    monkeypatch.setenv("ATTNZOO_IMDB_URL", server.url("/aclImdb_v1.tar.gz"))
    monkeypatch.setenv("ATTNZOO_IMDB_SHA256", sha(data))
    task = build_task("imdb", str(tmp_path / "data"), 0, seq_len=8, tokenizer="bpe", val_size=2)
    assert task.num_examples("test") == 4
    assert (_isolated_cache / "downloads" / "imdb" / "aclImdb_v1.tar.gz").read_bytes() == data
    # the minutes of work done once say so, and where they are kept; a second build reads them
    said = capsys.readouterr().err
    tokenizers = _isolated_cache / "tokenizers"
    assert re.search(
        rf"training a 8192-token BPE on imdb's training split \(done once: kept in {tokenizers}/\S+\.tiktoken\)",
        said,
    ), said
    assert re.search(r"training a 8192-token BPE .*: done in \d+ s", said), said
    assert (
        f"tokenising IMDB's reviews (done once: kept in {_isolated_cache / 'imdb'}/tokens-" in said
    )
    build_task("imdb", str(tmp_path / "data"), 0, seq_len=8, tokenizer="bpe", val_size=2)
    assert "attnzoo:" not in capsys.readouterr().err


def test_imdb_interrupted_download_is_never_used(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _isolated_cache: Path
) -> None:
    monkeypatch.delenv("ATTNZOO_OFFLINE")
    data = imdb_tar()
    server.files["/a.tar.gz"] = data
    server.dying.add("/a.tar.gz")
    monkeypatch.setenv("ATTNZOO_IMDB_URL", server.url("/a.tar.gz"))
    monkeypatch.setenv("ATTNZOO_IMDB_SHA256", sha(data))
    with pytest.raises(CorpusError, match="ai.stanford.edu"):
        build_task("imdb", str(tmp_path / "data"), 0, seq_len=8, tokenizer="bpe", val_size=2)
    assert leftovers(_isolated_cache / "downloads") == []
    server.dying.clear()
    task = build_task("imdb", str(tmp_path / "data"), 0, seq_len=8, tokenizer="bpe", val_size=2)
    assert task.num_examples("train") + task.num_examples("val") == 5


def test_imdb_truncated_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = imdb_tar()
    put_archive(tmp_path, data[: len(data) // 2], monkeypatch)
    with pytest.raises(CorpusError, match="truncated or corrupt") as err:
        build_task("imdb", str(tmp_path), 0, tokenizer="bpe")
    assert "ai.stanford.edu" in str(err.value)
    monkeypatch.delenv("ATTNZOO_IMDB_SHA256")  # with the real checksum: caught before reading
    with pytest.raises(CorpusError, match="sha256"):
        build_task("imdb", str(tmp_path), 0, tokenizer="bpe")


def test_imdb_archive_without_the_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reviews = {k: v for k, v in REVIEWS.items() if k != ("test", "neg")}
    put_archive(tmp_path, imdb_tar(reviews), monkeypatch)
    with pytest.raises(CorpusError, match="aclImdb/test/neg"):
        build_task("imdb", str(tmp_path), 0, tokenizer="bpe")


def test_imdb_from_folder_matches_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    put_archive(tmp_path / "a", imdb_tar(), monkeypatch)
    with tarfile.open(fileobj=io.BytesIO(imdb_tar())) as tar:
        tar.extractall(tmp_path / "b" / "imdb", filter="data")
    opts = {"seq_len": 16, "bpe_vocab_size": 300, "val_size": 2}
    from_tar = build_task("imdb", str(tmp_path / "a"), 0, **opts)
    from_dir = build_task("imdb", str(tmp_path / "b"), 0, **opts)
    assert from_tar.val_digest == from_dir.val_digest
    for split in ("train", "val", "test"):
        for a, b in zip(from_tar.data[split], from_dir.data[split], strict=True):
            assert torch.equal(a, b)


def test_imdb_missing_offline_says_how_to_obtain(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="aclImdb_v1.tar.gz") as err:
        build_task("imdb", str(tmp_path), 0)
    assert "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz" in str(err.value)


def test_a_failed_download_is_not_a_configuration_error_and_not_advised_again(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """The trainer labels a corpus it could not obtain as such (exit 2, no folder), and after a
    download that failed it advises the network, a mirror or a copy of one's own: not
    task.download=true, which is what just failed."""
    from attnzoo.train import compose, run
    from attnzoo.train.cli import _kind

    monkeypatch.delenv("ATTNZOO_OFFLINE")
    monkeypatch.setenv("ATTNZOO_TINYSHAKESPEARE_URL", "http://127.0.0.1:9/unreachable")
    cfg = compose(
        ["task=shakespeare_char", f"data_dir={tmp_path / 'none'}", "logger.mode=disabled"]
    )
    with pytest.raises(Exception) as err:
        run(cfg, tmp_path / "run")
    message = f"{_kind(err.value)}: {err.value}"
    assert message.startswith("data not available: task=shakespeare_char: data_dir")
    assert "failed after 0 bytes" in message and "task.download=true" not in message
    assert "ATTNZOO_TINYSHAKESPEARE_URL to a mirror" in message
    assert f"place it at {tmp_path / 'none' / 'tinyshakespeare' / 'input.txt'}" in message
