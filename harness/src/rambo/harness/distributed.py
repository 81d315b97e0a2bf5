"""Several processes for one run (torchrun / DDP, or SLURM tasks): who this process is, joining the
process group and each process's share of the global batch. The gather with gradient that puts the
shares back together is the library's ([`rambo.core.distributed`][rambo.core.distributed]): the losses rank the global
batch themselves.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = [
    "DistributedSetup",
    "ShardedBatchSampler",
    "barrier",
    "detect_setup",
    "gather_to_main",
    "init_process_group",
    "rank",
    "world_size",
    "wrap_model",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistributedSetup:
    """Where this process sits. `source` is "torchrun", "slurm" or "single"."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    source: str = "single"

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def detect_setup(env: dict | None = None) -> DistributedSetup:
    """torchrun variables (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`), then SLURM
    (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`), then a single process."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        return DistributedSetup(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)), "torchrun")
    if "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) > 1:
        return DistributedSetup(
            int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0)), "slurm"
        )
    return DistributedSetup()


def init_process_group(setup: DistributedSetup, backend: str | None = None) -> None:
    """Join the process group (no-op for a single process). Under SLURM, `MASTER_ADDR` must be
    set (e.g. `export MASTER_ADDR=$(scontrol show hostnames $SLURM_NODELIST | head -1)`) unless
    all tasks share one node; `MASTER_PORT` defaults to `20000 + SLURM_JOB_ID mod 20000` (the same in
    every task of a job, another for each job, so two jobs on one node do not take one port). Logs
    which process this is, and where its rank came from."""
    if not setup.is_distributed or dist.is_initialized():
        return
    if setup.source == "slurm":
        if "MASTER_ADDR" not in os.environ:
            if int(os.environ.get("SLURM_NNODES", "1")) > 1:
                raise ValueError("multi-node SLURM job without MASTER_ADDR: export it before launching")
            os.environ["MASTER_ADDR"] = socket.gethostname()
        os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ.get("SLURM_JOB_ID", "9500")) % 20000))
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    dist.init_process_group(backend, rank=setup.rank, world_size=setup.world_size)
    log.info(
        "process %d of %d (rank from %s, local rank %d, %s)",
        setup.rank,
        setup.world_size,
        setup.source,
        setup.local_rank,
        backend,
    )
    if torch.cuda.is_available():
        torch.cuda.set_device(setup.local_rank)


def world_size() -> int:
    """The number of processes of the initialised default process group; 1 without one."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank in the initialised default process group; 0 without one."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def gather_to_main(value) -> list | None:
    """Every process's `value` (picklable), in rank order, on the main process (`None` on the
    others); `[value]` for a single process. Called by every process."""
    if world_size() == 1:
        return [value]
    gathered = [None] * world_size() if rank() == 0 else None
    dist.gather_object(value, gathered, dst=0)
    return gathered


def barrier() -> None:
    """Wait for every process (no-op for a single process)."""
    if world_size() > 1:
        dist.barrier()


def wrap_model(model: torch.nn.Module, device: torch.device, **options) -> torch.nn.Module:
    """`DistributedDataParallel(model)` when several processes run, else `model` itself."""
    if world_size() == 1:
        return model
    device_ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids, **options)


class ShardedBatchSampler(torch.utils.data.Sampler):
    """Each process takes its contiguous slice of every global batch of `batch_sampler`, so the
    union of the processes' batches is the batch a single process would have drawn (same order).

    `even=True` (retrieval, whose gathered embeddings need equal shares) refuses a global batch
    that does not split evenly; `even=False` gives the first processes one item more.
    """

    def __init__(self, batch_sampler, rank: int, world_size: int, even: bool = True):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.batch_sampler, self.rank, self.world_size, self.even = batch_sampler, rank, world_size, even

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self):
        for batch in self.batch_sampler:
            batch = list(batch)
            if self.even and len(batch) % self.world_size:
                raise ValueError(f"global batch of {len(batch)} does not split over {self.world_size} processes")
            if len(batch) < self.world_size:
                raise ValueError(f"global batch of {len(batch)} is smaller than the {self.world_size} processes")
            share, extra = divmod(len(batch), self.world_size)
            start = self.rank * share + min(self.rank, extra)
            yield batch[start : start + share + (self.rank < extra)]
