"""Stanford Online Products (Song et al. 2016): Ebay_train.txt / Ebay_test.txt with super-classes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .image_retrieval_dataset import ImageRetrievalDataset, contiguous_labels
from .layout import check_split, read_rows, resolve_root

SOP_FOLDER = "Stanford_Online_Products"
SOP_SPLITS = ("train", "test")


def load_sop(root: Path | str, split: str, transform: Callable | None = None) -> ImageRetrievalDataset:
    """Read `root/Ebay_{split}.txt` (columns `image_id class_id super_class_id path`).

    The official protocol (paper 5.1): train = 59,551 images of 11,318 classes, test = 60,502
    images of 11,316 classes, 12 super-classes (bicycle, cabinet, ...) shared by both splits.
    `root` may be the dataset folder or the folder the zip was extracted into. Paths in the
    file are relative to the dataset folder. Labels and super-labels are remapped to `0..C-1`
    in the order of the original ids.
    """
    check_split(split, SOP_SPLITS, "sop")
    root = resolve_root(root, f"Ebay_{split}.txt", SOP_FOLDER, "sop")
    index_file = root / f"Ebay_{split}.txt"
    # Line 1 is the header "image_id class_id super_class_id path".
    rows = read_rows(index_file, columns=4, skip=1)
    if not rows:
        raise ValueError(f"{index_file} lists no images")
    try:
        class_ids = [int(fields[1]) for _, fields in rows]
        super_class_ids = [int(fields[2]) for _, fields in rows]
    except ValueError as error:
        raise ValueError(f"{index_file}: class_id and super_class_id must be integers ({error})") from None
    return ImageRetrievalDataset(
        [root / fields[3] for _, fields in rows],
        contiguous_labels(class_ids),
        contiguous_labels(super_class_ids),
        transform=transform,
    )
