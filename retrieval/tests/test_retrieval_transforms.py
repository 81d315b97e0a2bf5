"""The two kinds of training augmentation and of evaluation transform (``augmentation.*``)."""

import numpy as np
import pytest
import torch
from PIL import Image

from rambo.retrieval.transforms import IMAGENET_MEAN, IMAGENET_STD, eval_transform, eval_transform_of, train_transform


def striped(width: int, height: int) -> Image.Image:
    """Column x is grey level x * 255 / (width - 1): what a resize keeps of the width is visible."""
    row = np.linspace(0, 255, width).round().astype(np.uint8)
    return Image.fromarray(np.repeat(np.tile(row, (height, 1))[..., None], 3, axis=2))


def grey(tensor: torch.Tensor) -> torch.Tensor:
    """Undo the normalisation of channel 0: grey levels in [0, 1]."""
    return tensor[0] * IMAGENET_STD[0] + IMAGENET_MEAN[0]


def test_square_eval_resize_keeps_the_whole_width_and_shorter_side_crops_it():
    """Sec. 5.1: 256x256 (aspect not kept), the centre 224; the other kind keeps the aspect and
    so cuts the sides of a wide image."""
    image = striped(512, 256)
    square = grey(eval_transform(224, "square_resize_center_crop")(image))
    shorter = grey(eval_transform(224, "shorter_side_resize_center_crop")(image))
    assert square.shape == shorter.shape == (224, 224)
    # Square: the centre 224 of 256 columns spans 16/256 .. 240/256 of the width.
    assert square[:, 0].mean() == pytest.approx(16 / 256, abs=0.02) and square[:, -1].mean() == pytest.approx(
        240 / 256, abs=0.02
    )
    # Shorter side to 256 makes the image 512 wide: the centre 224 columns span 144/512 .. 368/512.
    assert shorter[:, 0].mean() == pytest.approx(144 / 512, abs=0.02) and shorter[:, -1].mean() == pytest.approx(
        368 / 512, abs=0.02
    )


def test_square_resize_random_crop_is_a_224_window_of_the_256_square():
    torch.manual_seed(0)
    image = striped(512, 256)
    for _ in range(20):
        crop = grey(train_transform(224, kind="square_resize_random_crop")(image))
        left, right = crop[:, 0].mean().item(), crop[:, -1].mean().item()
        if left > right:  # flipped
            left, right = right, left
        assert right - left == pytest.approx(223 / 255, abs=0.02)  # 224 of 256 columns: no rescaling


def test_shorter_side_resize_random_resized_crop_resizes_before_the_crop():
    """The Baselines fork's ``--resize256``: ``Resize(256)`` (the shorter side, aspect
    kept) then ``RandomResizedCrop(224)``. Against a brute force of the definition: the same
    random state drives torchvision's two steps written out by hand."""
    from torchvision import transforms as T

    image = striped(600, 300)
    for seed in range(5):
        torch.manual_seed(seed)
        ours = train_transform(224, 0.08, kind="shorter_side_resize_random_resized_crop")(image)
        torch.manual_seed(seed)
        resized = image.resize((512, 256), Image.BILINEAR)  # shorter side 300 -> 256, 600 -> 512
        assert T.Resize(256)(image).size == resized.size
        top, left, height, width = T.RandomResizedCrop.get_params(resized, (0.08, 1.0), (3 / 4, 4 / 3))
        crop = T.functional.resized_crop(T.Resize(256)(image), top, left, height, width, [224, 224])
        if torch.rand(1) < 0.5:
            crop = T.functional.hflip(crop)
        expected = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)(T.ToTensor()(crop))
        assert torch.equal(ours, expected)


def test_config_names_the_eval_transform_and_old_runs_keep_theirs():
    image = striped(512, 256)
    new = eval_transform_of({"image_size": 32, "augmentation": {"eval": "square_resize_center_crop"}})(image)
    old = eval_transform_of({"image_size": 32})(image)  # a checkpoint saved before the key existed
    assert torch.equal(new, eval_transform(32, "square_resize_center_crop")(image))
    assert torch.equal(old, eval_transform(32, "shorter_side_resize_center_crop")(image))


def test_unknown_kinds_are_named():
    with pytest.raises(ValueError, match="augmentation.train must be one of"):
        train_transform(224, kind="center")
    with pytest.raises(ValueError, match="augmentation.eval must be one of"):
        eval_transform(224, "crop")
