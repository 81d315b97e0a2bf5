"""Shared fixtures of the detection tests: tiny CPU budgets and VOC-layout folders written on the fly."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _few_threads(monkeypatch):
    torch.set_num_threads(1)  # 2 shared cores: one thread per process avoids oversubscription
    monkeypatch.setenv("WANDB_MODE", "disabled")
