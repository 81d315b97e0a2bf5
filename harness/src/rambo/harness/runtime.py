"""Where and how a run computes: device, seed, CPU threads and the numerics mode."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from . import numerics
from .config_check import InputError


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """`"auto"`: CUDA when available, else the CPU. A CUDA device without an index gets
    `local_rank` (one GPU per process under torchrun / SLURM)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    return device


def seed_everything(seed: int) -> None:
    """Seed python's `random`, numpy's global generator and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def set_threads(threads: int | None, env: dict | None = None, device=None) -> dict:
    """Use `threads` CPU threads and start the run in its numerics mode ([`numerics`][rambo.harness.numerics]);
    returns the mode's facts for the run's provenance. 0 or `None`: the CPUs SLURM gave the job's
    task (`SLURM_CPUS_PER_TASK`) inside a SLURM job; else, in the portable mode, 1 thread (a
    result must not depend on the machine's core count), in the native mode torch's default.
    (torch's default counts every core of the node, where SLURM may not bind a task to its CPUs: a
    job of 8 CPUs would run as many threads as the node has cores, beside the other jobs on it.)
    A portable mode asked for and not in force is an [`InputError`][rambo.harness.config_check.InputError] naming what
    is missing."""
    env = os.environ if env is None else env
    if not threads and env.get("SLURM_CPUS_PER_TASK", "").isdigit():
        threads = int(env["SLURM_CPUS_PER_TASK"])
    try:
        return numerics.require(threads, device)
    except numerics.NumericsError as error:
        raise InputError(str(error)) from None
