"""Base class of the losses called as `loss(scores: [Q, N], relevant: [Q, N])`, and the two
formulations of what the RaMBO losses read ([`loss_path`][rambo.core.loss_path]: sparse on the CPU, dense elsewhere)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .item_ranking import rank_items
from .loss_path import propagate_non_finite, raises_on_bad_values, use_dense
from .margin import shift_by_margin
from .ranking import rank_with_integers, ranks_within_relevant_items
from .validation import check_scores_and_relevance, refuse_embedding_call

# term(rank_alpha(y)_i, rank(y+)_i) -> the per-item quantity a loss averages over a row's relevant items
ItemTerm = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class RankLoss(torch.nn.Module):
    """Owns the plumbing: input checks and the mean over rows (queries) that have a relevant item.

    Subclasses implement [`row_losses`][rambo.core.RankLoss.row_losses], returning one loss per row; rows without a
    relevant item may return anything finite, they are left out of the mean (they carry no ranking signal,
    and counting them would reward empty rows). If no row has a relevant item the loss is 0 and
    every gradient is 0.

    `ranked_dim` is the dimension a score memory extends ([`rambo.core.ScoreMemory`][rambo.core.ScoreMemory]).
    """

    ranked_dim: int = -1

    def forward(self, scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        """`scores [Q, N]` floating, `relevant [Q, N]` bool -> the mean of the row losses over the
        rows with a relevant item, a 0-dimensional tensor. For embeddings and labels, wrap the loss in
        [`rambo.core.EmbeddingLoss`][rambo.core.EmbeddingLoss]."""
        refuse_embedding_call(scores, relevant, type(self).__name__)
        return self.mean_over_rows(scores, relevant)

    def mean_over_rows(self, scores: torch.Tensor, relevant: torch.Tensor, **row_options) -> torch.Tensor:
        """The mean of [`row_losses`][rambo.core.RankLoss.row_losses] over the rows with a relevant item (`row_options`
        are passed on, e.g. `rank_scale`). On the dense path without reading anything on the host:
        `where(has, rows, 0).sum() / has.sum().clamp(min=1)`, the same gradient bits as the
        sparse `rows[has].mean()` and the same value up to the order of the summation."""
        dense = use_dense(scores)
        check_values = raises_on_bad_values(dense)
        check_scores_and_relevance(scores, relevant, finite=check_values)
        has_relevant = relevant.any(dim=-1)
        if dense:
            rows = self.row_losses(scores, relevant, **row_options)
            value = torch.where(has_relevant, rows, 0.0).sum() / has_relevant.sum().clamp(min=1)
            return value if check_values else propagate_non_finite(value, scores)
        if not bool(has_relevant.any()):
            return scores.sum() * 0.0
        return self.row_losses(scores, relevant, **row_options)[has_relevant].mean()

    def row_losses(self, scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        """`scores: [Q, N]`, `relevant: [Q, N]` bool -> `[Q]` losses."""
        raise NotImplementedError


def ranks_of_relevant_items(
    scores: torch.Tensor, relevant: torch.Tensor, margin: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the RaMBO losses need, for the P relevant items in `relevant.nonzero()` order.

    Returns `(rows [P], rank_alpha(y) [P] differentiable by Alg. 1, rank_alpha(y+) [P])`: the row of
    each relevant item, its rank among all items of its row after the margin shift (Eq. 14-15), and
    its rank among the relevant items of its row (a constant for the backward pass, as in the
    authors' implementation). One sort of the scores in the forward pass, everything else
    O(N + P log N) ([`item_ranking.rank_items`][rambo.core.rank_items]: the backward re-ranks only the moved items);
    with a few relevant items per row no sort at all ([`counted_ranking`][rambo.core.counted_ranking]: O(N) per item).
    """
    relevant_index = relevant.nonzero(as_tuple=True)
    shifted = shift_by_margin(scores, relevant, margin, relevant_index)
    ranks, integer_ranks = rank_items(shifted, relevant_index, lam)
    rows = relevant_index[0]
    ranks_relevant = ranks_within_relevant_items(rows, integer_ranks, scores.shape[0])
    return rows, ranks, ranks_relevant.to(ranks.dtype)


def dense_ranks_of_relevant_items(
    scores: torch.Tensor, relevant: torch.Tensor, margin: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`ranks_of_relevant_items` for every entry, in fixed shapes and without a host sync.

    Returns `(rank_alpha(y) [Q, N] differentiable by Alg. 1, rank(y+) [Q, N])`; at an irrelevant
    entry the second is the number of relevant items ranked above it (read only through a mask).
    `rank(y+)`: the relevance scattered into rank order, its cumulative sum, gathered back.
    """
    shifted = shift_by_margin(scores, relevant, margin)
    ranks, integer_ranks = rank_with_integers(shifted, lam, validate=False)
    position = integer_ranks.long().sub_(1)
    in_rank_order = torch.zeros_like(relevant).scatter_(-1, position, relevant)  # bool: 1 byte per entry
    ranks_relevant = in_rank_order.cumsum(-1, dtype=integer_ranks.dtype).gather(-1, position)
    return ranks, ranks_relevant.to(ranks.dtype)


def mean_over_relevant_items(
    scores: torch.Tensor, relevant: torch.Tensor, margin: float, lam: float, term: ItemTerm
) -> torch.Tensor:
    """Per row, the mean of `term(rank_alpha(y)_i, rank(y+)_i)` over its relevant items `i`
    (0 for a row without one): `[Q]`. The one place where the sparse and the dense formulation
    ([`loss_path`][rambo.core.loss_path]) differ; a loss defines only its `term`."""
    count = relevant.sum(-1) if use_dense(scores) else None
    if count is not None:
        ranks, ranks_relevant = dense_ranks_of_relevant_items(scores, relevant, margin, lam)
        return torch.where(relevant, term(ranks, ranks_relevant), 0.0).sum(-1) / count.clamp(min=1)
    rows, ranks, ranks_relevant = ranks_of_relevant_items(scores, relevant, margin, lam)
    total = ranks.new_zeros(scores.shape[0]).index_add(0, rows, term(ranks, ranks_relevant))
    return total / torch.bincount(rows, minlength=scores.shape[0]).clamp(min=1)  # relevant per row
