"""AP with torchsort's soft ranks (Blondel et al., ICML 2020), a peer of the blackbox AP loss in the
speed benchmark ([`rambo.core.benchmark_peers`][rambo.core.benchmark_peers]): `pip install torchsort` (built from
source).

The loss is the AP loss of Eq. 21-22 with the ranking operator swapped: `precision(i) =
rank(y+)_i / rank(y)_i` with both ranks soft (`torchsort.soft_rank`, l2 regularisation), the
rank among the relevant items from the scores with the irrelevant items moved below every score.
"""

from __future__ import annotations

import torch

from .rank_loss import RankLoss


def import_torchsort():
    """torchsort, or ImportError saying how to get it (it builds from source against the local torch)."""
    try:
        import torchsort
    except ImportError as error:
        raise ImportError("torchsort is not installed: `make bench-peers` builds it into .venv-peers") from error
    return torchsort


class SoftRankAPLoss(RankLoss):
    """`1 - AP` per row (Eq. 22) with `precision(i) = softrank(y+)_i / softrank(y)_i` (Eq. 21).

    Args:
        regularization_strength: torchsort's epsilon (smaller: closer to the exact ranks).
    """

    def __init__(self, regularization_strength: float = 0.01):
        super().__init__()
        self.regularization_strength = float(regularization_strength)
        self._torchsort = import_torchsort()

    def row_losses(self, scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        soft_rank = self._torchsort.soft_rank
        strength = self.regularization_strength
        ranks = soft_rank(-scores, regularization_strength=strength)  # 1 = the highest score
        # irrelevant items below every relevant one (scores are cosines, in [-1, 1])
        relevant_first = torch.where(relevant, scores, scores.detach().min() - 2.0 - scores.shape[-1] * strength)
        ranks_relevant = soft_rank(-relevant_first, regularization_strength=strength)
        precision = torch.where(relevant, ranks_relevant / ranks, 0.0)  # Eq. 21
        return 1.0 - precision.sum(-1) / relevant.sum(-1).clamp(min=1).to(scores.dtype)

    def extra_repr(self) -> str:
        return f"regularization_strength={self.regularization_strength}"
