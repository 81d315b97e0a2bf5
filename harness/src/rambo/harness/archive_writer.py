"""Archives with the same bytes every time they are written: fixed times, owners and modes, sorted
members, no name or time in the gzip header. Used to write the stand-in datasets (their MD5s are
what a mirror's MD5SUMS lists, so they must not change from one run to the next)."""

from __future__ import annotations

import argparse
import gzip
import io
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from .atomic import atomic_path


def members(files: dict[str, bytes]) -> list[tuple[str, bytes | None]]:
    """`files` plus every folder above them (data `None`), sorted so a folder precedes its contents."""
    folders = {tuple(name.split("/")[:i]) for name in files for i in range(1, name.count("/") + 1)}
    entries = [(parts, None) for parts in folders] + [(tuple(name.split("/")), data) for name, data in files.items()]
    return [("/".join(parts), data) for parts, data in sorted(entries, key=lambda entry: entry[0])]


def write_zip(path: Path, files: dict[str, bytes], date_time: tuple[int, int, int, int, int, int]) -> Path:
    """A deflated zip of `files` (and their folders) with fixed times and Unix permissions."""
    with atomic_path(path) as partial, zipfile.ZipFile(partial, "w") as archive:
        for name, data in members(files):
            info = zipfile.ZipInfo(name if data is not None else name + "/", date_time)
            info.create_system = 3  # Unix, whatever the platform writing it
            if data is None:
                info.external_attr = (0o40755 << 16) | 0x10  # folder, rwxr-xr-x; MS-DOS directory bit
                info.compress_type = zipfile.ZIP_STORED
                archive.writestr(info, b"")
            else:
                info.external_attr = 0o100644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
    return path


def write_tar(path: Path, files: dict[str, bytes], mtime: int, gzipped: bool = False) -> Path:
    """A GNU tar (gzipped: no name, time 0 in the gzip header) with fixed times, owner root, 0644/0755."""
    with atomic_path(path) as partial, open(partial, "wb") as raw:
        stream = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if gzipped else raw
        with tarfile.open(fileobj=stream, mode="w", format=tarfile.GNU_FORMAT) as archive:
            for name, data in members(files):
                info = tarfile.TarInfo(name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "root", "root"
                if data is None:
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    archive.addfile(info)
                else:
                    info.mode, info.size = 0o644, len(data)
                    archive.addfile(info, io.BytesIO(data))
        if gzipped:
            stream.close()
    return path


def stand_in_main(
    prog: str, description: str, write_archives: Callable[[Path, int], list[Path]], argv: list[str] | None = None
) -> int:
    """The command line of an app's stand-in archives: `prog OUT_DIR [--seed N]`, prints each path."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("out_dir", type=Path, help="folder to write the archives into (created)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    for path in write_archives(args.out_dir, args.seed):
        print(path)
    return 0
