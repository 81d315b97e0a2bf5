"""Put a dataset's files in place: fetched from official URLs, verified, written whole, extracted.

[`ensure_dataset`][rambo.harness.download.ensure_dataset] is the one entry point of both training apps. For each
[`DatasetFile`][rambo.harness.download.DatasetFile] it accepts data that is already there (its `ready` path exists, e.g.
a shared copy extracted by hand: nothing is checksummed or extracted again); otherwise it verifies a file put at
`root/filename` by hand, or downloads it ([`fetch_file`][rambo.harness.download.fetch_file]), and extracts archives with
[`rambo.harness.extract.extract`][rambo.harness.extract.extract] (checked, staged, merged). Archives are kept.

A download streams into a temporary sibling of its target and is renamed only once complete and
its MD5 matches ([`rambo.harness.atomic.atomic_path`][rambo.harness.atomic.atomic_path]: usual `0o666 & ~umask`
permissions). That partial file, `.<name>.<host>-<process>-<start>-<URL key>-<random>.part`, names the process
writing it and the URL it comes from, so that a download killed mid-copy (`SIGKILL`, a node lost)
is dealt with by the next download of the same file into the same folder
([`settle_partial_downloads`][rambo.harness.download.settle_partial_downloads]): resumed with an HTTP range request
where that is safe, else removed; the partial file of a download still running is never touched.
A pinned MD5 is compared case-insensitively, surrounding whitespace stripped. Every failure
(offline, timeouts, HTTP errors, a web page served instead of the file, a short transfer, a wrong
checksum) ends in a [`DownloadError`][rambo.harness.download.DownloadError] whose message holds the manual steps; a
local failure (the disk full, a folder that cannot be written, a file that cannot be read) ends in one at once,
naming the path, without trying the other URLs.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import itertools
import os
import re
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from .atomic import atomic_path
from .extract import (
    ArchiveError,
    EncryptedArchiveError,
    _has_ended,
    _host,
    _process_start,
    extract,
    remove_stale_staging,
)

CHUNK_BYTES = 1 << 20
TIMEOUT_S = 60  # seconds without a byte before a connection counts as failed
_HTML_STARTS = (b"<!doctype html", b"<html", b"<head")
# What a failing transfer raises: URLError (offline, refused, HTTP errors), timeouts and resets
# (OSError), broken HTTP responses, and malformed URLs (ValueError).
_NETWORK_ERRORS = (OSError, http.client.HTTPException, ValueError)
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_RESUMABLE = ("http://", "https://")  # a file:// URL (a local mirror) is copied again: no range requests
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class DownloadError(RuntimeError):
    """A file could not be downloaded or verified; the message says how to put it in place by hand."""


@dataclass(frozen=True)
class DatasetFile:
    """One file of a dataset: where to get it, its checksum, and how to tell it is in place."""

    filename: str  # its name under the data root
    urls: tuple[str, ...]  # tried in order
    md5: str | None  # None: no published checksum; it can only be accepted unverified
    extract: bool  # an archive, extracted into the data root
    ready: str  # the path, relative to the data root, that exists once this file is in place
    # Other layouts a user may already have (e.g. a dataset's own download folder), relative to the
    # data root: a path that means the file is in place, and archives used where they lie (each
    # extracted into its own folder).
    found_at: tuple[str, ...] = ()
    archive_at: tuple[str, ...] = ()

    def __post_init__(self):
        if self.md5 is not None:  # as pinned by hand: any case, a stray newline
            object.__setattr__(self, "md5", normalise_md5(self.md5))

    def in_place(self, root: Path) -> Path | None:
        """The first of `ready` and `found_at` that exists under `root`, else None."""
        return next((root / p for p in (self.ready, *self.found_at) if os.path.lexists(root / p)), None)


class _Refused(Exception):
    """What a URL served is not the file (a web page, a short transfer, a wrong checksum)."""


def normalise_md5(pin: str) -> str:
    """A pinned MD5 as [`md5_of`][rambo.harness.download.md5_of] writes it: lower case, surrounding whitespace
    stripped."""
    return pin.strip().lower()


def _size(count: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if count < 1024 or unit == "TiB":
            break
        count /= 1024
    return f"{count:.0f} bytes" if unit == "bytes" else f"{count:.1f} {unit}"


def _local_failure(error: BaseException, target: Path) -> OSError | None:
    """The error of this machine's disk in `error` (or what it was raised from): the disk full, or
    a file in `target`'s folder that cannot be made or written; `None` for a transfer's error."""
    seen = set()
    # A URLError is the transfer's (a file:// URL's missing file among them), whatever it wraps.
    while error is not None and id(error) not in seen and not isinstance(error, urllib.error.URLError):
        seen.add(id(error))
        if isinstance(error, OSError):
            if error.errno in _DISK_FULL:
                return error
            name = Path(error.filename) if isinstance(error.filename, (str, os.PathLike)) else None
            if name is not None and (name.parent == target.parent or name in (target.parent, *target.parent.parents)):
                return error  # the download's temporary file, or a folder above it
        error = error.__cause__ or error.__context__
    return None


def _local_error(error: OSError, target: Path, url: str, progress: dict, steps: str) -> DownloadError:
    """The [`DownloadError`][rambo.harness.download.DownloadError] of a local failure while `url` was downloaded to
    `target`."""
    if error.errno in _DISK_FULL:
        try:
            free = f"{_size(shutil.disk_usage(target.parent).free)} free"
        except OSError:
            free = "the free space is unknown"
        total = progress.get("total")
        needs = f"it needs {_size(total)}" if total else "its size is not known"
        what = "no space left on the disk" if error.errno == errno.ENOSPC else "the disk quota is spent"
        return DownloadError(
            f"{target} was not downloaded from {url}: {what} of {target.parent} ({needs}, {free}); nothing was "
            f"kept. Free space there and run the same command again, or\n{steps}"
        )
    return DownloadError(
        f"{target} cannot be written ({error.strerror or error}: {error.filename}); nothing was downloaded. "
        f"Choose a data folder you can write to."
    )


def md5_of(path: str | os.PathLike) -> str:
    """Hex MD5 of a file, read in chunks."""
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def manual_steps(
    target: Path, urls: Sequence[str], md5: str | None = None, homepage: str | None = None, ready: Path | None = None
) -> str:
    """How to put `target` in place by hand: the URLs, where to put it, its MD5."""
    lines = [f"Download {target.name} by hand from one of:", *(f"    {url}" for url in urls)]
    if homepage:
        lines.append(f"  (dataset page: {homepage})")
    checksum = f" (its MD5 must be {md5})" if md5 else ""
    lines.append(f"put it at {target}{checksum}, and run the same command again: it is verified and used from there.")
    if ready is not None:
        lines.append(f"Or extract it yourself so that {ready} exists: data found there is used as it is.")
    return "\n".join(lines)


def _looks_like_html(first_chunk: bytes) -> bool:
    return first_chunk[:64].lstrip().lower().startswith(_HTML_STARTS)


def _pause(point: str) -> None:
    """A point of a download where a test's worker process stops, to be killed there
    (`download_worker.py`): `"written"` (a chunk was written to the partial file). Nothing here."""


def _url_key(url: str) -> str:
    """12 hexadecimal digits of the URL's SHA-256: a partial file's record of the URL it comes from."""
    return hashlib.sha256(url.encode()).hexdigest()[:12]


def _partial_prefix(name: str, url: str) -> str:
    """The start of the partial file of this process's download of `name` from `url`."""
    pid = os.getpid()
    return f".{name}.{_host()}-{pid}-{_process_start(pid) or 'none'}-{_url_key(url)}-"


def settle_partial_downloads(
    target: str | os.PathLike, urls: Sequence[str], md5: str | None = None
) -> dict[str, tuple[Path, int]]:
    """Deal with the partial files that killed downloads of `target` left in its folder; return,
    per URL of `urls`, the one to resume and the process that wrote it.

    A partial file whose process, on this host, has ended is kept to be resumed when that is safe:
    it came from one of `urls` over `http(s)`, and `md5` is pinned, so that the whole file is
    verified (the largest of several from one URL). The others of ended processes are removed. The
    partial file of a process still running is left to it; one made on another host, or by a
    version that did not record its process, may belong to a running download: it is left, with a
    warning saying when to delete it. Each is named on stderr.
    """
    target = Path(target)
    start = re.escape(f".{target.name}.")
    ours = re.compile(
        start + r"(?P<host>[A-Za-z0-9.-]+)-(?P<pid>\d+)-(?P<start>\d+|none)-(?P<url>[0-9a-f]{12})-[a-z0-9_]{8}\.part"
    )
    unrecorded = re.compile(start + r"[a-z0-9_]{8}\.part")
    try:
        entries = sorted(
            (
                e
                for e in os.scandir(target.parent)
                if e.name.startswith(f".{target.name}.") and e.name.endswith(".part")
            ),
            key=lambda entry: entry.name,
        )
    except (FileNotFoundError, NotADirectoryError):
        return {}
    resumable = {_url_key(url): url for url in urls if md5 is not None and url.startswith(_RESUMABLE)}
    ended: list[tuple[int, str, Path, int]] = []  # (size, url key, path, pid) of files whose writer has ended
    for entry in entries:
        if not entry.is_file(follow_symlinks=False):
            continue
        match = ours.fullmatch(entry.name)
        if match and match["host"] == _host():
            pid = int(match["pid"])
            if not _has_ended(pid, match["start"]):
                print(
                    f"{entry.path} is left as it is: process {pid} is downloading {target.name} into it",
                    file=sys.stderr,
                )
                continue
            try:
                ended.append((entry.stat(follow_symlinks=False).st_size, match["url"], Path(entry.path), pid))
            except FileNotFoundError:  # removed or taken over by another download meanwhile
                pass
        elif match or unrecorded.fullmatch(entry.name):
            who = (
                f"process {match['pid']} on {match['host']}" if match else "a process an earlier version did not record"
            )
            print(
                f"warning: {entry.path} is left as it is: a partial download of {target.name} by {who}, which may "
                f"still run; delete it if no download of {target.name} into {target.parent} runs",
                file=sys.stderr,
            )
    kept = {}
    for key, group in itertools.groupby(sorted(ended, key=lambda e: (e[1], -e[0])), key=lambda e: e[1]):
        for size, _, path, pid in group:
            if key in resumable and resumable[key] not in kept and size > 0:
                kept[resumable[key]] = (path, pid)
                continue
            _remove_partial(path, target.name, pid)
    return kept


def _remove_partial(path: Path, name: str, pid: int) -> None:
    """Remove `path`, the partial download of `name` by process `pid` (ended), saying so on stderr."""
    try:
        size = f" ({_size(path.stat().st_size)})"
        path.unlink()
    except FileNotFoundError:  # removed or taken over by another download meanwhile
        return
    print(f"removed {path}: a partial download of {name}{size} by process {pid}, which has ended", file=sys.stderr)


def _take_over(partial: Path, leftover: Path, pid: int, url: str, name: str) -> int:
    """Move the partial file `leftover` (of process `pid`, which has ended) to `partial`, this
    download's own; the bytes it holds (0 when another download took it first)."""
    try:
        os.replace(leftover, partial)  # one step: of several downloads taking it over, one gets it
    except FileNotFoundError:
        return 0
    size = partial.stat().st_size
    print(
        f"resuming {name} from {url} at byte {size} ({_size(size)}): the partial download {leftover} of "
        f"process {pid}, which has ended",
        file=sys.stderr,
    )
    return size


def _resumed_from(response, headers, offset: int) -> int:
    """Where the body of `response` to a range request from byte `offset` starts: `offset` when the
    server sends that range (status 206, `Content-Range: bytes <offset>-...`), 0 when it sends the whole file."""
    status = getattr(response, "status", None)
    found = _CONTENT_RANGE.fullmatch((headers.get("Content-Range") or "").strip())
    if status != 206:
        return 0
    if found is None or int(found[1]) != offset:
        raise _Refused(f"asked for the bytes from {offset} on, got Content-Range {headers.get('Content-Range')!r}")
    return offset


def _stream(
    url: str, partial: Path, name: str, show_progress: bool, timeout: float, state: dict, offset: int = 0
) -> str:
    """Write what `url` serves to `partial` (the download of file `name`); return its MD5.
    `state["total"]` is set to the size the server announces (0: none). With `offset`, the
    bytes from there on are asked for (an HTTP range request) and written after the first
    `offset` bytes of `partial`; a server that sends the whole file instead has it written
    from the start. `state["resumed"]` says whether the bytes were added."""
    digest = hashlib.md5()
    html_expected = name.lower().endswith((".html", ".htm"))
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"}) if offset else url
    state["resumed"] = False
    with urllib.request.urlopen(request, timeout=timeout) as response:
        headers = response.headers or {}
        content_type = headers.get("Content-Type", "") or ""
        if content_type.startswith("text/html") and not html_expected:
            # Google Drive quota pages and expired mirrors answer with a web page instead of the file.
            raise _Refused(f"got a web page (Content-Type {content_type}) instead of the file")
        start = _resumed_from(response, headers, offset) if offset else 0
        if offset and not start:
            print(
                f"{url} sends the whole file, not the bytes from {offset} on: {name} is downloaded from the start",
                file=sys.stderr,
            )
        if start:  # the bytes kept count in the MD5 of the whole file
            with open(partial, "rb") as handle:
                for chunk in iter(lambda: handle.read(min(CHUNK_BYTES, start - handle.tell())), b""):
                    digest.update(chunk)
        length = int(headers.get("Content-Length") or 0)
        total = state["total"] = start + length if length else 0
        state["resumed"] = bool(start)
        written = start
        with (
            open(partial, "r+b") as handle,
            tqdm(
                total=total or None, initial=start, unit="B", unit_scale=True, desc=name, disable=not show_progress
            ) as progress,
        ):
            handle.seek(start)
            handle.truncate()
            for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                if written == 0 and not html_expected and _looks_like_html(chunk):
                    raise _Refused("got a web page instead of the file")
                handle.write(chunk)
                digest.update(chunk)
                written += len(chunk)
                progress.update(len(chunk))
                _pause("written")
    if total and written != total:
        raise _Refused(f"the transfer ended after {written} of {total} bytes")
    return digest.hexdigest()


def _resume(
    url: str, partial: Path, name: str, md5: str, show_progress: bool, timeout: float, state: dict, offset: int
) -> str:
    """`_stream` from byte `offset` on into `partial`, which holds the bytes before; the
    MD5 of the whole file. A resumed file whose MD5 is not `md5` (its first part may come from
    another version of the file) and a server that refuses the range are downloaded again from the start."""
    try:
        found = _stream(url, partial, name, show_progress, timeout, state, offset)
    except urllib.error.HTTPError as error:
        if error.code != 416:  # 416: range not satisfiable, e.g. a download killed after its last byte
            raise
        found = md5_of(partial)
        if found == md5:
            return found
        print(f"{url} refuses the bytes from {offset} on: {name} is downloaded from the start", file=sys.stderr)
        return _stream(url, partial, name, show_progress, timeout, state)
    if state["resumed"] and found != md5:
        print(
            f"{name} resumed from {url} has MD5 {found}, expected {md5}: the bytes downloaded before may be of "
            f"another version of the file; it is downloaded again from the start",
            file=sys.stderr,
        )
        return _stream(url, partial, name, show_progress, timeout, state)
    return found


def fetch_file(
    target: str | os.PathLike,
    urls: Sequence[str],
    md5: str | None = None,
    *,
    homepage: str | None = None,
    ready: Path | None = None,
    show_progress: bool | None = None,
    timeout: float = TIMEOUT_S,
) -> Path:
    """Make sure `target` is present and, when `md5` is pinned, verified; download it if absent.

    A file already at `target` (put there by hand) is verified, never replaced. Otherwise each
    of `urls` is tried in turn; a download is renamed to `target` only once complete and
    verified. `md5` is compared case-insensitively, surrounding whitespace stripped; without
    one, the MD5 found is printed. `show_progress=None` shows a progress bar only when stderr is
    a terminal. Raises [`DownloadError`][rambo.harness.download.DownloadError] (with the manual steps; `homepage` and
    `ready` are mentioned in them) when no URL gives the file, and at once when this machine's disk
    fails (full, or `target` cannot be written or read). Partial files of killed downloads of
    `target` are resumed or removed first
    ([`settle_partial_downloads`][rambo.harness.download.settle_partial_downloads]).
    """
    target = Path(target)
    if md5 is not None:
        md5 = normalise_md5(md5)
        if not re.fullmatch(r"[0-9a-f]{32}", md5):
            raise DownloadError(
                f"the MD5 pinned for {target.name}, {md5!r}, is not 32 hexadecimal digits: nothing can be verified "
                f"against it. Correct the pin (md5sum prints the MD5 of a copy you trust)."
            )
    steps = manual_steps(target, urls, md5, homepage, ready)
    leftovers = settle_partial_downloads(target, () if target.exists() else urls, md5)
    if target.exists():
        try:
            found = md5_of(target)
        except OSError as error:
            raise DownloadError(
                f"{target} cannot be read ({error.strerror or error}); it was left as it is and nothing was "
                f"extracted. Move it away and run again, or\n{steps}"
            ) from error
        if md5 is None:
            print(f"{target.name}: MD5 {found} (not verified: no pinned checksum)", file=sys.stderr)
        elif found != md5:
            raise DownloadError(
                f"{target} has MD5 {found}, expected {md5}: it is incomplete or not the official file. "
                f"It was left as it is and nothing was extracted. Delete it and run again, or\n{steps}"
            )
        return target
    if show_progress is None:
        show_progress = sys.stderr.isatty()
    failures = []
    for url in urls:
        state = {"total": 0}
        try:
            with atomic_path(target, suffix=".part", prefix=_partial_prefix(target.name, url)) as partial:
                offset = _take_over(partial, *leftovers.pop(url), url, target.name) if url in leftovers else 0
                if offset:
                    found = _resume(url, partial, target.name, md5, show_progress, timeout, state, offset)
                else:
                    found = _stream(url, partial, target.name, show_progress, timeout, state)
                if md5 is not None and found != md5:
                    raise _Refused(f"MD5 {found}, expected {md5}")
        except (_Refused, *_NETWORK_ERRORS) as error:
            local = _local_failure(error, target)
            if local is not None:  # the other URLs would fail the same way
                raise _local_error(local, target, url, state, steps) from error
            failures.append(f"  {url}: {error}")
            continue
        if md5 is None:
            print(f"{target.name}: MD5 {found} (not verified)", file=sys.stderr)
        for path, pid in leftovers.values():  # of URLs after the one that served the file
            _remove_partial(path, target.name, pid)
        return target
    raise DownloadError(f"could not download {target.name}:\n" + "\n".join(failures) + "\n" + steps)


def ensure_dataset(
    root: str | os.PathLike,
    files: Iterable[DatasetFile],
    *,
    verify: bool = True,
    homepage: str | None = None,
    show_progress: bool | None = None,
    archive_dir: str | os.PathLike | None = None,
) -> list[Path]:
    """Put every one of `files` in place under `root`; return the paths that show each in place.

    A file whose `ready` path (or one of its `found_at`) exists is accepted as it is (the path
    found is printed); an archive at one of its `archive_at` is verified and extracted where it lies. The
    others are verified or downloaded ([`fetch_file`][rambo.harness.download.fetch_file]), archives into `archive_dir`
    (default `root`; the pipeline keeps archives in a folder of their own, which no stage deletes) and, if archives,
    extracted into `root`; then their `ready` path must exist. A pinned MD5 is always checked
    (`verify=False` skips it: for the Python API only, no command offers it); a file with no
    pinned checksum is accepted with a printed warning and the MD5 found, before anything is
    fetched. Raises [`DownloadError`][rambo.harness.download.DownloadError] or
    [`rambo.harness.extract.ArchiveError`][rambo.harness.extract.ArchiveError] (and its subclasses; an encrypted archive
    names the dataset's page).
    """
    root = Path(root)
    archive_dir = root if archive_dir is None else Path(archive_dir)
    files = tuple(files)
    missing = [item for item in files if item.in_place(root) is None]
    unverifiable = [item.filename for item in missing if item.md5 is None]
    if unverifiable:
        print(
            f"warning: {', '.join(unverifiable)} have no published checksum: they are used unverified "
            f"(the MD5 found is printed; compare it with another copy){f' ({homepage})' if homepage else ''}",
            file=sys.stderr,
        )
    placed = []
    for item in files:
        if item.extract:  # staging folders of killed extractions, also where the data got in place
            remove_stale_staging(item.filename, root)
        ready = root / item.ready
        found = item.in_place(root)
        if found is not None:
            print(
                f"found {found}: the data of {item.filename} is in place, not downloaded or extracted again",
                file=sys.stderr,
            )
            settle_partial_downloads((archive_dir if item.extract else root) / item.filename, ())
            placed.append(found)
            continue
        lying = next((root / p for p in item.archive_at if (root / p).is_file()), None) if item.extract else None
        if lying is not None:  # an archive where the dataset's own download puts it: used there
            path, into = fetch_file(lying, item.urls, item.md5 if verify else None, homepage=homepage), lying.parent
        else:
            folder = archive_dir if item.extract else root  # a plain file is data itself, not an archive
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise DownloadError(
                    f"{folder} cannot be made ({error.strerror or error}); nothing was downloaded. "
                    f"Choose a data folder you can write to."
                ) from error
            path = fetch_file(
                folder / item.filename,
                item.urls,
                item.md5 if verify else None,
                homepage=homepage,
                ready=ready if item.extract else None,
                show_progress=show_progress,
            )
            into = root
        if item.extract:
            try:
                extract(path, into)
            except EncryptedArchiveError as error:
                raise EncryptedArchiveError(f"{error}{f' The dataset page: {homepage}' if homepage else ''}") from None
        found = item.in_place(root)
        if found is None:
            raise ArchiveError(
                f"{path} is in place but {ready} is still missing: it is not the expected file. "
                f"Delete it and download it again."
            )
        placed.append(found)
    return placed
