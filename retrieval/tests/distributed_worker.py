"""Run by test_retrieval_distributed.py under torchrun (2 CPU processes, gloo); not a test module.

Each process embeds its half of one global batch; the loss is computed on the gathered global
batch. Writes ``OUT/rank{r}.pt`` with the loss and DDP's synchronised parameter gradients, for
a plain backward and for the two-pass backward.
"""

import sys

import torch

from rambo.core import EmbeddingMemory, RecallLoss
from rambo.harness.distributed import detect_setup, init_process_group
from rambo.retrieval.model import EmbeddingNet
from rambo.retrieval.two_pass import two_pass_backward


def make_model():
    torch.manual_seed(0)
    return EmbeddingNet("small_convnet", embedding_dim=8, pretrained=False, width=4, freeze_batchnorm=True)


def global_batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(16, 3, 16, 16, generator=g), torch.arange(16) % 5


def make_loss():
    return EmbeddingMemory(RecallLoss(margin=0.02, lam=4.0), tau=3)


def main(out):
    torch.set_num_threads(1)
    setup = detect_setup()
    init_process_group(setup, backend="gloo")
    images, labels = global_batch()
    share = len(labels) // setup.world_size
    mine = slice(setup.rank * share, (setup.rank + 1) * share)
    result = {"setup": (setup.rank, setup.world_size, setup.source)}
    for mode in ("plain", "two_pass"):
        model = torch.nn.parallel.DistributedDataParallel(make_model())
        if mode == "plain":
            value = make_loss()(model(images[mine]), labels[mine])  # the loss gathers the global batch
            value.backward()
        else:
            value = two_pass_backward(model, images[mine], labels[mine], make_loss(), chunk_size=3)
        result[mode] = {
            "loss": float(value.detach()),
            "grads": {n: p.grad.clone() for n, p in model.module.named_parameters() if p.grad is not None},
        }
    torch.save(result, f"{out}/rank{setup.rank}.pt")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
