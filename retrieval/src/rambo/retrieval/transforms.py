"""Image transforms: the training augmentation and the evaluation transform, at any image size
(224 px paper, 32 px mini), each in two kinds (the `augmentation` keys of the training config):

* training: `square_resize_random_crop` (the paper's words, Sec. 5.1: every image resized to
  256x256, a random 224 crop and a flip), `shorter_side_resize_random_resized_crop` (the code
  the paper's numbers came from, kunhe/Deep-Metric-Learning-Baselines `--resize256`: the
  shorter side to 256, aspect kept, then a random resized crop and a flip; the paper profile's
  RaMBO rows) or `random_resized_crop` (area fraction `min_scale`..1, aspect 3/4..4/3, and a
  flip: the Recall@k surrogate's official code, and the mini profile);
* evaluation: `square_resize_center_crop` (the paper: 256x256, the centre 224) or
  `shorter_side_resize_center_crop` (the shorter side to 256, aspect kept: the Recall@k code).

256 is `round(image_size * 256 / 224)` at other sizes.

These work on one PIL image at a time (the real datasets' images differ in size);
[`batch_transforms`][rambo.retrieval.batch_transforms] is the same training augmentation on a batch of same-size images.
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
    """`image_size` as an `int`; a `ValueError` unless it is an integer >= 8."""
    if int(image_size) != image_size or image_size < 8:
        raise ValueError(f"image_size must be an integer >= 8, got {image_size}")
    return int(image_size)


TRAIN_KINDS = ("square_resize_random_crop", "shorter_side_resize_random_resized_crop", "random_resized_crop")
EVAL_KINDS = ("square_resize_center_crop", "shorter_side_resize_center_crop")
EVAL_DEFAULT = "shorter_side_resize_center_crop"  # what a run saved before the `augmentation` keys used


def _resized(size: int) -> int:
    return round(size * 256 / 224)


def _check_kind(kind: str, kinds: tuple[str, ...], name: str) -> str:
    if kind not in kinds:
        raise ValueError(f"{name} must be one of {', '.join(kinds)}; got {kind!r}")
    return kind


def train_transform(
    image_size: int, min_scale: float = MIN_SCALE, kind: str = "random_resized_crop"
) -> transforms.Compose:
    """PIL image -> `[3, image_size, image_size]` float tensor, randomly cropped and flipped."""
    size = check_image_size(image_size)
    kind = _check_kind(kind, TRAIN_KINDS, "augmentation.train")
    if kind == "square_resize_random_crop":
        crop = [transforms.Resize((_resized(size), _resized(size))), transforms.RandomCrop(size)]
    else:
        crop = [transforms.RandomResizedCrop(size, scale=(min_scale, 1.0), ratio=CROP_RATIO)]
        if kind == "shorter_side_resize_random_resized_crop":
            crop.insert(0, transforms.Resize(_resized(size)))
    return transforms.Compose(
        [
            *crop,
            transforms.RandomHorizontalFlip(FLIP_PROBABILITY),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )


def eval_transform(image_size: int, kind: str = EVAL_DEFAULT) -> transforms.Compose:
    """PIL image -> `[3, image_size, image_size]`: resize (to a 256/224 square, or the shorter
    side to 256/224 of the size), centre crop."""
    size = check_image_size(image_size)
    square = _check_kind(kind, EVAL_KINDS, "augmentation.eval") == "square_resize_center_crop"
    return transforms.Compose(
        [
            transforms.Resize((_resized(size), _resized(size)) if square else _resized(size)),
            transforms.CenterCrop(size),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )


def eval_transform_of(config) -> transforms.Compose:
    """The evaluation transform a training config (a run's saved one included) names."""
    augmentation = config.get("augmentation") or {}
    return eval_transform(config["image_size"], augmentation.get("eval", EVAL_DEFAULT))
