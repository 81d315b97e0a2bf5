import contextlib
import dataclasses

import pytest
import torch
from omegaconf import OmegaConf

from rambo.harness.engine_options import EngineOptions


def config(precision="float32", channels_last=False, progress=True):
    return OmegaConf.create({"precision": precision, "channels_last": channels_last, "progress": progress})


def test_the_options_are_frozen_and_an_epoch_gets_a_labelled_copy():
    options = EngineOptions(device="cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.description = "epoch 1/2"
    epoch = options.for_epoch(3, 10)
    assert epoch.description == "epoch 3/10" and options.description == ""
    assert dataclasses.replace(epoch, description="") == options  # nothing else changed
    assert (options.autocast, options.channels_last, options.show_progress) == (contextlib.nullcontext, False, False)


def test_a_float32_config_gives_a_null_forward_context_and_its_flags():
    device = torch.device("cpu")
    options = EngineOptions.from_config(config(channels_last=True), device)
    assert options.device == device and options.autocast is contextlib.nullcontext
    assert options.channels_last is True and options.show_progress is True and options.description == ""


def test_a_bfloat16_config_autocasts_on_the_device_and_only_the_main_process_shows_progress():
    options = EngineOptions.from_config(config("bfloat16"), "cpu", is_main=False)
    with options.autocast():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")
    assert options.show_progress is False and options.channels_last is False
    assert EngineOptions.from_config(config(progress=False), "cpu").show_progress is False
    with pytest.raises(ValueError, match="precision must be one of"):
        EngineOptions.from_config(config("fp16"), "cpu")
