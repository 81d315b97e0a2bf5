"""Average-precision loss by blackbox differentiation (paper Sec. 4.6, Eq. 21-22)."""

from __future__ import annotations

import torch

from .rank_loss import RankLoss, mean_over_relevant_items
from .validation import check_lam, check_margin


def precision(ranks: torch.Tensor, ranks_relevant: torch.Tensor) -> torch.Tensor:
    """Eq. 21 per relevant item: `rank(y+) / rank_alpha(y)`."""
    return ranks_relevant / ranks


class APLoss(RankLoss):
    """`1 - AP` of each row (Eq. 22), with `precision(i) = rank(y+)_i / rank_alpha(y)_i` (Eq. 21).

    Args:
        margin: alpha of Eq. 14 (0 disables the margin).
        lam: blackbox interpolation strength, the paper's normalised convention (see `rank`).

    Call: `loss(scores [Q, N] floating, relevant [Q, N] bool)` -> a 0-dimensional tensor, the mean
    of `1 - AP` over the rows with a relevant item; every item of a row takes part in that row's
    ranking. For embeddings and labels: `rambo.core.EmbeddingLoss(APLoss(...))(embeddings, labels)`. `rank(y+)` (the
    rank among relevant items) is treated as a constant in the backward pass, as in the authors' implementation: only
    `rank_alpha(y)` is differentiated.
    """

    def __init__(self, margin: float = 0.0, lam: float = 0.5):
        super().__init__()
        self.margin = check_margin(margin)
        self.lam = check_lam(lam)

    def row_losses(self, scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        # Eq. 21: precision(i) = rank(y+)_i / rank_alpha(y)_i, averaged over the row's relevant items
        return 1.0 - mean_over_relevant_items(scores, relevant, self.margin, self.lam, precision)

    def extra_repr(self) -> str:
        return f"margin={self.margin}, lam={self.lam}"
