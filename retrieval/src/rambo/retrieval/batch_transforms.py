"""The paper's training augmentation (random resized crop + horizontal flip, as
[`transforms.train_transform`][rambo.retrieval.transforms.train_transform]) on a whole batch of same-size `uint8` images
at once.

Per image, [`transforms.train_transform`][rambo.retrieval.transforms.train_transform] costs a PIL crop, a PIL resize, a
flip and a tensor conversion: at 32 px that is most of a CPU training step. Here every draw is one tensor
op over the batch:

* [`random_resized_crop_boxes`][rambo.retrieval.batch_transforms.random_resized_crop_boxes]: one crop box per image,
  drawn as torchvision's `RandomResizedCrop.get_params` draws it (area fraction uniform in `scale`, log aspect
  ratio uniform in `log(ratio)`, integer sides rounded, the first of 10 attempts that fits,
  else the central crop of the nearest allowed ratio; the offset uniform over the positions);
* [`resized_crops`][rambo.retrieval.batch_transforms.resized_crops]: every box resampled to `size x size` in one
  `roi_align` call (bilinear; several samples per output pixel when a crop is larger than the output);
* a horizontal flip of each image with probability `flip_probability`, then the ImageNet
  normalisation.

One difference in the resampling: torchvision crops, then resizes the crop alone, so output
pixels within half a pixel of the crop's edge repeat its edge pixels; `roi_align` samples the
image itself there, reading the pixels just outside the box. Away from the border the two agree
exactly (bilinear upsampling; the test checks it).

Randomness comes from `generator` (a `torch.Generator`), or, when it is `None`, from torch's
global generator, which checkpoints save and restore: a resumed run draws what an uninterrupted
one would. Or, with `seeds` (one per image), each image's crop and flip come from its own seed
(`DRAWS_PER_IMAGE` uniform numbers of `torch.Generator().manual_seed(seed)`): the training
loader's way ([`sample_seeds`][rambo.retrieval.sample_seeds]), so the batch is the same whichever process collates it.
"""

from __future__ import annotations

import math

import torch
from torch.utils.data import default_collate
from torchvision.ops import roi_align

from .transforms import CROP_RATIO, FLIP_PROBABILITY, IMAGENET_MEAN, IMAGENET_STD, MIN_SCALE, check_image_size

# torchvision's RandomResizedCrop: draws before falling back to the central crop.
CROP_ATTEMPTS = 10
# Uniform numbers an image's box takes (an area and a ratio per attempt, the two offsets), and with its flip.
DRAWS_PER_BOX = 2 * CROP_ATTEMPTS + 2
DRAWS_PER_IMAGE = DRAWS_PER_BOX + 1


def _check_range(values: tuple[float, float], name: str) -> tuple[float, float]:
    low, high = (float(v) for v in values)
    if not 0 < low <= high:
        raise ValueError(f"{name} must be (low, high) with 0 < low <= high, got {tuple(values)}")
    return low, high


def _central_fallback(height: int, width: int, ratio: tuple[float, float]) -> tuple[int, int]:
    """`(crop_height, crop_width)` when no attempt fits: the whole image, cut to the nearest ratio."""
    image_ratio = width / height
    if image_ratio < ratio[0]:
        return int(round(width / ratio[0])), width
    if image_ratio > ratio[1]:
        return height, int(round(height * ratio[1]))
    return height, width


def _uniform_offsets(room: torch.Tensor, draw: torch.Tensor) -> torch.Tensor:
    """One integer uniform in `0..room[i]` for each `i`, from `draw[i]` uniform in `[0, 1)`."""
    return torch.minimum((draw * (room + 1)).floor().long(), room)


def seeded_draws(seeds, count: int) -> torch.Tensor:
    """`float64 [len(seeds), count]`: row `i` the first `count` numbers uniform in `[0, 1)`
    of `torch.Generator().manual_seed(seeds[i])`."""
    rows = [
        torch.rand(count, dtype=torch.float64, generator=torch.Generator().manual_seed(int(seed))) for seed in seeds
    ]
    return torch.stack(rows) if rows else torch.empty(0, count, dtype=torch.float64)


def random_resized_crop_boxes(
    count: int,
    height: int,
    width: int,
    scale: tuple[float, float] = (MIN_SCALE, 1.0),
    ratio: tuple[float, float] = CROP_RATIO,
    generator: torch.Generator | None = None,
    draws: torch.Tensor | None = None,
) -> torch.Tensor:
    """`count` random crop boxes of a `height x width` image: `LongTensor [count, 4]` of
    `(top, left, crop_height, crop_width)`, every box inside the image.

    The distribution of torchvision's `RandomResizedCrop`: for each box, up to
    `CROP_ATTEMPTS` draws of an area (a fraction uniform in `scale` of the image's) and a
    width / height ratio (log-uniform in `ratio`); the first draw whose rounded sides fit the
    image is kept, at a uniformly drawn position. When none fits, the box is the central crop of
    the whole image cut to the nearest ratio in `ratio`. All attempts are drawn at once (the
    ones after the kept one are drawn and unused), so the batch costs a few tensor ops.

    `draws`: `float64 [count, DRAWS_PER_BOX]` numbers uniform in `[0, 1)` to use instead of
    `generator` (the areas, the ratios, the top and the left offset of each box, in that order).
    """
    scale, ratio = _check_range(scale, "scale"), _check_range(ratio, "ratio")
    if scale[1] > 1:
        raise ValueError(f"scale is a fraction of the image area, at most 1; got {scale}")
    if count < 0 or height < 1 or width < 1:
        raise ValueError(f"need count >= 0 and a non-empty image, got {count} boxes of {height} x {width}")
    shape = (count, CROP_ATTEMPTS)
    if draws is None:  # the generator's numbers in the order the seeded rows hold them
        area_draw = torch.rand(shape, dtype=torch.float64, generator=generator)
        aspect_draw = torch.rand(shape, dtype=torch.float64, generator=generator)
        top_draw = torch.rand(count, dtype=torch.float64, generator=generator)
        left_draw = torch.rand(count, dtype=torch.float64, generator=generator)
    else:
        if draws.shape != (count, DRAWS_PER_BOX):
            raise ValueError(f"draws must be [{count}, {DRAWS_PER_BOX}], got {tuple(draws.shape)}")
        draws = draws.to(torch.float64)
        area_draw, aspect_draw = draws[:, :CROP_ATTEMPTS], draws[:, CROP_ATTEMPTS : 2 * CROP_ATTEMPTS]
        top_draw, left_draw = draws[:, -2], draws[:, -1]
    area = height * width * (scale[0] + (scale[1] - scale[0]) * area_draw)
    log_low, log_high = math.log(ratio[0]), math.log(ratio[1])
    log_aspect = log_low + (log_high - log_low) * aspect_draw
    aspect = log_aspect.exp()
    crop_width = (area * aspect).sqrt().round().long()
    crop_height = (area / aspect).sqrt().round().long()
    fits = (crop_width >= 1) & (crop_width <= width) & (crop_height >= 1) & (crop_height <= height)
    first = fits.long().argmax(dim=1)  # index of the first attempt that fits (0 when none does)
    rows = torch.arange(count)
    found = fits.any(dim=1)
    fallback_height, fallback_width = _central_fallback(height, width, ratio)
    crop_height = torch.where(found, crop_height[rows, first], fallback_height)
    crop_width = torch.where(found, crop_width[rows, first], fallback_width)
    top = torch.where(found, _uniform_offsets(height - crop_height, top_draw), (height - crop_height) // 2)
    left = torch.where(found, _uniform_offsets(width - crop_width, left_draw), (width - crop_width) // 2)
    return torch.stack([top, left, crop_height, crop_width], dim=1)


def resized_crops(images: torch.Tensor, boxes: torch.Tensor, size: int) -> torch.Tensor:
    """Crop box `boxes[i]` (`(top, left, height, width)`) of `images[i]` and resample it to
    `size x size`: `[B, C, H, W]` float -> `[B, C, size, size]`, bilinear, in one call.

    A pixel `(row, col)` covers `[col, col + 1] x [row, row + 1]` and its value sits at its
    centre, as in `interpolate(..., align_corners=False)`; a box larger than the output averages
    `ceil(box side / size)` samples per side in each output pixel (antialiasing).
    """
    if images.ndim != 4 or boxes.shape != (images.shape[0], 4):
        raise ValueError(
            f"need images [B, C, H, W] and boxes [B, 4], got {tuple(images.shape)} and {tuple(boxes.shape)}"
        )
    top, left, height, width = boxes.to(images.dtype).unbind(dim=1)
    batch_index = torch.arange(images.shape[0], dtype=images.dtype)
    rois = torch.stack([batch_index, left, top, left + width, top + height], dim=1)
    return roi_align(images, rois, (size, size), spatial_scale=1.0, sampling_ratio=-1, aligned=True)


class BatchTrainAugmentation:
    """`uint8 [B, 3, H, W]` images -> `float32 [B, 3, image_size, image_size]`: random resized
    crop, horizontal flip and ImageNet normalisation per image, drawn for the batch at once.

    The batch version of [`transforms.train_transform`][rambo.retrieval.transforms.train_transform] (same parameters and
    defaults), for images already decoded into one tensor
    ([`in_memory_dataset.InMemoryImageDataset`][rambo.retrieval.in_memory_dataset.InMemoryImageDataset]).
    [`collate`][rambo.retrieval.batch_transforms.BatchTrainAugmentation.collate] is a `DataLoader` `collate_fn`: it
    stacks `(image, label, index)` items and augments the stacked images.
    """

    def __init__(
        self,
        image_size: int,
        min_scale: float = MIN_SCALE,
        ratio: tuple[float, float] = CROP_RATIO,
        flip_probability: float = FLIP_PROBABILITY,
    ):
        if not 0.0 <= flip_probability <= 1.0:
            raise ValueError(f"flip_probability must be in [0, 1], got {flip_probability}")
        self.image_size = check_image_size(image_size)
        self.scale = _check_range((min_scale, 1.0), "scale")
        self.ratio = _check_range(ratio, "ratio")
        self.flip_probability = float(flip_probability)
        self.mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None = None, seeds=None) -> torch.Tensor:
        """The augmented batch; draws the crop boxes, then the flips, from `generator`, or each
        image's from its own seed in `seeds` ([`seeded_draws`][rambo.retrieval.batch_transforms.seeded_draws])."""
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"need uint8 images [B, 3, H, W], got {images.dtype} {tuple(images.shape)}")
        count, _, height, width = images.shape
        draws = None
        if seeds is not None:
            if len(seeds) != count:
                raise ValueError(f"need one seed per image, got {len(seeds)} seeds for {count} images")
            draws = seeded_draws(seeds, DRAWS_PER_IMAGE)
        boxes = random_resized_crop_boxes(
            count, height, width, self.scale, self.ratio, generator, None if draws is None else draws[:, :DRAWS_PER_BOX]
        )
        crops = resized_crops(images.float().div_(255), boxes, self.image_size)
        flip_draw = torch.rand(count, generator=generator) if draws is None else draws[:, DRAWS_PER_BOX]
        flipped = flip_draw < self.flip_probability
        crops = torch.where(flipped.view(-1, 1, 1, 1), crops.flip(-1), crops)
        return (crops - self.mean) / self.std

    def collate(self, items: list) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`(images, labels, indices)` of a list of `(uint8 image, label, index)` items, the
        images augmented: from torch's global generator (one draw per batch, in the loading
        process), or, for `(uint8 image, label, index, seed)` items
        ([`sample_seeds.SeededSamples`][rambo.retrieval.sample_seeds.SeededSamples]), each image from its own seed."""
        if items and len(items[0]) == 4:
            images, labels, indices = default_collate([item[:3] for item in items])
            return self(images, seeds=[item[3] for item in items]), labels, indices
        images, labels, indices = default_collate(items)
        return self(images), labels, indices
