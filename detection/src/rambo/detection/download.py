"""Download Pascal VOC 2007 / 2012 with pinned checksums, atomically, and extract it safely.

`python -m rambo.detection.download ROOT [--sets voc2007-trainval voc2007-test voc2012-trainval]`
leaves `ROOT/VOCdevkit/VOC2007` and `ROOT/VOCdevkit/VOC2012`. The work is done by
[`rambo.harness.download.ensure_dataset`][rambo.harness.download.ensure_dataset]: a VOC already extracted under `ROOT`
is used as it is (no archive needed); otherwise each tar is verified or downloaded, then extracted (checked,
staged, merged: both 2007 tars fill `VOCdevkit/VOC2007`). When the network or a file is missing
the command stops with the manual steps instead of a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from rambo.harness.download import DatasetFile, DownloadError, ensure_dataset
from rambo.harness.extract import ArchiveError
from rambo.harness.mirror import from_mirror

__all__ = ["ARCHIVES", "DownloadError", "fetch", "main"]

HOMEPAGE = "http://host.robots.ox.ac.uk/pascal/VOC/"
_MIRRORS = (
    "https://thor.robots.ox.ac.uk/pascal/VOC/voc{year}",  # Oxford's current server
    "http://host.robots.ox.ac.uk/pascal/VOC/voc{year}",  # the VOC page's own links (torchvision's)
    "https://pjreddie.com/media/files",  # a copy of the same tars (Darknet's); the pinned MD5 decides
)


def _voc(year: int, filename: str, md5: str, image_set: str) -> DatasetFile:
    """A VOC tar on its servers, tried in order; `ready` is an image-set list only that archive provides."""
    return DatasetFile(
        filename,
        tuple(f"{base.format(year=year)}/{filename}" for base in _MIRRORS),
        md5=md5,
        extract=True,
        ready=f"VOCdevkit/VOC{year}/ImageSets/Main/{image_set}.txt",
    )


# MD5 sums as published with torchvision's VOC loader: every server must give the same bytes.
ARCHIVES: dict[str, DatasetFile] = {
    "voc2007-trainval": _voc(2007, "VOCtrainval_06-Nov-2007.tar", "c52e279531787c972589f7e41ab4ae64", "trainval"),
    "voc2007-test": _voc(2007, "VOCtest_06-Nov-2007.tar", "b6e924de25625d8de591ea690078ad9f", "test"),
    "voc2012-trainval": _voc(2012, "VOCtrainval_11-May-2012.tar", "6cd6e144f989b92b3379bac3b3de84fd", "trainval"),
}


def _year_folder(item: DatasetFile) -> str:
    """`VOCdevkit/VOC2007` or `VOCdevkit/VOC2012`: the first two components of `ready`."""
    return "/".join(item.ready.split("/")[:2])


def fetch(
    root: str | Path,
    names: Iterable[str] = tuple(ARCHIVES),
    show_progress: bool | None = None,
    mirror: str | None = None,
    archive_dir: str | Path | None = None,
) -> list[Path]:
    """Put the named VOC archives in place under `root`; return their year folders, in order.

    Data already extracted there is used as it is; otherwise the archive is verified or downloaded
    (from `mirror` instead of the official server when given: [`rambo.harness.mirror`][rambo.harness.mirror]) into
    `archive_dir` (default `root`) and extracted. Raises [`DownloadError`][rambo.harness.download.DownloadError] (with
    the manual steps) or [`rambo.harness.extract.ArchiveError`][rambo.harness.extract.ArchiveError] (corrupt, unsafe or
    clashing archive).
    """
    root, names = Path(root), list(names)
    unknown = sorted(set(names) - set(ARCHIVES))
    if unknown:
        raise ValueError(f"unknown VOC archive(s) {unknown}; choose from {sorted(ARCHIVES)}")
    items = [ARCHIVES[name] for name in names]
    if mirror is not None:
        items = list(from_mirror(items, mirror))
    ensure_dataset(root, items, homepage=HOMEPAGE, show_progress=show_progress, archive_dir=archive_dir)
    return [root / _year_folder(item) for item in items]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path)
    parser.add_argument("--sets", nargs="+", default=list(ARCHIVES), choices=sorted(ARCHIVES))
    parser.add_argument("--mirror", help="a folder or URL holding the archives (rambo.harness.mirror)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (shown only on a terminal anyway)")
    args = parser.parse_args(argv)
    try:
        folders = fetch(args.root, args.sets, show_progress=False if args.quiet else None, mirror=args.mirror)
    except (DownloadError, ArchiveError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for folder in sorted(set(folders)):
        print(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
