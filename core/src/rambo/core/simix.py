"""SiMix: similarity mixup of same-class pairs (Patel, Tolias, Matas, CVPR 2022)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .pairwise import check_labels


class SiMix(torch.nn.Module):
    """Wraps a loss called as ``loss(scores, relevant, valid)``; call as ``simix(embeddings, labels)``.

    ``mixes`` same-class pairs ``(a, b)`` of the batch are drawn uniformly, each with a weight
    ``w ~ U(0, 1)``. A mixed item's similarity to any item ``c`` is ``w s(a, c) + (1 - w) s(b, c)``
    (and bilinearly between two mixed items): the *similarities* are mixed, which for cosine scores
    equals the dot product with the unnormalised mixed embedding ``w e_a + (1 - w) e_b``. The mixed
    items act both as queries and as gallery items, labelled with their pair's class. An item never
    ranks itself, nor any item that shares one of its source elements (so a query is never its own
    positive, not even through a mix it took part in).

    Args:
        loss: e.g. :class:`RecallAtKSurrogate`. mixes: number of mixed items (default: batch size).
    """

    def __init__(self, loss: torch.nn.Module, mixes: int | None = None, generator: torch.Generator | None = None):
        super().__init__()
        if mixes is not None and (isinstance(mixes, bool) or int(mixes) != mixes or mixes < 0):
            raise ValueError(f"mixes must be an integer >= 0 (or None: as many as the batch size), got {mixes!r}")
        self.loss = loss
        self.mixes = None if mixes is None else int(mixes)
        self.generator = generator

    def mixed_batch(self, embeddings: torch.Tensor, labels: torch.Tensor):
        """``(scores [B+M, B+M], relevant, valid)`` of the batch extended by M mixed items."""
        check_labels(embeddings, labels)
        b = embeddings.shape[0]
        unit = F.normalize(embeddings, dim=1)
        same = (labels.unsqueeze(1) == labels.unsqueeze(0)).triu(diagonal=1)
        pairs = same.nonzero()  # [num_pairs, 2]
        sources = torch.stack([torch.arange(b, device=labels.device)] * 2, dim=1)  # originals: (i, i)
        items, item_labels = unit, labels
        if self.training and pairs.shape[0] and (self.mixes is None or self.mixes > 0):
            mixes = b if self.mixes is None else self.mixes
            # Drawn where the generator lives (the global CPU generator when none is given), whatever
            # torch's default device: the same draws on the CPU and on a GPU.
            draw_on = self.generator.device if self.generator is not None else torch.device("cpu")
            pick = torch.randint(pairs.shape[0], (mixes,), generator=self.generator, device=draw_on).to(pairs.device)
            chosen = pairs[pick]
            weight = torch.rand(mixes, 1, generator=self.generator, dtype=unit.dtype, device=draw_on).to(unit.device)
            mixed = weight * unit[chosen[:, 0]] + (1 - weight) * unit[chosen[:, 1]]
            items = torch.cat([unit, mixed])
            item_labels = torch.cat([labels, labels[chosen[:, 0]]])
            sources = torch.cat([sources, chosen])
        scores = items @ items.transpose(0, 1)
        relevant = item_labels.unsqueeze(1) == item_labels.unsqueeze(0)
        shares = (sources.unsqueeze(1).unsqueeze(3) == sources.unsqueeze(0).unsqueeze(2)).flatten(2).any(-1)
        return scores, relevant, ~shares

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss(*self.mixed_batch(embeddings, labels))
