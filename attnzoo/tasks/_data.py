"""Finding, downloading and verifying the real corpora, and where derived files are cached.

Two rules hold throughout:
- `data_dir` is only ever read. It may be a read-only shared folder; a download or a derived
  file (tokenizer, token ids) goes to the cache directory instead (`cache_dir()`).
- Every file is written to a temporary name next to its destination and renamed into place only
  when it is complete (and, for downloads, when its sha256 matches). A killed process or a dropped
  connection leaves at most a `*.part` file, which is never read.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20
STALE_PART_S = 3600.0  # a partial download untouched this long belongs to a dead process


class CorpusError(ValueError):
    """A corpus is missing, empty, truncated or corrupt; the message says how to obtain it."""


def cache_dir() -> Path:
    """Where downloads and derived files go: $ATTNZOO_CACHE_DIR, else $XDG_CACHE_HOME/attnzoo,
    else ~/.cache/attnzoo. Never inside `data_dir`, which may be read-only or shared."""
    env = os.environ.get("ATTNZOO_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "attnzoo"


def offline() -> bool:
    """True when $ATTNZOO_OFFLINE is set to a true value: no network access is attempted."""
    return os.environ.get("ATTNZOO_OFFLINE", "").lower() in ("1", "true", "yes", "on")


@contextmanager
def said(what: str, kept: Path) -> Iterator[None]:
    """Says on stderr that `what` (minutes of work done once) starts and where its result is
    kept for later runs, and then how long it took."""
    print(f"attnzoo: {what} (done once: kept in {kept})", file=sys.stderr, flush=True)
    start = time.monotonic()
    yield
    print(f"attnzoo: {what}: done in {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)


@contextmanager
def atomic_path(dest: Path) -> Iterator[Path]:
    """A temporary path in `dest`'s folder; renamed to `dest` if the block completes, deleted if
    it raises. Readers therefore see either no file or the whole file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, dest)
    finally:
        tmp_path.unlink(missing_ok=True)


def atomic_write_bytes(dest: Path, data: bytes) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Remote:
    """A corpus file with a canonical public URL and a known sha256.

    `env` names the environment variables that override them: `ATTNZOO_<env>_URL` (a mirror, or
    a local server in tests) and `ATTNZOO_<env>_SHA256` (the checksum of what that URL serves).
    """

    name: str
    filename: str  # path under data_dir / the download cache
    url: str
    sha256: str
    env: str
    homepage: str
    # a repack of another Remote's file (no URL of its own): obtained by getting that one instead
    original: Remote | None = None

    @property
    def current_url(self) -> str:
        return os.environ.get(f"ATTNZOO_{self.env}_URL") or self.url

    @property
    def current_sha256(self) -> str:
        return (os.environ.get(f"ATTNZOO_{self.env}_SHA256") or self.sha256).lower()

    def how_to_obtain(self, data_dir: Path | str, download_failed: bool = False) -> str:
        """How a user gets this file: one way that works from where they are. After a download
        that failed, not the download again: the network, a mirror, or their own copy."""
        if self.original is not None:
            return self.original.how_to_obtain(data_dir, download_failed)
        yourself = (
            f"download it yourself from {self.url} (see {self.homepage}) and place it at "
            f"{Path(data_dir) / self.filename} (sha256 {self.sha256})."
        )
        if download_failed:
            return (
                f"To obtain {self.name}: run again once {self.current_url} can be reached (or "
                f"set ATTNZOO_{self.env}_URL to a mirror), or {yourself}"
            )
        switches = [s for s, on in (("unset ATTNZOO_OFFLINE", offline()),) if on]
        let = f"; {' and '.join(switches)}" if switches else ""
        return (
            f"To obtain {self.name}: let attnzoo download it (task.download=true fetches "
            f"{self.current_url} into {cache_dir() / 'downloads'}{let}), or {yourself}"
        )

    def how_to_fix(self, path: Path, data_dir: Path | str) -> str:
        """The one fix for a copy at `path` that is not the expected file."""
        if cache_dir() in path.parents:  # attnzoo's own download: fetched again once removed
            return f"Delete {path} and run again: attnzoo downloads it again."
        if self.original is not None:
            good = Path(data_dir) / self.original.filename
            return (
                f"Replace it with a good copy, or remove it and place the original archive at "
                f"{good} (from {self.original.url}, sha256 {self.original.sha256})."
            )
        return f"Replace it with a good copy of {self.url} (sha256 {self.sha256})."


def download(url: str, dest: Path, sha256: str, timeout: float = 60.0) -> Path:
    """Fetch `url` to `dest`, verifying the length the server announced and the sha256.

    The bytes go to a temporary file that is renamed to `dest` only after both checks pass; on any
    failure it is deleted and a CorpusError says what went wrong.
    """
    for stale in dest.parent.glob(f".{dest.name}.*.part") if dest.parent.exists() else ():
        with contextlib.suppress(OSError):
            if time.time() - stale.stat().st_mtime > STALE_PART_S:
                stale.unlink()  # left by a download that was killed (kill -9, power loss)
    digest = hashlib.sha256()
    received = 0
    try:
        with atomic_path(dest) as tmp:
            with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "wb") as out:
                announced = response.headers.get("Content-Length")
                while chunk := response.read1(CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
            if announced is not None and received != int(announced):
                raise CorpusError(
                    f"download of {url} was cut off: got {received} of {announced} bytes"
                )
            if received == 0:
                raise CorpusError(f"download of {url} returned an empty file")
            if digest.hexdigest() != sha256.lower():
                raise CorpusError(
                    f"download of {url} has sha256 {digest.hexdigest()}, expected {sha256}: "
                    "the file is corrupt, truncated or not the expected one"
                )
    except CorpusError:
        raise
    except (urllib.error.URLError, OSError, ValueError) as err:
        # http.client.IncompleteRead is an HTTPException, caught below.
        raise CorpusError(f"download of {url} failed after {received} bytes: {err}") from err
    except Exception as err:  # http.client.HTTPException and friends
        raise CorpusError(f"download of {url} failed after {received} bytes: {err!r}") from err
    return dest


def verify(path: Path, remote: Remote, data_dir: Path | str) -> Path:
    """`path` if it is non-empty and has the expected sha256; otherwise a CorpusError."""
    size = path.stat().st_size
    if size == 0:
        raise CorpusError(f"{path} is empty. {remote.how_to_fix(path, data_dir)}")
    got = sha256_file(path)
    if got != remote.current_sha256:
        raise CorpusError(
            f"{path} ({size} bytes) has sha256 {got}, expected {remote.current_sha256}: it is "
            f"truncated, corrupt or a different file. {remote.how_to_fix(path, data_dir)}"
        )
    return path


def fetch(remote: Remote, data_dir: Path | str, allow_download: bool = True) -> Path:
    """The verified local copy of `remote`: from `data_dir` if it holds one, else from the
    download cache, else downloaded into the cache (unless downloads are off)."""
    local = Path(data_dir) / remote.filename
    if local.exists():
        return verify(local, remote, data_dir)
    cached = cache_dir() / "downloads" / remote.filename
    if cached.exists():
        return verify(cached, remote, data_dir)
    missing = (
        f"data_dir {data_dir} does not exist (it is where the corpora are read from: "
        f"{remote.filename} under it). "
        if not Path(data_dir).exists()
        else ""
    )
    if not allow_download or offline():
        why = "ATTNZOO_OFFLINE is set" if offline() else "task.download=false"
        raise CorpusError(
            f"{missing}{remote.name} not found at {local} or {cached}, and downloading is off "
            f"({why}). {remote.how_to_obtain(data_dir)}"
        )
    try:
        return download(remote.current_url, cached, remote.current_sha256)
    except CorpusError as err:
        raise CorpusError(f"{missing}{err}. {remote.how_to_obtain(data_dir, True)}") from err
