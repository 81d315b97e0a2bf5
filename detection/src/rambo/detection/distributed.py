"""The RoI classifier's rank loss over several processes (torchrun / DDP, SLURM tasks; the set-up is
[`rambo.harness.distributed`][rambo.harness.distributed]): every process ranks the *global* batch, as the paper's one
GPU ranks its batch of 8 images (Sec. 5.2), so several GPUs change the speed, not the loss.

Each process holds the RoIs of its own images (`ShardedBatchSampler(even=False)` hands out
contiguous slices of every global batch, so the numbers of images and of RoIs may differ). Their
logits and labels are gathered with gradient in rank order
([`rambo.core.distributed.gather_with_grad`][rambo.core.distributed.gather_with_grad]), which is the order one process
sees the same global batch in; the loss, its score memory included, then sees on every process what a single process
would see, and every memory holds global batches.

Why the local logits' gradient is scaled by the world size: every process computes the same loss
on the same global batch, but autograd reaches only its own logits; DDP then *averages* the
parameter gradients over the processes, while the global gradient is their *sum*. So the gradient
leaving the local logits is multiplied by `world_size` ([`rambo.core.scale_gradient`][rambo.core.scale_gradient]). The
loss value is not scaled: the blackbox rank (paper Alg. 1) perturbs the scores by `lam * dL/drank`,
so a factor on the loss would change lambda, not only the gradient's size.

The other losses (the RPN's objectness and box regression, the RoI box regression, cross-entropy)
are means over items: anchors or RoIs. Under DDP each process would take the mean of its own items
and DDP would average those, which is not the global batch's mean when the processes hold different
numbers of items. [`global_mean`][rambo.detection.distributed.global_mean] makes each of them the mean over every
process's items: the value is the global sum over the global count, the same on every process, and the gradient reaching
this process's sum is `world_size / global count`, so DDP's average of the parameter gradients is
the one-process gradient. In a single process the losses take their own path, unchanged.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from rambo.core.distributed import global_batch as gathered
from rambo.core.distributed import world_size


def global_batch(class_logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's `class_logits [n_r, C+1]` and `labels [n_r]` -> the global batch's
    `[sum n_r, C+1]` and `[sum n_r]` in rank order, the same on every process; the gradient
    reaching the local logits is multiplied by the world size (module docstring). In a single
    process, the two tensors themselves. Every process must call it at every step (a collective).
    The gather is the library's ([`rambo.core.distributed.global_batch`][rambo.core.distributed.global_batch]), as the
    retrieval losses'."""
    return gathered(class_logits, labels)


def global_mean(
    sums: tuple[torch.Tensor, ...], count: int | torch.Tensor, at_least_one: bool = False
) -> tuple[torch.Tensor, ...]:
    """This process's `sums` (scalars: each loss summed over its items, with gradient) and the
    number of those items, `count` -> each loss's mean over the items of every process: its sum
    over the processes divided by `count` summed over the processes, the same value on every
    process. The gradient reaching each local sum is `world_size / global count` (module
    docstring). `at_least_one`: divide by at least 1 (a global count of 0 gives 0, not NaN). One
    `all_reduce` for all of them, no host read; a collective: every process must call it at every
    step, with the same number of sums. In a single process, `sum / count` (or `max(count, 1)`)."""
    dtype = torch.float32  # at least: a count in bfloat16 would round
    for value in sums:
        dtype = torch.promote_types(dtype, value.dtype)
    device = sums[0].device
    local_count = (
        count.to(device, dtype)
        if isinstance(count, torch.Tensor)
        else torch.tensor(float(count), device=device, dtype=dtype)
    )
    totals = torch.stack([*(value.detach().to(dtype).reshape(()) for value in sums), local_count.reshape(())])
    processes = world_size()
    if processes > 1:
        dist.all_reduce(totals)
    total_count = totals[-1].clamp(min=1) if at_least_one else totals[-1]
    factor = processes / total_count  # the gradient reaching each local sum
    return tuple(_GlobalMean.apply(value, total / total_count, factor) for value, total in zip(sums, totals[:-1]))


class _GlobalMean(torch.autograd.Function):
    """`(local sum, global mean, factor)` -> the global mean; in backward the incoming gradient
    times `factor` goes to the local sum ([`global_mean`][rambo.detection.distributed.global_mean])."""

    @staticmethod
    def forward(ctx, local_sum: torch.Tensor, mean: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(factor)
        ctx.dtype = local_sum.dtype
        return mean.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (factor,) = ctx.saved_tensors
        return (grad * factor).to(ctx.dtype), None, None
