"""Two-pass chunked backward (Recall@k surrogate paper, Patel et al. 2022): the batch size of a
rank loss no longer bounds memory, only the chunk size does.

Pass 1 embeds the batch chunk by chunk without a graph; the loss over the whole (global) batch
gives `d loss / d embeddings`; pass 2 re-embeds each chunk with a graph and back-propagates its
slice of that gradient. By the chain rule the parameter gradients are those of one forward over
the whole batch. Both passes see the same input: the augmented images are the `images` tensor
itself (augmentation happens once, in the data loader), and the random number generator state is
replayed per chunk for any stochastic layer. BatchNorm in training mode normalises per chunk in
both passes (identical statistics); its running statistics are restored after pass 1, so they are
updated once per chunk, by pass 2.
"""

from __future__ import annotations

import contextlib

import torch


def _batchnorm_buffers(model: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [
        (buffer, buffer.detach().clone())
        for module in model.modules()
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.training
        for buffer in module.buffers()
    ]


def two_pass_backward(
    model: torch.nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    loss_fn,
    chunk_size: int,
    autocast=contextlib.nullcontext,
) -> torch.Tensor:
    """Accumulate the gradients of `loss_fn(model(images), labels)` into the parameters.

    `images: [B, ...]`, `labels: [B]`; `loss_fn(embeddings [B', D], labels [B'])` is called
    once; under several processes it ranks the batch gathered over them itself
    ([`rambo.core.distributed`][rambo.core.distributed]), and the gradient that reaches this process's embeddings is its
    share's. Returns the loss value (detached). Under DDP, gradients are synchronised on the last chunk only.
    `autocast`: the factory of the forward passes' context
    ([`rambo.harness.precision.autocast`][rambo.harness.precision.autocast]); the embeddings reach the loss in float32,
    outside it.
    """
    if int(chunk_size) != chunk_size or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}")
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"shape mismatch: {images.shape[0]} images vs {labels.shape[0]} labels")
    chunks = torch.split(torch.arange(images.shape[0]), int(chunk_size))
    devices = [images.device.index] if images.is_cuda else []

    saved_buffers = _batchnorm_buffers(model)
    rng_before_chunk = []
    with torch.no_grad(), autocast():
        parts = []
        for chunk in chunks:
            rng_before_chunk.append((torch.get_rng_state(), torch.cuda.get_rng_state_all() if devices else None))
            parts.append(model(images[chunk]))
    for buffer, saved in saved_buffers:
        buffer.copy_(saved)

    embeddings = torch.cat(parts).float().requires_grad_(True)
    value = loss_fn(embeddings, labels)
    value.backward()
    gradient = embeddings.grad
    # Pass 2 replays pass 1's random draws; afterwards the generator continues from here, so the
    # draws of the loss (e.g. SiMix) are not replayed by the next batch.
    rng_after_loss = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if devices else None)

    for i, chunk in enumerate(chunks):
        cpu_state, cuda_state = rng_before_chunk[i]
        torch.set_rng_state(cpu_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state_all(cuda_state)
        last = i == len(chunks) - 1
        context = model.no_sync() if hasattr(model, "no_sync") and not last else torch.enable_grad()
        with context:
            with autocast():
                output = model(images[chunk])
            output.float().backward(gradient[chunk])
    torch.set_rng_state(rng_after_loss[0])
    if rng_after_loss[1] is not None:
        torch.cuda.set_rng_state_all(rng_after_loss[1])
    return value.detach()
