"""Losses summed on their device and read once (rambo.harness.loss_sums)."""

import pytest
import torch

from rambo.core.host_syncs import count_host_syncs
from rambo.harness.loss_sums import DeviceLossSums, reads_every_step


def test_the_sums_are_read_once_and_equal_the_per_step_means():
    steps = [{"a": torch.tensor(0.1 * i), "b": torch.tensor(1.0 + i, dtype=torch.float64)} for i in range(5)]
    sums = DeviceLossSums()
    syncs, _ = count_host_syncs(lambda: [sums.add(step) for step in steps])
    assert syncs == 0  # adding never reads on the host
    means = sums.means("epoch 1")
    assert means["a"] == pytest.approx(sum(float(s["a"]) for s in steps) / 5, rel=1e-7)
    assert means["b"] == pytest.approx(3.0) and sums.steps == 5
    assert DeviceLossSums().means() == {}


def test_a_non_finite_step_is_named_when_the_sums_are_read():
    sums = DeviceLossSums()
    sums.add({"loss": torch.tensor(1.0)})
    sums.add({"loss": torch.tensor(float("nan"))})
    with pytest.raises(FloatingPointError, match="non-finite loss in epoch 3 .*read once per epoch"):
        sums.means("epoch 3")


def test_only_the_cpu_reads_every_step():
    assert reads_every_step("cpu") and reads_every_step(torch.device("cpu"))
    assert not reads_every_step("cuda") and not reads_every_step(torch.device("meta"))
