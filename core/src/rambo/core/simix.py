"""SiMix: similarity mixup of same-class pairs (Patel, Tolias, Matas, CVPR 2022)."""

from __future__ import annotations

import torch

from .distributed import global_batch
from .pairwise import check_labels, unit_rows
from .validation import check_integer


class SiMix(torch.nn.Module):
    """Wraps a loss called as `loss(scores, relevant, valid)`; call as `simix(embeddings, labels)`.

    Pairs. `mixes=None` (default): every same-class pair `(a, b)`, `a < b`, of the batch once,
    as the official code (yash0307/RecallatK_surrogate, src/mixup.py@275cc0de52e364cedb8a8e9bdedebde7780b18e2,
    `pos_mixup`: all C(m, 2) pairs of each class's m samples, C(4, 2) = 6 per class of 4, so 1.5 x
    the batch at 4 per class). `mixes=M`: M pairs drawn uniformly, with replacement, from those.
    Each mixed item has its own weight `w ~ U(0, 1)` (the official code: `np.random.rand()` per
    pair), drawn from `generator`.

    A mixed item's similarity to any item `c` is `w s(a, c) + (1 - w) s(b, c)` (and bilinearly
    between two mixed items): the *similarities* are mixed, which for cosine scores equals the dot
    product with the mixed embedding `w e_a + (1 - w) e_b` of the unit embeddings, not re-normalised
    (as the official code, whose loss takes dot products of the mixed embeddings). The mixed items act
    both as queries and as gallery items, labelled with their pair's class (as the official code,
    which appends them to the batch and takes every item of the extended batch as a query). An item
    never ranks itself, nor any item that shares one of its source elements (so a query is never its
    own positive, not even through a mix it took part in).

    Args:
        loss: e.g. [`RecallAtKSurrogate`][rambo.core.RecallAtKSurrogate].
        mixes: `None`: every same-class pair once (official); an integer: that many random pairs.
        generator: for the pair draws and the weights (default: torch's global CPU generator).
        global_batch: under an initialised process group, mix and rank the batch of every process
            (True: N processes compute the one-process loss, [`rambo.core.distributed`][rambo.core.distributed]; the
            processes' generators must then draw alike, e.g. seeded alike) or each process's own share (False).

    Call: `simix(embeddings [B, D] float, labels [B] int)` -> a 0-dimensional loss.
    """

    def __init__(
        self,
        loss: torch.nn.Module,
        mixes: int | None = None,
        generator: torch.Generator | None = None,
        global_batch: bool = True,
    ):
        super().__init__()
        self.loss = loss
        self.mixes = None if mixes is None else check_integer(mixes, "mixes", 0, "or None: every same-class pair once")
        self.generator = generator
        if not isinstance(global_batch, bool):
            raise ValueError(f"global_batch must be True or False, got {global_batch!r}")
        self.global_batch = global_batch

    def mixed_batch(self, embeddings: torch.Tensor, labels: torch.Tensor):
        """`(scores [B+M, B+M], relevant, valid)` of the batch extended by M mixed items."""
        check_labels(embeddings, labels)
        b = embeddings.shape[0]
        unit = unit_rows(embeddings)
        pairs = (labels.unsqueeze(1) == labels.unsqueeze(0)).triu(diagonal=1).nonzero()  # [num_pairs, 2], a < b
        sources = torch.stack([torch.arange(b, device=labels.device)] * 2, dim=1)  # originals: (i, i)
        items, item_labels = unit, labels
        if self.training and pairs.shape[0] and self.mixes != 0:
            # Drawn where the generator lives (the global CPU generator when none is given), whatever
            # torch's default device: the same draws on the CPU and on a GPU.
            draw_on = self.generator.device if self.generator is not None else torch.device("cpu")
            if self.mixes is None:
                chosen = pairs
            else:
                pick = torch.randint(pairs.shape[0], (self.mixes,), generator=self.generator, device=draw_on)
                chosen = pairs[pick.to(pairs.device)]
            weight = torch.rand(chosen.shape[0], 1, generator=self.generator, dtype=unit.dtype, device=draw_on)
            weight = weight.to(unit.device)
            mixed = weight * unit[chosen[:, 0]] + (1 - weight) * unit[chosen[:, 1]]
            items = torch.cat([unit, mixed])
            item_labels = torch.cat([labels, labels[chosen[:, 0]]])
            sources = torch.cat([sources, chosen])
        scores = items @ items.transpose(0, 1)
        relevant = item_labels.unsqueeze(1) == item_labels.unsqueeze(0)
        # Items x and y share a source when any of x's two equals any of y's: four [N, N] comparisons
        # ORed in place (at most two [N, N] bool tensors alive, not one [N, N, 2, 2]).
        first, second = sources[:, 0], sources[:, 1]
        shares = first.unsqueeze(1) == first.unsqueeze(0)
        shares |= first.unsqueeze(1) == second.unsqueeze(0)
        shares |= second.unsqueeze(1) == first.unsqueeze(0)
        shares |= second.unsqueeze(1) == second.unsqueeze(0)
        return scores, relevant, ~shares

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.global_batch:
            check_labels(embeddings, labels, finite=False)
            embeddings, labels = global_batch(embeddings, labels)
        return self.loss(*self.mixed_batch(embeddings, labels))

    def extra_repr(self) -> str:
        return f"mixes={'every same-class pair once' if self.mixes is None else self.mixes}"
