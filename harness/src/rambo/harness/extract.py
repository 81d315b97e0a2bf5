"""Extract a zip or tar archive safely: checked member by member, staged, then merged into place.

Safety never depends on the Python version: before anything is written, every member's path (and
every link's target) is resolved *lexically* against the target folder, following the symbolic
links declared earlier in the same archive, exactly as the filesystem would while extracting into
an empty folder. Absolute names, ``..`` that climbs out, links that point out (directly or through
a chain of the archive's own links) and devices / FIFOs are refused with
:class:`UnsafeArchiveError`. Where ``tarfile`` has the ``data`` filter it is used as well, as a
second line of defence only.

Extraction goes to a hidden staging folder inside the target (same filesystem, so the merge is
renames), and is merged into the target only once complete: directories that exist already are
merged (the VOC 2007 trainval and test tars both fill ``VOCdevkit/VOC2007``), an existing file is
never overwritten (a clash is an :class:`ArchiveClashError` and nothing is moved). A refused,
corrupt or truncated archive leaves the target as it was and no staging folder behind.
"""

from __future__ import annotations

import filecmp
import gzip
import lzma
import os
import re
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path

# Python refuses to follow more symbolic links than this while resolving one path (Linux: 40).
MAX_LINK_HOPS = 40
_SEPARATORS = re.compile(r"[/\\]")
_DRIVE = re.compile(r"^[A-Za-z]:")
# What a corrupt, truncated or non-archive file raises while it is read.
_READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, gzip.BadGzipFile, EOFError, zlib.error, lzma.LZMAError)
# What the ``data`` filter raises when it refuses a member (absent before Python 3.11.4).
_FILTER_ERRORS = (tarfile.FilterError,) if hasattr(tarfile, "FilterError") else ()


class ArchiveError(ValueError):
    """An archive cannot be extracted (corrupt, truncated, not an archive, or clashing)."""


class UnsafeArchiveError(ArchiveError):
    """A member would be written outside the target folder (path traversal, links out, devices)."""


class ArchiveClashError(ArchiveError):
    """A member would overwrite a different file that already exists in the target folder."""


class EncryptedArchiveError(ArchiveError):
    """The archive's members are password-protected: it cannot be extracted without the password."""


def _corrupt(archive: Path, reason: object) -> ArchiveError:
    return ArchiveError(
        f"{archive} is corrupt, truncated or not an archive ({reason}); nothing was extracted. "
        f"Delete it and download it again."
    )


class _Resolver:
    """Lexical path resolution inside the target folder, following the archive's own symlinks."""

    def __init__(self, archive: Path):
        self.archive = archive
        self.links: dict[tuple[str, ...], str] = {}  # symlink path -> its raw target

    def _refuse(self, what: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(
            f"{self.archive}: {what} would be written outside the target folder; nothing was extracted"
        )

    def resolve(self, name: str, base: tuple[str, ...] = (), what: str | None = None) -> tuple[str, ...]:
        """The components, relative to the target, that ``name`` (relative to ``base``) lands on.

        Every symbolic link met on the way, the last component included, is followed: writing a
        file over a link writes where it points.
        """
        what = what or f"member {name!r}"
        if _SEPARATORS.match(name) or _DRIVE.match(name):
            raise UnsafeArchiveError(f"{self.archive}: {what} has an absolute path; nothing was extracted")
        resolved = list(base)
        pending = list(reversed(_SEPARATORS.split(name)))
        hops = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if not resolved:
                    raise self._refuse(what)
                resolved.pop()
                continue
            resolved.append(part)
            link = self.links.get(tuple(resolved))
            if link is not None:
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise UnsafeArchiveError(f"{self.archive}: {what} goes through a loop of symbolic links")
                if _SEPARATORS.match(link) or _DRIVE.match(link):
                    raise self._refuse(what)
                resolved.pop()  # a symlink's target is relative to the folder holding it
                pending.extend(reversed(_SEPARATORS.split(link)))
        return tuple(resolved)

    def check_tar_member(self, member: tarfile.TarInfo) -> None:
        if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
            kind = "a device" if member.isdev() else "a FIFO" if member.isfifo() else "not a file, folder or link"
            raise UnsafeArchiveError(f"{self.archive}: member {member.name!r} is {kind}; nothing was extracted")
        if not self.resolve(member.name) and not member.isdir():
            raise UnsafeArchiveError(f"{self.archive}: member {member.name!r} would replace the target folder itself")
        if member.issym():
            what = f"link {member.name!r} -> {member.linkname!r}"
            *folder, last = _SEPARATORS.split(member.name.rstrip("/\\"))
            if last in ("", ".", ".."):
                raise UnsafeArchiveError(f"{self.archive}: {what} has no name of its own; nothing was extracted")
            # The link's own folder; its target is resolved from there.
            parent = self.resolve("/".join(folder), what=what)
            self.resolve(member.linkname, base=parent, what=what)
            self.links[(*parent, last)] = member.linkname
        elif member.islnk():
            # A hard link's target is a path relative to the archive's root.
            self.resolve(member.linkname, what=f"hard link {member.name!r} -> {member.linkname!r}")


def check_members(archive: str | os.PathLike) -> list[str]:
    """Raise :class:`UnsafeArchiveError` if a member of ``archive`` would leave the target folder.

    Returns the member names. Nothing is extracted; a corrupt archive is an :class:`ArchiveError`.
    """
    archive = Path(archive)
    try:
        if _is_zip(archive):
            with zipfile.ZipFile(archive) as handle:
                return _check_zip(handle, archive)
        with tarfile.open(archive) as handle:
            return [member.name for member in _check_tar(handle, archive)]
    except _READ_ERRORS as error:
        raise _corrupt(archive, error) from error


def _is_zip(archive: Path) -> bool:
    return archive.suffix.lower() == ".zip" or zipfile.is_zipfile(archive)


def _check_zip(handle: zipfile.ZipFile, archive: Path) -> list[str]:
    resolver = _Resolver(archive)  # zipfile writes no links, so there are none to follow
    encrypted = [info.filename for info in handle.infolist() if info.flag_bits & 0x1]
    if encrypted:
        raise EncryptedArchiveError(
            f"{archive} is password-protected ({len(encrypted)} encrypted members, e.g. {encrypted[0]!r}); "
            f"nothing was extracted. Extract it by hand with its password, or download the unencrypted release."
        )
    names = handle.namelist()
    for name in names:
        if not resolver.resolve(name) and not name.endswith("/"):
            raise UnsafeArchiveError(f"{archive}: member {name!r} would replace the target folder itself")
    return names


def _check_tar(handle: tarfile.TarFile, archive: Path) -> list[tarfile.TarInfo]:
    resolver = _Resolver(archive)
    members = handle.getmembers()
    for member in members:
        resolver.check_tar_member(member)
    return members


def _extract_tar(handle: tarfile.TarFile, members: list[tarfile.TarInfo], staging: Path) -> None:
    if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.10.12: a second, independent check
        handle.extractall(staging, members=members, filter="data")
    else:
        handle.extractall(staging, members=members)
    # Read a compressed stream to its end: gzip, bz2 and xz then check the whole archive's CRC.
    while handle.fileobj.read(1 << 20):
        pass


def _clashes(staging: Path, target: Path) -> list[str]:
    """Entries of ``staging`` that would replace something different in ``target``."""
    found = []
    for entry in sorted(staging.iterdir()):
        destination = target / entry.name
        if not os.path.lexists(destination):
            continue
        if entry.is_dir() and not entry.is_symlink() and destination.is_dir() and not destination.is_symlink():
            found += _clashes(entry, destination)
        elif entry.is_symlink() or destination.is_symlink() or not entry.is_file() or not destination.is_file():
            found.append(str(destination))
        elif not filecmp.cmp(entry, destination, shallow=False):
            found.append(str(destination))
    return found


def _merge(staging: Path, target: Path) -> None:
    """Move every entry of ``staging`` into ``target``; folders already there are merged."""
    for entry in sorted(staging.iterdir()):
        destination = target / entry.name
        if not os.path.lexists(destination):
            os.replace(entry, destination)
        elif entry.is_dir() and not entry.is_symlink():
            _merge(entry, destination)
        # else: the same file is already there (checked by _clashes); it is left as it is.


def extract(archive: str | os.PathLike, target: str | os.PathLike) -> list[Path]:
    """Extract a zip or tar (``.tar``, ``.tar.gz``, ``.tgz``, ...) ``archive`` into ``target``.

    Returns the top-level paths of the archive in ``target``. Raises :class:`UnsafeArchiveError`
    (a member would leave ``target``), :class:`ArchiveError` (corrupt, truncated, not an archive)
    or :class:`ArchiveClashError` (a different file is already in ``target``); with each of them
    ``target`` is left as it was.
    """
    archive, target = Path(archive), Path(target)
    if not archive.is_file():
        raise FileNotFoundError(f"{archive}: no such archive")
    # The topmost folder this call creates, removed again when extraction fails.
    created = next((folder for folder in reversed((target, *target.parents)) if not folder.exists()), None)
    target.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{archive.name}.extracting-", dir=target))
    try:
        try:
            if _is_zip(archive):
                with zipfile.ZipFile(archive) as handle:
                    _check_zip(handle, archive)
                    handle.extractall(staging)
            else:
                with tarfile.open(archive) as handle:
                    _extract_tar(handle, _check_tar(handle, archive), staging)
        except _FILTER_ERRORS as error:  # the data filter refused what the check let through
            raise UnsafeArchiveError(f"{archive}: {error}; nothing was extracted") from error
        except _READ_ERRORS as error:
            raise _corrupt(archive, error) from error
        clashes = _clashes(staging, target)
        if clashes:
            shown = ", ".join(clashes[:5]) + (f" and {len(clashes) - 5} more" if len(clashes) > 5 else "")
            raise ArchiveClashError(
                f"{archive}: extracting it would overwrite {shown} (different content); nothing was "
                f"extracted. Move those files away, or extract the archive by hand."
            )
        tops = sorted(staging.iterdir())
        _merge(staging, target)
        return [target / entry.name for entry in tops]
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
