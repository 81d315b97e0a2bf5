"""mmdetection's classifier-loss arguments turned into what
[`RankClassifierLoss`][rambo.detection.rank_classifier_loss.RankClassifierLoss] takes.

mmdet's bbox heads call `loss_cls(cls_score [N, C+1], labels [N], label_weights [N], avg_factor=...)`
with background = C (the last column). This module needs no mmdet, so it is tested everywhere.
"""

from __future__ import annotations

import torch


def select_weighted_rois(cls_score: torch.Tensor, labels: torch.Tensor, label_weights: torch.Tensor | None):
    """Validate mmdet's arguments and keep the RoIs whose `label_weights` is positive.

    Returns `(cls_score [M, C+1], labels [M])`. A zero weight is how mmdet leaves a RoI out of
    the loss (e.g. ignored or padded samples); the rank losses have no per-item weight, so such
    RoIs are removed from the ranking instead. Positive weights other than 1 cannot be honoured
    by a ranking and raise `ValueError`.
    """
    if cls_score.dim() != 2 or cls_score.shape[1] < 2:
        raise ValueError(f"cls_score must be [N, C+1] with C >= 1, got shape {tuple(cls_score.shape)}")
    if labels.shape != cls_score.shape[:1]:
        raise ValueError(f"labels must be [N] = [{cls_score.shape[0]}], got shape {tuple(labels.shape)}")
    if label_weights is None:
        return cls_score, labels
    if label_weights.shape != labels.shape:
        raise ValueError(f"label_weights must be [N] = [{labels.shape[0]}], got shape {tuple(label_weights.shape)}")
    keep = label_weights > 0
    if bool(((label_weights[keep] - 1).abs() > 1e-6).any()):
        raise ValueError("label_weights other than 0 and 1 cannot weight a ranking-based loss")
    return cls_score[keep], labels[keep]
