"""Files that are either complete or absent: write to a temporary sibling, then rename.

Every writer of the project (metrics, curves, checkpoints, downloads, figures) goes through
[`atomic_path`][rambo.harness.atomic.atomic_path], so a killed process leaves the previous file (or none), never half of
one, and never a stray temporary file. The result gets the permissions of a file created by `open`
(`0o666` less the umask), not `mkstemp`'s owner-only `0o600`: colleagues on a shared cluster
read the outputs like any other.

A process killed mid-write (`SIGKILL`, a node lost) leaves its temporary file behind; a run
removes the ones in its own folders when it starts
([`remove_stale_temporaries`][rambo.harness.atomic.remove_stale_temporaries]). A write that finds the disk full raises
[`DiskFullError`][rambo.harness.atomic.DiskFullError]: one line naming the file and the space it needs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

#: A temporary file of `atomic_path` with the default suffix: `.<name>.<8 random characters>.tmp`.
TEMPORARY = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp")


class DiskFullError(OSError):
    """A write that found no space left (or the user's quota spent) on the disk of its file."""


def _size(count: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError


def _disk_full(error: BaseException) -> OSError | None:
    """The `ENOSPC` / `EDQUOT` error that `error` is or was raised from, else `None` (torch
    raises its own error while closing an archive whose write failed; the cause is in its context)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return error
        error = error.__cause__ or error.__context__
    return None


def disk_full_error(path: str | os.PathLike, cause: OSError, needed: int | None) -> DiskFullError:
    """The one-line [`DiskFullError`][rambo.harness.atomic.DiskFullError] for a write of `needed` bytes (`None`: not
    known) to `path`."""
    path = Path(path)
    try:
        free = f"{_size(shutil.disk_usage(path.parent).free)} free there"
    except OSError:
        free = "the free space could not be read"
    what = "no space left on the device" if cause.errno == errno.ENOSPC else "the disk quota is spent"
    need = f"it needs {_size(needed)}, {free}" if needed is not None else free
    error = DiskFullError(
        f"{path} was not written: {what} ({need}); a file already at that path is kept as it was. "
        "Free space on that disk (or write to another one), then run again"
    )
    error.errno = cause.errno
    return error


def remove_stale_temporaries(folder: str | os.PathLike, names=None) -> list[Path]:
    """Remove the temporary files of [`atomic_path`][rambo.harness.atomic.atomic_path] that a killed writer left in
    `folder` (not in its subfolders), of every file or only of the file names in `names`: call it only
    where no other writer of those files is at work (a run's claimed folders: [`claim`][rambo.harness.claim]; its
    own files in a folder it shares). Returns the files removed."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return removed
    for entry in entries:
        match = TEMPORARY.fullmatch(entry.name)
        if match and (names is None or match["name"] in names) and entry.is_file(follow_symlinks=False):
            Path(entry.path).unlink(missing_ok=True)
            removed.append(Path(entry.path))
    return removed


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def give_default_permissions(path: str | os.PathLike) -> None:
    """The permissions `open` / `mkdir` would have given `path` (0o666 or 0o777 less the
    umask), for files and folders made by `mkstemp` / `mkdtemp` (owner-only)."""
    path = Path(path)
    os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~_umask())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp", prefix: str | None = None):
    """Yield a temporary path beside `path`; on success it is renamed to `path`.

    On any exception the temporary file is removed and `path` is left as it was. `suffix` is
    the temporary file's ending, for writers that choose a format by it (`np.savez` adds
    `.npz` to names without it; matplotlib reads the format from the suffix). `prefix` replaces
    the name's start, `.<name>.`, for writers that record who writes the file in its name
    (downloads: [`download`][rambo.harness.download]); 8 random characters follow it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{path.name}." if prefix is None else prefix
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=suffix)
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        give_default_permissions(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to `path` so that a reader never sees a half-written file
    ([`DiskFullError`][rambo.harness.atomic.DiskFullError] when the disk is full)."""
    try:
        with atomic_path(path) as temporary:
            temporary.write_text(text)
    except OSError as error:
        if _disk_full(error) is None:
            raise
        raise disk_full_error(path, _disk_full(error), len(text.encode())) from None
    return Path(path)


def write_json(path: str | os.PathLike, data) -> Path:
    """`data` as indented JSON with sorted keys (stable diffs), written atomically."""
    return write_text(path, json.dumps(data, indent=2, sort_keys=True))


def save_torch(obj, path: str | os.PathLike) -> Path:
    """`torch.save(obj)` to `path` atomically (a killed run leaves the previous checkpoint), on
    disk (`fsync`) before it takes the name, so a crash of the machine cannot leave the name on a
    file whose data was never written. [`DiskFullError`][rambo.harness.atomic.DiskFullError] when the disk is full.

    torch writes through an open file, not to the temporary's path: given a path, torch names the
    archive's records after the file (here a random temporary name), so two saves of equal objects
    would differ in bytes; through a file every record is under `archive/` and equal objects give
    equal files (a rerun leaves DVC's hash of a checkpoint unchanged)."""
    import torch

    try:
        with atomic_path(path) as temporary:
            with open(temporary, "wb") as handle:
                torch.save(obj, handle)
                handle.flush()
                os.fsync(handle.fileno())
    except Exception as error:
        cause = _disk_full(error)
        if cause is None:
            raise
        raise disk_full_error(path, cause, _saved_size(obj)) from None
    return Path(path)


class _Counter:
    """A file that only counts the bytes written to it."""

    def __init__(self):
        self.written = 0

    def write(self, data) -> int:
        self.written += len(data)
        return len(data)

    def flush(self) -> None:
        pass


def _saved_size(obj) -> int | None:
    """The bytes `torch.save(obj)` writes (saved again, to nowhere), or `None` if that fails."""
    import torch

    counter = _Counter()
    try:
        torch.save(obj, counter)
    except Exception:  # noqa: BLE001 (only for the message)
        return None
    return counter.written
