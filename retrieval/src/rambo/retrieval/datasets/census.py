"""The classes of a dataset's splits as a run reads them, counted from its folders or index files
(no image opened), with the words that say where they come from: what the config check
([`rambo.retrieval.config_check`][rambo.retrieval.config_check]) compares with what a run needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .cub import CUB_FOLDER
from .image_retrieval_dataset import ImageRetrievalDataset
from .imagefolder import dataset_of, has_own_split, split_classes
from .inshop import INSHOP_FOLDER
from .layout import resolve_root
from .loading import load_dataset
from .sop import SOP_FOLDER


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`"1 class"`, `"2 classes"`: `count` and `noun` in the number it takes."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


@dataclass(frozen=True)
class Census:
    """A dataset's splits, and where their classes come from in words.

    `train`: the training split before the validation hold-out. `evaluation`: `{"test": ...}`,
    or In-shop's `{"query": ..., "gallery": ...}`. `train_words` / `test_words`: the folder or
    file and its count of classes ("DIR/train holds 3 class folders with images"). `unit`: what
    the user adds to have more classes ("class folders", "classes"). `halves`: one list of
    classes split in two, the first half train (the flat ImageFolder layout, CUB), so the run
    needs twice the training classes it trains on; `train_where` / `test_where`: where classes
    are added for each split."""

    train: ImageRetrievalDataset
    evaluation: dict[str, ImageRetrievalDataset]
    train_words: str
    test_words: str
    unit: str
    halves: bool
    train_where: str
    test_where: str

    @property
    def test(self) -> ImageRetrievalDataset:
        """The split whose classes a query is ranked among: `test`, or In-shop's gallery."""
        return self.evaluation["test" if "test" in self.evaluation else "gallery"]


def census(name: str, root: Path | str) -> Census:
    """The splits of dataset `name` (`sop`, `cub`, `inshop`, `synthetic`, `imagefolder`)
    at `root`. An ImageFolder split of fewer than 2 classes is counted (the loader refuses it);
    the other layouts raise what their loaders raise (`FileNotFoundError`, `ValueError`)."""
    root = Path(root)
    if name == "imagefolder":
        train, test = (dataset_of(split_classes(root, split)) for split in ("train", "test"))
        t, u = train.num_classes, test.num_classes
        if has_own_split(root):
            return Census(
                train,
                {"test": test},
                f"{root / 'train'} holds {counted(t, 'class folder')} with images",
                f"{root / 'test'} holds {counted(u, 'class folder')} with images",
                "class folders",
                False,
                f" to {root / 'train'}",
                f" to {root / 'test'}",
            )
        words = (
            f"data.root={root} holds {counted(t + u, 'class folder')} with images: "
            f"the first {t} in sorted order train, the other {u} test"
        )
        return Census(train, {"test": test}, words, words, "class folders", True, "", "")
    splits = ("train", "query", "gallery") if name == "inshop" else ("train", "test")
    loaded = {split: load_dataset(name, root, split) for split in splits}
    train, evaluation = loaded.pop("train"), loaded
    t = train.num_classes
    if name == "cub":
        u = evaluation["test"].num_classes
        classes = resolve_root(root, "images.txt", CUB_FOLDER, "cub") / "classes.txt"
        words = (
            f"{classes} lists {counted(t + u, 'class', 'classes')} with images: the first {t} train, the other {u} test"
        )
        return Census(train, evaluation, words, words, "classes", True, "", "")
    if name == "inshop":
        index = resolve_root(root, "list_eval_partition.txt", INSHOP_FOLDER, "inshop") / "list_eval_partition.txt"
        u = evaluation["gallery"].num_classes
        return Census(
            train,
            evaluation,
            f"{index} lists {counted(t, 'training item')}",
            f"{index} lists {counted(u, 'gallery item')}",
            "items",
            False,
            "",
            "",
        )
    train_index, test_index = (
        resolve_root(root, f, SOP_FOLDER, "sop") / f for f in ("Ebay_train.txt", "Ebay_test.txt")
    )
    u = evaluation["test"].num_classes
    return Census(
        train,
        evaluation,
        f"{train_index} lists {counted(t, 'class', 'classes')}",
        f"{test_index} lists {counted(u, 'class', 'classes')}",
        "classes",
        False,
        f" to {train_index}",
        f" to {test_index}",
    )
