"""Base class of the comparison surrogates, which also accept a `valid` mask of items per row."""

from __future__ import annotations

import torch

from .rank_loss import RankLoss
from .validation import check_relevance, check_scores_and_relevance


class SurrogateLoss(RankLoss):
    """`loss(scores [Q, N], relevant [Q, N] bool, valid [Q, N] bool | None)`.

    `valid` marks the items that take part in each row's ranking (default: all). SiMix uses it
    to keep a query, and the mixed items made from it, out of the query's own ranking.
    """

    def forward(self, scores: torch.Tensor, relevant: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        check_scores_and_relevance(scores, relevant, loss=type(self).__name__)
        if valid is None:
            valid = torch.ones_like(relevant)
        check_relevance(scores, valid, name="valid")
        relevant = relevant & valid
        has_relevant = relevant.any(dim=-1)
        if not bool(has_relevant.any()):
            return scores.sum() * 0.0
        return self.row_losses(scores, relevant, valid)[has_relevant].mean()

    def row_losses(self, scores: torch.Tensor, relevant: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
