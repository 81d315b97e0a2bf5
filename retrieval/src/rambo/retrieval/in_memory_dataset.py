"""A retrieval dataset computed once and held in memory as one tensor (small, same-size images).

The mini profile's synthetic images are 32 px PNGs: opening and decoding one costs more than
training on it. [`InMemoryImageDataset`][rambo.retrieval.in_memory_dataset.InMemoryImageDataset] reads every item of an
[`ImageRetrievalDataset`][rambo.retrieval.datasets.ImageRetrievalDataset] once, through that dataset's own
transform, and serves the results from memory. Two uses (`data.in_memory` in the config,
[`rambo.retrieval.train.build_splits`][rambo.retrieval.train.build_splits]):

* training images decoded to `uint8` (`PILToTensor`), augmented a batch at a time by
  [`BatchTrainAugmentation`][rambo.retrieval.batch_transforms.BatchTrainAugmentation];
* evaluation images through the evaluation transform, computed once instead of at every
  evaluation: they are the same tensors the on-disk dataset would give each time.

The dataset's transform must therefore be deterministic: a random one would be drawn once and
then frozen.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .datasets import ImageRetrievalDataset


class InMemoryImageDataset(torch.utils.data.Dataset):
    """Every item of `dataset` computed once; `self[i] = (images[i], label, i)` as `dataset[i]`.

    Raises `ValueError` when the transformed images are not tensors of one shape (the real
    datasets' images differ in size: read them from disk instead).

    Attributes:
        images: `[n, ...]` tensor, the transformed images in dataset order.
        labels, super_labels, image_paths: those of `dataset`.
    """

    def __init__(self, dataset: ImageRetrievalDataset):
        if len(dataset) == 0:
            raise ValueError("cannot hold an empty dataset in memory")
        images = [dataset[index][0] for index in range(len(dataset))]
        if not all(isinstance(image, torch.Tensor) for image in images):
            raise ValueError("the dataset's transform must turn every image into a tensor (e.g. PILToTensor)")
        shapes = sorted({tuple(image.shape) for image in images})
        if len(shapes) > 1:
            raise ValueError(f"images of one shape are needed to hold them as one tensor, got shapes {shapes[:4]}")
        self.images = torch.stack(images)
        self.labels: torch.Tensor = dataset.labels
        self.super_labels: torch.Tensor | None = dataset.super_labels
        self.image_paths: list[Path] = list(dataset.image_paths)

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, index: int):
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for a dataset of {len(self)} images")
        index = index % len(self)
        return self.images[index], int(self.labels[index]), index

    @property
    def num_classes(self) -> int:
        """Number of distinct class labels."""
        return int(self.labels.unique().numel())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(images={len(self)}, shape={tuple(self.images.shape[1:])}, classes={self.num_classes})"
