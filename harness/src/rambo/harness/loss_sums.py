"""Training losses summed where they are computed, read on the host once.

Reading a loss on the host every step (`float(loss)`, `loss.item()`, `if not isfinite(loss)`)
makes the host wait for the GPU to finish that step before it can queue the next one. On a GPU
both training engines add each step's losses into [`DeviceLossSums`][rambo.harness.loss_sums.DeviceLossSums] instead and
read the means once per epoch: a non-finite loss is then found at the end of the epoch (the run stops and
keeps the checkpoint of the epoch before,
[`rambo.harness.run.TrainingRun.diverged`][rambo.harness.run.TrainingRun.diverged]). On the CPU a read costs nothing,
and the engines keep checking every step, before the optimiser's step.
"""

from __future__ import annotations

import math

import torch


def reads_every_step(device) -> bool:
    """True where reading a loss on the host every step is free (the CPU)."""
    return torch.device(device).type == "cpu"


class DeviceLossSums:
    """`add({name: loss})` per step (no host read); [`means`][rambo.harness.loss_sums.DeviceLossSums.means] reads them
    all at once."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor] = {}
        self.steps = 0

    def add(self, losses: dict[str, torch.Tensor]) -> None:
        for name, value in losses.items():
            value = value.detach().to(torch.float64)
            self.sums[name] = value if name not in self.sums else self.sums[name] + value
        self.steps += 1

    def means(self, where: str = "") -> dict[str, float]:
        """`{name: mean over the steps}` (one transfer to the host); `FloatingPointError` naming
        `where` and the terms when one is not finite."""
        if not self.sums:
            return {}
        names = list(self.sums)
        values = torch.stack([self.sums[name] for name in names]).cpu().tolist()
        means = {name: value / self.steps for name, value in zip(names, values)}
        if not all(math.isfinite(value) for value in means.values()):
            raise FloatingPointError(f"non-finite loss in {where} (summed on the device, read once per epoch): {means}")
        return means
