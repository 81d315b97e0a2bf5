"""Mean-average-precision losses for `[items, classes]` score matrices (Eq. 6, 22, 23)."""

from __future__ import annotations

import torch

from .ap_loss import APLoss
from .loss_path import host_checks
from .validation import check_scores_and_relevance


class MAPLoss(APLoss):
    """`1 - mAP` (Eq. 6, 22): the mean over classes present of each column's AP loss.

    Call: `loss(scores [N, C] floating, labels [N, C] bool)` -> a 0-dimensional tensor; column `c`
    ranks the N items by their class-`c` score. Classes with no positive item in the batch are left
    out of the mean. (For embeddings, the mAP over queries is `EmbeddingLoss(APLoss(...))`.)
    """

    ranked_dim = 0

    def forward(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        check_scores_and_relevance(
            scores,
            labels,
            finite=host_checks(scores),
            loss=type(self).__name__,
            wrapped="APLoss",
            relevant_name="labels",
        )
        return self.mean_over_rows(scores.transpose(0, 1), labels.transpose(0, 1))


class APCLoss(APLoss):
    """AP-C (Eq. 23): one AP loss over the `[N, C]` matrix flattened into a single ranking.

    Call: `loss(scores [N, C] floating, labels [N, C] bool)` -> a 0-dimensional tensor, `1 - AP` of
    the N * C entries ranked together.
    """

    ranked_dim = 0

    def forward(self, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        check_scores_and_relevance(
            scores,
            labels,
            finite=host_checks(scores),
            loss=type(self).__name__,
            wrapped="APLoss",
            relevant_name="labels",
        )
        return self.mean_over_rows(scores.reshape(1, -1), labels.reshape(1, -1))
