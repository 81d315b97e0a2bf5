"""Image transforms: the paper's training augmentation (random resized crop + flip) and the
evaluation transform (resize + centre crop), at any image size (224 px paper, 32 px mini).

These work on one PIL image at a time (the real datasets' images differ in size);
:mod:`.batch_transforms` is the same training augmentation on a batch of same-size images.
"""

from __future__ import annotations

from torchvision import transforms

# ImageNet statistics: the pretrained ResNet-50 expects inputs normalised by them.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# Random resized crop: the crop covers MIN_SCALE..1 of the image area, with a width / height ratio
# in CROP_RATIO (torchvision's default range); the flip mirrors half the images.
MIN_SCALE = 0.16
CROP_RATIO = (3 / 4, 4 / 3)
FLIP_PROBABILITY = 0.5


def check_image_size(image_size: int) -> int:
    """``image_size`` as an ``int``; a ``ValueError`` unless it is an integer >= 8."""
    if int(image_size) != image_size or image_size < 8:
        raise ValueError(f"image_size must be an integer >= 8, got {image_size}")
    return int(image_size)


def train_transform(image_size: int, min_scale: float = MIN_SCALE) -> transforms.Compose:
    """PIL image -> ``[3, image_size, image_size]`` float tensor, randomly cropped and flipped."""
    size = check_image_size(image_size)
    return transforms.Compose([
        transforms.RandomResizedCrop(size, scale=(min_scale, 1.0), ratio=CROP_RATIO),
        transforms.RandomHorizontalFlip(FLIP_PROBABILITY),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])  # fmt: skip


def eval_transform(image_size: int) -> transforms.Compose:
    """PIL image -> ``[3, image_size, image_size]``: resize to 256/224 of the size, centre crop."""
    size = check_image_size(image_size)
    return transforms.Compose([
        transforms.Resize(round(size * 256 / 224)),
        transforms.CenterCrop(size),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])  # fmt: skip
