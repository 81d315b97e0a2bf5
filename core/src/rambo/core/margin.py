"""Score margin (paper Sec. 4.4, Eq. 14-15)."""

from __future__ import annotations

import torch

from .loss_path import use_dense


def shift_by_margin(
    scores: torch.Tensor,
    relevant: torch.Tensor,
    margin: float,
    relevant_index: tuple[torch.Tensor, ...] | None = None,
) -> torch.Tensor:
    """Eq. 14: relevant scores move down by `margin / 2`, irrelevant scores up by `margin / 2`.

    Ranking the shifted scores is `rank_alpha` of Eq. 15: a relevant item only counts as ranked
    above an irrelevant one when it leads by more than `margin`. `relevant_index` may pass
    `relevant.nonzero(as_tuple=True)` when the caller has it already; without it the dense form
    runs where [`rambo.core.loss_path.use_dense`][rambo.core.loss_path.use_dense] says so.
    """
    if margin == 0:
        return scores
    # Half-precision scores shift in float32 (what they are ranked in): one rounding per step on
    # every path, also where a compiler fuses the two additions (inductor computes bfloat16 in float32).
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32))
    if relevant_index is None and use_dense(scores):
        # The dense form (no nonzero(), no host sync): the same two roundings per entry,
        # (s + margin/2) then - margin on the relevant ones (+ 0 elsewhere).
        minus_margin = torch.full((), -margin, dtype=scores.dtype, device=scores.device)
        return (scores + margin / 2) + torch.where(relevant, minus_margin, torch.zeros_like(minus_margin))
    if relevant_index is None:
        relevant_index = relevant.nonzero(as_tuple=True)
    # One dense pass (+ margin/2 everywhere), then - margin on the (usually few) relevant items.
    shifted = scores + margin / 2
    minus_margin = torch.full((relevant_index[0].shape[0],), -margin, dtype=scores.dtype, device=scores.device)
    return shifted.index_put_(relevant_index, minus_margin, accumulate=True)
