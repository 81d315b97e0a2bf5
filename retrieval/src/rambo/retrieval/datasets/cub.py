"""CUB-200-2011 (Wah et al. 2011) in the metric-learning protocol: first 100 classes train, last 100 test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .image_retrieval_dataset import ImageRetrievalDataset, contiguous_labels
from .layout import check_split, read_rows, resolve_root

CUB_FOLDER = "CUB_200_2011"
CUB_SPLITS = ("train", "test")


def load_cub(root: Path | str, split: str, transform: Callable | None = None) -> ImageRetrievalDataset:
    """Read CUB_200_2011's `classes.txt`, `images.txt` and `image_class_labels.txt`.

    Split by class, not by the official train_test_split.txt (Song et al. 2016, paper 5.1): the
    first half of the classes in class-id order (classes 1-100 of 200: 5,864 images) train, the
    rest (101-200: 5,924 images) test. CUB has no super-labels. Image paths in `images.txt` are
    relative to `root/images`; `root` may also be the folder the tgz was extracted into.
    """
    check_split(split, CUB_SPLITS, "cub")
    root = resolve_root(root, "images.txt", CUB_FOLDER, "cub")
    class_ids = sorted(int(fields[0]) for _, fields in read_rows(root / "classes.txt", columns=2))
    if len(class_ids) < 2:
        raise ValueError(f"{root / 'classes.txt'} lists {len(class_ids)} class(es); need at least 2 to split")
    half = len(class_ids) // 2
    split_classes = set(class_ids[:half] if split == "train" else class_ids[half:])

    paths = {int(fields[0]): fields[1] for _, fields in read_rows(root / "images.txt", columns=2)}
    image_classes = [(int(f[0]), int(f[1])) for _, f in read_rows(root / "image_class_labels.txt", columns=2)]
    missing = [image_id for image_id, _ in image_classes if image_id not in paths]
    if missing:
        raise ValueError(f"image_class_labels.txt names image ids absent from images.txt, e.g. {missing[:3]}")
    selected = sorted((image_id, class_id) for image_id, class_id in image_classes if class_id in split_classes)
    return ImageRetrievalDataset(
        [root / "images" / paths[image_id] for image_id, _ in selected],
        contiguous_labels([class_id for _, class_id in selected]),
        None,
        transform=transform,
    )
