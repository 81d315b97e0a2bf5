import contextlib

import pytest
import torch

from rambo.harness.precision import autocast, autocast_dtype, to_channels_last


@pytest.mark.parametrize("name", ["float16", "bf16", "fp32", None])
def test_an_unknown_precision_names_the_allowed_values(name):
    with pytest.raises(ValueError, match=r"precision must be one of float32, bfloat16; got "):
        autocast_dtype(name)
    with pytest.raises(ValueError, match=r"precision must be one of float32, bfloat16"):
        autocast(name, "cpu")


def test_float32_is_a_null_context_without_autocast():
    assert autocast_dtype("float32") is None
    context = autocast("float32", torch.device("cpu"))()
    assert isinstance(context, contextlib.nullcontext)
    with context:
        assert not torch.is_autocast_enabled("cpu")
        assert torch.nn.Linear(4, 2)(torch.randn(3, 4)).dtype == torch.float32


def test_bfloat16_autocasts_on_the_device_type_once_per_call():
    assert autocast_dtype("bfloat16") is torch.bfloat16
    forward_context = autocast("bfloat16", "cpu")
    layer = torch.nn.Linear(4, 2)
    for _ in range(2):  # a fresh context each call
        with forward_context():
            assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
            assert layer(torch.randn(3, 4)).dtype == torch.bfloat16
        assert not torch.is_autocast_enabled("cpu")


def test_channels_last_moves_conv_weights_and_image_batches_only():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
    assert to_channels_last(model) is model
    weight = model[0].weight
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()
    batch = torch.randn(2, 3, 5, 5)
    moved = to_channels_last(batch)
    assert moved.is_contiguous(memory_format=torch.channels_last) and not moved.is_contiguous()
    assert torch.equal(moved, batch)
    image, labels = torch.randn(3, 5, 5), torch.arange(4)
    assert to_channels_last(image) is image and to_channels_last(labels) is labels
