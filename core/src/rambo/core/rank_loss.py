"""Base class of the losses called as ``loss(scores: [Q, N], relevant: [Q, N])``."""

from __future__ import annotations

import torch

from .validation import check_scores_and_relevance


class RankLoss(torch.nn.Module):
    """Owns the plumbing: input checks and the mean over rows (queries) that have a relevant item.

    Subclasses implement :meth:`row_losses`, returning one loss per row; rows without a relevant
    item may return anything finite, they are left out of the mean (they carry no ranking signal,
    and counting them would reward empty rows). If no row has a relevant item the loss is 0 and
    every gradient is 0.

    ``ranked_dim`` is the dimension a score memory extends (:class:`rambo.core.ScoreMemory`).
    """

    ranked_dim: int = -1

    def forward(self, scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        check_scores_and_relevance(scores, relevant)
        has_relevant = relevant.any(dim=-1)
        if not bool(has_relevant.any()):
            return scores.sum() * 0.0
        row_losses = self.row_losses(scores, relevant)
        return row_losses[has_relevant].mean()

    def row_losses(self, scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        """``scores: [Q, N]``, ``relevant: [Q, N]`` bool -> ``[Q]`` losses."""
        raise NotImplementedError
