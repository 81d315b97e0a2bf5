"""Training checkpoints: written atomically, restoring every random number generator, and loaded
with `weights_only=True` (a checkpoint is data, never code, whoever wrote it).

A checkpoint is a dict of tensors, numbers, strings, lists and dicts. The random states are kept in
those types too: python's `random` state (ints), numpy's legacy global state (its key as an int64
tensor), torch's CPU generator and the generator of every CUDA device.

While it trains, a run keeps the checkpoint of the epoch before the last beside it
([`previous_path`][rambo.harness.checkpoint.previous_path], `checkpoint.prev.pt`): a checkpoint found damaged (cut
short, overwritten) is set aside under `resume=auto` and the run continues from that one
([`resume`][rambo.harness.resume]). It doubles the disk a training run's checkpoints take; a finished run removes it,
and its own checkpoint holds no optimiser or scheduler state
([`rambo.harness.run.TrainingRun`][rambo.harness.run.TrainingRun]).

A file set aside ([`set_aside`][rambo.harness.checkpoint.set_aside]: a damaged checkpoint, another run's) gets a name of
its own, never one a file already has: nothing set aside earlier is overwritten.
"""

from __future__ import annotations

import itertools
import os
import pickle
import random
from pathlib import Path

import numpy as np
import torch

from .atomic import atomic_path, save_torch
from .config_check import InputError

#: What to do about a damaged checkpoint, for a message that names no better step.
NEXT_STEP = (
    "a training run with resume=auto sets it aside and continues from the checkpoint of the epoch before "
    "(or from the start); to use it elsewhere, train it again"
)


class DamagedCheckpoint(ValueError):
    """A checkpoint file that cannot be read back (cut short, overwritten, or not a checkpoint).

    `path` is the file, `reason` what reading it said (one line); the message adds `next_step`."""

    def __init__(self, path: str | Path, reason: str, next_step: str = NEXT_STEP):
        self.path, self.reason = Path(path), reason
        super().__init__(f"{path} is a damaged checkpoint ({reason}); {next_step}")


class NotACheckpoint(DamagedCheckpoint):
    """A file that loads but holds no checkpoint dict (a tensor, a list: `torch.save` of something else)."""


def _first_line(error: BaseException) -> str:
    """An error as one short line: its type and the first sentence of its message."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = text.split(". ")[0].rstrip(".")
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class DeviceCountMismatch(InputError, ValueError):
    """A checkpoint's CUDA generator states are for another number of devices than this machine has."""


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
    """Restore [`rng_states`][rambo.harness.checkpoint.rng_states]. CUDA states are restored when this machine has CUDA
    (a checkpoint written on a GPU resumes on a CPU with the CPU generators restored)."""
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
            raise DeviceCountMismatch(
                f"checkpoint holds {len(cuda)} CUDA generator states, this machine has "
                f"{torch.cuda.device_count()} devices: resume on as many devices"
            )
        torch.cuda.set_rng_state_all(cuda)


def previous_path(path: str | Path) -> Path:
    """Where the checkpoint of the epoch before `path`'s is kept: `checkpoint.prev.pt` beside
    `checkpoint.pt`."""
    path = Path(path)
    return path.with_name(f"{path.stem}.prev{path.suffix}")


def keep_as_previous(path: str | Path) -> None:
    """Make the checkpoint at `path` the previous one ([`previous_path`][rambo.harness.checkpoint.previous_path]) before
    a new one replaces it: a hard link (no copy, no extra disk until the new one is written), else a copy;
    either appears whole or not at all. Without a checkpoint at `path` (a run's first epoch), an
    earlier run's previous checkpoint is removed, so the previous one is always this run's."""
    path, previous = Path(path), previous_path(path)
    if not path.is_file():
        previous.unlink(missing_ok=True)
        return
    with atomic_path(previous) as temporary:
        temporary.unlink()
        try:
            os.link(path, temporary)
        except OSError:  # a file system without hard links
            with open(path, "rb") as source, open(temporary, "wb") as target:
                while block := source.read(1 << 20):
                    target.write(block)


def save_checkpoint(state: dict, path: str | Path) -> Path:
    """`torch.save` atomically: a kill mid-write leaves the previous checkpoint intact."""
    return save_torch(state, path)


def load_checkpoint(path: str | Path, next_step: str = NEXT_STEP) -> dict:
    """Load a checkpoint onto the CPU with `weights_only=True`.

    Raises `FileNotFoundError` when there is none (`PermissionError` when it cannot be opened),
    and [`DamagedCheckpoint`][rambo.harness.checkpoint.DamagedCheckpoint] naming the file and `next_step` when it cannot
    be read as a checkpoint of this project (cut short, overwritten, another format, or pickled objects beyond data).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    with open(path, "rb") as handle:  # an unreadable file is the file system's error, not damage
        try:
            state = torch.load(handle, map_location="cpu", weights_only=True)
        except MemoryError:
            raise
        except Exception as error:  # noqa: BLE001 (a damaged file fails in many ways: zip, pickle, I/O)
            reason = "it is empty" if path.stat().st_size == 0 else _first_line(error)
            if isinstance(error, pickle.UnpicklingError) and "Weights only load failed" in str(error):
                reason = "not a checkpoint this project can load safely: it is no torch archive of tensors and data"
            raise DamagedCheckpoint(path, reason, next_step) from error
    if not isinstance(state, dict):
        raise NotACheckpoint(path, f"it holds a {type(state).__name__}, not a checkpoint dict", next_step)
    return state


def set_aside(path: str | Path, label: str) -> Path:
    """Rename the file `path` to `<name>.<label>`, or to `<name>.<label>.1`, `.2`, ... when
    that name is taken, and return where it went. It never replaces a file: each name is taken in
    one step that fails when the name exists (a hard link, then the old name removed; on a file
    system without hard links, an exclusive create of the name, then a rename onto it), so two set
    asides at once, or one beside files set aside before, each keep their file."""
    path = Path(path)
    for number in itertools.count():
        aside = path.with_name(f"{path.name}.{label}" + (f".{number}" if number else ""))
        try:
            os.link(path, aside, follow_symlinks=False)
        except FileExistsError:
            continue
        except FileNotFoundError:
            raise
        except OSError:  # no hard links here: reserve the name, then rename onto the reservation
            try:
                os.close(os.open(aside, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            except FileExistsError:
                continue
            try:
                os.replace(path, aside)
            except BaseException:
                aside.unlink(missing_ok=True)
                raise
            return aside
        os.unlink(path)
        return aside
    raise AssertionError("unreachable")  # pragma: no cover
