"""Download the real retrieval datasets from their official sources, with pinned checksums.

`download(name, root)` leaves `root` so that `load_dataset(name, root, split)` reads it:

* `cub`: `CUB_200_2011.tgz` (Caltech DATA) extracted to `root/CUB_200_2011/`.
* `sop`: `Stanford_Online_Products.zip` (Stanford CVGL) extracted to
  `root/Stanford_Online_Products/`.
* `inshop`: `img.zip` and `list_eval_partition.txt` from the DeepFashion In-shop Google Drive
  folder, giving `root/img/` and `root/list_eval_partition.txt`.

Each file is fetched, verified and extracted by
[`rambo.harness.download.ensure_dataset`][rambo.harness.download.ensure_dataset] (pinned MD5, atomic download, checked
and staged extraction); a dataset already extracted in `root` (e.g. a shared copy) is used as it is. Without network, or
when a checksum does not match, it stops with a [`DownloadError`][rambo.harness.download.DownloadError] that says where
to put the file by hand; a file put there is verified the same way and used instead of downloading.

CLI: `python -m rambo.retrieval.datasets.download NAME ROOT [--mirror DIR_OR_URL]`.

Checksums: CUB's and SOP's MD5s are pinned and always checked. In-shop publishes none: its files
are used with a printed warning and the MD5 found (compare it with another copy).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rambo.harness.download import DatasetFile, DownloadError, ensure_dataset
from rambo.harness.extract import ArchiveError
from rambo.harness.mirror import from_mirror


def _google_drive(file_id: str, resource_key: str | None = None) -> str:
    # confirm=t skips the "cannot scan for viruses" page that Drive shows for large files. Files
    # shared before Google's 2021 security update (ids starting 0B...) also need their resource key.
    key = f"&resourcekey={resource_key}" if resource_key else ""
    return f"https://drive.usercontent.google.com/download?id={file_id}&export=download&confirm=t{key}"


DATASETS: dict[str, tuple[DatasetFile, ...]] = {
    "cub": (
        DatasetFile(
            "CUB_200_2011.tgz",
            (
                "https://data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz?download=1",
                "http://www.vision.caltech.edu/visipedia-data/CUB-200-2011/CUB_200_2011.tgz",
            ),
            md5="97eceeb196236b17998738112f37df78",
            extract=True,
            ready="CUB_200_2011/images.txt",
            found_at=("images.txt",),  # the loader's other layout: the dataset folder itself
        ),
    ),
    "sop": (
        DatasetFile(
            "Stanford_Online_Products.zip",
            (
                "http://ftp.cs.stanford.edu/cs/cvgl/Stanford_Online_Products.zip",
                # Mirror used by pytorch-metric-learning; the pinned MD5 decides whether it is the same zip.
                _google_drive("1TclrpQOF_ullUP99wk_gjGN8pKvtErG8"),
            ),
            md5="7f73d41a2f44250d4779881525aea32e",
            extract=True,
            ready="Stanford_Online_Products/Ebay_test.txt",
            found_at=("Ebay_test.txt",),  # the loader's other layout: the dataset folder itself
        ),
    ),
    "inshop": (
        # Official DeepFashion In-shop Google Drive folder 0B7EVK8r0v71pVDZFQXRsMDZCX1E (resource key
        # 0-4R4v6zl4CWhHTsUGOsTstw): Img/img.zip and Eval/list_eval_partition.txt. No checksum of either
        # is published: they are used unverified, with a warning and the MD5 found. That folder,
        # downloaded as it is, is accepted where it lies (Img/img.zip extracted into Img/).
        DatasetFile(
            "img.zip",
            (_google_drive("0B7EVK8r0v71pS2YxRE1QTFZzekU", "0-2n-dbZygJiZdm0UbEaFRTA"),),
            md5=None,
            extract=True,
            ready="img",
            found_at=("Img/img",),
            archive_at=("Img/img.zip",),
        ),
        DatasetFile(
            "list_eval_partition.txt",
            (_google_drive("0B7EVK8r0v71pYVBqLXpRVjhHeWM", "0-rxJ2QcImN-IRo_Bv9QSXmg"),),
            md5=None,
            extract=False,
            ready="list_eval_partition.txt",
            found_at=("Eval/list_eval_partition.txt",),
        ),
    ),
}
HOMEPAGES = {
    "cub": "https://www.vision.caltech.edu/datasets/cub_200_2011/",
    "sop": "https://cvgl.stanford.edu/projects/lifted_struct/",
    "inshop": "https://mmlab.ie.cuhk.edu.hk/projects/DeepFashion/InShopRetrieval.html",
}


def download(
    name: str,
    root: Path | str,
    verify: bool = True,
    show_progress: bool | None = None,
    mirror: str | None = None,
    archive_dir: Path | str | None = None,
) -> Path:
    """Download and extract dataset `name` (`cub`, `sop` or `inshop`) into `root`.

    Returns `root`, ready for `load_dataset(name, root, split)`. Parts already in place are
    used as they are. Pinned MD5s are checked (`verify=False` skips them: Python API only); a
    file without one (In-shop) is used with a warning, unless `mirror` (a folder or URL with the
    archives, [`rambo.harness.mirror`][rambo.harness.mirror]) lists its MD5 in its `MD5SUMS`. Archives are kept in
    `archive_dir` (default `root`). `show_progress=None`: a progress bar only on a terminal.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; downloadable: {sorted(DATASETS)} (synthetic is generated)")
    files = DATASETS[name] if mirror is None else from_mirror(DATASETS[name], mirror)
    ensure_dataset(
        root, files, verify=verify, homepage=HOMEPAGES[name], show_progress=show_progress, archive_dir=archive_dir
    )
    return Path(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rambo.retrieval.datasets.download",
        description="Download a retrieval dataset from its official source and verify its checksum.",
    )
    parser.add_argument("name", choices=sorted(DATASETS))
    parser.add_argument("root", type=Path, help="folder to download and extract into")
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="ignored (kept for old scripts): pinned checksums "
        "are always checked, and files without one are used with a warning",
    )
    parser.add_argument("--mirror", help="a folder or URL holding the archives (rambo.harness.mirror)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (shown only on a terminal anyway)")
    args = parser.parse_args(argv)
    try:
        if args.no_verify:
            print("warning: --no-verify is ignored: pinned checksums are always checked", file=sys.stderr)
        root = download(args.name, args.root, show_progress=False if args.quiet else None, mirror=args.mirror)
    except (DownloadError, ArchiveError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
