"""The options both apps' engines share (`train_one_epoch` and `evaluate` of
[`rambo.retrieval.engine`][rambo.retrieval.engine] and [`rambo.detection.engine`][rambo.detection.engine]): where the
network runs and how (device, autocast, memory format), and what a run shows while it trains (progress bar, its label).

Each app's `train.py` builds one [`EngineOptions`][rambo.harness.engine_options.EngineOptions] from its config
([`EngineOptions.from_config`][rambo.harness.engine_options.EngineOptions.from_config]) and passes it by keyword; a
user's own loop builds its own (`EngineOptions(device="cuda")`). An epoch's label is
[`EngineOptions.for_epoch`][rambo.harness.engine_options.EngineOptions.for_epoch].
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

import torch

from .precision import autocast as autocast_of


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """The cross-cutting options of both apps' engines (frozen: a changed copy is
    `dataclasses.replace`, e.g. [`for_epoch`][rambo.harness.engine_options.EngineOptions.for_epoch]).

    Attributes:
        device: where the batches are moved and the losses computed (`torch.device` or its name);
            the model's device is the caller's. On the CPU the engines read every step's loss,
            on a GPU they sum the losses on the device ([`rambo.harness.loss_sums`][rambo.harness.loss_sums]).
        autocast: the factory of the context each forward pass runs under, called once per
            forward ([`rambo.harness.precision.autocast`][rambo.harness.precision.autocast]; `contextlib.nullcontext`:
            float32). The losses are computed in float32 outside it.
        channels_last: the 4-D image batches in channels-last memory format (retrieval; the
            detector's images are 3-D, batched inside the model, so there only the model is
            converted, by the caller:
            [`rambo.harness.precision.to_channels_last`][rambo.harness.precision.to_channels_last]).
        show_progress: a progress bar over the batches (on a terminal only,
            [`rambo.harness.run_log.progress`][rambo.harness.run_log.progress]).
        description: the label of the progress bar and of a non-finite loss's error
            (`"epoch 3/10"`, [`for_epoch`][rambo.harness.engine_options.EngineOptions.for_epoch]).
    """

    device: torch.device | str
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    channels_last: bool = False
    show_progress: bool = False
    description: str = ""

    @classmethod
    def from_config(cls, cfg, device, is_main: bool = True) -> EngineOptions:
        """The options of an app's config (the keys `precision`, `channels_last` and `progress`
        of both apps) on `device` (resolved:
        [`rambo.harness.runtime.resolve_device`][rambo.harness.runtime.resolve_device]); a progress bar only in the main
        process (`is_main`)."""
        return cls(
            device=device,
            autocast=autocast_of(cfg.precision, device),
            channels_last=bool(cfg.channels_last),
            show_progress=bool(is_main and cfg.progress),
        )

    def for_epoch(self, epoch: int, epochs: int) -> EngineOptions:
        """These options labelled `"epoch {epoch}/{epochs}"`."""
        return dataclasses.replace(self, description=f"epoch {epoch}/{epochs}")
