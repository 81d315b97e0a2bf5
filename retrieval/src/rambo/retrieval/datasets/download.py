"""Download the real retrieval datasets from their official sources, with pinned checksums.

``download(name, root)`` leaves ``root`` so that ``load_dataset(name, root, split)`` reads it:

* ``cub``: ``CUB_200_2011.tgz`` (Caltech DATA) extracted to ``root/CUB_200_2011/``.
* ``sop``: ``Stanford_Online_Products.zip`` (Stanford CVGL) extracted to
  ``root/Stanford_Online_Products/``.
* ``inshop``: ``img.zip`` and ``list_eval_partition.txt`` from the DeepFashion In-shop Google Drive
  folder, giving ``root/img/`` and ``root/list_eval_partition.txt``.

Each archive is streamed to a temporary name in ``root``, its MD5 checked, and only then renamed
to its final name and extracted (safely, see ``archive.py``). Without network, or when the
checksum does not match, it stops with a :class:`DatasetDownloadError` that says where to put the
file by hand; a file put there is verified the same way and used instead of downloading.

CLI: ``python -m rambo.retrieval.datasets.download NAME ROOT [--no-verify]``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from .archive import extract_archive


class DatasetDownloadError(RuntimeError):
    """A dataset file could not be downloaded or verified; the message says what to do by hand."""


@dataclass(frozen=True)
class DatasetFile:
    """One file of a dataset: where to get it, its checksum, and whether to extract it."""

    filename: str
    urls: tuple[str, ...]
    md5: str | None  # None: no published checksum found; downloading needs verify=False
    extract: bool
    ready: str  # the path, relative to root, that exists once this file is in place


def _google_drive(file_id: str) -> str:
    # confirm=t skips the "cannot scan for viruses" page that Drive shows for large files.
    return f"https://drive.usercontent.google.com/download?id={file_id}&export=download&confirm=t"


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
        ),
    ),
    "inshop": (
        # Official DeepFashion In-shop Google Drive folder 0B7EVK8r0v71pVDZFQXRsMDZCX1E:
        # Img/img.zip and Eval/list_eval_partition.txt. No checksum of either is published, so
        # INSHOP_MD5 is None and downloading them needs --no-verify (the MD5 found is printed).
        DatasetFile(
            "img.zip", (_google_drive("0B7EVK8r0v71pS2YxRE1QTFZzekU"),), md5=None, extract=True, ready="img"
        ),
        DatasetFile(
            "list_eval_partition.txt",
            (_google_drive("0B7EVK8r0v71pYVBqLXpRVjhHeWM"),),
            md5=None,
            extract=False,
            ready="list_eval_partition.txt",
        ),
    ),
}
HOMEPAGES = {
    "cub": "https://www.vision.caltech.edu/datasets/cub_200_2011/",
    "sop": "https://cvgl.stanford.edu/projects/lifted_struct/",
    "inshop": "https://mmlab.ie.cuhk.edu.hk/projects/DeepFashion/InShopRetrieval.html",
}
CHUNK_BYTES = 1 << 20


def md5_of(path: Path) -> str:
    """Hex MD5 of a file, read in chunks."""
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _manual_steps(name: str, item: DatasetFile, target: Path) -> str:
    sources = "\n".join(f"    {url}" for url in item.urls)
    return (
        f"Download {item.filename} by hand from\n{sources}\n  (dataset page: {HOMEPAGES[name]})\n"
        f"put it at {target}, and run the same command again: it is verified and used from there."
    )


def _fetch(url: str, partial: Path, show_progress: bool) -> str:
    """Stream ``url`` into ``partial``; return the MD5 of what was written."""
    digest = hashlib.md5()
    with urllib.request.urlopen(url, timeout=60) as response:
        content_type = response.headers.get("Content-Type", "") if response.headers else ""
        if content_type.startswith("text/html"):
            # Google Drive and expired mirrors answer with a web page instead of the file.
            raise OSError(f"got a web page (Content-Type {content_type}) instead of the file")
        total = int(response.headers.get("Content-Length") or 0) if response.headers else 0
        with open(partial, "wb") as handle, tqdm(
            total=total or None, unit="B", unit_scale=True, desc=partial.name, disable=not show_progress
        ) as progress:
            for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                handle.write(chunk)
                digest.update(chunk)
                progress.update(len(chunk))
    return digest.hexdigest()


def fetch_file(name: str, item: DatasetFile, root: Path, verify: bool = True, show_progress: bool = True) -> Path:
    """Make sure ``root/item.filename`` is present and verified; download it if absent.

    A file already at that path (e.g. put there by hand) is checked, not replaced. A download goes
    to a temporary name and is renamed only when complete and verified; on failure the temporary
    file is removed and :class:`DatasetDownloadError` explains the manual steps.
    """
    target = root / item.filename
    if target.exists():
        if verify and item.md5 is not None:
            found = md5_of(target)
            if found != item.md5:
                raise DatasetDownloadError(
                    f"{target} has MD5 {found}, expected {item.md5}: it is incomplete or not the "
                    f"official file. Nothing was extracted. Delete it and run again, or\n"
                    + _manual_steps(name, item, target)
                )
        return target
    failures = []
    for url in item.urls:
        handle, partial_name = tempfile.mkstemp(prefix=f".{item.filename}.partial-", dir=root)
        os.close(handle)
        partial = Path(partial_name)
        try:
            found = _fetch(url, partial, show_progress)
            if verify and item.md5 is not None and found != item.md5:
                failures.append(f"{url}: MD5 {found}, expected {item.md5}")
                continue
            if item.md5 is None:
                print(f"{item.filename}: MD5 {found} (not verified: no pinned checksum)", file=sys.stderr)
            os.replace(partial, target)
            return target
        except (urllib.error.URLError, OSError, ValueError) as error:
            failures.append(f"{url}: {error}")
        finally:
            partial.unlink(missing_ok=True)
    raise DatasetDownloadError(
        f"could not download {item.filename} for {name}:\n"
        + "\n".join(f"  {failure}" for failure in failures)
        + "\n"
        + _manual_steps(name, item, target)
    )


def download(name: str, root: Path | str, verify: bool = True, show_progress: bool = True) -> Path:
    """Download and extract dataset ``name`` (``cub``, ``sop`` or ``inshop``) into ``root``.

    Returns ``root``, ready for ``load_dataset(name, root, split)``. Parts already in place are
    skipped. ``verify=False`` (CLI ``--no-verify``) accepts files without checking their MD5;
    it is required for files that have no pinned checksum (In-shop).
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; downloadable: {sorted(DATASETS)} (synthetic is generated)")
    unverifiable = [item.filename for item in DATASETS[name] if item.md5 is None]
    if verify and unverifiable:
        raise DatasetDownloadError(
            f"{name}: no pinned checksum is known for {unverifiable}, so the download cannot be verified. "
            "Pass --no-verify (verify=False) to accept the files unverified; their MD5 is printed."
        )
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for item in DATASETS[name]:
        if (root / item.ready).exists():
            continue
        archive = fetch_file(name, item, root, verify=verify, show_progress=show_progress)
        if item.extract:
            extract_archive(archive, root)
            if not (root / item.ready).exists():
                raise DatasetDownloadError(f"{archive} was extracted but {root / item.ready} is missing")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rambo.retrieval.datasets.download",
        description="Download a retrieval dataset from its official source and verify its checksum.",
    )
    parser.add_argument("name", choices=sorted(DATASETS))
    parser.add_argument("root", type=Path, help="folder to download and extract into")
    parser.add_argument("--no-verify", action="store_true", help="accept files without checking their MD5")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        root = download(args.name, args.root, verify=not args.no_verify, show_progress=not args.quiet)
    except (DatasetDownloadError, ValueError, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
