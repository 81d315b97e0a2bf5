"""Score margin (paper Sec. 4.4, Eq. 14-15)."""

from __future__ import annotations

import torch


def shift_by_margin(scores: torch.Tensor, relevant: torch.Tensor, margin: float) -> torch.Tensor:
    """Eq. 14: relevant scores move down by ``margin / 2``, irrelevant scores up by ``margin / 2``.

    Ranking the shifted scores is ``rank_alpha`` of Eq. 15: a relevant item only counts as ranked
    above an irrelevant one when it leads by more than ``margin``.
    """
    if margin == 0:
        return scores
    half = margin / 2
    return scores + torch.where(relevant, -half, half).to(scores.dtype)
