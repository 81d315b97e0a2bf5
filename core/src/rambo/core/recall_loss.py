"""Recall loss by blackbox differentiation (paper Sec. 4.5, Eq. 16-20, Prop. 2)."""

from __future__ import annotations

import torch

from .rank_loss import RankLoss, mean_over_relevant_items
from .validation import check_lam, check_margin

WEIGHTINGS = ("log", "loglog")


class RecallLoss(RankLoss):
    """Closed form of Eq. 19 (Eq. 20): `E_{i relevant} l(r_i)` or `E_{i relevant} l(l(r_i))`.

    `l(k) = log(1 + k)` and `r_i = rank_alpha(y)_i - rank_alpha(y+)_i` (Eq. 17) is the number
    of irrelevant items ranked above relevant item `i`. `weighting="log"` is the sum of Eq. 19
    with `w_K = log(1 + 1/K) ~ 1/K`; `"loglog"` has `w_K ~ 1/(K log K)` (Appendix B).

    Args:
        margin: alpha of Eq. 14.
        lam: as in [`rank`][rambo.core.rank].
        weighting: `"log"` or `"loglog"`.

    `rank(y+)` is a constant in the backward pass; only `rank_alpha(y)` is differentiated.

    Call: `loss(scores [Q, N] floating, relevant [Q, N] bool)` -> a 0-dimensional tensor, the mean of
    the row losses over the rows (queries) with a relevant item (0 when none has one). Each row ranks
    its N items. For embeddings and labels: `rambo.core.EmbeddingLoss(loss)(embeddings, labels)`.
    """

    def __init__(self, margin: float = 0.0, lam: float = 4.0, weighting: str = "log"):
        super().__init__()
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
        self.margin = check_margin(margin)
        self.lam = check_lam(lam)
        self.weighting = weighting

    def row_losses(self, scores: torch.Tensor, relevant: torch.Tensor, rank_scale: float = 1.0) -> torch.Tensor:
        """Per row. `rank_scale` multiplies every `r_i` (1 here; [`rambo.core.RowMemory`][rambo.core.RowMemory],
        the authors' batch memory, passes the number of batches whose rows are in `scores`)."""
        loglog = self.weighting == "loglog"

        def weighted(ranks: torch.Tensor, ranks_relevant: torch.Tensor) -> torch.Tensor:
            per_item = torch.log1p((ranks - ranks_relevant) * rank_scale)  # l(r_i), r_i of Eq. 17
            return torch.log1p(per_item) if loglog else per_item

        return mean_over_relevant_items(scores, relevant, self.margin, self.lam, weighted)

    def extra_repr(self) -> str:
        return f"margin={self.margin}, lam={self.lam}, weighting={self.weighting!r}"
