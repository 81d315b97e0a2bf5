"""Run by test_core_embedding_loss.py under torchrun (2 CPU processes, gloo); not a test module.

A float64 linear model under DDP embeds this process's share of three global batches of 12
(uneven shares: 7 and 5); each loss is called on the share as a user's script calls it,
``loss(embeddings, labels)``. Writes ``OUT/rank{r}.pt``: per loss and step the loss value, the
gradient reaching the local embeddings, DDP's synchronised parameter gradients, and at the end
the score memory's contents.
"""

import sys

import torch
import torch.distributed as dist

SHARES = (7, 5)  # rows of each global batch of 12 held by rank 0 and rank 1
STEPS = 3


def batches():
    """The three global batches: inputs [12, 6] float64 and labels [12] (4 classes, 3 each)."""
    g = torch.Generator().manual_seed(3)
    out = []
    for _ in range(STEPS):
        labels = torch.arange(12) % 4
        out.append((torch.randn(12, 6, generator=g, dtype=torch.float64), labels[torch.randperm(12, generator=g)]))
    return out


def make_model():
    torch.manual_seed(0)
    return torch.nn.Linear(6, 4).double()


def make_losses(global_batch=True):
    from rambo.core import APLoss, EmbeddingLoss, RecallAtKSurrogate, RecallLoss

    return {
        "recall_memory": EmbeddingLoss(RecallLoss(margin=0.05, lam=4.0), tau=2, global_batch=global_batch),
        "ap_memory": EmbeddingLoss(APLoss(margin=0.05, lam=0.5), tau=2, global_batch=global_batch),
        "recall_at_k": EmbeddingLoss(RecallAtKSurrogate(ks=(1, 2, 4)), global_batch=global_batch),
    }


def run(model, loss, rows=slice(None)):
    """The steps of one loss; rows: this process's share of each global batch."""
    record = []
    for inputs, labels in batches():
        model.zero_grad(set_to_none=True)
        embeddings = model(inputs[rows])
        embeddings.retain_grad()
        value = loss(embeddings, labels[rows])
        value.backward()
        parameters = model.module if hasattr(model, "module") else model
        record.append(
            {
                "loss": value.detach(),
                "embedding_grad": embeddings.grad.clone(),
                "parameter_grads": {n: p.grad.clone() for n, p in parameters.named_parameters()},
            }
        )
    held = loss.held()
    return {"steps": record, "memory": None if held is None else (held[0].clone(), held[1].clone())}


def main(out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    start = sum(SHARES[:rank])
    mine = slice(start, start + SHARES[rank])
    result = {"rank": rank, "world_size": dist.get_world_size(), "global": {}, "per_process": {}}
    for name, loss in make_losses().items():
        result["global"][name] = run(torch.nn.parallel.DistributedDataParallel(make_model()), loss, mine)
    for name, loss in make_losses(global_batch=False).items():
        result["per_process"][name] = run(make_model(), loss, mine)  # no DDP: this process's own gradient
    torch.save(result, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
