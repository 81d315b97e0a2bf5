"""Contrastive loss baseline (Hadsell, Chopra, LeCun 2006) on L2-normalised embeddings."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rambo.core.distributed import global_batch
from rambo.core.pairwise import check_labels, unit_rows


class ContrastiveLoss(torch.nn.Module):
    """`L = mean_{(i,j) positive} d_ij^2 + mean_{(i,j) negative} max(0, margin - d_ij)^2`.

    `d_ij = ||e_i - e_j||` between unit embeddings (so `d_ij^2 = 2 - 2 cos_ij`), over the
    ordered pairs `i != j` of the batch. Positive and negative terms are averaged separately
    so that the ~1:C ratio of positive to negative pairs in a batch does not drown the positives.
    Called as `loss(embeddings [B, D], labels [B])`.

    Args:
        margin: distance beyond which a negative pair costs nothing (in [0, 2]).
        global_batch: under an initialised process group, the pairs of every process's batch (True)
            or of this process's own share (False).
    """

    def __init__(self, margin: float = 0.5, global_batch: bool = True):
        super().__init__()
        if not isinstance(global_batch, bool):
            raise ValueError(f"global_batch must be True or False, got {global_batch!r}")
        self.global_batch = global_batch
        if not 0.0 <= margin <= 2.0:
            raise ValueError(f"margin must be in [0, 2] (distances between unit vectors), got {margin}")
        self.margin = float(margin)

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        check_labels(embeddings, labels)
        if self.global_batch:  # under several processes: the pairs of the global batch (rambo.core.distributed)
            embeddings, labels = global_batch(embeddings, labels)
        unit = unit_rows(embeddings)
        # d^2 = 2 - 2 cos; the clamp keeps sqrt differentiable at d = 0 (duplicates, i == j).
        squared = (2.0 - 2.0 * unit @ unit.transpose(0, 1)).clamp(min=1e-12)
        same = labels[:, None] == labels[None, :]
        other = ~torch.eye(len(labels), dtype=torch.bool, device=labels.device)
        positive = same & other
        negative = ~same
        zero = embeddings.sum() * 0.0
        pos_term = squared[positive].mean() if positive.any() else zero
        neg_term = F.relu(self.margin - squared.sqrt())[negative].pow(2).mean() if negative.any() else zero
        return pos_term + neg_term

    def extra_repr(self) -> str:
        return f"margin={self.margin}"
