"""The RoI classifier's rank loss over several processes (torchrun / DDP, SLURM tasks; the set-up is
:mod:`rambo.harness.distributed`): every process ranks the *global* batch, as the paper's one GPU
ranks its batch of 8 images (Sec. 5.2), so several GPUs change the speed, not the loss.

Each process holds the RoIs of its own images (``ShardedBatchSampler(even=False)`` hands out
contiguous slices of every global batch, so the numbers of images and of RoIs may differ). Their
logits and labels are gathered with gradient in rank order (:func:`rambo.core.distributed.gather_with_grad`),
which is the order one process sees the same global batch in; the loss, its score memory included,
then sees on every process what a single process would see, and every memory holds global batches.

Why the local logits' gradient is scaled by the world size: every process computes the same loss
on the same global batch, but autograd reaches only its own logits; DDP then *averages* the
parameter gradients over the processes, while the global gradient is their *sum*. So the gradient
leaving the local logits is multiplied by ``world_size`` (:func:`rambo.core.scale_gradient`). The
loss value is not scaled: the blackbox rank (paper Alg. 1) perturbs the scores by ``lam * dL/drank``,
so a factor on the loss would change lambda, not only the gradient's size.
"""

from __future__ import annotations

import torch

from rambo.core.distributed import global_batch as gathered


def global_batch(class_logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's ``class_logits [n_r, C+1]`` and ``labels [n_r]`` -> the global batch's
    ``[sum n_r, C+1]`` and ``[sum n_r]`` in rank order, the same on every process; the gradient
    reaching the local logits is multiplied by the world size (module docstring). In a single
    process, the two tensors themselves. Every process must call it at every step (a collective).
    The gather is the library's (:func:`rambo.core.distributed.global_batch`), as the retrieval losses'."""
    return gathered(class_logits, labels)
