"""Atomic training checkpoints: everything a resumed run needs to reach the same weights.

Saved each epoch: model (the score memory of the rank loss is part of its state dict), optimizer,
learning-rate scheduler, the epoch, and the global torch RNG state (the RPN and RoI samplers draw
from it). The data order and flips are functions of seed and epoch, so they need no state.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch


def save_checkpoint(state: dict, path: str | Path) -> None:
    """Write to a temporary file in the same folder, then ``os.replace``: a crash leaves the old file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        torch.save(state, temporary)
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)


def load_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    # weights_only=False because the score memory's extra state is a python dict of tensors and the
    # RNG state a ByteTensor inside it; load only checkpoints this project wrote.
    return torch.load(path, map_location="cpu", weights_only=False)
