"""Recall@k surrogate (Patel, Tolias, Matas, CVPR 2022; summary in shared/papers/)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .sigmoid_rank import sigmoid_ranks_of_relevant
from .surrogate_loss import SurrogateLoss


class RecallAtKSurrogate(SurrogateLoss):
    """``1 - mean_k R~@k`` with ``R~@k = sum_{i relevant} sigmoid((k - r~(i)) / tau2_k) / min(k, |P|)``.

    ``r~(i) = 1 + sum_{j != i} sigmoid((s_j - s_i) / tau1)`` is the sigmoid-relaxed rank of relevant
    item ``i`` among all valid items of the row. The query itself is never in its own row (use
    :func:`rambo.core.pairwise_scores` or SiMix's ``valid`` mask), so it is never its own positive.

    Args:
        ks: the k of the averaged Recall@k terms (paper: 1, 2, 4, 8, 16).
        tau1: temperature of the rank relaxation (paper: 0.01).
        tau2: temperature of the top-k relaxation: one number for every k, or one per k (the
            official code's ``--k_temperatures`` default is ``[1, 2, 4, 8, 16]``: ``tau2_k = k``).
    """

    def __init__(self, ks=(1, 2, 4, 8, 16), tau1: float = 0.01, tau2: float | Sequence[float] = 1.0):
        super().__init__()
        if not ks or any(int(k) != k or k < 1 for k in ks):
            raise ValueError(f"ks must be positive integers, got {ks}")
        per_k = tuple(float(t) for t in tau2) if isinstance(tau2, Sequence) else (float(tau2),) * len(ks)
        if len(per_k) != len(ks):
            raise ValueError(f"tau2 needs one temperature per k: {len(per_k)} for ks={tuple(ks)}")
        if tau1 <= 0 or min(per_k) <= 0:
            raise ValueError(f"temperatures must be > 0, got tau1={tau1}, tau2={tau2}")
        self.ks = tuple(int(k) for k in ks)
        self.tau1, self.tau2 = float(tau1), per_k

    def row_losses(self, scores, relevant, valid):
        rank_all, _, mask = sigmoid_ranks_of_relevant(scores, relevant, self.tau1, valid)
        positives = relevant.sum(-1).to(scores.dtype)
        recalls = []
        for k, tau2 in zip(self.ks, self.tau2):
            in_top_k = torch.where(mask, torch.sigmoid((k - rank_all) / tau2), 0.0).sum(-1)
            recalls.append(in_top_k / positives.clamp(max=k).clamp(min=1))
        return 1.0 - torch.stack(recalls).mean(0)

    def extra_repr(self) -> str:
        return f"ks={self.ks}, tau1={self.tau1}, tau2={self.tau2}"
