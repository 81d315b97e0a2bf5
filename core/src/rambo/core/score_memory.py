"""Score memory (paper Sec. 4.3): the last ``tau`` batches extend the *ranking*, not the queries.

Two wrappers in the spirit of pytorch-metric-learning's ``CrossBatchMemory``:

* :class:`ScoreMemory` for precomputed score rows (detection): the stored, detached scores of the
  last ``tau`` batches are concatenated to the current ones along the loss's ranked dimension.
* :class:`EmbeddingMemory` for retrieval: the current queries are scored against the other
  elements of the current batch *and* the stored, detached embeddings of the last ``tau`` batches.

In both, gradients reach only the current batch, and the number of queries stays the batch's own.
The memory is filled only in training mode and travels with ``state_dict()`` so that a resumed run
continues with the same memory.
"""

from __future__ import annotations

from collections import deque

import torch
import torch.nn.functional as F

from .pairwise import check_labels, pairwise_scores
from .validation import check_scores_and_relevance


def _check_tau(tau: int) -> int:
    if int(tau) != tau or tau < 0:
        raise ValueError(f"tau (number of remembered batches) must be an integer >= 0, got {tau}")
    return int(tau)


class ScoreMemory(torch.nn.Module):
    """Wraps a loss called as ``loss(scores, relevant)``; extends its ranked dimension by memory.

    Args:
        loss: e.g. ``MAPLoss`` (ranked dimension 0: items) or ``APLoss`` (ranked dimension -1).
        tau: number of previous batches remembered (paper: 7 for detection); 0 disables it.
    """

    def __init__(self, loss: torch.nn.Module, tau: int):
        super().__init__()
        self.loss = loss
        self.tau = _check_tau(tau)
        self.dim = getattr(loss, "ranked_dim", -1)
        self._batches: deque[tuple[torch.Tensor, torch.Tensor]] = deque(maxlen=max(self.tau, 1))

    def forward(self, scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        check_scores_and_relevance(scores, relevant)
        remembered = list(self._batches) if self.tau else []
        all_scores = torch.cat([scores] + [s.to(scores.dtype) for s, _ in remembered], dim=self.dim)
        all_relevant = torch.cat([relevant] + [r for _, r in remembered], dim=self.dim)
        value = self.loss(all_scores, all_relevant)
        if self.training and self.tau:
            self._batches.append((scores.detach(), relevant.detach()))
        return value

    def reset(self) -> None:
        """Forget every remembered batch."""
        self._batches.clear()

    def get_extra_state(self) -> dict:
        return {"batches": [(s.cpu(), r.cpu()) for s, r in self._batches]}

    def set_extra_state(self, state: dict) -> None:
        self._batches.clear()
        self._batches.extend(state["batches"])


class EmbeddingMemory(torch.nn.Module):
    """Wraps a loss called as ``loss(scores, relevant)``; call it as ``memory(embeddings, labels)``.

    Each of the ``B`` current embeddings is a query; its row ranks the ``B - 1`` other current
    elements followed by the ``M`` remembered ones: ``scores: [B, B - 1 + M]`` (cosine scores).

    Args:
        loss: e.g. ``RecallLoss``. tau: number of previous batches remembered (paper: 3).
    """

    def __init__(self, loss: torch.nn.Module, tau: int):
        super().__init__()
        self.loss = loss
        self.tau = _check_tau(tau)
        self._batches: deque[tuple[torch.Tensor, torch.Tensor]] = deque(maxlen=max(self.tau, 1))

    def scores_and_relevance(self, embeddings: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``[B, B - 1 + M]`` scores and relevance that the wrapped loss receives."""
        scores, relevant = pairwise_scores(embeddings, labels)
        if self.tau and self._batches:
            memory = torch.cat([e for e, _ in self._batches]).to(embeddings.device, embeddings.dtype)
            memory_labels = torch.cat([l for _, l in self._batches]).to(labels.device)
            unit = F.normalize(embeddings, dim=1)
            scores = torch.cat([scores, unit @ memory.transpose(0, 1)], dim=1)
            relevant = torch.cat([relevant, labels.unsqueeze(1) == memory_labels.unsqueeze(0)], dim=1)
        return scores, relevant

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        check_labels(embeddings, labels)
        value = self.loss(*self.scores_and_relevance(embeddings, labels))
        if self.training and self.tau:
            self._batches.append((F.normalize(embeddings.detach(), dim=1), labels.detach()))
        return value

    def reset(self) -> None:
        """Forget every remembered batch."""
        self._batches.clear()

    def get_extra_state(self) -> dict:
        return {"batches": [(e.cpu(), l.cpu()) for e, l in self._batches]}

    def set_extra_state(self, state: dict) -> None:
        self._batches.clear()
        self._batches.extend(state["batches"])
