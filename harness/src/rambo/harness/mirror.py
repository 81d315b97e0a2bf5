"""A mirror: one folder (or URL) that holds a dataset's archives under their official file names.

A site copy of the archives (a cluster's shared folder, an institute's web server) or the small
stand-in archives of the smoke pipeline are given to a data stage as ``--mirror DIR_OR_URL``;
every file is then fetched from ``<mirror>/<filename>`` instead of its official URLs. When the
mirror holds an ``MD5SUMS`` file (the ``md5sum`` format: ``<md5>  <filename>`` per line), the
checksums listed there replace the pinned ones for those files (stand-in archives are not the
official files), and a line on stderr says so; files it does not list keep their pinned MD5.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from .atomic import write_text
from .download import DatasetFile, DownloadError, md5_of

MD5SUMS = "MD5SUMS"
_URL_SCHEMES = ("file://", "http://", "https://")


def mirror_url(mirror: str | os.PathLike) -> str:
    """The mirror as a URL without a trailing slash: a local folder becomes a ``file://`` URL."""
    text = str(mirror)
    if text.startswith(_URL_SCHEMES):
        return text.rstrip("/")
    folder = Path(text).expanduser().resolve()
    if not folder.is_dir():
        raise DownloadError(f"mirror {text!r} is not a folder (nor a file://, http:// or https:// URL)")
    return folder.as_uri()


def parse_md5sums(text: str, origin: str = MD5SUMS) -> dict[str, str]:
    """``{filename: md5}`` from ``md5sum`` output (``<md5>  <name>`` or ``<md5> *<name>``)."""
    sums = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split(maxsplit=1)
        digest = fields[0].lower()
        if len(fields) != 2 or len(digest) != 32 or any(c not in "0123456789abcdef" for c in digest):
            raise DownloadError(f"{origin}:{number}: expected '<md5>  <filename>', got {line!r}")
        sums[fields[1].strip().lstrip("*")] = digest
    return sums


def read_md5sums(mirror: str | os.PathLike) -> dict[str, str]:
    """The mirror's ``MD5SUMS`` as ``{filename: md5}``; empty when it has none."""
    url = f"{mirror_url(mirror)}/{MD5SUMS}"
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            text = response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return {}
        raise DownloadError(f"could not read {url}: {error}") from error
    except urllib.error.URLError as error:
        if url.startswith("file://") and isinstance(error.reason, FileNotFoundError):
            return {}
        raise DownloadError(f"could not read {url}: {error}") from error
    return parse_md5sums(text, url)


def write_md5sums(folder: str | os.PathLike, paths: Iterable[str | os.PathLike]) -> Path:
    """Add ``paths`` (files in ``folder``) to ``folder/MD5SUMS``, keeping the other entries."""
    folder = Path(folder)
    target = folder / MD5SUMS
    sums = parse_md5sums(target.read_text(), str(target)) if target.is_file() else {}
    for path in map(Path, paths):
        if path.resolve().parent != folder.resolve():
            raise ValueError(f"{path} is not a file directly in {folder}")
        sums[path.name] = md5_of(path)
    write_text(target, "".join(f"{sums[name]}  {name}\n" for name in sorted(sums)))
    return target


def from_mirror(files: Iterable[DatasetFile], mirror: str | os.PathLike) -> tuple[DatasetFile, ...]:
    """``files`` fetched from ``mirror`` only, with the checksums of its ``MD5SUMS`` where it lists them."""
    base, sums = mirror_url(mirror), read_md5sums(mirror)
    files = tuple(files)
    replaced = [item.filename for item in files if item.filename in sums and sums[item.filename] != item.md5]
    if replaced:
        print(f"checksums of {', '.join(replaced)} from {base}/{MD5SUMS}, not the pinned ones", file=sys.stderr)
    return tuple(
        replace(item, urls=(f"{base}/{item.filename}",), md5=sums.get(item.filename, item.md5)) for item in files
    )
