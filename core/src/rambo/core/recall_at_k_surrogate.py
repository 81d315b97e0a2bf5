"""Recall@k surrogate (Patel, Tolias, Matas, CVPR 2022; summary in shared/papers/)."""

from __future__ import annotations

import torch

from .sigmoid_rank import sigmoid_ranks_of_relevant
from .surrogate_loss import SurrogateLoss


class RecallAtKSurrogate(SurrogateLoss):
    """``1 - mean_k R~@k`` with ``R~@k = sum_{i relevant} sigmoid((k - r~(i)) / tau2) / min(k, |P|)``.

    ``r~(i) = 1 + sum_{j != i} sigmoid((s_j - s_i) / tau1)`` is the sigmoid-relaxed rank of relevant
    item ``i`` among all valid items of the row. The query itself is never in its own row (use
    :func:`rambo.core.pairwise_scores` or SiMix's ``valid`` mask), so it is never its own positive.

    Args:
        ks: the k of the averaged Recall@k terms (paper: 1, 2, 4, 8, 16).
        tau1: temperature of the rank relaxation (paper: 0.01). tau2: of the top-k relaxation (1).
    """

    def __init__(self, ks=(1, 2, 4, 8, 16), tau1: float = 0.01, tau2: float = 1.0):
        super().__init__()
        if not ks or any(int(k) != k or k < 1 for k in ks):
            raise ValueError(f"ks must be positive integers, got {ks}")
        if tau1 <= 0 or tau2 <= 0:
            raise ValueError(f"temperatures must be > 0, got tau1={tau1}, tau2={tau2}")
        self.ks = tuple(int(k) for k in ks)
        self.tau1, self.tau2 = float(tau1), float(tau2)

    def row_losses(self, scores, relevant, valid):
        rank_all, _, mask = sigmoid_ranks_of_relevant(scores, relevant, self.tau1, valid)
        positives = relevant.sum(-1).to(scores.dtype)
        recalls = []
        for k in self.ks:
            in_top_k = torch.where(mask, torch.sigmoid((k - rank_all) / self.tau2), 0.0).sum(-1)
            recalls.append(in_top_k / positives.clamp(max=k).clamp(min=1))
        return 1.0 - torch.stack(recalls).mean(0)

    def extra_repr(self) -> str:
        return f"ks={self.ks}, tau1={self.tau1}, tau2={self.tau2}"
