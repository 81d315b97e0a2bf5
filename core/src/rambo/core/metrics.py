"""Rank-based retrieval metrics on `(scores: [Q, N], relevant: [Q, N] bool)`.

Every metric is a fraction in [0, 1] (not a percentage; the paper's tables show percentages).

Row `q` is one query's scores over N items. Ties are broken by position, exactly as in
[`rambo.core.rank`][rambo.core.rank] (the earlier item ranks higher), so every metric is a deterministic function
of its inputs. Rows without a relevant item are left out of every mean (the metric is undefined
for them); a mean over no row is `nan`.
"""

from __future__ import annotations

import torch

from .ranking import descending_order
from .validation import check_scores_and_relevance


def _relevance_in_rank_order(scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
    """`[Q, N]` float64 0/1: row q's relevance listed from its best-ranked item to its worst."""
    check_scores_and_relevance(scores, relevant)
    order = descending_order(scores)
    return relevant.gather(-1, order).to(torch.float64)


def _mean_over_rows_with_relevant(values: torch.Tensor, relevant: torch.Tensor) -> float:
    has_relevant = relevant.any(dim=-1)
    return float(values[has_relevant].mean()) if bool(has_relevant.any()) else float("nan")


def average_precision(scores: torch.Tensor, relevant: torch.Tensor, reduction: str = "mean"):
    """AP of each row (Eq. 4-5): the mean over relevant items of precision at their rank.

    `reduction="mean"` gives the mean over rows with a relevant item (mAP of Eq. 6 when rows
    are classes) as a float; `"none"` gives `[Q]` float64 (`nan` for rows with none).
    """
    hits = _relevance_in_rank_order(scores, relevant)
    positions = torch.arange(1, hits.shape[-1] + 1, dtype=torch.float64, device=hits.device)
    precision_at_hits = hits.cumsum(-1) / positions * hits
    per_row = precision_at_hits.sum(-1) / hits.sum(-1)
    return _reduce(per_row, relevant, reduction)


def recall_at_k(scores: torch.Tensor, relevant: torch.Tensor, ks=(1,)) -> dict[int, float] | float:
    """Recall@K (Eq. 7-8): the fraction of queries with a relevant item among their top K.

    `ks`: one K (`recall_at_k(scores, relevant, 1)`) gives that fraction as a float; several
    (`ks=(1, 10)`) give `{k: fraction}` for each. Fractions are in [0, 1] (0.5 is 50% R@1), over
    the rows with a relevant item (`nan` when none has one). A K larger than the number of items
    counts every item.
    """
    single = not isinstance(ks, (list, tuple, range, set, frozenset, torch.Tensor))
    chosen = [ks] if single else (ks.tolist() if isinstance(ks, torch.Tensor) else list(ks))
    for k in chosen:
        if isinstance(k, bool) or not isinstance(k, (int, float)) or int(k) != k or k < 1:
            raise ValueError(f"K must be a positive integer, got {k!r}")
    hits = _relevance_in_rank_order(scores, relevant)
    first_hit_within = hits.cummax(-1).values  # 1 from the first relevant position on
    n = hits.shape[-1]
    result = {int(k): _mean_over_rows_with_relevant(first_hit_within[:, min(int(k), n) - 1], relevant) for k in chosen}
    return result[int(chosen[0])] if single else result


def map_at_r(scores: torch.Tensor, relevant: torch.Tensor, reduction: str = "mean"):
    """MAP@R (Musgrave et al. 2020): `(1/R) sum_{i<=R} precision@i * rel(i)`, R = number relevant."""
    hits = _relevance_in_rank_order(scores, relevant)
    r = hits.sum(-1, keepdim=True)
    positions = torch.arange(1, hits.shape[-1] + 1, dtype=torch.float64, device=hits.device)
    within_r = positions <= r
    per_row = (hits.cumsum(-1) / positions * hits * within_r).sum(-1) / r.squeeze(-1)
    return _reduce(per_row, relevant, reduction)


def r_precision(scores: torch.Tensor, relevant: torch.Tensor, reduction: str = "mean"):
    """R-precision: the fraction of relevant items among the top R, R = number of relevant items."""
    hits = _relevance_in_rank_order(scores, relevant)
    r = hits.sum(-1, keepdim=True)
    positions = torch.arange(1, hits.shape[-1] + 1, dtype=torch.float64, device=hits.device)
    per_row = (hits * (positions <= r)).sum(-1) / r.squeeze(-1)
    return _reduce(per_row, relevant, reduction)


def _reduce(per_row: torch.Tensor, relevant: torch.Tensor, reduction: str):
    if reduction == "none":
        return per_row
    if reduction == "mean":
        return _mean_over_rows_with_relevant(per_row, relevant)
    raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
