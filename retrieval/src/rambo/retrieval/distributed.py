"""Retrieval over several processes (torchrun / DDP or SLURM; the set-up is :mod:`rambo.harness.distributed`):
embeddings are gathered across processes *with gradients*, so ranks are computed over the global batch.

Why the local embeddings' gradient is scaled by the world size: every process computes the same
loss on the same global batch, but autograd reaches only its own (local) embeddings; DDP then
*averages* the parameter gradients over processes, while the global gradient is their *sum*. So
the gradient reaching the local embeddings is multiplied by ``world_size``. The loss itself is
not scaled: a blackbox-differentiated rank (paper Alg. 1) is not linear in its incoming gradient
(it perturbs the scores by ``lam * dL/drank``), so ``world_size * loss`` would change the gradient.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from rambo.core import scale_gradient
from rambo.harness.distributed import world_size


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


def global_batch_loss(loss_fn, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss over the global batch; its ``backward()`` under DDP gives every process the
    global gradient (see the module docstring). Identical to ``loss_fn(embeddings, labels)`` in
    a single process."""
    if world_size() > 1:
        embeddings = scale_gradient(embeddings, float(world_size()))
    return loss_fn(*gather_batch(embeddings, labels))
