"""Where and how a run computes: device, seed, CPU threads."""

from __future__ import annotations

import random

import numpy as np
import torch


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``"auto"``: CUDA when available, else the CPU. A CUDA device without an index gets
    ``local_rank`` (one GPU per process under torchrun / SLURM)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    return device


def seed_everything(seed: int) -> None:
    """Seed python's ``random``, numpy's global generator and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def set_threads(threads: int | None) -> None:
    """Use ``threads`` CPU threads for torch's intra-op work; 0 or ``None`` keeps torch's default."""
    if threads:
        torch.set_num_threads(int(threads))
