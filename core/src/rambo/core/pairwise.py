"""Scores of every batch element against every *other* element (paper Sec. 5.1)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .loss_path import host_checks
from .validation import check_scores


def off_diagonal(matrix: torch.Tensor) -> torch.Tensor:
    """``[B, B]`` -> ``[B, B-1]``: each row without its diagonal entry, order otherwise kept."""
    b = matrix.shape[0]
    return matrix.flatten()[1:].view(b - 1, b + 1)[:, :-1].reshape(b, b - 1)


def check_labels(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    finite: bool = True,
    names: tuple[str, str] = ("embeddings", "labels"),
) -> None:
    """Raise ``ValueError`` unless ``labels`` is a 1-D integer tensor with one label per embedding
    (and, with ``finite``, the embeddings are finite: a read on the host). ``names``: the two
    arguments' names in the messages."""
    emb, lab = names
    check_scores(embeddings, name=emb, min_dim=2, finite=finite)
    if embeddings.dim() != 2:
        raise ValueError(f"{emb} must be [batch, dim], got shape {tuple(embeddings.shape)}")
    if not isinstance(labels, torch.Tensor) or labels.dim() != 1 or labels.is_floating_point() or labels.is_complex():
        shown = (
            f"shape {tuple(labels.shape)}, dtype {labels.dtype}"
            if isinstance(labels, torch.Tensor)
            else type(labels).__name__
        )
        raise ValueError(f"{lab} must be a 1-D integer tensor [batch], got {shown}")
    if labels.shape[0] != embeddings.shape[0]:
        raise ValueError(f"shape mismatch: {embeddings.shape[0]} {emb} vs {labels.shape[0]} {lab}")
    if labels.device != embeddings.device:
        raise ValueError(f"device mismatch: {emb} on {embeddings.device}, {lab} on {labels.device}")


def pairwise_scores(embeddings: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine scores and relevance of each element against all others.

    ``embeddings: [B, D]``, ``labels: [B]`` -> ``(scores: [B, B-1], relevant: [B, B-1] bool)``;
    row ``q`` lists elements ``0..B-1`` except ``q`` itself, so no query is its own positive.
    """
    check_labels(embeddings, labels, finite=host_checks(embeddings))
    if embeddings.shape[0] < 2:
        raise ValueError("pairwise_scores needs a batch of at least 2 elements")
    unit = F.normalize(embeddings, dim=1)
    scores = unit @ unit.transpose(0, 1)
    relevant = labels.unsqueeze(1) == labels.unsqueeze(0)
    return off_diagonal(scores), off_diagonal(relevant)
