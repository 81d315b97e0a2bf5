"""A folder of class folders (torchvision's ImageFolder layout) as a retrieval dataset.

Two layouts are read, the first found wins:

* `root/train/<class>/<image>` and `root/test/<class>/<image>`: the user's own split (the test
  classes should be other classes than the training ones: retrieval is evaluated on unseen classes);
* `root/<class>/<image>`: the classes in sorted order of their folder names, the first half train
  and the rest test, as CUB's metric-learning split (paper Sec. 5.1) splits its classes.

Images are files with one of torchvision's image extensions (case ignored); hidden files and
folders are skipped. There are no super-labels, so training batches are drawn m per class.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .image_retrieval_dataset import ImageRetrievalDataset, contiguous_labels
from .layout import check_split

IMAGEFOLDER_SPLITS = ("train", "test")
# torchvision.datasets.folder.IMG_EXTENSIONS (kept here: the loader needs no torchvision import)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def class_folders(folder: Path) -> dict[str, list[Path]]:
    """`{class folder name: its image files, sorted}` for the non-hidden subfolders of `folder`
    that hold at least one image."""
    classes = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        images = sorted(
            p
            for p in sub.rglob("*")
            if p.suffix.lower() in IMAGE_EXTENSIONS
            and p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(sub).parts)
        )
        if images:
            classes[sub.name] = images
    return classes


def has_own_split(root: Path) -> bool:
    """True when `root` holds `train/` and `test/` folders (the user's own split)."""
    return (root / "train").is_dir() and (root / "test").is_dir()


def split_classes(root: Path, split: str) -> dict[str, list[Path]]:
    """`{class folder name: its images}` of split `split` (`train` or `test`) of the tree at
    `root`, however few ([`load_imagefolder`][rambo.retrieval.datasets.imagefolder.load_imagefolder] needs 2): the
    `train`/`test` folder's class folders, or a half of `root`'s class folders in sorted order (module docstring)."""
    if has_own_split(root):
        return class_folders(root / split)
    every = class_folders(root)
    names = list(every)
    half = len(names) // 2
    return {name: every[name] for name in (names[:half] if split == "train" else names[half:])}


def load_imagefolder(root: Path | str, split: str, transform: Callable | None = None) -> ImageRetrievalDataset:
    """Read split `split` (`train` or `test`) of the ImageFolder tree at `root` (module docstring).

    Raises `FileNotFoundError` when `root` is not a folder, and `ValueError` when it (or its
    `train`/`test` folder) holds fewer than 2 class folders with images."""
    check_split(split, IMAGEFOLDER_SPLITS, "imagefolder")
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(
            f"imagefolder: {root} is not a folder (expected {root}/<class>/<image>, or train/ and test/ of those)"
        )
    if has_own_split(root):
        classes = class_folders(root / split)
        if len(classes) < 2:
            raise ValueError(
                f"imagefolder: {root / split} holds {len(classes)} class folder(s) with images; need at least 2"
            )
        return dataset_of(classes, transform)
    if (count := len(class_folders(root))) < 2:
        raise ValueError(
            f"imagefolder: {root} holds {count} class folder(s) with images; need at least 2 "
            f"(the first half of the classes train, the rest test), as {root}/<class>/<image>"
        )
    return dataset_of(split_classes(root, split), transform)


def dataset_of(classes: dict[str, list[Path]], transform: Callable | None = None) -> ImageRetrievalDataset:
    """The images of `classes` (`{class name: its images}`), labelled `0..C-1` in sorted order of the names."""
    paths = [path for images in classes.values() for path in images]
    labels = [name for name, images in classes.items() for _ in images]
    return ImageRetrievalDataset(paths, contiguous_labels(labels), None, transform=transform)
