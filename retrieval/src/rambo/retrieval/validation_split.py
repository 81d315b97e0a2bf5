"""Class-disjoint validation split of the training classes (the "fair" protocol's model selection:
the checkpoint is chosen without looking at the test set)."""

from __future__ import annotations

import numpy as np

from .datasets import ImageRetrievalDataset


def _subset(dataset: ImageRetrievalDataset, keep: np.ndarray, transform) -> ImageRetrievalDataset:
    labels = dataset.labels.numpy()[keep]
    remap = {old: new for new, old in enumerate(np.unique(labels))}  # contiguous 0..C-1 per split
    return ImageRetrievalDataset(
        [dataset.image_paths[i] for i in keep],
        [remap[int(label)] for label in labels],
        None if dataset.super_labels is None else dataset.super_labels.numpy()[keep].tolist(),
        transform=transform,
    )


def split_validation_classes(
    dataset: ImageRetrievalDataset, fraction: float, seed: int = 0, validation_transform=None
) -> tuple[ImageRetrievalDataset, ImageRetrievalDataset | None]:
    """`(train, validation)`: a `fraction` of the classes (chosen per super-label, so every
    super-label keeps classes for the super-label sampler) moves to `validation`; `None` when
    `fraction` is 0. Both keep `dataset`'s images; labels are re-numbered contiguously."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1), got {fraction}")
    if fraction == 0.0:
        return dataset, None
    labels = dataset.labels.numpy()
    groups = np.zeros_like(labels) if dataset.super_labels is None else dataset.super_labels.numpy()
    rng = np.random.default_rng([seed, 2])
    held_out = []
    for group in np.unique(groups):
        classes = np.unique(labels[groups == group])
        count = int(round(fraction * len(classes)))
        held_out.extend(rng.permutation(classes)[:count].tolist())
    if not held_out or len(held_out) == len(np.unique(labels)):
        raise ValueError(f"validation_fraction {fraction} leaves an empty train or validation split")
    is_validation = np.isin(labels, held_out)
    return (
        _subset(dataset, np.flatnonzero(~is_validation), dataset.transform),
        _subset(dataset, np.flatnonzero(is_validation), validation_transform),
    )
