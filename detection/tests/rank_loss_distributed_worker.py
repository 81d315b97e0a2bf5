"""Run by test_detection_rank_loss_distributed.py under torchrun (2 CPU processes, gloo); not a test module.

Over the steps of ``SPLITS`` each process takes its contiguous rows of a fixed global batch of RoIs
(another number on each process, none on one of them at one step) and computes the RaMBO
classifier loss on them, in float64:

* ``leaf``: the local logits are leaves; their gradient is written as it arrives (global batch).
* ``ddp``: the logits come from a DDP-wrapped linear layer; DDP's averaged parameter gradients.
* ``local``: ``global_batch=False``, each process's own RoIs and memory (the steps without an
  empty share, since a loss needs RoIs to rank).

Writes ``OUT/rank{r}.pt``: per mode and step the loss, the gradients and the score memory.
"""

import sys

import torch

from rambo.detection.rank_classifier_loss import RankClassifierLoss
from rambo.harness.distributed import detect_setup, init_process_group

NUM_CLASSES = 3  # C object classes; logits [N, C + 1], background 0 (torchvision)
FEATURES = 5
SPLITS = [(7, 5), (4, 8), (6, 0), (3, 9), (5, 5)]  # RoIs on rank 0, rank 1 at each step
TAU = 2  # the memory fills, then drops its oldest batch


def make_loss(global_batch=True):
    return RankClassifierLoss(NUM_CLASSES, background_label=0, margin=0.15, lam=0.5, tau=TAU, global_batch=global_batch)


def make_model():
    torch.manual_seed(0)
    return torch.nn.Linear(FEATURES, NUM_CLASSES + 1, dtype=torch.float64)


def global_step(step):
    """The global batch of ``step``: ``(logits [N, C+1], labels [N], features [N, FEATURES])``, float64.
    Scores close together (x 0.002), so the blackbox perturbation moves ranks (non-zero gradients)."""
    g = torch.Generator().manual_seed(100 + step)
    n = sum(SPLITS[step])
    logits = 0.002 * torch.randn(n, NUM_CLASSES + 1, generator=g, dtype=torch.float64)
    labels = torch.randint(0, NUM_CLASSES + 1, (n,), generator=g)
    labels[: NUM_CLASSES + 1] = torch.arange(NUM_CLASSES + 1)  # every class and background present
    order = torch.randperm(n, generator=g)
    return logits, labels[order], 0.005 * torch.randn(n, FEATURES, generator=g, dtype=torch.float64)


def rows(step, rank):
    """This rank's contiguous slice of the global batch of ``step`` (as ShardedBatchSampler hands out images)."""
    start = sum(SPLITS[step][:rank])
    return slice(start, start + SPLITS[step][rank])


def memory(loss):
    return [(scores.clone(), relevant.clone()) for scores, relevant in loss.map_memory.remembered()]


def main(out):
    torch.set_num_threads(1)
    setup = detect_setup()
    init_process_group(setup, backend="gloo")
    result = {"setup": (setup.rank, setup.world_size), "leaf": [], "ddp": [], "local": []}
    leaf_loss, ddp_loss, local_loss = make_loss(), make_loss(), make_loss(global_batch=False)
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    for step in range(len(SPLITS)):
        logits, labels, features = global_step(step)
        mine = rows(step, setup.rank)

        local_logits = logits[mine].clone().requires_grad_()
        value = leaf_loss(local_logits, labels[mine])
        value.backward()
        result["leaf"].append({"loss": value.detach(), "grad": local_logits.grad, "memory": memory(leaf_loss)})

        model.zero_grad(set_to_none=True)
        value = ddp_loss(model(features[mine]), labels[mine])
        value.backward()
        grads = {name: p.grad.clone() for name, p in model.module.named_parameters()}
        result["ddp"].append({"loss": value.detach(), "grads": grads, "memory": memory(ddp_loss)})

        if 0 in SPLITS[step]:
            continue
        local_logits = logits[mine].clone().requires_grad_()
        value = local_loss(local_logits, labels[mine])
        value.backward()
        result["local"].append(
            {"step": step, "loss": value.detach(), "grad": local_logits.grad, "memory": memory(local_loss)}
        )
    torch.save(result, f"{out}/rank{setup.rank}.pt")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
