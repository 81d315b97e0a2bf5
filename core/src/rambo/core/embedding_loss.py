"""The embedding-level entry point: `loss(embeddings, labels)`, as metric-learning losses are called.

Every loss of `rambo.core` is written on scores: `loss(scores [Q, N], relevant [Q, N] bool)`,
one row per query, ranking that row's items (detection's `[N, C]` class scores use this level
directly). [`EmbeddingLoss`][rambo.core.EmbeddingLoss] turns such a loss into one called on embeddings and labels:

* `loss(embeddings, labels)`: each element of the batch is a query ranking every *other* element
  of the batch by cosine similarity (the query is left out of its own row, so it is never its own
  positive; paper Sec. 5.1), followed by the remembered batches of the score memory (`tau > 0`,
  Sec. 4.3);
* `loss(embeddings, labels, ref_embeddings, ref_labels)`: each embedding is a query ranking the
  reference set (nothing is left out: the reference set is another set of elements).

Under an initialised process group (torchrun / DDP) the loss ranks the global batch: every process's
share is gathered with gradient ([`rambo.core.distributed.global_batch`][rambo.core.distributed.global_batch]), so N
processes compute the one-process loss and every score memory holds the same global batches in the same order.
`global_batch=False` keeps the per-process loss (each process ranks its own share and remembers
its own batches).
"""

from __future__ import annotations

import torch

from .distributed import global_batch
from .loss_path import host_checks
from .pairwise import check_labels, pairwise_scores, unit_rows
from .score_memory import _BatchMemory


def check_bool(value, name: str) -> bool:
    """`value` itself when it is True or False; `ValueError` naming `name` otherwise."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


class EmbeddingLoss(_BatchMemory):
    """A score-level loss called on embeddings: `loss(embeddings, labels[, ref_embeddings, ref_labels])`.

    Args:
        loss: a loss called as `loss(scores [Q, N], relevant [Q, N] bool)`: [`RecallLoss`][rambo.core.RecallLoss],
            [`APLoss`][rambo.core.APLoss], [`RecallAtKSurrogate`][rambo.core.RecallAtKSurrogate],
            [`FastAPLoss`][rambo.core.FastAPLoss], [`SmoothAPLoss`][rambo.core.SmoothAPLoss], or one of your own.
            ([`MAPLoss`][rambo.core.MAPLoss] and [`APCLoss`][rambo.core.APCLoss] rank the items of each *class* of an
            `[N, C]` score matrix, detection's setting; for retrieval, [`APLoss`][rambo.core.APLoss] here is the mAP
            over queries.)
        tau: the score memory: each query also ranks the embeddings of the last `tau` batches
            (stored detached and normalised; the paper: 3 for retrieval, Sec. 4.3). 0: no memory.
            The memory is filled in training mode only and travels with `state_dict()`.
        global_batch: under an initialised process group, rank the batch of every process (True, the
            default: N processes compute the one-process loss) or each process's own share (False).

    Call:
        `loss(embeddings, labels)`: `embeddings [B, D]` floating (any scale: they are normalised
        to unit length, so the scores are cosine similarities in [-1, 1], the units of `margin` and
        `lam`), `labels [B]` integer (elements with equal labels are relevant to each other).
        Each element ranks the `B - 1` others, then the `M` remembered elements:
        scores `[B, B - 1 + M]`.

        `loss(embeddings, labels, ref_embeddings, ref_labels)`: `ref_embeddings [R, D]`,
        `ref_labels [R]`; each embedding ranks the R references: scores `[B, R]`. Gradients
        reach both sets. Not with a memory (`tau > 0`): the memory extends a batch's own ranking.

    Returns:
        A 0-dimensional tensor: the wrapped loss over the queries that have a relevant item.
    """

    def __init__(self, loss: torch.nn.Module, tau: int = 0, global_batch: bool = True):
        if isinstance(loss, (_BatchMemory, EmbeddingLoss)) or not callable(loss):
            raise ValueError(
                f"EmbeddingLoss wraps a loss called on scores, loss(scores, relevant), got {type(loss).__name__}: "
                "pass the loss itself, e.g. EmbeddingLoss(RecallLoss(), tau=3)"
            )
        if getattr(loss, "ranked_dim", -1) not in (-1, 1):
            raise ValueError(
                f"{type(loss).__name__} ranks the items of each class of an [N, C] score matrix (detection), "
                "not the references of each query: wrap APLoss instead, the mAP over queries"
            )
        super().__init__(loss, tau)
        self.global_batch = check_bool(global_batch, "global_batch")

    def scores_and_relevance(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The scores and relevance that the wrapped loss receives (no gathering, no memory update):
        `[B, B - 1 + M]` for the batch against itself and the memory, `[B, R]` against a reference set."""
        if ref_embeddings is not None:
            unit, ref_unit = unit_rows(embeddings), unit_rows(ref_embeddings)
            return unit @ ref_unit.transpose(0, 1), labels.unsqueeze(1) == ref_labels.unsqueeze(0)
        scores, relevant = pairwise_scores(embeddings, labels)
        held = self.held()
        if held is None:
            return scores, relevant
        memory, memory_labels = held
        if memory.shape[1] != embeddings.shape[1]:
            raise ValueError(
                f"the score memory holds embeddings of size {memory.shape[1]}, got a batch of size "
                f"{embeddings.shape[1]}: the embedding size changed; call reset() after changing the model"
            )
        # a copy: the product saves it for the backward pass, and the next batch overwrites the memory
        memory = memory.to(embeddings.device, embeddings.dtype, copy=True)
        unit = unit_rows(embeddings)
        scores = torch.cat([scores, unit @ memory.transpose(0, 1)], dim=1)
        relevant = torch.cat([relevant, labels.unsqueeze(1) == memory_labels.to(labels.device).unsqueeze(0)], dim=1)
        return scores, relevant

    def forward(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        finite = host_checks(embeddings)
        check_labels(embeddings, labels, finite=finite)
        if (ref_embeddings is None) != (ref_labels is None):
            raise ValueError("pass ref_embeddings and ref_labels together (the reference set), or neither")
        if ref_embeddings is not None:
            check_labels(ref_embeddings, ref_labels, finite=finite, names=("ref_embeddings", "ref_labels"))
            if ref_embeddings.shape[1] != embeddings.shape[1]:
                raise ValueError(
                    f"embeddings have size {embeddings.shape[1]}, ref_embeddings {ref_embeddings.shape[1]}: "
                    "both sets need the same embedding size"
                )
            if self.tau:
                raise ValueError(
                    "a reference set and a score memory do not combine: the memory extends the batch's own "
                    "ranking; use tau=0 with ref_embeddings"
                )
        if self.global_batch:
            if ref_embeddings is None:
                embeddings, labels = global_batch(embeddings, labels)
            else:
                embeddings, labels, ref_embeddings, ref_labels = global_batch(
                    embeddings, labels, ref_embeddings, ref_labels
                )
        value = self.loss(*self.scores_and_relevance(embeddings, labels, ref_embeddings, ref_labels))
        if ref_embeddings is None:
            self.remember(unit_rows(embeddings.detach()), labels)
        return value

    def extra_repr(self) -> str:
        return f"tau={self.tau}, global_batch={self.global_batch}"


class EmbeddingMemory(EmbeddingLoss):
    """[`EmbeddingLoss`][rambo.core.EmbeddingLoss] with a score memory of `tau` batches (paper Sec. 4.3), named for it:
    `EmbeddingMemory(loss, tau)` is `EmbeddingLoss(loss, tau=tau)`; called as `memory(embeddings, labels)`."""

    def __init__(self, loss: torch.nn.Module, tau: int, global_batch: bool = True):
        super().__init__(loss, tau=tau, global_batch=global_batch)
