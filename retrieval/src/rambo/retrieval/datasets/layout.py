"""Finding and reading a dataset's official index files under a root folder."""

from __future__ import annotations

from pathlib import Path


def resolve_root(root: Path | str, marker: str, folder: str, dataset: str) -> Path:
    """Return the folder holding `marker`: `root` itself or `root/folder`.

    `folder` is the name the official archive extracts to (`Stanford_Online_Products`, ...), so
    both the dataset folder and the folder it was extracted into are accepted as `root`.
    """
    root = Path(root)
    for candidate in (root, root / folder):
        if (candidate / marker).is_file():
            return candidate
    raise FileNotFoundError(
        f"{dataset}: no {marker} in {root} or {root / folder}. Download it with "
        f"`python -m rambo.retrieval.datasets.download {dataset} {root}` (or put the official files there)"
    )


def read_rows(path: Path, columns: int, skip: int = 0) -> list[tuple[int, list[str]]]:
    """Whitespace-separated rows of `path` after `skip` header lines, as `(line number, fields)`.

    Blank lines are ignored; a row with fewer than `columns` fields is a `ValueError` naming
    the file and line.
    """
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if number <= skip or not line.strip():
                continue
            fields = line.split()
            if len(fields) < columns:
                raise ValueError(f"{path}:{number}: expected {columns} columns, got {line.strip()!r}")
            rows.append((number, fields))
    return rows


def check_split(split: str, allowed: tuple[str, ...], dataset: str) -> None:
    """Raise `ValueError` unless `split` is one of `allowed`."""
    if split not in allowed:
        raise ValueError(f"{dataset} split must be one of {allowed}, got {split!r}")


# The index file of each official layout, at the dataset folder or in the folder its archive extracts to.
LAYOUT_MARKERS = {
    "sop": ("Ebay_train.txt", "Stanford_Online_Products/Ebay_train.txt"),
    "cub": ("images.txt", "CUB_200_2011/images.txt"),
    "inshop": ("list_eval_partition.txt", "Eval/list_eval_partition.txt"),
}


def detect_layout(root: Path | str) -> str | None:
    """`sop`, `cub` or `inshop` when `root` (or its official subfolder) holds that dataset's
    index file, else `None`. An ImageFolder tree has no index file: it is not detected here."""
    root = Path(root)
    return next((name for name, paths in LAYOUT_MARKERS.items() if any((root / p).is_file() for p in paths)), None)
