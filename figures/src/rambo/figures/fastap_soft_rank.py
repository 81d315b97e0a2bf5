"""Soft ranks from FastAP's soft histogram (Cakir et al. 2019), as used by
[`rambo.core.FastAPLoss`][rambo.core.FastAPLoss].

The score range `[lo, hi]` is cut into `bins` intervals with `bins + 1` centres
`z_l = hi - l * delta` (`delta = (hi - lo) / bins`, l = 0 is the best bin). Item `i` spreads
over the two nearest centres with the triangular kernel `k_il = max(0, 1 - |w_i - z_l| / delta)`
(the weights of an item sum to 1). Its soft rank is one plus the soft count of the *other* items in
strictly better bins, expected over the item's own bins:

    softrank_i = 1 + sum_l k_il * sum_{j != i} sum_{l' < l} k_jl'

With a fine binning it tends to the exact rank of [`rambo.core.rank`][rambo.core.rank] (1 = highest score);
items sharing a bin tie, which flattens the loss inside a bin.
"""

from __future__ import annotations

import torch


def bin_weights(scores: torch.Tensor, bins: int, score_range: tuple[float, float]) -> torch.Tensor:
    """Triangular-kernel weights `[..., N, bins + 1]` of `scores: [..., N]` (clamped to the range)."""
    if int(bins) != bins or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {bins}")
    lo, hi = (float(v) for v in score_range)
    if not hi > lo:
        raise ValueError(f"score_range must be (low, high) with high > low, got {score_range}")
    delta = (hi - lo) / bins
    centres = hi - delta * torch.arange(bins + 1, dtype=scores.dtype, device=scores.device)
    clamped = scores.clamp(lo, hi).unsqueeze(-1)
    return (1 - (clamped - centres).abs() / delta).clamp(min=0)


def fastap_soft_rank(scores: torch.Tensor, bins: int, score_range: tuple[float, float]) -> torch.Tensor:
    """Soft ranks `[..., N]` of `scores: [..., N]` (module docstring); differentiable in `scores`."""
    weights = bin_weights(scores, bins, score_range)  # [..., N, L]
    # Mass in strictly better bins: exclusive cumulative sum over the bin axis.
    better_all = weights.sum(-2, keepdim=True).cumsum(-1) - weights.sum(-2, keepdim=True)  # [..., 1, L]
    better_self = weights.cumsum(-1) - weights  # [..., N, L], the item's own share, left out
    return 1 + (weights * (better_all - better_self)).sum(-1)
