"""Smooth-AP (Brown et al., ECCV 2020): AP with sigmoid-relaxed ranks, O(n^2) memory."""

from __future__ import annotations

import torch

from .sigmoid_rank import sigmoid_ranks_of_relevant
from .surrogate_loss import SurrogateLoss
from .validation import check_positive


class SmoothAPLoss(SurrogateLoss):
    """`1 - (1/|P|) sum_{i relevant} r~_rel(i) / r~_all(i)` with sigmoid ranks at temperature `tau`.

    Rows are processed in checkpointed chunks (see [`rambo.core.sigmoid_rank`][rambo.core.sigmoid_rank]), so memory is
    O(Q * N), not the O(Q * N * N) of the reference implementation.

    Call: `loss(scores [Q, N] floating, relevant [Q, N] bool, valid [Q, N] bool | None)` -> a
    0-dimensional tensor, the mean over the rows with a relevant valid item; `valid` marks the items
    that take part in each row (default: all). For embeddings and labels:
    `rambo.core.EmbeddingLoss(loss)(embeddings, labels)`.
    """

    def __init__(self, tau: float = 0.01):
        super().__init__()
        self.tau = check_positive(tau, "tau", "the sigmoid's temperature")

    def row_losses(self, scores, relevant, valid):
        rank_all, rank_rel, mask = sigmoid_ranks_of_relevant(scores, relevant, self.tau, valid)
        precision = torch.where(mask, rank_rel / rank_all.clamp(min=1), 0.0)
        return 1.0 - precision.sum(-1) / relevant.sum(-1).clamp(min=1).to(scores.dtype)

    def extra_repr(self) -> str:
        return f"tau={self.tau}"
