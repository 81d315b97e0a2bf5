"""Several processes for one run (torchrun / DDP, or SLURM tasks): who this process is, joining the
process group, each process's share of the global batch, and the gather with gradient that puts
the shares back together (:func:`gather_with_grad`).

What a loss does with the gathered batch (retrieval ranks gathered embeddings, detection gathered
RoI logits, each scaling its local gradient by the world size) belongs to the app.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistributedSetup:
    """Where this process sits. ``source`` is "torchrun", "slurm" or "single"."""

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
    """torchrun variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), then SLURM
    (``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``), then a single process."""
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        return DistributedSetup(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)), "torchrun")
    if "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) > 1:
        return DistributedSetup(
            int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0)), "slurm"
        )
    return DistributedSetup()


def init_process_group(setup: DistributedSetup, backend: str | None = None) -> None:
    """Join the process group (no-op for a single process). Under SLURM, ``MASTER_ADDR`` must be
    set (e.g. ``export MASTER_ADDR=$(scontrol show hostnames $SLURM_NODELIST | head -1)``) unless
    all tasks share one node; ``MASTER_PORT`` defaults to ``20000 + SLURM_JOB_ID mod 20000`` (the same in
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
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def barrier() -> None:
    """Wait for every process (no-op for a single process)."""
    if world_size() > 1:
        dist.barrier()


def wrap_model(model: torch.nn.Module, device: torch.device, **options) -> torch.nn.Module:
    """``DistributedDataParallel(model)`` when several processes run, else ``model`` itself."""
    if world_size() == 1:
        return model
    device_ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids, **options)


class ShardedBatchSampler(torch.utils.data.Sampler):
    """Each process takes its contiguous slice of every global batch of ``batch_sampler``, so the
    union of the processes' batches is the batch a single process would have drawn (same order).

    ``even=True`` (retrieval, whose gathered embeddings need equal shares) refuses a global batch
    that does not split evenly; ``even=False`` gives the first processes one item more.
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


MAX_GATHERED_DIMS = 8  # the shape descriptor that gather_with_grad exchanges has room for this many dimensions
# dtypes named by their position here in that descriptor (a Python hash of the name differs between processes)
GATHERED_DTYPES = (
    torch.float64,
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
)


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """``[n_r, ...]`` on each process r -> ``[n_0 + ... + n_{W-1}, ...]``, in rank order and identical on
    every process; the local rows are ``tensor`` itself, so gradients flow back to this process's part
    (``all_gather`` returns detached copies). ``n_r`` may differ between processes, zero included: the
    shapes are gathered first (one host read), each share is padded to the largest, gathered, and cut
    back. The trailing dimensions and the dtype must agree; a ``ValueError`` names every process's
    shape and dtype otherwise (raised on every process alike, so none is left waiting in a collective).
    Returns ``tensor`` itself in a single process.
    """
    if world_size() == 1:
        return tensor
    if tensor.dim() > MAX_GATHERED_DIMS:
        raise ValueError(f"gather_with_grad takes at most {MAX_GATHERED_DIMS} dimensions, got {tuple(tensor.shape)}")
    processes, rank = dist.get_world_size(), dist.get_rank()
    dtype = GATHERED_DTYPES.index(tensor.dtype) if tensor.dtype in GATHERED_DTYPES else -1
    padding = [-1] * (MAX_GATHERED_DIMS - tensor.dim())
    descriptor = torch.tensor([dtype, tensor.dim(), *tensor.shape, *padding], device=tensor.device)
    descriptors = [torch.empty_like(descriptor) for _ in range(processes)]
    dist.all_gather(descriptors, descriptor)
    rows = torch.stack(descriptors).cpu().tolist()
    shapes = [tuple(row[2 : 2 + row[1]]) for row in rows]
    dtypes = [str(GATHERED_DTYPES[row[0]]) if row[0] >= 0 else "another dtype" for row in rows]
    same_dtype = len(set(dtypes)) == 1 and "another dtype" not in dtypes
    if any(not shape or shape[1:] != shapes[0][1:] for shape in shapes) or not same_dtype:
        raise ValueError(
            f"gather_with_grad needs at least one dimension, the same trailing dimensions and the same dtype "
            f"(one of {', '.join(str(d) for d in GATHERED_DTYPES)}) on every process; "
            f"got shapes {shapes} and dtypes {dtypes} (by rank)"
        )
    sizes = [shape[0] for shape in shapes]
    padded = tensor.detach().new_zeros((max(sizes), *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor.detach()
    parts = [torch.empty_like(padded) for _ in range(processes)]
    dist.all_gather(parts, padded)
    parts = [part[:size] for part, size in zip(parts, sizes)]
    parts[rank] = tensor
    return torch.cat(parts)
