"""Training checkpoints, written atomically (temporary file + ``os.replace``), with everything a
resumed run needs to continue exactly: model, optimizer, scheduler, loss memory, epoch (the
samplers are a function of seed and epoch) and the random number generator states."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch


def rng_states() -> dict:
    """The states of every random number generator a training step draws from."""
    states = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def save_checkpoint(state: dict, path: str | Path) -> None:
    """``torch.save`` to ``path.tmp`` then rename: a kill mid-write leaves the previous file intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    # weights_only=False: the checkpoint holds RNG states (numpy, python) besides tensors; only
    # load checkpoints this project wrote.
    return torch.load(path, map_location="cpu", weights_only=False)
