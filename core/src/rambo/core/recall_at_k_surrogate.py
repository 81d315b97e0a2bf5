"""Recall@k surrogate (Patel, Tolias, Matas, CVPR 2022; summary in shared/papers/)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .sigmoid_rank import sigmoid_ranks_of_relevant
from .surrogate_loss import SurrogateLoss
from .validation import check_integer, check_positive


class RecallAtKSurrogate(SurrogateLoss):
    """`1 - mean_k R~@k`, `R~@k = min(sum_{i relevant} sigmoid((k - r~(i)) / tau2_k), k) / min(k, |P|)`.

    The relaxed Recall@k of the Recall@k surrogate paper (Patel, Tolias, Matas, CVPR 2022; its method
    section: Recall@k with the Heaviside steps of the rank and of the top-k test replaced by sigmoids,
    averaged over the ks). Only the paper's summary is in shared/papers (no equations): no section
    or equation number is cited here.
    `r~(i) = 1 + sum_{j != i} sigmoid((s_j - s_i) / tau1)` is the sigmoid-relaxed rank of relevant
    item `i` among all valid items of the row. The query itself is never in its own row (use
    [`rambo.core.pairwise_scores`][rambo.core.pairwise_scores] or SiMix's `valid` mask), so it is never its own
    positive. (The official `RecallatK.forward` does rank each positive against the query itself as well, an
    item above nearly every positive since `s(q, q) = 1`: about 1 more on every rank. Not done here;
    a row that keeps the query as a valid, non-relevant item reproduces it.)

    Numerator clip (`clip_numerator`). The exact count of positives within the top k never exceeds
    k; its relaxation, a sum of sigmoids over the positives, can when a row has more than k of them.
    The official code (yash0307/RecallatK_surrogate, src/losses.py@416ea278ad45c6f5b03e66779e417cd66cbb1410,
    `RecallatK.forward`) clips it, per k, with `torch.minimum(recall, k)` before dividing by
    `min(k, |P|)`; a clipped term is constant, so it passes no gradient. Whether the paper states
    the clip is not checked (its text is not here).

    Args:
        ks: the k of the averaged Recall@k terms (paper: 1, 2, 4, 8, 16).
        tau1: temperature of the rank relaxation (paper: 0.01).
        tau2: temperature of the top-k relaxation: one number for every k, or one per k (the
            official code's `--k_temperatures` default was `[1, 2, 4, 8, 16]`, `tau2_k = k`,
            until src/main.py@ed052029 (Nov 2024), which sets `[1] * len(k_vals)`).
        clip_numerator: clip each k's relaxed numerator at k, as the official code (default). False:
            unclipped.

    Call: `loss(scores [Q, N] floating, relevant [Q, N] bool, valid [Q, N] bool | None)` -> a
    0-dimensional tensor, the mean over the rows with a relevant valid item; `valid` marks the items
    that take part in each row (default: all). For embeddings and labels:
    `rambo.core.EmbeddingLoss(loss)(embeddings, labels)`.
    """

    def __init__(
        self, ks=(1, 2, 4, 8, 16), tau1: float = 0.01, tau2: float | Sequence[float] = 1.0, clip_numerator: bool = True
    ):
        super().__init__()
        if isinstance(ks, (str, bytes)) or not isinstance(ks, Sequence) or not ks:
            raise ValueError(f"ks must be a non-empty sequence of integers >= 1, got {ks!r}")
        self.ks = tuple(check_integer(k, "ks", 1, "the k of Recall@k") for k in ks)
        per_k = tuple(tau2) if isinstance(tau2, Sequence) and not isinstance(tau2, (str, bytes)) else (tau2,) * len(ks)
        if len(per_k) != len(ks):
            raise ValueError(f"tau2 needs one temperature per k: {len(per_k)} for ks={tuple(ks)}")
        self.tau1 = check_positive(tau1, "tau1", "the rank relaxation's temperature")
        self.tau2 = tuple(check_positive(t, "tau2", "the top-k relaxation's temperature") for t in per_k)
        if not isinstance(clip_numerator, bool):
            raise ValueError(f"clip_numerator must be True or False, got {clip_numerator!r}")
        self.clip_numerator = clip_numerator

    def row_losses(self, scores, relevant, valid):
        rank_all, _, mask = sigmoid_ranks_of_relevant(scores, relevant, self.tau1, valid)
        positives = relevant.sum(-1).to(scores.dtype)
        recalls = []
        for k, tau2 in zip(self.ks, self.tau2):
            in_top_k = torch.where(mask, torch.sigmoid((k - rank_all) / tau2), 0.0).sum(-1)
            if self.clip_numerator:  # torch.minimum as the official code (at a tie, half the gradient)
                in_top_k = torch.minimum(in_top_k, in_top_k.new_full((), k))
            recalls.append(in_top_k / positives.clamp(max=k).clamp(min=1))
        return 1.0 - torch.stack(recalls).mean(0)

    def extra_repr(self) -> str:
        return f"ks={self.ks}, tau1={self.tau1}, tau2={self.tau2}, clip_numerator={self.clip_numerator}"
