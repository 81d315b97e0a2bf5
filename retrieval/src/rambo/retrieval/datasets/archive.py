"""Safe extraction of zip and tar archives: every member must land inside the target folder."""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path


class UnsafeArchiveError(ValueError):
    """An archive member would be written outside the target folder (path traversal, links, devices)."""


def _inside(folder: Path, name: str) -> bool:
    if os.path.isabs(name) or name.startswith(("/", "\\")):
        return False
    return (folder / name).resolve().is_relative_to(folder.resolve())


def check_members(archive: Path, folder: Path) -> None:
    """Raise :class:`UnsafeArchiveError` if any member of ``archive`` would leave ``folder``.

    Refused: absolute names, ``..`` that climbs out, symbolic or hard links pointing outside,
    and device files / FIFOs (tar). Nothing is extracted by this check.
    """
    folder = Path(folder)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as handle:
            for name in handle.namelist():
                if not _inside(folder, name):
                    raise UnsafeArchiveError(f"{archive}: member {name!r} would be written outside {folder}")
        return
    with tarfile.open(archive) as handle:
        for member in handle.getmembers():
            if not _inside(folder, member.name):
                raise UnsafeArchiveError(f"{archive}: member {member.name!r} would be written outside {folder}")
            if member.issym() or member.islnk():
                # A symlink target is relative to the link's folder, a hard-link target to the root.
                base = os.path.dirname(member.name) if member.issym() else ""
                if not _inside(folder, os.path.join(base, member.linkname)):
                    raise UnsafeArchiveError(
                        f"{archive}: link {member.name!r} -> {member.linkname!r} points outside {folder}"
                    )
            if member.isdev() or member.isfifo():
                raise UnsafeArchiveError(f"{archive}: member {member.name!r} is a device or FIFO")


def extract_archive(archive: Path, folder: Path) -> list[Path]:
    """Extract a zip or tar(.gz) ``archive`` into ``folder``; return the top-level paths created.

    All members are checked first (:func:`check_members`), then extracted into a temporary folder
    beside ``folder`` and moved into place one top-level entry at a time, so an interrupted or
    refused extraction leaves nothing half-written in ``folder``. A top-level entry that already
    exists in ``folder`` is a ``FileExistsError`` (nothing is overwritten).
    """
    archive, folder = Path(archive), Path(folder)
    if not zipfile.is_zipfile(archive) and not tarfile.is_tarfile(archive):
        raise ValueError(f"{archive} is neither a zip nor a tar archive")
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{archive.name}.extracting-", dir=folder))
    try:
        check_members(archive, staging)
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as handle:
                handle.extractall(staging)
        else:
            with tarfile.open(archive) as handle:
                # The "data" filter (Python >= 3.11.4) re-checks what check_members already did.
                if hasattr(tarfile, "data_filter"):
                    handle.extractall(staging, filter="data")
                else:
                    handle.extractall(staging)
        entries = sorted(staging.iterdir())
        clashes = [entry.name for entry in entries if (folder / entry.name).exists()]
        if clashes:
            raise FileExistsError(f"{archive}: {clashes} already exist in {folder}; remove them to extract again")
        for entry in entries:
            os.replace(entry, folder / entry.name)
        return [folder / entry.name for entry in entries]
    finally:
        shutil.rmtree(staging, ignore_errors=True)
