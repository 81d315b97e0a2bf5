"""Image transforms: the paper's training augmentation (random resized crop + flip) and the
evaluation transform (resize + centre crop), at any image size (224 px paper, 32 px mini)."""

from __future__ import annotations

from torchvision import transforms

# ImageNet statistics: the pretrained ResNet-50 expects inputs normalised by them.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _check_size(image_size: int) -> int:
    if int(image_size) != image_size or image_size < 8:
        raise ValueError(f"image_size must be an integer >= 8, got {image_size}")
    return int(image_size)


def train_transform(image_size: int, min_scale: float = 0.16) -> transforms.Compose:
    """PIL image -> ``[3, image_size, image_size]`` float tensor, randomly cropped and flipped."""
    size = _check_size(image_size)
    return transforms.Compose([
        transforms.RandomResizedCrop(size, scale=(min_scale, 1.0)),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])  # fmt: skip


def eval_transform(image_size: int) -> transforms.Compose:
    """PIL image -> ``[3, image_size, image_size]``: resize to 256/224 of the size, centre crop."""
    size = _check_size(image_size)
    return transforms.Compose([
        transforms.Resize(round(size * 256 / 224)),
        transforms.CenterCrop(size),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])  # fmt: skip
