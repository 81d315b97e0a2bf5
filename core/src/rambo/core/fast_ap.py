"""FastAP (Cakir et al., CVPR 2019): AP from soft histograms of the scores."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .surrogate_loss import SurrogateLoss
from .validation import as_number, check_integer


class FastAPLoss(SurrogateLoss):
    """`1 - FastAP`, `FastAP = (1/|P|) sum_l h+_l H+_l / H_l` over `bins + 1` bin centres.

    Bin centres `z_l = hi - l * delta` (l = 0..bins, delta = (hi - lo) / bins) run from the best
    score to the worst; each item spreads over the two nearest centres with the triangular kernel
    `max(0, 1 - |s - z_l| / delta)`. `h+`/`h` are the soft counts of relevant/all valid items
    per bin, `H+`/`H` their cumulative sums (items at least as good as bin l); bins with
    `H_l = 0` add nothing. Scores are clamped to `score_range` (cosine scores: (-1, 1), which
    is FastAP's distance range [0, 4] of unit vectors).

    Call: `loss(scores [Q, N] floating, relevant [Q, N] bool, valid [Q, N] bool | None)` -> a
    0-dimensional tensor, the mean over the rows with a relevant valid item; `valid` marks the items
    that take part in each row (default: all). For embeddings and labels:
    `rambo.core.EmbeddingLoss(loss)(embeddings, labels)`.
    """

    def __init__(self, bins: int = 10, score_range: tuple[float, float] = (-1.0, 1.0)):
        super().__init__()
        self.bins = check_integer(bins, "bins", 1, "the histogram's number of bins")
        if isinstance(score_range, (str, bytes)) or not isinstance(score_range, Sequence) or len(score_range) != 2:
            raise ValueError(f"score_range must be (low, high), got {score_range!r}")
        lo, hi = (as_number(v, "score_range") for v in score_range)
        if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
            raise ValueError(f"score_range must be (low, high), finite, with high > low, got {score_range!r}")
        self.lo, self.hi = lo, hi

    def row_losses(self, scores, relevant, valid):
        delta = (self.hi - self.lo) / self.bins
        centres = self.hi - delta * torch.arange(self.bins + 1, dtype=scores.dtype, device=scores.device)
        clamped = scores.clamp(self.lo, self.hi).unsqueeze(-1)  # [Q, N, 1]
        weight = (1 - (clamped - centres).abs() / delta).clamp(min=0) * valid.unsqueeze(-1)  # [Q, N, L+1]
        h_all = weight.sum(1)
        h_rel = (weight * relevant.unsqueeze(-1)).sum(1)
        cum_all, cum_rel = h_all.cumsum(-1), h_rel.cumsum(-1)
        ratio = torch.where(cum_all > 0, h_rel * cum_rel / cum_all.clamp(min=torch.finfo(scores.dtype).tiny), 0.0)
        return 1.0 - ratio.sum(-1) / relevant.sum(-1).clamp(min=1).to(scores.dtype)

    def extra_repr(self) -> str:
        return f"bins={self.bins}, score_range=({self.lo}, {self.hi})"
