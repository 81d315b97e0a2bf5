"""Files that are either complete or absent: write to a temporary sibling, then rename.

Every writer of the project (metrics, curves, checkpoints, downloads, figures) goes through
:func:`atomic_path`, so a killed process leaves the previous file (or none), never half of one,
and never a stray temporary file. The result gets the permissions of a file created by ``open``
(``0o666`` less the umask), not ``mkstemp``'s owner-only ``0o600``: colleagues on a shared cluster
read the outputs like any other.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def give_default_permissions(path: str | os.PathLike) -> None:
    """The permissions ``open`` / ``mkdir`` would have given ``path`` (0o666 or 0o777 less the
    umask), for files and folders made by ``mkstemp`` / ``mkdtemp`` (owner-only)."""
    path = Path(path)
    os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~_umask())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp"):
    """Yield a temporary path beside ``path``; on success it is renamed to ``path``.

    On any exception the temporary file is removed and ``path`` is left as it was. ``suffix`` is
    the temporary file's ending, for writers that choose a format by it (``np.savez`` adds
    ``.npz`` to names without it; matplotlib reads the format from the suffix).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        give_default_permissions(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` so that a reader never sees a half-written file."""
    with atomic_path(path) as temporary:
        temporary.write_text(text)
    return Path(path)


def write_json(path: str | os.PathLike, data) -> Path:
    """``data`` as indented JSON with sorted keys (stable diffs), written atomically."""
    return write_text(path, json.dumps(data, indent=2, sort_keys=True))


def save_torch(obj, path: str | os.PathLike) -> Path:
    """``torch.save(obj)`` to ``path`` atomically (a killed run leaves the previous checkpoint).

    torch writes through an open file, not to the temporary's path: given a path, torch names the
    archive's records after the file (here a random temporary name), so two saves of equal objects
    would differ in bytes; through a file every record is under ``archive/`` and equal objects give
    equal files (a rerun leaves DVC's hash of a checkpoint unchanged, issue 34)."""
    import torch

    with atomic_path(path) as temporary:
        with open(temporary, "wb") as handle:
            torch.save(obj, handle)
    return Path(path)
