"""Mini-batch estimates of mAP (paper Sec. 4.2, Fig. 2), with and without score memory (Sec. 4.3).

Rows are classes (the queries of Eq. 6), columns the dataset's items. A mini-batch estimate is the
mAP of the batch's columns; with score memory the batch's columns are ranked together with the
columns of the previous `tau` batches, through [`rambo.core.ScoreMemory`][rambo.core.ScoreMemory], the same wrapper
training uses. Batches are drawn as in training: consecutive slices of a fresh random permutation of
the items each epoch (the last incomplete slice is dropped).
"""

from __future__ import annotations

import torch

from rambo.core import ScoreMemory
from rambo.core.metrics import average_precision


def synthetic_class_scores(items: int, classes: int, signal: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy class evidence: `scores[c, i] = signal * [label_i = c] + N(0, 1)`.

    Returns `scores: [classes, items]` float64 and `relevant: [classes, items]` bool.
    """
    if items < 1 or classes < 1:
        raise ValueError(f"items and classes must be >= 1, got items={items}, classes={classes}")
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(classes, (items,), generator=generator)
    relevant = torch.arange(classes).unsqueeze(1) == labels.unsqueeze(0)
    scores = signal * relevant.double() + torch.randn(classes, items, generator=generator, dtype=torch.float64)
    return scores, relevant


class MeanAveragePrecision(torch.nn.Module):
    """`mAP` of `scores: [classes, items]` (Eq. 6) as a 0-d tensor, so that ScoreMemory can wrap it."""

    def forward(self, scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        return torch.tensor(average_precision(scores, relevant), dtype=torch.float64)


def batch_stream(items: int, batch_size: int, generator: torch.Generator):
    """Endless column indices of mini-batches: consecutive slices of a new permutation each epoch."""
    if not 1 <= batch_size <= items:
        raise ValueError(f"batch_size must be in [1, items={items}], got {batch_size}")
    while True:
        permutation = torch.randperm(items, generator=generator)
        for start in range(0, items - batch_size + 1, batch_size):
            yield permutation[start : start + batch_size]


def minibatch_map_estimates(
    scores: torch.Tensor, relevant: torch.Tensor, batch_size: int, batches: int, tau: int = 0, seed: int = 0
) -> torch.Tensor:
    """`[batches]` mAP estimates of successive mini-batches; with `tau > 0` after the memory has filled.

    Classes without a positive in the ranked columns are left out of a batch's mean (AP is undefined
    for them); a batch where no class has one gives `nan` and is dropped.
    """
    memory = ScoreMemory(MeanAveragePrecision(), tau).train()
    stream = batch_stream(scores.shape[1], batch_size, torch.Generator().manual_seed(seed))
    for _ in range(tau):  # fill the memory first: every estimate then ranks (tau + 1) batches
        columns = next(stream)
        memory(scores[:, columns], relevant[:, columns])
    estimates = torch.stack([memory(scores[:, c], relevant[:, c]) for c in (next(stream) for _ in range(batches))])
    return estimates[~estimates.isnan()]
