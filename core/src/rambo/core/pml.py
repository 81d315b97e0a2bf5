"""rambo.core's rank losses as pytorch-metric-learning (PML) loss functions: `pip install "./core[pml]"`.

(From a clone of the repository; the package is not on PyPI yet, where its name will be `rambo-core`.)

This module is the only one that imports PML; `import rambo.core` never does. Classes:

- [`RankLossAdapter`][rambo.core.pml.RankLossAdapter]`(loss, distance=None, reducer=None,
  embedding_regularizer=None, ...)`
- [`RaMBORecallLoss`][rambo.core.pml.RaMBORecallLoss]`(margin, lam, weighting, **pml_kwargs)`:
  [`RecallLoss`][rambo.core.RecallLoss] (Eq. 16-20)
- [`RaMBOAPLoss`][rambo.core.pml.RaMBOAPLoss]`(margin, lam, **pml_kwargs)`: [`APLoss`][rambo.core.APLoss]
  (Eq. 21-22)
- [`RecallAtKSurrogateLoss`][rambo.core.pml.RecallAtKSurrogateLoss]`(ks, tau1, tau2, clip_numerator,
  **pml_kwargs)`: [`RecallAtKSurrogate`][rambo.core.RecallAtKSurrogate]
- [`CrossBatchMemory`][rambo.core.pml.CrossBatchMemory]`(loss, embedding_size, memory_size, miner=None)`

Called as every PML loss: `loss(embeddings, labels, indices_tuple=None, ref_emb=None, ref_labels=None)`.

What a call computes. Each query (row of `embeddings`) ranks a set of reference items (rows of
`ref_emb`, default: the batch itself) by cosine similarity, and the wrapped rank loss is taken
per row over *exactly* that set, as `rambo.core` does on `pairwise_scores`:

* `indices_tuple=None`: every reference item except the query itself; relevant = same label.
* pairs `(a1, p, a2, n)` (a miner's output, or what `CrossBatchMemory` builds): query `a`
  ranks the `p` of its positive pairs (relevant) and the `n` of its negative pairs
  (irrelevant), nothing else. Queries that appear in no positive pair are not queries.
* triplets `(a, p, n)`: likewise; a rank loss does not use the triplets as triplets, only the
  set of positives and negatives each anchor is listed with.

The query never ranks itself: its own column when the reference set is the batch, and in a
separate reference set every entry that is an exact copy of it (the same bits and label). That is
how `CrossBatchMemory` works: it writes the current batch, detached, into its memory *before*
calling the loss (and removes the query's pair with its own copy from the indices it builds). The
adapter finds those copies and (a) leaves them out of their query's ranking, (b) puts the *live*
query embedding in their place for every other query, so that the gradient reaches the current
batch in both roles, as query and as ranked item, exactly as in the paper's score memory
(Sec. 4.3, [`rambo.core.EmbeddingMemory`][rambo.core.EmbeddingMemory]); older entries stay detached. Edge case: two
queries with bit-identical embeddings and the same label (the same image twice, no augmentation)
cannot be told apart in a reference set, and each is then left out of the other's ranking too.

Rows with different numbers of ranked items. The blackbox backward of the RaMBO losses perturbs
by `lam * N` with N the row's length, so each row must be ranked over exactly its items: the
rows are grouped by their number of items and each group is one dense `[rows, N]` call (no
placeholder scores). The surrogates rank over a `valid` mask, which is exact already.

Distances: cosine similarity only (`CosineSimilarity`, or `DotProductSimilarity` with
normalised embeddings); see [`check_distance`][rambo.core.pml.check_distance]. Reducers: see
[`check_reducer`][rambo.core.pml.check_reducer].
"""

from __future__ import annotations

try:
    from pytorch_metric_learning import losses as pml_losses
    from pytorch_metric_learning.distances import CosineSimilarity, DotProductSimilarity
    from pytorch_metric_learning.reducers import (
        AvgNonZeroReducer,
        DoNothingReducer,
        MeanReducer,
        MultipleReducers,
        PerAnchorReducer,
        ThresholdReducer,
    )
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError('rambo.core.pml needs pytorch-metric-learning: pip install "./core[pml]" from a clone') from error

import torch

from .ap_loss import APLoss
from .rank_loss import RankLoss
from .recall_at_k_surrogate import RecallAtKSurrogate
from .recall_loss import RecallLoss
from .surrogate_loss import SurrogateLoss
from .validation import check_scores_and_relevance

# Reducers whose result is a *mean over query rows* (of all of them, or of those past a filter).
# The blackbox backward perturbs the scores by lam * dL/drank, so the weight a reducer gives a row
# is part of that row's lambda: a mean over Q rows is rambo.core's own convention (RankLoss
# averages over its queries), a sum or a per-class weight would silently change lambda.
MEAN_REDUCERS = (MeanReducer, ThresholdReducer, AvgNonZeroReducer)


def check_distance(distance) -> None:
    """Raise `ValueError` unless `distance` computes cosine similarities.

    RaMBO ranks by cosine similarity (paper Sec. 5.1): the margin alpha (Eq. 14) and lambda are in
    units of scores in [-1, 1], and higher must mean closer. An `LpDistance` is a distance (lower
    = closer: the ranking would be upside down, and its negation is not in those units); an
    unnormalised dot product or `power != 1` changes the scale of the scores, hence what margin
    and lambda mean; `SNRDistance` and `BatchedDistance` are not similarities of two embeddings.
    """
    ok = (
        type(distance) in (CosineSimilarity, DotProductSimilarity)
        and distance.normalize_embeddings
        and distance.p == 2
        and distance.power == 1
    )
    if not ok:
        raise ValueError(
            "RaMBO rank losses need cosine similarity scores (distance=CosineSimilarity(), the default): "
            "the margin and lambda are in units of scores in [-1, 1] and a higher score must mean closer; "
            f"got {distance!r} (type {type(distance).__name__}, normalize_embeddings="
            f"{getattr(distance, 'normalize_embeddings', None)}, p={getattr(distance, 'p', None)}, "
            f"power={getattr(distance, 'power', None)}). LpDistance ranks upside down, an unnormalised dot "
            "product or power != 1 rescales the scores (changing what margin and lambda mean)."
        )


def check_reducer(reducer) -> None:
    """Raise `ValueError` unless `reducer` reduces the per-query losses by a mean over queries.

    The adapter hands the reducer one loss per query row (`reduction_type="element"`, indices =
    the query rows). Accepted: `MeanReducer` (the default: rambo.core's mean over the queries
    that have a relevant item), `ThresholdReducer` / `AvgNonZeroReducer` (the mean over the
    queries whose loss passes the filter, i.e. the rank loss of those queries), `DoNothingReducer`
    (the per-query losses, for you to reduce), and `PerAnchorReducer` / `MultipleReducers`
    around accepted reducers. Refused: `SumReducer`, `ClassWeightedReducer`, `DivisorReducer`
    and unknown reducers, because a weight on a rank loss's value is a change of its lambda (the
    blackbox backward perturbs by `lam * dL/drank`); weight the gradient with
    [`rambo.core.scale_gradient`][rambo.core.scale_gradient] on the embeddings instead.
    """
    if type(reducer) in MEAN_REDUCERS or type(reducer) is DoNothingReducer:
        return
    if type(reducer) is PerAnchorReducer:
        check_reducer(reducer.reducer)
        return
    if type(reducer) is MultipleReducers:
        for inner in list(reducer.reducers.values()) + [reducer.default_reducer]:
            check_reducer(inner)
        return
    raise ValueError(
        f"reducer {type(reducer).__name__} is not supported by RaMBO rank losses: a rank loss gives one "
        "loss per query, and only a mean over queries keeps lambda's meaning (the blackbox backward "
        "perturbs the scores by lam * dL/drank, so weighting or summing the row losses changes lambda). "
        "Use MeanReducer (default), ThresholdReducer, AvgNonZeroReducer or DoNothingReducer; to weight "
        "the loss, use rambo.core.scale_gradient on the embeddings."
    )


def _bit_rows(x: torch.Tensor) -> torch.Tensor:
    """The rows of a float matrix as integer words (a view of the same bits)."""
    x = x.detach().contiguous()
    word = torch.int16 if x.element_size() == 2 else torch.int32
    return x.view(word)


def _fingerprints(words: torch.Tensor) -> torch.Tensor:
    """One int64 per row, equal for bit-identical rows (exact integer arithmetic, no overflow:
    words < 2**31 times coefficients < 2**15 summed over at most 2**16 words)."""
    words = words[:, : 2**16].to(torch.int64)
    generator = torch.Generator(device="cpu").manual_seed(20200613)
    coefficients = torch.randint(1, 2**15, (words.shape[1],), generator=generator).to(words.device)
    return (words * coefficients).sum(1)


def own_copies(embeddings, labels, ref_emb, ref_labels) -> tuple[torch.Tensor, torch.Tensor]:
    """`(query rows, reference rows)` of the reference entries that are exact copies of a query:
    the same bits and, when both label sets are given, the same label."""
    q_words, r_words = _bit_rows(embeddings), _bit_rows(ref_emb)
    same = _fingerprints(q_words).unsqueeze(1) == _fingerprints(r_words).unsqueeze(0)
    if labels is not None and ref_labels is not None:
        same &= labels.unsqueeze(1) == ref_labels.unsqueeze(0)
    rows, cols = same.nonzero(as_tuple=True)
    if rows.numel():
        exact = (q_words[rows] == r_words[cols]).all(1)  # the fingerprint only preselects
        rows, cols = rows[exact], cols[exact]
    return rows, cols


class RankLossAdapter(pml_losses.BaseMetricLossFunction):
    """A rambo.core rank loss (`loss(scores [Q, N], relevant [Q, N])`) as a PML loss function.

    Args:
        loss: a [`rambo.core.RankLoss`][rambo.core.RankLoss] that ranks along the last dimension (`RecallLoss`,
            `APLoss`, `RecallAtKSurrogate`, `SmoothAPLoss`, `FastAPLoss`; not `MAPLoss` /
            `APCLoss`, which rank items per class).
        distance: `CosineSimilarity()` (default); see [`check_distance`][rambo.core.pml.check_distance].
        reducer: `MeanReducer()` (default); see [`check_reducer`][rambo.core.pml.check_reducer].
        **kwargs: PML's other options (`embedding_regularizer`, `collect_stats`).

    See the module docstring for what a call computes (self-exclusion, indices tuples, memory).
    """

    def __init__(self, loss: RankLoss, **kwargs):
        if not isinstance(loss, RankLoss) or getattr(loss, "ranked_dim", -1) not in (-1, 1):
            raise ValueError(
                "loss must be a rambo.core RankLoss that ranks along the last dimension (RecallLoss, APLoss, "
                f"RecallAtKSurrogate, SmoothAPLoss, FastAPLoss), got {type(loss).__name__}; for a memory, "
                "wrap the adapter in CrossBatchMemory instead of passing ScoreMemory/EmbeddingMemory"
            )
        super().__init__(**kwargs)
        self.rank_loss = loss
        check_distance(self.distance)
        check_reducer(self.reducer)

    def get_default_distance(self):
        return CosineSimilarity()

    def compute_loss(self, embeddings, labels, indices_tuple, ref_emb, ref_labels):
        num_queries, num_items = embeddings.shape[0], ref_emb.shape[0]
        device = embeddings.device
        if ref_emb is embeddings:
            self_rows = self_cols = torch.arange(num_queries, device=device)
            scores = self.distance(embeddings)
        else:
            if ref_emb.dim() != 2 or ref_emb.shape[1] != embeddings.shape[1]:
                raise ValueError(f"ref_emb must be [items, {embeddings.shape[1]}], got {tuple(ref_emb.shape)}")
            self_rows, self_cols = own_copies(embeddings, labels, ref_emb, ref_labels)
            if self_cols.numel():
                # One query per copied entry (the first, if identical queries share it), live.
                first = torch.full((num_items,), num_queries, device=device).scatter_reduce(
                    0, self_cols, self_rows, reduce="amin"
                )
                cols = (first < num_queries).nonzero(as_tuple=True)[0]
                ref_emb = ref_emb.index_put((cols,), embeddings[first[cols]].to(ref_emb.dtype))
            scores = self.distance(embeddings, ref_emb)
        valid, relevant = self.ranked_items(labels, ref_labels, indices_tuple, num_queries, num_items, device)
        valid[self_rows, self_cols] = False  # the query never ranks itself
        relevant &= valid
        queries = relevant.any(1).nonzero(as_tuple=True)[0]
        if queries.numel() == 0:
            return self.zero_losses()
        losses = self.row_losses(scores, relevant, valid, queries)
        return {"loss": {"losses": losses, "indices": queries, "reduction_type": "element"}}

    @staticmethod
    def ranked_items(labels, ref_labels, indices_tuple, num_queries, num_items, device):
        """`(valid, relevant)`, both `[queries, items]` bool: what each query ranks, and which of
        those are relevant (from the labels, or from the indices tuple's positive/negative roles)."""
        if indices_tuple is None:
            if labels is None or ref_labels is None:
                raise ValueError("labels (and ref_labels with ref_emb) are needed when indices_tuple is None")
            relevant = labels.unsqueeze(1) == ref_labels.to(labels.device).unsqueeze(0)
            return torch.ones_like(relevant), relevant
        if len(indices_tuple) == 4:
            a1, p, a2, n = indices_tuple
        elif len(indices_tuple) == 3:
            a1, p, n = indices_tuple
            a2 = a1
        else:
            raise ValueError(
                f"indices_tuple must be pairs (a1, p, a2, n) or triplets (a, p, n), got {len(indices_tuple)} tensors"
            )
        a1, p, a2, n = (torch.as_tensor(x, device=device).long().view(-1) for x in (a1, p, a2, n))
        if a1.shape != p.shape or a2.shape != n.shape:
            raise ValueError("indices_tuple: anchors and positives (negatives) must have the same length")
        for name, index, size in (
            ("anchor", a1, num_queries),
            ("anchor", a2, num_queries),
            ("positive", p, num_items),
            ("negative", n, num_items),
        ):
            if index.numel() and (int(index.min()) < 0 or int(index.max()) >= size):
                raise ValueError(f"indices_tuple: {name} index out of range [0, {size})")
        positive = torch.zeros(num_queries, num_items, dtype=torch.bool, device=device)
        negative = torch.zeros_like(positive)
        positive[a1, p] = True
        negative[a2, n] = True
        if bool((positive & negative).any()):
            raise ValueError("indices_tuple lists a pair both as positive and as negative")
        return positive | negative, positive

    def row_losses(self, scores, relevant, valid, queries):
        """The wrapped loss of each query row, over exactly its valid items, in `queries` order."""
        scores, relevant, valid = scores[queries], relevant[queries], valid[queries]
        if isinstance(self.rank_loss, SurrogateLoss):  # ranks over a valid mask: exact as it is
            check_scores_and_relevance(scores, relevant)
            return self.rank_loss.row_losses(scores, relevant, valid)
        counts = valid.sum(1)
        if bool((counts == scores.shape[1]).all()):
            check_scores_and_relevance(scores, relevant)
            return self.rank_loss.row_losses(scores, relevant)
        by_count = torch.argsort(counts, stable=True)
        sizes, group_lengths = torch.unique_consecutive(counts[by_count], return_counts=True)
        pieces = []
        for rows, size in zip(torch.split(by_count, group_lengths.tolist()), sizes.tolist()):
            columns = valid[rows].nonzero(as_tuple=True)[1].view(rows.shape[0], size)  # ascending
            group_scores = scores[rows.unsqueeze(1), columns]
            group_relevant = relevant[rows.unsqueeze(1), columns]
            check_scores_and_relevance(group_scores, group_relevant)
            pieces.append(self.rank_loss.row_losses(group_scores, group_relevant))
        return torch.cat(pieces)[torch.argsort(by_count)]


class RaMBORecallLoss(RankLossAdapter):
    """[`rambo.core.RecallLoss`][rambo.core.RecallLoss] (Eq. 16-20) as a PML loss; PML options as keyword arguments."""

    def __init__(self, margin: float = 0.0, lam: float = 4.0, weighting: str = "log", **kwargs):
        super().__init__(RecallLoss(margin, lam, weighting), **kwargs)


class RaMBOAPLoss(RankLossAdapter):
    """[`rambo.core.APLoss`][rambo.core.APLoss] (Eq. 21-22) as a PML loss; PML options as keyword arguments."""

    def __init__(self, margin: float = 0.0, lam: float = 0.5, **kwargs):
        super().__init__(APLoss(margin, lam), **kwargs)


class RecallAtKSurrogateLoss(RankLossAdapter):
    """[`rambo.core.RecallAtKSurrogate`][rambo.core.RecallAtKSurrogate] as a PML loss; PML options as keyword
    arguments."""

    def __init__(self, ks=(1, 2, 4, 8, 16), tau1: float = 0.01, tau2=1.0, clip_numerator: bool = True, **kwargs):
        super().__init__(RecallAtKSurrogate(ks, tau1, tau2, clip_numerator), **kwargs)


def _adapter_names() -> set[str]:
    names, stack = set(), [RankLossAdapter]
    while stack:
        cls = stack.pop()
        names.add(cls.__name__)
        stack.extend(cls.__subclasses__())
    return names


class CrossBatchMemory(pml_losses.CrossBatchMemory):
    """PML's `CrossBatchMemory`, unchanged except that it accepts the adapters of this module.

    PML's own class refuses every loss not on its list (`check_loss_support`, by class name).
    With an adapter inside, it is the paper's score memory (Sec. 4.3): see the module docstring.
    `memory_size = (tau + 1) * batch_size` holds the current batch and the `tau` before it,
    as `rambo.core.EmbeddingMemory(loss, tau)` does.
    """

    @classmethod
    def check_loss_support(cls, loss_name):
        if loss_name not in _adapter_names():
            super().check_loss_support(loss_name)


__all__ = [
    "CrossBatchMemory",
    "RaMBOAPLoss",
    "RaMBORecallLoss",
    "RankLossAdapter",
    "RecallAtKSurrogateLoss",
    "check_distance",
    "check_reducer",
    "own_copies",
]
