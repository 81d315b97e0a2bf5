"""Score memory (paper Sec. 4.3): the last `tau` batches extend the *ranking*, not the queries.

Two wrappers in the spirit of pytorch-metric-learning's `CrossBatchMemory`:

* [`ScoreMemory`][rambo.core.ScoreMemory] for precomputed score rows (detection): the stored, detached scores of the
  last `tau` batches are concatenated to the current ones along the loss's ranked dimension.
* [`rambo.core.EmbeddingMemory`][rambo.core.EmbeddingMemory] (`embedding_loss`) for retrieval: the current queries
  are scored against the other elements of the current batch *and* the stored, detached embeddings
  of the last `tau` batches.

In both, gradients reach only the current batch, and the number of queries stays the batch's own.

[`RowMemory`][rambo.core.RowMemory] is the authors' variant (martius-lab/blackbox-backprop `BatchMemoryRecallLoss`
at 075bf56), for comparison: the detached score *rows* of the last `tau` batches are appended as
more queries (the ranking stays the current batch), and, as their `RecallLoss` denormalises the
ranks by the number of rows, every rank is multiplied by the number of batches in the loss.

The memory is filled only in training mode and travels with `state_dict()` so that a resumed run
continues with the same memory.
"""

from __future__ import annotations

import inspect

import torch

from .distributed import global_batch
from .loss_path import host_checks, is_compiling
from .pairwise import check_labels, pairwise_scores
from .validation import check_integer, check_scores_and_relevance


class _BatchMemory(torch.nn.Module):
    """The last `tau` batches, held as two detached tensors (the batches' `first` and `second`
    parts, oldest batch first, concatenated along dimension `dim`), saved with `state_dict()`.

    A full memory is shifted in place: once it holds `tau` batches of one size, each new batch of
    that size drops the oldest by a copy into the same two tensors, so they keep their shape and
    their address from then on. A CUDA graph needs that (it replays fixed addresses), and a compiled
    loss then sees the same shapes at every step. While the memory fills, and when a batch of
    another size arrives, the two tensors are rebuilt. The order is the same either way, so what a
    loss receives does not depend on which happened (ties are broken by position).

    Under `torch.compile` the memory is rebuilt at every batch instead (new tensors, the same
    values): a compiled backward may read the memory again rather than keep a copy (inductor does),
    and an in-place shift would change what it reads. For CUDA graphs of a compiled step use
    `mode="reduce-overhead"`, which copies its inputs to fixed addresses itself.
    """

    dim = 0  # the dimension the batches are concatenated along

    def __init__(self, loss: torch.nn.Module, tau: int):
        super().__init__()
        self.loss = loss
        self.tau = check_integer(tau, "tau", 0, "the number of remembered batches")
        self._first: torch.Tensor | None = None
        self._second: torch.Tensor | None = None
        self._sizes: list[int] = []  # each remembered batch's length along `dim`, oldest first

    def __len__(self) -> int:
        """The number of batches remembered."""
        return len(self._sizes)

    def remember(self, first: torch.Tensor, second: torch.Tensor) -> None:
        """Store one batch (detached, copied), only in training mode and when `tau > 0`."""
        if not (self.training and self.tau):
            return
        first, second = first.detach(), second.detach()
        size = first.shape[self.dim]
        if (
            len(self._sizes) == self.tau
            and all(held == size for held in self._sizes)
            and not is_compiling()
            and self._holds_like(self._first, first)
            and self._holds_like(self._second, second)
        ):
            for held, new in ((self._first, first), (self._second, second)):  # in place: same shape, same address
                held.copy_(torch.cat([held.narrow(self.dim, size, held.shape[self.dim] - size), new], self.dim))
            return
        kept = self._sizes[max(0, len(self._sizes) - self.tau + 1) :]
        dropped = sum(self._sizes) - sum(kept)
        self._first = self._appended(self._first, dropped, first)
        self._second = self._appended(self._second, dropped, second)
        self._sizes = kept + [size]

    def _holds_like(self, held: torch.Tensor | None, new: torch.Tensor) -> bool:
        """True when `held` is `tau` batches shaped like `new` (same dtype and device)."""
        if held is None or held.dtype != new.dtype or held.device != new.device:
            return False
        shape = list(new.shape)
        shape[self.dim] *= self.tau
        return list(held.shape) == shape

    def _appended(self, held: torch.Tensor | None, dropped: int, new: torch.Tensor) -> torch.Tensor:
        if held is None or held.shape[self.dim] == dropped:
            return new.clone(memory_format=torch.contiguous_format)
        kept = held.narrow(self.dim, dropped, held.shape[self.dim] - dropped)
        return torch.cat([kept.to(new.device, new.dtype), new], self.dim)

    def held(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The remembered batches as two tensors (oldest first, along `dim`), or None when empty.
        They are the memory itself, overwritten in place by the next `remember`: copy what
        must outlive it (the wrapped losses read copies)."""
        return (self._first, self._second) if self._sizes else None

    def remembered(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The remembered batches, oldest first, as `(first, second)` views of the memory."""
        if not self._sizes:
            return []
        return list(zip(self._first.split(self._sizes, self.dim), self._second.split(self._sizes, self.dim)))

    def reset(self) -> None:
        """Forget every remembered batch."""
        self._first = self._second = None
        self._sizes = []

    def get_extra_state(self) -> dict:
        return {"batches": [(a.cpu(), b.cpu()) for a, b in self.remembered()]}

    def set_extra_state(self, state: dict) -> None:
        self.reset()
        batches = list(state["batches"])[-self.tau :] if self.tau else []
        if batches:
            self._first = torch.cat([a for a, _ in batches], self.dim)
            self._second = torch.cat([b for _, b in batches], self.dim)
            self._sizes = [a.shape[self.dim] for a, _ in batches]


class ScoreMemory(_BatchMemory):
    """Wraps a loss called as `loss(scores, relevant)`; extends its ranked dimension by memory.

    Args:
        loss: e.g. `MAPLoss` (ranked dimension 0: items) or `APLoss` (ranked dimension -1).
        tau: number of previous batches remembered (paper: 7 for detection); 0 disables it.
    """

    def __init__(self, loss: torch.nn.Module, tau: int):
        super().__init__(loss, tau)
        self.dim = getattr(loss, "ranked_dim", -1)

    def forward(self, scores: torch.Tensor, relevant: torch.Tensor) -> torch.Tensor:
        check_scores_and_relevance(scores, relevant, finite=host_checks(scores), loss=type(self.loss).__name__)
        held = self.held()
        kept = 1 if self.dim in (0, -2) else 0  # the dimension that is not ranked (the queries)
        all_scores, all_relevant = scores, relevant
        if held is not None:
            if held[0].shape[kept] != scores.shape[kept]:
                raise ValueError(
                    f"ScoreMemory extends dimension {self.dim} (the ranking), so every batch needs the same size "
                    f"in dimension {kept}: got scores {tuple(scores.shape)} after a remembered batch of "
                    f"{tuple(self.remembered()[-1][0].shape)}. A DataLoader's smaller last batch does this: use "
                    "drop_last=True, or call reset() before such a batch"
                )
            # the current batch first, then the remembered ones, oldest first (cat copies: the loss
            # never holds the memory itself, which the next batch overwrites)
            all_scores = torch.cat([scores, held[0].to(scores.device, scores.dtype)], dim=self.dim)
            all_relevant = torch.cat([relevant, held[1].to(relevant.device)], dim=self.dim)
        value = self.loss(all_scores, all_relevant)
        self.remember(scores, relevant)
        return value


class RowMemory(_BatchMemory):
    """The authors' batch memory for a [`rambo.core.RecallLoss`][rambo.core.RecallLoss]: `memory(embeddings, labels)`.

    The current `[B, B - 1]` cosine score rows ([`rambo.core.pairwise_scores`][rambo.core.pairwise_scores]) and those of
    the last `tau` batches (detached, kept as they were scored) are one `[(1 + m) B, B - 1]`
    input of the recall loss, whose ranks `r_i` are multiplied by `1 + m` (`m` the batches
    remembered): their `rank_normalised` divides by the `B` columns, the denormalisation
    multiplies by the `(1 + m) B` rows. The mean over rows with a relevant item (the project's
    [`RankLoss`][rambo.core.RankLoss]) then includes the remembered rows, which carry no gradient.
    Every batch must have the same size (the rows are concatenated).

    Args:
        loss: a [`rambo.core.RecallLoss`][rambo.core.RecallLoss].
        tau: number of previous batches remembered.
        global_batch: under an initialised process group, score the batch of every process (True:
            N processes compute the one-process loss, [`rambo.core.distributed`][rambo.core.distributed]) or each
            process's own share (False).

    Call: `memory(embeddings [B, D] float, labels [B] int)` -> a 0-dimensional loss.
    """

    def __init__(self, loss: torch.nn.Module, tau: int, global_batch: bool = True):
        super().__init__(loss, tau)
        if not isinstance(global_batch, bool):
            raise ValueError(f"global_batch must be True or False, got {global_batch!r}")
        self.global_batch = global_batch
        if "rank_scale" not in inspect.signature(getattr(loss, "row_losses", lambda: None)).parameters:
            raise TypeError(
                f"RowMemory needs a loss whose row_losses takes rank_scale (RecallLoss), got {type(loss).__name__}"
            )

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        check_labels(embeddings, labels, finite=host_checks(embeddings))
        if self.global_batch:
            embeddings, labels = global_batch(embeddings, labels)
        scores, relevant = pairwise_scores(embeddings, labels)
        held = self.held()
        if held is not None and held[0].shape[1] != scores.shape[1]:
            raise ValueError(
                f"RowMemory appends score rows of {held[0].shape[1]} columns, got a batch of "
                f"{scores.shape[0]} ({scores.shape[1]} columns): every batch needs the same size. A DataLoader's "
                "smaller last batch does this: use drop_last=True, or call reset() before such a batch"
            )
        batches = 1 + len(self)
        if held is not None:  # the current rows first, then the remembered ones, oldest first (cat copies)
            scores_all = torch.cat([scores, held[0].to(scores.device, scores.dtype)])
            relevant_all = torch.cat([relevant, held[1].to(relevant.device)])
        else:
            scores_all, relevant_all = scores, relevant
        self.remember(scores, relevant)
        return self.loss.mean_over_rows(scores_all, relevant_all, rank_scale=float(batches))
