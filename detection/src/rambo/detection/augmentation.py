"""Training augmentation: the random horizontal flip of the VOC detection recipes (probability 0.5)."""

from __future__ import annotations

import torch


def horizontal_flip(image: torch.Tensor, target: dict) -> tuple[torch.Tensor, dict]:
    """Mirror `image [3, H, W]` and its `boxes [K, 4]` (corners): `x1' = W - x2`, `x2' = W - x1`."""
    width = image.shape[-1]
    boxes = target["boxes"].clone()
    boxes[:, [0, 2]] = width - target["boxes"][:, [2, 0]]
    return image.flip(-1), {**target, "boxes": boxes}


def random_flips(images, targets, generator: torch.Generator, probability: float = 0.5):
    """Flip each image of a batch with `probability`; draws one number per image from `generator`."""
    flipped_images, flipped_targets = [], []
    for image, target in zip(images, targets):
        if float(torch.rand((), generator=generator)) < probability:
            image, target = horizontal_flip(image, target)
        flipped_images.append(image)
        flipped_targets.append(target)
    return flipped_images, flipped_targets
