"""Download Pascal VOC 2007 / 2012 with pinned checksums, atomically, and extract it safely.

``python -m rambo.detection.download ROOT [--sets voc2007-trainval voc2007-test voc2012-trainval]``
leaves ``ROOT/VOCdevkit/VOC2007`` and ``ROOT/VOCdevkit/VOC2012``. When the network or a file is
missing the command stops with the manual steps instead of a traceback.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Archive:
    url: str
    md5: str
    folder: str  # what the archive creates under ROOT

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


# The official mirror of the VOC server at Oxford; md5 sums as published with torchvision's VOC loader.
ARCHIVES = {
    "voc2007-trainval": Archive(
        "https://thor.robots.ox.ac.uk/pascal/VOC/voc2007/VOCtrainval_06-Nov-2007.tar",
        "c52e279531787c972589f7e41ab4ae64",
        "VOCdevkit/VOC2007",
    ),
    "voc2007-test": Archive(
        "https://thor.robots.ox.ac.uk/pascal/VOC/voc2007/VOCtest_06-Nov-2007.tar",
        "b6e924de25625d8de591ea690078ad9f",
        "VOCdevkit/VOC2007",
    ),
    "voc2012-trainval": Archive(
        "https://thor.robots.ox.ac.uk/pascal/VOC/voc2012/VOCtrainval_11-May-2012.tar",
        "6cd6e144f989b92b3379bac3b3de84fd",
        "VOCdevkit/VOC2012",
    ),
}


class DownloadError(RuntimeError):
    """The data could not be fetched or verified; the message holds the manual steps."""


def manual_steps(root: Path, names) -> str:
    lines = [f"Fetch the archives by hand into {root} and rerun this command (it verifies and extracts them):"]
    for name in names:
        archive = ARCHIVES[name]
        lines.append(f"  wget -O {root / archive.filename} {archive.url}   # md5 {archive.md5}")
    lines.append(f"or extract them yourself: tar -xf <archive> -C {root}  (gives {root}/VOCdevkit/VOC2007, VOC2012)")
    return "\n".join(lines)


def md5sum(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, target: Path, md5: str) -> Path:
    """Fetch ``url`` to ``target`` under a temporary name; rename only once the md5 matches."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    os.close(handle)
    temporary = Path(temporary)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(temporary, "wb") as out:
            while block := response.read(1 << 20):
                out.write(block)
        actual = md5sum(temporary)
        if actual != md5:
            raise DownloadError(f"{url}: md5 {actual} does not match the pinned {md5} (corrupt or changed file)")
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return target


def safe_extract(archive: Path, target: Path) -> None:
    """Extract a tar archive, refusing members that would land outside ``target`` or are links out."""
    target = target.resolve()
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for member in members:
            destination = (target / member.name).resolve()
            if not destination.is_relative_to(target):
                raise ValueError(f"{archive}: member {member.name!r} would be extracted outside {target}")
            if member.issym() or member.islnk():
                link = (destination.parent / member.linkname) if member.issym() else (target / member.linkname)
                if not link.resolve().is_relative_to(target):
                    raise ValueError(f"{archive}: link {member.name!r} -> {member.linkname!r} points outside {target}")
            if member.isdev():
                raise ValueError(f"{archive}: member {member.name!r} is a device file")
        tar.extractall(target, members=members, filter="data")


def fetch(root: str | Path, names=tuple(ARCHIVES)) -> list[Path]:
    """Download (unless already there and verified) and extract the named archives under ``root``."""
    root = Path(root)
    unknown = sorted(set(names) - set(ARCHIVES))
    if unknown:
        raise ValueError(f"unknown VOC archive(s) {unknown}; choose from {sorted(ARCHIVES)}")
    folders = []
    for name in names:
        archive = ARCHIVES[name]
        path = root / archive.filename
        if path.exists() and md5sum(path) != archive.md5:
            raise DownloadError(f"{path} exists but its md5 is not {archive.md5}; delete it.\n" + manual_steps(root, [name]))
        if not path.exists():
            try:
                download(archive.url, path, archive.md5)
            except OSError as error:  # URLError, timeouts and refused connections are OSErrors
                raise DownloadError(f"could not download {archive.url}: {error}\n" + manual_steps(root, [name])) from error
        safe_extract(path, root)
        folders.append(root / archive.folder)
    return folders


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path)
    parser.add_argument("--sets", nargs="+", default=list(ARCHIVES), choices=sorted(ARCHIVES))
    args = parser.parse_args(argv)
    try:
        folders = fetch(args.root, args.sets)
    except DownloadError as error:
        print(error)
        return 1
    for folder in sorted(set(folders)):
        print(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
