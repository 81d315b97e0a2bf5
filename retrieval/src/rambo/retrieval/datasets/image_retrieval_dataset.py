"""The one dataset class every loader returns: image paths with class labels and super-labels.

Images are read as RGB values with [`rambo.harness.images.rgb_image`][rambo.harness.images.rgb_image] (16-bit grayscale
scaled to 8 bits; integer and floating-point images refused). An image that cannot be read is an
[`UnreadableImageError`][rambo.retrieval.datasets.image_retrieval_dataset.UnreadableImageError] naming its file and
index;
[`ImageRetrievalDataset.unreadable`][rambo.retrieval.datasets.image_retrieval_dataset.ImageRetrievalDataset.unreadable]
reads every image once and lists those that fail, and
[`ImageRetrievalDataset.without`][rambo.retrieval.datasets.image_retrieval_dataset.ImageRetrievalDataset.without] drops
them (`data.skip_unreadable`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from PIL import Image

from rambo.harness.config_check import InputError
from rambo.harness.images import UnreadableImage, rgb_image


class UnreadableImageError(InputError):
    """An image file of a dataset cannot be opened or decoded; the message names it and its index."""


def read_image(path: Path | str) -> Image.Image:
    """The RGB image at `path`, fully decoded ([`rambo.harness.images.rgb_image`][rambo.harness.images.rgb_image]: CUB
    and SOP hold a few grayscale and CMYK JPEGs among the RGB ones). Raises
    [`rambo.harness.images.UnreadableImage`][rambo.harness.images.UnreadableImage] naming `path` when it cannot be
    read."""
    return rgb_image(path)


def unreadable_reason(path: Path | str) -> str | None:
    """Why the image at `path` cannot be read (the decoder's error, or the mode refused, in one
    line), or None."""
    try:
        read_image(path)
    except UnreadableImage as error:
        return error.reason
    return None


class ImageRetrievalDataset(torch.utils.data.Dataset):
    """Images on disk with a class label (and optionally a super-label) each.

    Args:
        image_paths: `n` image files.
        labels: `n` class labels; contiguous `0..C-1` within a split (the loaders remap them).
        super_labels: `n` super-labels (SOP super-class, In-shop category) or `None`; used by
            [`rambo.retrieval.samplers.SuperLabelBatchSampler`][rambo.retrieval.samplers.SuperLabelBatchSampler].
        transform: called on the RGB PIL image, e.g. a torchvision transform.

    `dataset[i]` is `(image, label, i)`: the index lets training and evaluation find the image
    again (score memory, example retrievals in Fig. 4).

    Attributes:
        labels: `LongTensor [n]`.
        super_labels: `LongTensor [n]` or `None`.
        image_paths: `list[Path]` of length `n`.
    """

    def __init__(
        self,
        image_paths: Sequence[Path | str],
        labels: Sequence[int],
        super_labels: Sequence[int] | None = None,
        transform: Callable | None = None,
    ):
        if len(image_paths) != len(labels):
            raise ValueError(f"got {len(image_paths)} image paths but {len(labels)} labels")
        if super_labels is not None and len(super_labels) != len(labels):
            raise ValueError(f"got {len(labels)} labels but {len(super_labels)} super-labels")
        if transform is not None and not callable(transform):
            raise ValueError(f"transform must be callable, got {type(transform).__name__}")
        self.image_paths = [Path(p) for p in image_paths]
        self.labels = torch.as_tensor(list(labels), dtype=torch.long).reshape(-1)
        self.super_labels = (
            None if super_labels is None else torch.as_tensor(list(super_labels), dtype=torch.long).reshape(-1)
        )
        if bool((self.labels < 0).any()):
            raise ValueError("labels must be >= 0")
        self.transform = transform

    def __len__(self) -> int:
        return len(self.image_paths)

    def __getitem__(self, index: int):
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for a dataset of {len(self)} images")
        index = index % len(self)
        try:
            image = read_image(self.image_paths[index])
        except UnreadableImage as error:
            raise UnreadableImageError(
                f"{self.image_paths[index]}: image {index} of {len(self)} cannot be read ({error.reason})"
            ) from None
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.labels[index]), index

    def unreadable(self) -> list[tuple[int, Path, str]]:
        """`(index, path, reason)` of every image that cannot be read, each image read once."""
        found = []
        for index, path in enumerate(self.image_paths):
            reason = unreadable_reason(path)
            if reason is not None:
                found.append((index, path, reason))
        return found

    def without(self, indices) -> ImageRetrievalDataset:
        """This dataset less the images at `indices` (same labels, super-labels and transform)."""
        dropped = set(int(i) for i in indices)
        keep = [i for i in range(len(self)) if i not in dropped]
        supers = None if self.super_labels is None else self.super_labels[keep].tolist()
        return ImageRetrievalDataset(
            [self.image_paths[i] for i in keep],
            contiguous_labels(self.labels[keep].tolist()),
            supers,
            transform=self.transform,
        )

    @property
    def num_classes(self) -> int:
        """Number of distinct class labels."""
        return int(self.labels.unique().numel())

    def __repr__(self) -> str:
        supers = "none" if self.super_labels is None else int(self.super_labels.unique().numel())
        return f"{type(self).__name__}(images={len(self)}, classes={self.num_classes}, super_labels={supers})"


def contiguous_labels(raw: Sequence) -> list[int]:
    """Map raw class ids (ints or strings) to `0..C-1` in sorted order of the raw ids."""
    index = {value: i for i, value in enumerate(sorted(set(raw)))}
    return [index[value] for value in raw]
