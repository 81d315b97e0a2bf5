"""Training checkpoints: written atomically, restoring every random number generator, and loaded
with ``weights_only=True`` (a checkpoint is data, never code, whoever wrote it).

A checkpoint is a dict of tensors, numbers, strings, lists and dicts. The random states are kept in
those types too: python's ``random`` state (ints), numpy's legacy global state (its key as an int64
tensor), torch's CPU generator and the generator of every CUDA device.
"""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import numpy as np
import torch

from .atomic import save_torch


def rng_states() -> dict:
    """The states of every random number generator a training step may draw from."""
    version, internal, gauss = random.getstate()
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    states = {
        "python": {"version": version, "state": list(internal), "gauss": gauss},
        "numpy": {
            "name": str(name),
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    """Restore :func:`rng_states`. CUDA states are restored when this machine has CUDA (a
    checkpoint written on a GPU resumes on a CPU with the CPU generators restored)."""
    python = states["python"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss"]))
    numpy = states["numpy"]
    np.random.set_state(
        (
            numpy["name"],
            numpy["keys"].numpy().astype(np.uint32),
            numpy["position"],
            numpy["has_gauss"],
            numpy["cached_gaussian"],
        )
    )
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        cuda = list(states["cuda"])
        if len(cuda) != torch.cuda.device_count():
            raise ValueError(
                f"checkpoint holds {len(cuda)} CUDA generator states, this machine has "
                f"{torch.cuda.device_count()} devices: resume on as many devices"
            )
        torch.cuda.set_rng_state_all(cuda)


def save_checkpoint(state: dict, path: str | Path) -> Path:
    """``torch.save`` atomically: a kill mid-write leaves the previous checkpoint intact."""
    return save_torch(state, path)


def load_checkpoint(path: str | Path) -> dict:
    """Load a checkpoint onto the CPU with ``weights_only=True``.

    Raises ``FileNotFoundError`` when there is none, and ``ValueError`` naming the file when it is
    not a checkpoint of this project (truncated, another format, or pickled objects beyond data).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        raise ValueError(f"{path} is not a checkpoint this project can load safely: {error}") from error
    if not isinstance(state, dict):
        raise ValueError(f"{path} holds a {type(state).__name__}, not a checkpoint dict")
    return state
