"""Extract a zip or tar archive safely: checked member by member, staged, then merged into place.

Safety never depends on the Python version: before anything is written, every member's path (and
every link's target) is resolved *lexically* against the target folder, following the symbolic
links declared earlier in the same archive, exactly as the filesystem would while extracting into
an empty folder. Absolute names, `..` that climbs out, links that point out (directly or through
a chain of the archive's own links) and special files (devices, FIFOs) are refused with
[`UnsafeArchiveError`][rambo.harness.extract.UnsafeArchiveError]. Members that contradict each other (a file `a` and a
member `a/b`, a hard link to a name the archive has not stored before it) are an
[`InconsistentArchiveError`][rambo.harness.extract.InconsistentArchiveError]. Where `tarfile` has the `data` filter it
is used as well, as a second line of defence only.

Nothing is written either when the members' declared sizes exceed a limit
([`ArchiveTooLargeError`][rambo.harness.extract.ArchiveTooLargeError]): more than `max_ratio` times the archive's own
size (a zip bomb; archives that declare less than `ratio_floor` are exempt), or more than the free space on the
target's disk less `reserve` bytes. A disk that fills up all the same (file system overhead, other
writers) is a [`NoSpaceError`][rambo.harness.extract.NoSpaceError] naming the file being written and the space needed.

Extraction goes to a hidden staging folder inside the target (same filesystem, so the merge is
renames), `.<archive>.extracting-<host>-<process>-...`, and is merged into the target only once
complete: directories that exist already are merged (the VOC 2007 trainval and test tars both fill
`VOCdevkit/VOC2007`), an existing file is never overwritten (a clash is an
[`ArchiveClashError`][rambo.harness.extract.ArchiveClashError] and nothing is moved). A refused, corrupt or truncated
archive leaves the target as it was and no staging folder behind. A process killed mid-extraction cannot clean up: the
next extraction of the same archive into the same folder removes the staging folders of that
archive whose process has ended ([`remove_stale_staging`][rambo.harness.extract.remove_stale_staging]).
"""

from __future__ import annotations

import errno
import filecmp
import gzip
import lzma
import os
import re
import shutil
import socket
import sys
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path

# Python refuses to follow more symbolic links than this while resolving one path (Linux: 40).
MAX_LINK_HOPS = 40
#: The default limit on the members' declared sizes, in times the archive's size: real datasets
#: (images, text) stay below 20; a zip bomb is near 1000 (deflate) or far above (xz, bzip2).
MAX_RATIO = 100.0
#: Archives declaring at most this many bytes are never refused for their ratio (small, highly
#: compressible annotation files harm no disk).
RATIO_FLOOR_BYTES = 16 << 20
#: The default free space left on the target's disk after extraction (others write there too).
DISK_RESERVE_BYTES = 1 << 30
_SEPARATORS = re.compile(r"[/\\]")
_DRIVE = re.compile(r"^[A-Za-z]:")
# What a corrupt, truncated or non-archive file raises while it is read.
_READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, gzip.BadGzipFile, EOFError, zlib.error, lzma.LZMAError)
# What the ``data`` filter raises when it refuses a member (absent before Python 3.11.4).
_FILTER_ERRORS = (tarfile.FilterError,) if hasattr(tarfile, "FilterError") else ()
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_DAMAGED = "The archive is damaged or not the expected file: delete it and download it again."


class ArchiveError(ValueError):
    """An archive cannot be extracted (corrupt, truncated, not an archive, or clashing)."""


class ArchiveNotFoundError(ArchiveError, FileNotFoundError):
    """The archive to extract is not there (or is not a file)."""


class UnsafeArchiveError(ArchiveError):
    """A member would be written outside the target folder (path traversal, links out) or is a
    special file (a device, a FIFO)."""


class InconsistentArchiveError(ArchiveError):
    """The archive's members contradict each other: a file and a folder of one name, a hard link to
    a name the archive has not stored before it."""


class ArchiveTooLargeError(ArchiveError):
    """The members' declared sizes exceed the ratio limit (a zip bomb) or the free disk."""


class NoSpaceError(ArchiveError):
    """The target's disk filled up during extraction (or the user's quota is spent)."""


class ArchiveClashError(ArchiveError):
    """A member would overwrite a different file that already exists in the target folder."""


class EncryptedArchiveError(ArchiveError):
    """The archive's members are password-protected: it cannot be extracted without the password."""


def _corrupt(archive: Path, reason: object) -> ArchiveError:
    return ArchiveError(
        f"{archive} is corrupt, truncated or not an archive ({reason}); nothing was extracted. "
        f"Delete it and download it again."
    )


def _size(count: float) -> str:
    """`count` bytes for a reader: `512 bytes`, `64.0 MiB`."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            break
        count /= 1024
    return f"{count:.0f} bytes" if unit == "bytes" else f"{count:.1f} {unit}"


class _Resolver:
    """Lexical path resolution inside the target folder, following the archive's own symlinks, and
    what each path holds once the members before are extracted."""

    def __init__(self, archive: Path):
        self.archive = archive
        self.links: dict[tuple[str, ...], str] = {}  # symlink path -> its raw target
        self.kinds: dict[tuple[str, ...], str] = {}  # resolved path -> "file" or "folder"

    def _refuse(self, what: str) -> UnsafeArchiveError:
        return UnsafeArchiveError(
            f"{self.archive}: {what} would be written outside the target folder; nothing was extracted"
        )

    def _inconsistent(self, what: str) -> InconsistentArchiveError:
        return InconsistentArchiveError(f"{self.archive}: {what}; nothing was extracted. {_DAMAGED}")

    def resolve(self, name: str, base: tuple[str, ...] = (), what: str | None = None) -> tuple[str, ...]:
        """The components, relative to the target, that `name` (relative to `base`) lands on.

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

    def place(self, name: str, path: tuple[str, ...], kind: str) -> None:
        """Record that member `name` makes `path` a `kind` ("file" or "folder"), and every
        folder above it a folder; refuse it where the members before made one of them the other."""
        for end in range(1, len(path) + (kind == "folder")):
            folder = path[:end]
            if self.kinds.get(folder) == "file":
                needs = "is a folder" if folder == path else f"needs {'/'.join(folder)!r} to be a folder"
                raise self._inconsistent(f"member {name!r} {needs}, but the archive has {'/'.join(folder)!r} as a file")
            self.kinds[folder] = "folder"
        if kind == "file" and path:
            if self.kinds.get(path) == "folder":
                raise self._inconsistent(
                    f"member {name!r} is a file, but the archive has {'/'.join(path)!r} as a folder"
                )
            self.kinds[path] = "file"

    def _own_path(self, member: tarfile.TarInfo, what: str) -> tuple[str, ...]:
        """Where a link member itself lands: its folder resolved, its last component not followed."""
        *folder, last = _SEPARATORS.split(member.name.rstrip("/\\"))
        if last in ("", ".", ".."):
            raise UnsafeArchiveError(f"{self.archive}: {what} has no name of its own; nothing was extracted")
        return (*self.resolve("/".join(folder), what=what), last)

    def check_tar_member(self, member: tarfile.TarInfo) -> None:
        if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
            kind = (
                "a FIFO (a named pipe)"
                if member.isfifo()
                else "a character device"
                if member.ischr()
                else "a block device"
                if member.isblk()
                else "not a file, folder or link"
            )
            raise UnsafeArchiveError(
                f"{self.archive}: member {member.name!r} is {kind}, a special file that is never extracted; "
                f"nothing was extracted"
            )
        path = self.resolve(member.name)
        if not path and not member.isdir():
            raise UnsafeArchiveError(f"{self.archive}: member {member.name!r} would replace the target folder itself")
        if member.issym():
            what = f"link {member.name!r} -> {member.linkname!r}"
            own = self._own_path(member, what)
            # The link's target is resolved from the link's own folder.
            self.resolve(member.linkname, base=own[:-1], what=what)
            self.place(member.name, own[:-1], "folder")
            if self.kinds.get(own) == "folder":
                raise self._inconsistent(f"{what} would replace the folder {'/'.join(own)!r} of the archive")
            self.kinds.pop(own, None)  # a file there is replaced by the link
            self.links[own] = member.linkname
        elif member.islnk():
            # A hard link's target is a path relative to the archive's root.
            what = f"hard link {member.name!r} -> {member.linkname!r}"
            source = self.resolve(member.linkname, what=what)
            own = self._own_path(member, what)
            if self.kinds.get(source) == "folder":
                raise self._inconsistent(f"{what} links to a folder")
            if self.kinds.get(source) != "file":
                raise self._inconsistent(f"{what} names no file stored before it in the archive")
            if own in self.kinds or own in self.links:
                raise self._inconsistent(f"{what} would replace {'/'.join(own)!r}, stored before it in the archive")
            self.place(member.name, own, "file")
        else:
            self.place(member.name, path, "folder" if member.isdir() else "file")


def check_members(archive: str | os.PathLike) -> list[str]:
    """Raise [`UnsafeArchiveError`][rambo.harness.extract.UnsafeArchiveError] if a member of `archive` would leave the
    target folder, [`InconsistentArchiveError`][rambo.harness.extract.InconsistentArchiveError] if its members
    contradict each other.

    Returns the member names. Nothing is extracted; a corrupt archive is an
    [`ArchiveError`][rambo.harness.extract.ArchiveError].
    """
    archive = Path(archive)
    try:
        if _is_zip(archive):
            with zipfile.ZipFile(archive) as handle:
                return [info.filename for info in _check_zip(handle, archive)]
        with tarfile.open(archive) as handle:
            return [member.name for member in _check_tar(handle, archive)]
    except _READ_ERRORS as error:
        raise _corrupt(archive, error) from error


def _is_zip(archive: Path) -> bool:
    return archive.suffix.lower() == ".zip" or zipfile.is_zipfile(archive)


def _check_zip(handle: zipfile.ZipFile, archive: Path) -> list[zipfile.ZipInfo]:
    resolver = _Resolver(archive)  # zipfile writes no links, so there are none to follow
    infos = handle.infolist()
    encrypted = [info.filename for info in infos if info.flag_bits & 0x1]
    if encrypted:
        raise EncryptedArchiveError(
            f"{archive} is password-protected ({len(encrypted)} encrypted members, e.g. {encrypted[0]!r}); "
            f"nothing was extracted. Extract it by hand with its password, or download the unencrypted release."
        )
    for info in infos:
        name = info.filename
        if not resolver.resolve(name) and not name.endswith("/"):
            raise UnsafeArchiveError(f"{archive}: member {name!r} would replace the target folder itself")
        # Where zipfile writes it: empty, "." and ".." components dropped.
        path = tuple(part for part in name.split("/") if part not in ("", ".", ".."))
        resolver.place(name, path, "folder" if name.endswith("/") else "file")
    return infos


def _check_tar(handle: tarfile.TarFile, archive: Path) -> list[tarfile.TarInfo]:
    resolver = _Resolver(archive)
    members = handle.getmembers()
    for member in members:
        resolver.check_tar_member(member)
    return members


def _free_bytes(target: Path) -> int | None:
    """The free space on the disk `target` is (or will be) on; `None` where it cannot be read."""
    existing = next((folder for folder in (target, *target.parents) if folder.exists()), target)
    try:
        return shutil.disk_usage(existing).free
    except OSError:
        return None


def _check_sizes(
    archive: Path, target: Path, declared: int, max_ratio: float | None, ratio_floor: int, reserve: int | None
) -> None:
    """Raise [`ArchiveTooLargeError`][rambo.harness.extract.ArchiveTooLargeError] when `declared` bytes exceed the ratio
    or the disk limit."""
    size = archive.stat().st_size
    free = _free_bytes(target)
    free_text = f"{_size(free)} free" if free is not None else "free space unknown"
    if max_ratio is not None:
        limit = max(max_ratio * size, ratio_floor)
        if declared > limit:
            raise ArchiveTooLargeError(
                f"{archive} declares {_size(declared)} of files in {_size(size)} "
                f"({declared / max(size, 1):.0f} times its size), more than the {_size(limit)} allowed "
                f"({max_ratio:g} times its size, at least {_size(ratio_floor)}; {free_text} on the disk of {target}): a zip bomb or a damaged archive; "
                f"nothing was extracted. Delete it and download it again; extract it by hand only if you trust it."
            )
    if reserve is not None and free is not None and declared > free - reserve:
        raise ArchiveTooLargeError(
            f"{archive} declares {_size(declared)} of files, more than the limit of {_size(max(free - reserve, 0))} "
            f"on the disk of {target} ({free_text}, less a reserve of {_size(reserve)}); nothing was extracted. "
            f"Free space there, or extract it into a folder on a larger disk."
        )


def _staging_prefix(archive: Path) -> str:
    return f".{archive.name}.extracting-"


def _process_start(pid: int) -> str | None:
    """The start time of process `pid` (`/proc/<pid>/stat` field 22), `None` without `/proc`."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())


def _has_ended(pid: int, start: str) -> bool:
    """Whether process `pid` of this host, started at `start` ("none": not known), has ended."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    now = _process_start(pid)
    return state == "Z" or (start != "none" and now is not None and now != start)


def remove_stale_staging(archive: str | os.PathLike, target: str | os.PathLike) -> list[Path]:
    """Remove the staging folders that extractions of `archive` into `target` left behind when
    they were killed; return them.

    Only folders named as this module names the staging of that archive are looked at; one is
    removed when the process that made it, on this host, has ended. One made on another host, or
    by a version that did not record its process, may belong to a running extraction: it is left,
    with a line on stderr saying when to delete it.
    """
    archive, target = Path(archive), Path(target)
    prefix = re.escape(_staging_prefix(archive))
    ours = re.compile(prefix + r"(?P<host>.+)-(?P<pid>\d+)-(?P<start>\d+|none)-[a-z0-9_]{8}")
    unrecorded = re.compile(prefix + r"[a-z0-9_]{8}")
    try:
        entries = [entry for entry in os.scandir(target) if entry.name.startswith(_staging_prefix(archive))]
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for entry in sorted(entries, key=lambda entry: entry.name):
        if not entry.is_dir(follow_symlinks=False):
            continue
        match = ours.fullmatch(entry.name)
        if match and match["host"] == _host():
            if _has_ended(int(match["pid"]), match["start"]):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(Path(entry.path))
                print(
                    f"removed {entry.path}: the staging folder of an extraction of {archive.name} whose process "
                    f"{match['pid']} has ended",
                    file=sys.stderr,
                )
            continue
        if match or unrecorded.fullmatch(entry.name):
            who = (
                f"process {match['pid']} on {match['host']}" if match else "a process an earlier version did not record"
            )
            print(
                f"warning: {entry.path} is left as it is: the staging folder of an extraction of {archive.name} "
                f"by {who}, which may still run; delete it if no extraction of {archive.name} into {target} runs",
                file=sys.stderr,
            )
    return removed


def _extract_zip(handle: zipfile.ZipFile, infos: list[zipfile.ZipInfo], staging: Path, current: list[str]) -> None:
    for info in infos:
        current[0] = info.filename
        handle.extract(info, staging)


def _extract_tar(handle: tarfile.TarFile, members: list[tarfile.TarInfo], staging: Path, current: list[str]) -> None:
    def tracked():
        for member in members:
            current[0] = member.name
            yield member

    if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.10.12: a second, independent check
        handle.extractall(staging, members=tracked(), filter="data")
    else:
        handle.extractall(staging, members=tracked())
    # Read a compressed stream to its end: gzip, bz2 and xz then check the whole archive's CRC.
    while handle.fileobj.read(1 << 20):
        pass


def _clashes(staging: Path, target: Path) -> list[str]:
    """Entries of `staging` that would replace something different in `target`."""
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
    """Move every entry of `staging` into `target`; folders already there are merged."""
    for entry in sorted(staging.iterdir()):
        destination = target / entry.name
        if not os.path.lexists(destination):
            os.replace(entry, destination)
        elif entry.is_dir() and not entry.is_symlink():
            _merge(entry, destination)
        # else: the same file is already there (checked by _clashes); it is left as it is.


def _write_error(archive: Path, target: Path, name: str, error: OSError, declared: int) -> ArchiveError:
    """The error for a member that could not be written (the staging folder already removed)."""
    path = target / name if name else target
    if error.errno in _DISK_FULL:
        free = _free_bytes(target)
        what = "no space left on the disk" if error.errno == errno.ENOSPC else "the disk quota is spent"
        return NoSpaceError(
            f"{archive}: {what} of {target} while writing {path}: extracting it needs {_size(declared)} "
            f"(the members' declared sizes, plus file system overhead), "
            f"{f'{_size(free)} is free' if free is not None else 'the free space is unknown'}; nothing was "
            f"extracted. Free space there, or extract it into a folder on another disk."
        )
    return ArchiveError(
        f"{archive}: member {name!r} cannot be written to {path} ({error.strerror or error}); nothing was "
        f"extracted. Check that {target} can be written; if it can, the archive is damaged: delete it and "
        f"download it again."
    )


def _stage_and_merge(
    archive: Path, target: Path, handle: zipfile.ZipFile | tarfile.TarFile, members: list, declared: int
) -> list[Path]:
    """Extract the checked `members` into a staging folder in `target`, then merge it in."""
    # The topmost folder this call creates, removed again when extraction fails.
    created = next((folder for folder in reversed((target, *target.parents)) if not folder.exists()), None)
    start = _process_start(os.getpid()) or "none"
    try:
        target.mkdir(parents=True, exist_ok=True)
        staging = Path(
            tempfile.mkdtemp(prefix=f"{_staging_prefix(archive)}{_host()}-{os.getpid()}-{start}-", dir=target)
        )
    except OSError as error:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise _write_error(archive, target, "", error, declared) from error
    current = [""]  # the member being written
    try:
        try:
            if isinstance(handle, zipfile.ZipFile):
                _extract_zip(handle, members, staging, current)
            else:
                _extract_tar(handle, members, staging, current)
        except _FILTER_ERRORS as error:  # the data filter refused what the check let through
            raise UnsafeArchiveError(f"{archive}: {error}; nothing was extracted") from error
        except _READ_ERRORS as error:
            raise _corrupt(archive, error) from error
        except OSError as error:
            shutil.rmtree(staging, ignore_errors=True)  # before the free space is measured
            raise _write_error(archive, target, current[0], error, declared) from error
        except KeyError as error:  # tarfile: a link's target not found (the check refuses these first)
            raise InconsistentArchiveError(
                f"{archive}: member {current[0]!r}: {error.args[0] if error.args else error}; nothing was "
                f"extracted. {_DAMAGED}"
            ) from error
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


def extract(
    archive: str | os.PathLike,
    target: str | os.PathLike,
    *,
    max_ratio: float | None = MAX_RATIO,
    ratio_floor: int = RATIO_FLOOR_BYTES,
    reserve: int | None = DISK_RESERVE_BYTES,
) -> list[Path]:
    """Extract a zip or tar (`.tar`, `.tar.gz`, `.tgz`, ...) `archive` into `target`.

    Returns the top-level paths of the archive in `target`. First the staging folders of this
    archive that killed extractions left in `target` are removed
    ([`remove_stale_staging`][rambo.harness.extract.remove_stale_staging]). Then, before anything is written, every
    member is checked, and the archive is refused when its members declare more than `max_ratio` times its own size
    (`None`: no ratio limit; archives declaring at most `ratio_floor` bytes are exempt), or more than the free space on
    `target`'s disk less `reserve` bytes (`None`: no disk limit, e.g. for a file system that
    reports no free space).

    Raises [`UnsafeArchiveError`][rambo.harness.extract.UnsafeArchiveError] (a member would leave `target`, or is a
    special file), [`InconsistentArchiveError`][rambo.harness.extract.InconsistentArchiveError] (members contradict each
    other), [`ArchiveTooLargeError`][rambo.harness.extract.ArchiveTooLargeError],
    [`NoSpaceError`][rambo.harness.extract.NoSpaceError] (the disk filled up all the same),
    [`ArchiveClashError`][rambo.harness.extract.ArchiveClashError] (a different file is already in `target`),
    [`ArchiveNotFoundError`][rambo.harness.extract.ArchiveNotFoundError], or
    [`ArchiveError`][rambo.harness.extract.ArchiveError] (corrupt, truncated, not an archive, a member that cannot be
    written); with each of them `target` is left as it was.
    """
    archive, target = Path(archive), Path(target)
    if not archive.is_file():
        raise ArchiveNotFoundError(
            f"{archive} {'is not a file' if archive.exists() else 'does not exist'}: there is no archive to "
            f"extract; nothing was extracted. Download it again, or put it there by hand."
        )
    remove_stale_staging(archive, target)
    zipped = _is_zip(archive)
    try:
        with zipfile.ZipFile(archive) if zipped else tarfile.open(archive) as handle:
            if zipped:
                members = _check_zip(handle, archive)
                declared = sum(info.file_size for info in members)
            else:
                members = _check_tar(handle, archive)
                declared = sum(member.size for member in members if member.isreg())
            _check_sizes(archive, target, declared, max_ratio, ratio_floor, reserve)
            return _stage_and_merge(archive, target, handle, members, declared)
    except _READ_ERRORS as error:
        raise _corrupt(archive, error) from error
