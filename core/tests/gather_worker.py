"""Run by test_harness_gather.py under torchrun (2 CPU processes, gloo); not a test module.

Each process holds its own rows of a fixed global tensor (another number of rows on each, zero on
one); it gathers them with :func:`rambo.core.distributed.gather_with_grad`, backpropagates a
fixed weighting of the gathered tensor, and writes ``OUT/rank{r}.pt`` with what it gathered and the
gradient its own rows received, for each split, and the message of the refused gathers.
"""

import sys

import torch
import torch.distributed as dist

from rambo.core.distributed import gather_with_grad

SPLITS = [(3, 5), (0, 4), (6, 0), (0, 0)]  # rows on rank 0, rank 1


def global_rows(split, dtype=torch.float64):
    """The global tensor of a split, ``[sum(split), 2, 3]``, and the weights of the backpropagated sum."""
    g = torch.Generator().manual_seed(sum(split) + 10 * split[0])
    return torch.randn(sum(split), 2, 3, generator=g, dtype=dtype), torch.randn(
        sum(split), 2, 3, generator=g, dtype=dtype
    )


def main(out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result = {"splits": []}
    for split in SPLITS:
        rows, weights = global_rows(split)
        start = sum(split[:rank])
        mine = rows[start : start + split[rank]].clone().requires_grad_()
        gathered = gather_with_grad(mine)
        (gathered * weights).sum().backward()
        labels = torch.arange(sum(split))[start : start + split[rank]]
        result["splits"].append({"gathered": gathered.detach(), "grad": mine.grad, "labels": gather_with_grad(labels)})
    refused = []
    for mine in (
        torch.zeros(2, 3 + rank),
        torch.zeros(2, 3, dtype=torch.float64 if rank else torch.float32),
        torch.zeros(()) if rank else torch.zeros(1),
    ):
        try:
            gather_with_grad(mine)
            refused.append(None)
        except ValueError as error:
            refused.append(str(error))
    result["refused"] = refused
    result["still_in_step"] = gather_with_grad(torch.tensor([rank])).tolist()  # no process was left behind
    torch.save(result, f"{out}/rank{rank}.pt")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
