"""Base class of the losses called as ``loss(scores: [Q, N], relevant: [Q, N])``."""

from __future__ import annotations

import torch

from .margin import shift_by_margin
from .item_ranking import rank_items
from .ranking import ranks_within_relevant_items
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


def ranks_of_relevant_items(
    scores: torch.Tensor, relevant: torch.Tensor, margin: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the RaMBO losses need, for the P relevant items in ``relevant.nonzero()`` order.

    Returns ``(rows [P], rank_alpha(y) [P] differentiable by Alg. 1, rank_alpha(y+) [P])``: the row of
    each relevant item, its rank among all items of its row after the margin shift (Eq. 14-15), and
    its rank among the relevant items of its row (a constant for the backward pass, as in the
    authors' implementation). One sort of the scores in the forward pass, everything else
    O(N + P log N) (:func:`.item_ranking.rank_items`: the backward re-ranks only the moved items).
    """
    relevant_index = relevant.nonzero(as_tuple=True)
    shifted = shift_by_margin(scores, relevant, margin, relevant_index)
    ranks, integer_ranks = rank_items(shifted, relevant_index, lam)
    rows = relevant_index[0]
    ranks_relevant = ranks_within_relevant_items(rows, integer_ranks, scores.shape[0])
    return rows, ranks, ranks_relevant.to(ranks.dtype)
