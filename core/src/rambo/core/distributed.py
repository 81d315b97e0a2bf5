"""Several processes (torchrun / DDP, SLURM tasks): the losses rank the *global* batch.

A rank loss is not a sum over the batch: each item's rank depends on every other item. A process
that ranks only its own share of a batch computes another loss than one process would on the whole
batch, so several GPUs would change the loss, not only the speed. Under an initialised process group
(`torch.distributed`), [`global_batch`][rambo.core.distributed.global_batch] gathers every process's share *with
gradient*, in rank order, so every process sees the batch one process would see (the score memory then holds the
same global batches, in the same order, on every process).

Why the gradient reaching the local share is multiplied by the world size: every process computes
the same loss on the same global batch, and autograd reaches only its own share; DDP then *averages*
the parameter gradients over the processes, while the global gradient is their *sum*. With the
factor, a DDP model's parameter gradient is exactly the one-process gradient. The loss value is not
scaled: the blackbox rank (paper Alg. 1) perturbs the scores by `lam * dL/drank`, so a factor on the
loss would change lambda, not only the gradient's size ([`rambo.core.scale_gradient`][rambo.core.scale_gradient]).

Without an initialised process group (or with one process) everything here returns its input.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .gradient_scale import scale_gradient


def world_size() -> int:
    """The number of processes of the initialised default process group; 1 without one."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


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
    """`[n_r, ...]` on each process r -> `[n_0 + ... + n_{W-1}, ...]`, in rank order and identical on
    every process; the local rows are `tensor` itself, so gradients flow back to this process's part
    (`all_gather` returns detached copies). `n_r` may differ between processes, zero included: the
    shapes are gathered first (one host read), each share is padded to the largest, gathered, and cut
    back. The trailing dimensions and the dtype must agree; a `ValueError` names every process's
    shape and dtype otherwise (raised on every process alike, so none is left waiting in a collective).
    Returns `tensor` itself in a single process.
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


def global_batch(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each `[n_r, ...]` tensor of this process -> the global batch's `[n_0 + ... + n_{W-1}, ...]`,
    in rank order and identical on every process ([`gather_with_grad`][rambo.core.distributed.gather_with_grad]; shares
    may be uneven). The gradient reaching this process's floating tensors is multiplied by the world size (module
    docstring), so DDP's average of the parameter gradients is the one-process gradient. A collective:
    every process must call it at every step, with the same number of tensors. In a single process,
    the tensors themselves."""
    processes = world_size()
    if processes == 1:
        return tensors
    return tuple(gather_with_grad(scale_gradient(t, float(processes)) if t.requires_grad else t) for t in tensors)
