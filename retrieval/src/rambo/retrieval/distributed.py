"""Several processes (torchrun / DDP or SLURM): one function decides the set-up, and embeddings are
gathered across processes *with gradients*, so ranks are computed over the global batch.

Why the local embeddings' gradient is scaled by the world size: every process computes the same
loss on the same global batch, but autograd reaches only its own (local) embeddings; DDP then
*averages* the parameter gradients over processes, while the global gradient is their *sum*. So
the gradient reaching the local embeddings is multiplied by ``world_size``. The loss itself is
not scaled: a blackbox-differentiated rank (paper Alg. 1) is not linear in its incoming gradient
(it perturbs the scores by ``lam * dL/drank``), so ``world_size * loss`` would change the gradient.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist


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
    all tasks share one node; ``MASTER_PORT`` defaults to 29500."""
    if not setup.is_distributed or dist.is_initialized():
        return
    if setup.source == "slurm":
        if "MASTER_ADDR" not in os.environ:
            if int(os.environ.get("SLURM_NNODES", "1")) > 1:
                raise ValueError("multi-node SLURM job without MASTER_ADDR: export it before launching")
            os.environ["MASTER_ADDR"] = socket.gethostname()
        os.environ.setdefault("MASTER_PORT", "29500")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    dist.init_process_group(backend, rank=setup.rank, world_size=setup.world_size)
    if torch.cuda.is_available():
        torch.cuda.set_device(setup.local_rank)


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """``[b, ...]`` on each of W processes -> ``[W * b, ...]`` in rank order, identical everywhere;
    the local slice is the input tensor itself, so gradients flow back to this process's part.
    (``all_gather`` returns detached copies; putting the local tensor back restores its graph.)"""
    if world_size() == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.detach().contiguous())
    parts[dist.get_rank()] = tensor
    return torch.cat(parts)


def gather_batch(embeddings: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Global ``(embeddings [W*b, D], labels [W*b])``; every process must pass the same ``b``."""
    return gather_with_grad(embeddings), gather_with_grad(labels)


class _ScaleGradient(torch.autograd.Function):
    """Identity forward; multiplies the incoming gradient by ``factor`` in backward."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.factor, None


def global_batch_loss(loss_fn, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss over the global batch; its ``backward()`` under DDP gives every process the
    global gradient (see the module docstring). Identical to ``loss_fn(embeddings, labels)`` in
    a single process."""
    if world_size() > 1:
        embeddings = _ScaleGradient.apply(embeddings, float(world_size()))
    return loss_fn(*gather_batch(embeddings, labels))


class ShardedBatchSampler(torch.utils.data.Sampler):
    """Each process takes its contiguous slice of every global batch of ``batch_sampler``, so the
    gathered global batch is the one a single process would have drawn (same order)."""

    def __init__(self, batch_sampler, rank: int, world_size: int):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.batch_sampler, self.rank, self.world_size = batch_sampler, rank, world_size

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self):
        for batch in self.batch_sampler:
            if len(batch) % self.world_size:
                raise ValueError(f"global batch of {len(batch)} does not split over {self.world_size} processes")
            share = len(batch) // self.world_size
            yield list(batch[self.rank * share : (self.rank + 1) * share])
