"""Scores of every batch element against every *other* element (paper Sec. 5.1)."""

from __future__ import annotations

import torch

from .loss_path import host_checks
from .validation import check_scores


def off_diagonal(matrix: torch.Tensor) -> torch.Tensor:
    """`[B, B]` -> `[B, B-1]`: each row without its diagonal entry, order otherwise kept."""
    b = matrix.shape[0]
    return matrix.flatten()[1:].view(b - 1, b + 1)[:, :-1].reshape(b, b - 1)


def unit_rows(embeddings: torch.Tensor) -> torch.Tensor:
    """Each row of `embeddings [B, D]` scaled to unit length: the cosine similarity's normalisation
    (paper Sec. 5.1), `x / ||x||`, computed so that it cannot overflow or underflow.

    Each row is first divided by its largest magnitude (a constant of the backward pass: the
    direction does not depend on it, so the gradient is still exactly that of `x / ||x||`), then
    by its norm, which then lies in `[1, sqrt(D)]`: rows near the float's largest value (1e30 in
    float32, whose squares overflow) and rows far below `F.normalize`'s `eps` (which it would
    return unscaled, not of unit length) both come out of unit length.

    A row of zeros has no direction: it stays zero (its cosine scores are 0), and the gradient that
    reaches it is the gradient of its unit vector unchanged (the Jacobian is the identity, operator
    norm 1), where `F.normalize` multiplies it by `1 / eps = 1e12`.

    Half-precision rows (float16, bfloat16) are normalised in float32, as autocast runs
    `F.normalize`, and returned in their own dtype.
    """
    rows = embeddings.float() if embeddings.dtype in (torch.float16, torch.bfloat16) else embeddings
    scale = rows.detach().abs().amax(dim=1, keepdim=True)
    scaled = rows / torch.where(scale > 0, scale, torch.ones_like(scale))
    squares = (scaled * scaled).sum(dim=1, keepdim=True)  # >= 1 for a non-zero row, 0 for a zero row
    return (scaled / torch.where(squares > 0, squares, torch.ones_like(squares)).sqrt()).to(embeddings.dtype)


def check_labels(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    finite: bool = True,
    names: tuple[str, str] = ("embeddings", "labels"),
) -> None:
    """Raise `ValueError` unless `labels` is a 1-D integer tensor with one label per embedding
    (and, with `finite`, the embeddings are finite: a read on the host). `names`: the two
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

    `embeddings: [B, D]`, `labels: [B]` -> `(scores: [B, B-1], relevant: [B, B-1] bool)`;
    row `q` lists elements `0..B-1` except `q` itself, so no query is its own positive.
    """
    check_labels(embeddings, labels, finite=host_checks(embeddings))
    if embeddings.shape[0] < 2:
        raise ValueError("pairwise_scores needs a batch of at least 2 elements")
    unit = unit_rows(embeddings)
    scores = unit @ unit.transpose(0, 1)
    relevant = labels.unsqueeze(1) == labels.unsqueeze(0)
    return off_diagonal(scores), off_diagonal(relevant)
