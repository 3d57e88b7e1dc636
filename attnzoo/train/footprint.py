"""What a command that trains nothing leaves behind: nothing. Hydra makes a run's folder (and its
parents) before the task starts, and a sweep's folder and `multirun.yaml` before its first job; a
command all of whose runs are refused, or that only finds its runs already completed, must leave
every folder as it found it. `Footprint.before` notes the folder's state when Hydra starts,
`Footprint.restore` puts it back if no run wrote into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from attnzoo.analysis.runs import REFUSED_FILE

# The files a sweep's folder holds that no run writes: Hydra's record of the command, and the
# refused jobs' reasons (attnzoo.train.build.record_refusal).
SWEEP_RECORDS = ("multirun.yaml", REFUSED_FILE)


def _existing_ancestor(folder: Path) -> Path:
    """`folder`, or its deepest ancestor that exists."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _files(folder: Path, skip: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """Every file under `folder` but the top-level `skip`: its size and modification time."""
    if not folder.is_dir():
        return {}
    out = {}
    for path in folder.rglob("*"):
        rel = str(path.relative_to(folder))
        if rel in skip or not path.is_file():
            continue
        stat = path.stat()
        out[rel] = (stat.st_size, stat.st_mtime_ns)
    return out


def _dirs(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_dir()} if folder.is_dir() else set()


@dataclass
class Footprint:
    """A run's or a sweep's folder as it was before the command: the deepest folder above it that
    existed, its files (size, modification time), its folders, and the bytes of `records`, the
    files that Hydra or a refusal writes without any run being accepted."""

    folder: Path
    existed: Path
    files: dict[str, tuple[int, int]]
    dirs: set[Path]
    records: dict[str, bytes | None] = field(default_factory=dict)

    @classmethod
    def before(cls, folder: Path, records: tuple[str, ...] = ()) -> Footprint:
        folder = folder.absolute()
        saved = {}
        for name in records:
            path = folder / name
            saved[name] = path.read_bytes() if path.is_file() else None
        return cls(
            folder, _existing_ancestor(folder), _files(folder, records), _dirs(folder), saved
        )

    def untouched(self) -> bool:
        """Whether no run wrote into the folder: every file but the records as it was."""
        return _files(self.folder, tuple(self.records)) == self.files

    def restore(self) -> bool:
        """If no run wrote into the folder, put the records back as they were and remove every
        folder the command made (the folder itself and its parents included) while empty.
        Whether the folder was left as it was found."""
        if not self.untouched():
            return False
        for name, data in self.records.items():
            path = self.folder / name
            if data is None:
                path.unlink(missing_ok=True)
            elif not path.is_file() or path.read_bytes() != data:
                path.write_bytes(data)
        inside = sorted(_dirs(self.folder) - self.dirs, key=lambda p: len(p.parts), reverse=True)
        for folder in inside:
            _remove_if_empty(folder)
        folder = self.folder
        while folder != self.existed and self.existed in folder.parents:
            if not _remove_if_empty(folder):
                break
            folder = folder.parent
        return True


def _remove_if_empty(folder: Path) -> bool:
    """Remove `folder` if it is empty; whether it is gone (also when it was gone already)."""
    if not folder.exists():
        return True
    try:
        folder.rmdir()  # only an empty folder
    except OSError:
        return False
    return True
