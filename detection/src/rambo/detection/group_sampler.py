"""Batches of images of one aspect-ratio group, as mmdetection's `GroupSampler` (`data.batch_grouping`).

mmdetection (v1, `mmdet/datasets/custom.py` `_set_group_flag` and
`mmdet/datasets/loader/sampler.py` `GroupSampler`) splits the training images into two groups
by their size in the annotation: flag 1 when `width / height > 1` (landscape), 0 otherwise. Every
epoch it shuffles each group, pads the group to a multiple of the batch by repeating the first
images of its shuffled order, cuts it into batches and shuffles the batches. Every batch thus
holds images of one group only (the detector pads a batch to its largest image, so a portrait
image among landscape ones costs padding), and every image is seen once per epoch, plus the
repeated ones that fill a group's last batch (fewer than one batch per group).

[`GroupedBatchSampler`][rambo.detection.group_sampler.GroupedBatchSampler] does the same with a `torch.Generator` seeded
per epoch (a function of the seed only, so a resumed epoch draws the same batches) instead of numpy's global generator.
Padding is mmdetection's (`pad=True`, what training uses): a group of `n` images gives
`ceil(n / batch_size)` full batches, its shuffled order repeated from the start to fill the last
one (cyclically, should a group be smaller than the padding it needs). `pad=False` leaves a
group's last batch short instead (every image exactly once).

Under DDP the batches are global batches that
[`rambo.harness.distributed.ShardedBatchSampler`][rambo.harness.distributed.ShardedBatchSampler] slices over the
processes, so every process's share is of one group too; padded batches are always full, so none is smaller than the
number of processes.

The sizes come from the annotations (`<size><width><height>` in VOC's XML, also written by the
synthetic sets), never from decoding the images:
[`rambo.detection.voc.VOCDetectionDataset.aspect_ratio_groups`][rambo.detection.voc.VOCDetectionDataset.aspect_ratio_groups].
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

import torch

BATCH_GROUPINGS = ("aspect_ratio", "none")


def aspect_ratio_flag(width: float, height: float) -> int:
    """mmdetection's group flag: 1 when `width / height > 1` (landscape), else 0 (portrait or square)."""
    if not (width > 0 and height > 0):
        raise ValueError(f"image sizes must be positive, got width {width}, height {height}")
    return int(width / height > 1)


def aspect_ratio_flags(sizes: Iterable[tuple[float, float]]) -> list[int]:
    """`[(width, height), ...]` -> the group flag of each image."""
    return [aspect_ratio_flag(width, height) for width, height in sizes]


class GroupedBatchSampler(torch.utils.data.Sampler):
    """Batches of `batch_size` dataset indices, each from one group of `groups` (one id per
    image), groups shuffled and padded as mmdetection's `GroupSampler` (module docstring).

    `seed`: every iteration draws from `torch.Generator().manual_seed(seed)`, so iterating
    twice gives the same batches; build one sampler per epoch with that epoch's seed.
    """

    def __init__(self, groups: Sequence[int], batch_size: int, seed: int, pad: bool = True):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.groups = torch.as_tensor(list(groups), dtype=torch.long)
        if self.groups.numel() == 0:
            raise ValueError("no images to batch")
        self.batch_size, self.seed, self.pad = batch_size, int(seed), bool(pad)

    def group_sizes(self) -> dict[int, int]:
        """`{group id: number of images}`, in increasing group id (the order the groups are cut in)."""
        ids, counts = torch.unique(self.groups, return_counts=True)
        return dict(zip(ids.tolist(), counts.tolist()))

    def __len__(self) -> int:
        return sum(math.ceil(size / self.batch_size) for size in self.group_sizes().values())

    def __iter__(self) -> Iterator[list[int]]:
        generator = torch.Generator().manual_seed(self.seed)
        batches = []
        for group in self.group_sizes():
            members = torch.nonzero(self.groups == group).squeeze(1)
            order = members[torch.randperm(members.numel(), generator=generator)]
            if self.pad:
                missing = math.ceil(order.numel() / self.batch_size) * self.batch_size - order.numel()
                order = torch.cat([order, order.repeat(math.ceil(missing / order.numel()))[:missing]])
            batches += [chunk.tolist() for chunk in order.split(self.batch_size)]
        for index in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[index]
