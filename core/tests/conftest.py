"""Shared test setup. ``RAMBO_TEST_DEVICE=cuda`` runs the whole core suite on that device
(as pytorch-metric-learning's TEST_DEVICE): it becomes torch's default device before any test
module is imported, so parametrised inputs are created there too. ``make gpu-check`` uses it."""

import os
import sys
from pathlib import Path

import pytest
import torch

# Tests import the brute-force definitions from core_brute_force.py beside this file.
sys.path.insert(0, str(Path(__file__).parent))

TEST_DEVICE = torch.device(os.environ.get("RAMBO_TEST_DEVICE", "cpu"))
if TEST_DEVICE.type == "cuda" and not torch.cuda.is_available():
    raise pytest.UsageError(f"RAMBO_TEST_DEVICE={TEST_DEVICE} but torch sees no CUDA device")
if TEST_DEVICE.type != "cpu":  # on the CPU, no device context (it would wrap every torch call)
    torch.set_default_device(TEST_DEVICE)


def pytest_report_header(config):
    return f"rambo core tests on device: {TEST_DEVICE}"


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    torch.set_num_threads(1)
