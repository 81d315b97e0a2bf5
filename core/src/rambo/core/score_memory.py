"""Score memory (paper Sec. 4.3): the last ``tau`` batches extend the *ranking*, not the queries.

Two wrappers in the spirit of pytorch-metric-learning's ``CrossBatchMemory``:

* :class:`ScoreMemory` for precomputed score rows (detection): the stored, detached scores of the
  last ``tau`` batches are concatenated to the current ones along the loss's ranked dimension.
* :class:`EmbeddingMemory` for retrieval: the current queries are scored against the other
  elements of the current batch *and* the stored, detached embeddings of the last ``tau`` batches.

In both, gradients reach only the current batch, and the number of queries stays the batch's own.

:class:`RowMemory` is the authors' variant (martius-lab/blackbox-backprop ``BatchMemoryRecallLoss``
at 075bf56), for comparison: the detached score *rows* of the last ``tau`` batches are appended as
more queries (the ranking stays the current batch), and, as their ``RecallLoss`` denormalises the
ranks by the number of rows, every rank is multiplied by the number of batches in the loss.

The memory is filled only in training mode and travels with ``state_dict()`` so that a resumed run
continues with the same memory.
"""

from __future__ import annotations

import inspect
from collections import deque

import torch
import torch.nn.functional as F

from .loss_path import host_checks
from .pairwise import check_labels, pairwise_scores
from .validation import check_scores_and_relevance


class _BatchMemory(torch.nn.Module):
    """The last ``tau`` batches as pairs of detached tensors, saved with ``state_dict()``."""

    def __init__(self, loss: torch.nn.Module, tau: int):
        super().__init__()
        if isinstance(tau, bool) or not isinstance(tau, (int, float)) or int(tau) != tau or tau < 0:
            raise ValueError(f"tau (number of remembered batches) must be an integer >= 0, got {tau}")
        self.loss = loss
        self.tau = int(tau)
        self._batches: deque[tuple[torch.Tensor, torch.Tensor]] = deque(maxlen=max(self.tau, 1))

    def remember(self, first: torch.Tensor, second: torch.Tensor) -> None:
        """Store one batch (detached), only in training mode and when ``tau > 0``."""
        if self.training and self.tau:
            self._batches.append((first.detach(), second.detach()))

    def remembered(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return list(self._batches) if self.tau else []

    def reset(self) -> None:
        """Forget every remembered batch."""
        self._batches.clear()

    def get_extra_state(self) -> dict:
        return {"batches": [(a.cpu(), b.cpu()) for a, b in self._batches]}

    def set_extra_state(self, state: dict) -> None:
        self._batches.clear()
        self._batches.extend(state["batches"])


class ScoreMemory(_BatchMemory):
    """Wraps a loss called as ``loss(scores, relevant)``; extends its ranked dimension by memory.

    Args:
        loss: e.g. ``MAPLoss`` (ranked dimension 0: items) or ``APLoss`` (ranked dimension -1).
        tau: number of previous batches remembered (paper: 7 for detection); 0 disables it.
    """

    def __init__(self, loss: torch.nn.Module, tau: int):
        super().__init__(loss, tau)
        self.dim = getattr(loss, "ranked_dim", -1)

    def forward(self, scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        check_scores_and_relevance(scores, relevant, finite=host_checks(scores))
        remembered = self.remembered()
        kept = 1 if self.dim in (0, -2) else 0  # the dimension that is not ranked (the queries)
        if remembered and remembered[-1][0].shape[kept] != scores.shape[kept]:
            raise ValueError(
                f"ScoreMemory extends dimension {self.dim} (the ranking), so every batch needs the same size "
                f"in dimension {kept}: got scores {tuple(scores.shape)} after a remembered batch of "
                f"{tuple(remembered[-1][0].shape)}. A DataLoader's smaller last batch does this: use "
                "drop_last=True, or call reset() before such a batch"
            )
        all_scores = torch.cat([scores] + [s.to(scores.device, scores.dtype) for s, _ in remembered], dim=self.dim)
        all_relevant = torch.cat([relevant] + [r.to(relevant.device) for _, r in remembered], dim=self.dim)
        value = self.loss(all_scores, all_relevant)
        self.remember(scores, relevant)
        return value


class EmbeddingMemory(_BatchMemory):
    """Wraps a loss called as ``loss(scores, relevant)``; call it as ``memory(embeddings, labels)``.

    Each of the ``B`` current embeddings is a query; its row ranks the ``B - 1`` other current
    elements followed by the ``M`` remembered ones: ``scores: [B, B - 1 + M]`` (cosine scores).

    Args:
        loss: e.g. ``RecallLoss``. tau: number of previous batches remembered (paper: 3).
    """

    def scores_and_relevance(self, embeddings: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``[B, B - 1 + M]`` scores and relevance that the wrapped loss receives."""
        scores, relevant = pairwise_scores(embeddings, labels)
        remembered = self.remembered()
        if remembered and remembered[-1][0].shape[1] != embeddings.shape[1]:
            raise ValueError(
                f"EmbeddingMemory holds embeddings of size {remembered[-1][0].shape[1]}, got a batch of size "
                f"{embeddings.shape[1]}: the embedding size changed; call reset() after changing the model"
            )
        if remembered:
            memory = torch.cat([e for e, _ in remembered]).to(embeddings.device, embeddings.dtype)
            memory_labels = torch.cat([l for _, l in remembered]).to(labels.device)
            unit = F.normalize(embeddings, dim=1)
            scores = torch.cat([scores, unit @ memory.transpose(0, 1)], dim=1)
            relevant = torch.cat([relevant, labels.unsqueeze(1) == memory_labels.unsqueeze(0)], dim=1)
        return scores, relevant

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        check_labels(embeddings, labels, finite=host_checks(embeddings))
        value = self.loss(*self.scores_and_relevance(embeddings, labels))
        self.remember(F.normalize(embeddings.detach(), dim=1), labels)
        return value


class RowMemory(_BatchMemory):
    """The authors' batch memory for a :class:`rambo.core.RecallLoss`: ``memory(embeddings, labels)``.

    The current ``[B, B - 1]`` cosine score rows (:func:`rambo.core.pairwise_scores`) and those of
    the last ``tau`` batches (detached, kept as they were scored) are one ``[(1 + m) B, B - 1]``
    input of the recall loss, whose ranks ``r_i`` are multiplied by ``1 + m`` (``m`` the batches
    remembered): their ``rank_normalised`` divides by the ``B`` columns, the denormalisation
    multiplies by the ``(1 + m) B`` rows. The mean over rows with a relevant item (the project's
    :class:`~rambo.core.RankLoss`) then includes the remembered rows, which carry no gradient.
    Every batch must have the same size (the rows are concatenated).

    Args:
        loss: a :class:`rambo.core.RecallLoss`. tau: number of previous batches remembered.
    """

    def __init__(self, loss: torch.nn.Module, tau: int):
        super().__init__(loss, tau)
        if "rank_scale" not in inspect.signature(getattr(loss, "row_losses", lambda: None)).parameters:
            raise TypeError(f"RowMemory needs a loss whose row_losses takes rank_scale (RecallLoss), got {type(loss).__name__}")

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        check_labels(embeddings, labels, finite=host_checks(embeddings))
        scores, relevant = pairwise_scores(embeddings, labels)
        remembered = self.remembered()
        if remembered and remembered[-1][0].shape[1] != scores.shape[1]:
            raise ValueError(
                f"RowMemory appends score rows of {remembered[-1][0].shape[1]} columns, got a batch of "
                f"{scores.shape[0]} ({scores.shape[1]} columns): every batch needs the same size. A DataLoader's "
                "smaller last batch does this: use drop_last=True, or call reset() before such a batch"
            )
        all_scores = torch.cat([scores] + [s.to(scores.device, scores.dtype) for s, _ in remembered])
        all_relevant = torch.cat([relevant] + [r.to(relevant.device) for _, r in remembered])
        self.remember(scores, relevant)
        return self.loss.mean_over_rows(all_scores, all_relevant, rank_scale=float(1 + len(remembered)))

