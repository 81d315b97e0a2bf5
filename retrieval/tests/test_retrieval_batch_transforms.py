"""The batched training augmentation (``rambo.retrieval.batch_transforms``): crop boxes drawn as
torchvision's ``RandomResizedCrop`` draws them, resampling, per-sample flips, determinism."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torchvision import transforms

from rambo.retrieval.batch_transforms import BatchTrainAugmentation, random_resized_crop_boxes, resized_crops
from rambo.retrieval.transforms import CROP_RATIO, IMAGENET_MEAN, IMAGENET_STD, MIN_SCALE


def normalised(images: torch.Tensor) -> torch.Tensor:
    """``uint8`` images as the augmentation normalises them (ToTensor + ImageNet statistics)."""
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return (images.float() / 255 - mean) / std


def random_images(count: int, height: int = 32, width: int = 32, seed: int = 0) -> torch.Tensor:
    """``count`` random ``uint8 [3, height, width]`` images."""
    return torch.randint(
        0, 256, (count, 3, height, width), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize(("height", "width"), [(32, 32), (16, 16), (24, 40), (50, 20)])
def test_boxes_lie_inside_the_image_within_the_scale_and_ratio_ranges(height, width):
    """Every box is inside the image, and its integer sides are the rounding of sides whose area
    fraction is in ``scale`` and whose ratio is in ``ratio`` (so within half a pixel of them)."""
    boxes = random_resized_crop_boxes(5000, height, width, generator=torch.Generator().manual_seed(0))
    assert boxes.shape == (5000, 4) and boxes.dtype == torch.int64
    top, left, crop_height, crop_width = boxes.double().unbind(1)
    assert bool((top >= 0).all() and (left >= 0).all() and (crop_height >= 1).all() and (crop_width >= 1).all())
    assert bool((top + crop_height <= height).all() and (left + crop_width <= width).all())
    area = height * width
    assert bool(((crop_height + 0.5) * (crop_width + 0.5) >= MIN_SCALE * area).all())
    assert bool(((crop_height - 0.5) * (crop_width - 0.5) <= area).all())
    assert bool(((crop_width + 0.5) / (crop_height - 0.5) >= CROP_RATIO[0]).all())
    assert bool(((crop_width - 0.5) / (crop_height + 0.5) <= CROP_RATIO[1]).all())
    # the offsets reach both ends of their range
    assert int(top.min()) == 0 and int((top + crop_height).max()) == height


def test_boxes_follow_the_distribution_of_torchvision_random_resized_crop():
    """Mean and spread of each box coordinate, and quantiles of the area fraction, match
    ``RandomResizedCrop.get_params`` on a non-square image (sampling error only)."""
    image = torch.zeros(3, 32, 40)
    torch.manual_seed(0)
    reference = torch.tensor(
        [transforms.RandomResizedCrop.get_params(image, (MIN_SCALE, 1.0), CROP_RATIO) for _ in range(20000)]
    ).double()
    ours = random_resized_crop_boxes(20000, 32, 40, generator=torch.Generator().manual_seed(1)).double()
    torch.testing.assert_close(ours.mean(0), reference.mean(0), atol=0.15, rtol=0)
    torch.testing.assert_close(ours.std(0), reference.std(0), atol=0.15, rtol=0)
    levels = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    fraction = lambda boxes: boxes[:, 2] * boxes[:, 3] / (32 * 40)  # noqa: E731
    quantiles = torch.quantile(fraction(ours), levels)
    torch.testing.assert_close(quantiles, torch.quantile(fraction(reference), levels), atol=0.01, rtol=0)


def test_box_falls_back_to_the_central_crop_of_the_nearest_ratio_when_no_attempt_fits():
    """A ratio range a square image cannot hold at full scale: torchvision's fallback, the central
    crop of the whole width at the nearest allowed ratio."""
    boxes = random_resized_crop_boxes(4, 20, 20, scale=(1.0, 1.0), ratio=(2.0, 2.0))
    assert boxes.tolist() == [[5, 0, 10, 20]] * 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scale": (0.5, 0.2)}, "scale"),
        ({"scale": (0.2, 1.5)}, "at most 1"),
        ({"ratio": (0.0, 1.0)}, "ratio"),
    ],
)
def test_boxes_reject_bad_ranges(kwargs, message):
    """Empty, non-positive or out-of-range scale and ratio ranges are refused."""
    with pytest.raises(ValueError, match=message):
        random_resized_crop_boxes(1, 8, 8, **kwargs)


def test_resized_crops_are_bilinear_resizes_of_the_crops_away_from_their_border():
    """Inside the crop, ``roi_align`` gives ``interpolate(crop, bilinear)``; in the outer ring of
    output pixels it reads the image beyond the crop, where the crop-then-resize clamps."""
    images = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    boxes = torch.tensor([[3, 5, 12, 20], [10, 0, 22, 16], [0, 16, 16, 16]])
    crops = resized_crops(images, boxes, 32)
    assert crops.shape == (3, 3, 32, 32)
    for image, (top, left, height, width), crop in zip(images, boxes.tolist(), crops):
        reference = F.interpolate(
            image[None, :, top : top + height, left : left + width], size=(32, 32), mode="bilinear"
        )[0]
        torch.testing.assert_close(crop[:, 2:-2, 2:-2], reference[:, 2:-2, 2:-2], atol=1e-6, rtol=0)
    whole = resized_crops(images, torch.tensor([[0, 0, 32, 32]] * 3), 32)
    torch.testing.assert_close(whole, images, atol=1e-6, rtol=0)  # the full image at its own size is unchanged


def test_augmentation_returns_normalised_float_images_of_the_output_size():
    """``uint8 [B, 3, H, W]`` -> ``float32 [B, 3, size, size]`` with values in the normalised range."""
    images = random_images(10, 24, 40)
    out = BatchTrainAugmentation(16)(images, torch.Generator().manual_seed(0))
    assert out.shape == (10, 3, 16, 16) and out.dtype == torch.float32
    extremes = torch.tensor([0, 255], dtype=torch.uint8).expand(1, 3, 1, 2)
    low, high = normalised(extremes).split(1, dim=-1)  # [1, 3, 1, 1] each
    assert bool((out >= low - 1e-5).all() and (out <= high + 1e-5).all())


def test_augmentation_rejects_images_that_are_not_uint8_rgb_batches():
    """Float images, single images and grey batches are refused."""
    augment = BatchTrainAugmentation(16)
    wrong = (
        torch.zeros(2, 3, 16, 16),
        torch.zeros(3, 16, 16, dtype=torch.uint8),
        torch.zeros(2, 1, 16, 16, dtype=torch.uint8),
    )
    for images in wrong:
        with pytest.raises(ValueError, match="uint8 images"):
            augment(images)
    with pytest.raises(ValueError, match="flip_probability"):
        BatchTrainAugmentation(16, flip_probability=1.5)


def test_flip_is_drawn_per_sample():
    """With the crop fixed to the whole image, each output is its image or its mirror image, both
    occur within one batch, and the flip probability's extremes flip none or all of them."""
    images = random_images(64)
    whole_image = {"min_scale": 1.0, "ratio": (1.0, 1.0)}
    expected, mirrored = normalised(images), normalised(images).flip(-1)
    out = BatchTrainAugmentation(32, **whole_image)(images, torch.Generator().manual_seed(0))
    is_plain = (out - expected).abs().amax(dim=(1, 2, 3)) < 1e-5
    is_mirrored = (out - mirrored).abs().amax(dim=(1, 2, 3)) < 1e-5
    assert bool((is_plain ^ is_mirrored).all())
    assert 10 < int(is_mirrored.sum()) < 54
    for probability, reference in ((0.0, expected), (1.0, mirrored)):
        out = BatchTrainAugmentation(32, flip_probability=probability, **whole_image)(images)
        torch.testing.assert_close(out, reference, atol=1e-5, rtol=0)


def test_same_generator_seed_same_batch_other_seed_other_batch():
    """The output depends only on the images and the generator's state; without a generator it
    comes from torch's global generator, so ``torch.manual_seed`` (and a checkpoint's RNG state)
    reproduces it."""
    images = random_images(16)
    augment = BatchTrainAugmentation(32)
    first = augment(images, torch.Generator().manual_seed(3))
    torch.testing.assert_close(augment(images, torch.Generator().manual_seed(3)), first, atol=0, rtol=0)
    assert not torch.equal(augment(images, torch.Generator().manual_seed(4)), first)
    torch.manual_seed(5)
    global_first = augment(images)
    torch.manual_seed(5)
    torch.testing.assert_close(augment(images), global_first, atol=0, rtol=0)


def test_collate_stacks_items_and_augments_the_images():
    """As a ``DataLoader`` ``collate_fn``: ``(image, label, index)`` items -> augmented images, labels, indices."""
    images = random_images(6, 20, 20)
    items = [(image, label, index) for index, (image, label) in enumerate(zip(images, [0, 0, 1, 1, 2, 2]))]
    torch.manual_seed(0)
    batch, labels, indices = BatchTrainAugmentation(16).collate(items)
    torch.manual_seed(0)
    torch.testing.assert_close(batch, BatchTrainAugmentation(16)(images), atol=0, rtol=0)
    assert labels.tolist() == [0, 0, 1, 1, 2, 2] and indices.tolist() == list(range(6))


def test_mean_crop_area_fraction_is_that_of_the_scale_range():
    """The area fraction is uniform in ``scale`` before rounding and rejection: on a large image
    (few rejections, small rounding) its mean is near the middle of the range."""
    generator = torch.Generator().manual_seed(0)
    boxes = random_resized_crop_boxes(20000, 400, 400, scale=(0.2, 0.6), ratio=(1.0, 1.0), generator=generator)
    fraction = (boxes[:, 2] * boxes[:, 3]).double() / 400**2
    assert math.isclose(float(fraction.mean()), 0.4, abs_tol=0.005)
