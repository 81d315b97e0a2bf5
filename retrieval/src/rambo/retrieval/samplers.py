"""Batch samplers for metric learning: m-per-class batches and super-label batches.

Both yield *lists of indices* (use them as `DataLoader(dataset, batch_sampler=...)`). A batch
holds `samples_per_class` images of each of `batch_size // samples_per_class` distinct
classes, grouped by class. Randomness comes only from `numpy.random.default_rng([seed, epoch])`,
so a sampler is deterministic for a seed and differs between epochs once `set_epoch(epoch)` is
called (as with `DistributedSampler`; iterating again without it repeats the epoch, which is
what a resumed run needs).

[`build_batch_sampler`][rambo.retrieval.samplers.build_batch_sampler] makes the sampler a run's config
asks for; the training app and the config check both use it.

Classes are visited in random permutations, and each class's images in its own random
permutation, so within an epoch classes and images recur as evenly as the batch shape allows.
A class with fewer than `samples_per_class` images contributes all of them, topped up by
repeats drawn at random (SOP has classes of 2-12 images; with augmentation the repeats are
different views).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from omegaconf import DictConfig


def _as_labels(values, name: str) -> np.ndarray:
    array = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of integers, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {array.dtype}")
    return array.astype(np.int64)


def _check_positive_int(value, name: str) -> int:
    if int(value) != value or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value}")
    return int(value)


def _classes_per_batch(batch_size: int, samples_per_class: int) -> int:
    batch_size = _check_positive_int(batch_size, "batch_size")
    samples_per_class = _check_positive_int(samples_per_class, "samples_per_class")
    if batch_size % samples_per_class:
        raise ValueError(
            f"batch_size ({batch_size}) must be a multiple of samples_per_class ({samples_per_class}): "
            f"a batch is batch_size // samples_per_class classes x samples_per_class images each"
        )
    return batch_size // samples_per_class


class _PermutationWalk:
    """Endless walk through random permutations of `items`, a fresh permutation when one runs out."""

    def __init__(self, items: np.ndarray, rng: np.random.Generator):
        self.items = items
        self.rng = rng
        self.queue: deque[int] = deque()

    def take(self, count: int) -> list[int]:
        """`count` distinct items (`count <= len(items)`), continuing the current permutation."""
        if count > len(self.items):
            raise ValueError(f"cannot take {count} distinct items out of {len(self.items)}")
        taken: list[int] = []
        while len(taken) < count:
            if not self.queue:
                self.queue = deque(self.rng.permutation(self.items).tolist())
            # An item already taken for this call waits for the next call, keeping `taken` distinct.
            skipped = []
            while self.queue and len(taken) < count:
                item = self.queue.popleft()
                (skipped if item in taken else taken).append(item)
            self.queue.extend(skipped)
        return taken


class _BatchBuilder:
    """Draws `samples_per_class` indices per class from per-class permutation walks."""

    def __init__(self, labels: np.ndarray, samples_per_class: int, rng: np.random.Generator):
        self.samples_per_class = samples_per_class
        self.rng = rng
        self.members = {int(c): np.flatnonzero(labels == c) for c in np.unique(labels)}
        self.walks: dict[int, _PermutationWalk] = {}

    def batch(self, classes: Sequence[int]) -> list[int]:
        indices: list[int] = []
        for label in classes:
            members = self.members[label]
            walk = self.walks.setdefault(label, _PermutationWalk(members, self.rng))
            chosen = walk.take(min(self.samples_per_class, len(members)))
            shortfall = self.samples_per_class - len(chosen)
            if shortfall:
                chosen += self.rng.choice(members, size=shortfall, replace=True).tolist()
            indices.extend(int(i) for i in chosen)
        return indices


class _EpochBatchSampler(torch.utils.data.Sampler):
    """What both samplers share: labels, batch geometry, `batches_per_epoch` and the epoch stream."""

    def __init__(self, labels, batch_size: int, samples_per_class: int, seed: int, batches_per_epoch: int | None):
        self.labels = _as_labels(labels, "labels")
        self.classes_per_batch = _classes_per_batch(batch_size, samples_per_class)
        self.batch_size = int(batch_size)
        self.samples_per_class = int(samples_per_class)
        self.seed = int(seed)
        self.batches_per_epoch = (
            max(1, len(self.labels) // self.batch_size)
            if batches_per_epoch is None
            else _check_positive_int(batches_per_epoch, "batches_per_epoch")
        )
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the random stream of epoch `epoch`."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.batches_per_epoch


class MPerClassBatchSampler(_EpochBatchSampler):
    """Batches of `batch_size // samples_per_class` classes x `samples_per_class` images.

    Args:
        labels: `[n]` class label of every dataset item.
        batch_size: images per batch; a multiple of `samples_per_class`.
        samples_per_class: images of each class in a batch (paper App. A: 4 for CUB and SOP,
            8 for In-shop). Not the number of classes per batch.
        seed: the sampler's random stream; with `set_epoch` it fixes every batch.
        batches_per_epoch: default `n // batch_size` (about one pass over the data).
    """

    def __init__(
        self,
        labels,
        batch_size: int,
        samples_per_class: int,
        seed: int = 0,
        batches_per_epoch: int | None = None,
    ):
        super().__init__(labels, batch_size, samples_per_class, seed, batches_per_epoch)
        self.classes = np.unique(self.labels)
        if self.classes_per_batch > len(self.classes):
            raise ValueError(
                f"a batch needs {self.classes_per_batch} distinct classes (batch_size {batch_size} / "
                f"samples_per_class {samples_per_class}) but the labels have only {len(self.classes)}; lower the "
                f"batch size: the largest that fits is batch_size={len(self.classes) * self.samples_per_class} "
                f"({len(self.classes)} classes)"
            )

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        classes = _PermutationWalk(self.classes, rng)
        builder = _BatchBuilder(self.labels, self.samples_per_class, rng)
        for _ in range(self.batches_per_epoch):
            yield builder.batch(classes.take(self.classes_per_batch))


class SuperLabelBatchSampler(_EpochBatchSampler):
    """m-per-class batches whose classes come from one pair of super-labels at a time.

    Paper App. A, following Cakir et al. (2019): `batches_per_super_pair` consecutive batches
    are drawn from the classes of one pair of super-labels (10 for SOP with 4 samples per class,
    4 for In-shop with 8), so a batch holds many hard negatives from similar products. With
    `pair_order="fixed"` the pairs are visited in one order every epoch, `(a, b)` for `a < b`
    in the super-labels' order (`itertools.combinations`, as the code behind App. A does:
    kunhe/Deep-Metric-Learning-Baselines `datasets.py` `SuperLabelTrainDataset`); with
    `"shuffled"` in a fresh random order each epoch (FastAP's Matlab `train_hard.m`).

    With `split="halves"` (FastAP's `train_hard.m`: "equal # of imgs from both meta-class";
    pytorch-metric-learning's `HierarchicalSampler` alike) half of a batch's classes come from
    each super-label of the pair, and a pair in which either super-label holds fewer than half
    the batch's classes is skipped. With `split="union"` the classes are drawn from the union
    of the two, and a pair holding fewer than `batch_size // samples_per_class` classes
    together is skipped.

    Args:
        labels: `[n]` class labels; each class must have a single super-label.
        super_labels: `[n]` super-label of every item (at least two distinct values).
        batch_size, samples_per_class, seed: as in
            [`MPerClassBatchSampler`][rambo.retrieval.samplers.MPerClassBatchSampler].
        batches_per_super_pair: consecutive batches per pair of super-labels.
        batches_per_epoch: default `n // batch_size` (about one pass); `"every_super_pair"`:
            `batches_per_super_pair` batches of every usable pair (FastAP's epoch: 66 x 10 = 660
            for SOP). The last pair of an epoch is cut short to make exactly this many batches.
        split: `"halves"` or `"union"` (above).
        pair_order: `"shuffled"` or `"fixed"` (above).
    """

    def __init__(
        self,
        labels,
        super_labels,
        batch_size: int,
        samples_per_class: int,
        batches_per_super_pair: int,
        seed: int = 0,
        batches_per_epoch: int | str | None = None,
        split: str = "union",
        pair_order: str = "shuffled",
    ):
        if split not in ("halves", "union"):
            raise ValueError(f"split must be 'halves' or 'union', got {split!r}")
        if pair_order not in ("shuffled", "fixed"):
            raise ValueError(f"pair_order must be 'shuffled' or 'fixed', got {pair_order!r}")
        self.pair_order = pair_order
        if batches_per_epoch not in (None, "every_super_pair") and isinstance(batches_per_epoch, str):
            raise ValueError(
                f"batches_per_epoch must be an integer, None or 'every_super_pair', got {batches_per_epoch!r}"
            )
        every_pair = batches_per_epoch == "every_super_pair"
        super().__init__(labels, batch_size, samples_per_class, seed, None if every_pair else batches_per_epoch)
        self.split = split
        if split == "halves" and self.classes_per_batch % 2:
            raise ValueError(
                f"split='halves' needs an even number of classes per batch, got {self.classes_per_batch} "
                f"(batch_size {batch_size} / samples_per_class {samples_per_class})"
            )
        self.super_labels = _as_labels(super_labels, "super_labels")
        if self.super_labels.shape != self.labels.shape:
            raise ValueError(f"got {len(self.labels)} labels but {len(self.super_labels)} super_labels")
        self.batches_per_super_pair = _check_positive_int(batches_per_super_pair, "batches_per_super_pair")

        self.classes_of_super: dict[int, np.ndarray] = {}
        for super_label in np.unique(self.super_labels):
            self.classes_of_super[int(super_label)] = np.unique(self.labels[self.super_labels == super_label])
        class_super_pairs = np.unique(np.stack([self.labels, self.super_labels], axis=1), axis=0)
        classes, counts = np.unique(class_super_pairs[:, 0], return_counts=True)
        if bool((counts > 1).any()):
            raise ValueError(
                f"every class needs one super-label; classes {classes[counts > 1][:5].tolist()} have several"
            )
        if len(self.classes_of_super) < 2:
            raise ValueError("super-label batches need at least 2 distinct super-labels")
        supers = sorted(self.classes_of_super)
        size = {a: len(self.classes_of_super[a]) for a in supers}
        half = self.classes_per_batch // 2
        self.pairs = [
            (a, b)
            for i, a in enumerate(supers)
            for b in supers[i + 1 :]
            if (min(size[a], size[b]) >= half if split == "halves" else size[a] + size[b] >= self.classes_per_batch)
        ]
        if not self.pairs:
            needs = (
                f"{half} classes in each of its super-labels"
                if split == "halves"
                else f"{self.classes_per_batch} classes"
            )
            ordered = sorted(size.values(), reverse=True)
            most = 2 * ordered[1] if split == "halves" else ordered[0] + ordered[1]  # classes the best pair offers
            raise ValueError(
                f"no pair of super-labels holds {needs} "
                f"(batch_size {batch_size} / samples_per_class {samples_per_class}); lower the batch size: "
                f"the largest that fits is batch_size={most * samples_per_class} ({most} classes)"
            )
        if every_pair:
            self.batches_per_epoch = len(self.pairs) * self.batches_per_super_pair

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        builder = _BatchBuilder(self.labels, self.samples_per_class, rng)
        pair_order = _PermutationWalk(np.arange(len(self.pairs)), rng) if self.pair_order == "shuffled" else None
        class_walks: dict = {}
        produced = visited = 0
        while produced < self.batches_per_epoch:
            (pair,) = pair_order.take(1) if pair_order is not None else (visited % len(self.pairs),)
            visited += 1
            first, second = self.pairs[pair]
            for _ in range(min(self.batches_per_super_pair, self.batches_per_epoch - produced)):
                if self.split == "halves":
                    half = self.classes_per_batch // 2
                    classes = [
                        c
                        for super_label in (first, second)
                        for c in self._walk(class_walks, super_label, rng).take(half)
                    ]
                else:
                    classes = self._walk(class_walks, (first, second), rng).take(self.classes_per_batch)
                yield builder.batch(classes)
                produced += 1

    def _walk(self, walks: dict, key, rng: np.random.Generator) -> _PermutationWalk:
        """The class walk of one super-label (`halves`) or of a pair's union (`union`)."""
        if key not in walks:
            supers = key if isinstance(key, tuple) else (key,)
            walks[key] = _PermutationWalk(np.concatenate([self.classes_of_super[s] for s in supers]), rng)
        return walks[key]


def build_batch_sampler(cfg: DictConfig, train_set) -> torch.utils.data.Sampler:
    """The global batch sampler of App. A (super-label pairs, or m per class without super-labels).

    Args:
        cfg: the run's config: `data.sampler`, `batch_size`, `seed` and `steps_per_epoch`.
        train_set: the training split, with its `labels` and `super_labels` (None without).

    Returns:
        A [`SuperLabelBatchSampler`][rambo.retrieval.samplers.SuperLabelBatchSampler] when
        `data.sampler.name` is `super_label` and the split has super-labels, else an
        [`MPerClassBatchSampler`][rambo.retrieval.samplers.MPerClassBatchSampler].

    Raises:
        ValueError: an unknown `data.sampler.name`, or a batch the training classes cannot fill
            (the message names the largest batch size that fits).
    """
    sampler = cfg.data.sampler
    if sampler.name == "super_label" and train_set.super_labels is not None:
        return SuperLabelBatchSampler(
            train_set.labels,
            train_set.super_labels,
            cfg.batch_size,
            sampler.samples_per_class,
            sampler.batches_per_super_pair,
            seed=cfg.seed,
            batches_per_epoch=cfg.steps_per_epoch or sampler.get("epoch_length"),
            split=sampler.get("split", "union"),
            pair_order=sampler.get("pair_order", "shuffled"),
        )
    if sampler.name not in ("super_label", "m_per_class"):
        raise ValueError(f"data.sampler.name must be 'super_label' or 'm_per_class', got {sampler.name!r}")
    return MPerClassBatchSampler(
        train_set.labels,
        cfg.batch_size,
        sampler.samples_per_class,
        seed=cfg.seed,
        batches_per_epoch=cfg.steps_per_epoch,
    )
