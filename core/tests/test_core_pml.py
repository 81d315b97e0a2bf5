"""rambo.core's losses as pytorch-metric-learning losses (rambo.core.pml): the same values and
gradients as rambo.core, and PML's CrossBatchMemory around them is the paper's score memory."""

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("pytorch_metric_learning")

from pytorch_metric_learning import distances, miners, reducers  # noqa: E402
from pytorch_metric_learning import losses as pml_losses  # noqa: E402

from rambo.core import APLoss, EmbeddingMemory, MAPLoss, RecallAtKSurrogate, RecallLoss, pairwise_scores  # noqa: E402
from rambo.core.pml import (  # noqa: E402
    CrossBatchMemory,
    RaMBOAPLoss,
    RaMBORecallLoss,
    RankLossAdapter,
    RecallAtKSurrogateLoss,
)

PAIRS = {
    "recall": (lambda: RaMBORecallLoss(0.1, 4.0), lambda: RecallLoss(0.1, 4.0)),
    "recall loglog": (lambda: RaMBORecallLoss(0.0, 4.0, "loglog"), lambda: RecallLoss(0.0, 4.0, "loglog")),
    "ap": (lambda: RaMBOAPLoss(0.1, 0.5), lambda: APLoss(0.1, 0.5)),
    "recall@k": (lambda: RecallAtKSurrogateLoss((1, 2, 4), 0.05), lambda: RecallAtKSurrogate((1, 2, 4), 0.05)),
}


def value_and_grad(function, embeddings):
    """``function(leaf)`` and its gradient w.r.t. a fresh leaf copy of ``embeddings``."""
    leaf = embeddings.detach().clone().requires_grad_()
    value = function(leaf)
    value.backward()
    return value.detach(), leaf.grad


def assert_same(first, second):
    assert first[0].item() == pytest.approx(second[0].item(), rel=1e-6, abs=1e-7)
    torch.testing.assert_close(first[1], second[1], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", PAIRS)
def test_adapter_equals_rambo_core_on_the_batch(name):
    """loss(embeddings, labels) equals rambo.core's loss on pairwise_scores: value and gradient."""
    adapter, loss = PAIRS[name][0](), PAIRS[name][1]()
    embeddings, labels = torch.randn(24, 8), torch.randint(0, 5, (24,))
    ours = value_and_grad(lambda e: adapter(e, labels), embeddings)
    theirs = value_and_grad(lambda e: loss(*pairwise_scores(e, labels)), embeddings)
    assert ours[1].abs().sum() > 0
    assert_same(ours, theirs)


@pytest.mark.parametrize("name", ["recall", "ap", "recall@k"])
def test_cross_batch_memory_is_the_papers_score_memory(name):
    """CrossBatchMemory(adapter, memory_size=(tau + 1) * B) equals EmbeddingMemory(loss, tau) step by step.

    Both hold the same remembered items: the other current elements (live: they get a gradient as
    ranked items too) and the tau previous batches (detached)."""
    batch, tau, dim = 10, 2, 6
    memory = CrossBatchMemory(PAIRS[name][0](), embedding_size=dim, memory_size=(tau + 1) * batch)
    reference = EmbeddingMemory(PAIRS[name][1](), tau=tau)
    assert isinstance(memory, pml_losses.CrossBatchMemory)
    for _ in range(5):
        embeddings, labels = torch.randn(batch, dim), torch.randint(0, 4, (batch,))
        ours = value_and_grad(lambda e: memory(e, labels), embeddings)
        theirs = value_and_grad(lambda e: reference(e, labels), embeddings)
        assert ours[1].abs().sum() > 0
        assert_same(ours, theirs)


def test_memory_gradient_reaches_the_current_batch_as_ranked_item_and_never_the_memory():
    """An element with no positive is no query, yet it gets a gradient through the other queries'
    rankings (the live copy put in place of its memory entry); earlier batches get none."""
    batch, dim = 8, 5
    memory = CrossBatchMemory(RaMBORecallLoss(0.0, 4.0), embedding_size=dim, memory_size=3 * batch)
    old = torch.randn(batch, dim, requires_grad=True)
    memory(old, torch.arange(batch) % 3).backward()
    old_grad = old.grad.clone()
    current = torch.randn(batch, dim, requires_grad=True)
    labels = torch.arange(batch) % 3
    labels[0] = 99  # no positive anywhere: element 0 is ranked, but is not a query
    memory(current, labels).backward()
    assert current.grad[0].abs().sum() > 0
    assert torch.equal(old.grad, old_grad)  # the memory is detached


def test_query_never_counts_itself():
    """Unique labels: no query has a positive (its own copy does not count), so the loss is 0 with
    zero gradient, on the batch, with a reference set that contains the batch, and in the memory."""
    embeddings, labels = torch.randn(6, 4, requires_grad=True), torch.arange(6)
    loss = RaMBOAPLoss(0.0, 0.5)
    for value in (
        loss(embeddings, labels),
        loss(
            embeddings,
            labels,
            ref_emb=torch.cat([embeddings.detach(), torch.randn(3, 4)]),
            ref_labels=torch.tensor([0, 1, 2, 3, 4, 5, 10, 11, 12]),
        ),
        CrossBatchMemory(loss, embedding_size=4, memory_size=12)(embeddings, labels),
    ):
        value.backward()
        assert value.item() == 0.0 and embeddings.grad.abs().sum() == 0


def test_reference_set_with_the_batch_in_it_equals_the_batch():
    """ref_emb = [batch (detached copy); extra items]: each query ranks the others live and the
    extra items, never its own copy: the same as rambo.core's EmbeddingMemory with those items."""
    embeddings, labels = torch.randn(12, 6), torch.randint(0, 3, (12,))
    extra, extra_labels = torch.randn(7, 6), torch.randint(0, 3, (7,))
    reference = EmbeddingMemory(RecallLoss(0.1, 4.0), tau=1)
    reference(extra, extra_labels)
    theirs = value_and_grad(lambda e: reference(e, labels), embeddings)
    ours = value_and_grad(
        lambda e: RaMBORecallLoss(0.1, 4.0)(
            e, labels, ref_emb=torch.cat([extra, e.detach()]), ref_labels=torch.cat([extra_labels, labels])
        ),
        embeddings,
    )
    assert_same(ours, theirs)


def rows_reference(loss, embeddings, anchors, positives, negatives):
    """The rank loss per anchor over exactly its listed items (ascending), self excluded; the mean."""
    unit = F.normalize(embeddings, dim=1)
    rows = []
    for a in sorted(set(anchors.tolist())):
        pos = {int(p) for x, p in zip(anchors.tolist(), positives.tolist()) if x == a and p >= 0 and p != a}
        neg = {int(n) for x, n in zip(anchors.tolist(), negatives.tolist()) if x == a and n >= 0 and n != a}
        if not pos:
            continue
        items = sorted(pos | neg)
        scores = (unit[a] @ unit[items].T).unsqueeze(0)
        relevant = torch.tensor([[i in pos for i in items]])
        if isinstance(loss, RecallAtKSurrogate):
            rows.append(loss.row_losses(scores, relevant, torch.ones_like(relevant)))
        else:
            rows.append(loss.row_losses(scores, relevant))
    return torch.cat(rows).mean()


@pytest.mark.parametrize("name", ["recall", "ap", "recall@k"])
def test_miner_indices_restrict_each_row_to_its_pairs(name):
    """With a miner's pairs, query a ranks exactly the p of its positive pairs and the n of its
    negative pairs; rows of different lengths are each ranked over exactly their items."""
    adapter, loss = PAIRS[name][0](), PAIRS[name][1]()
    embeddings, labels = torch.randn(20, 6), torch.randint(0, 3, (20,))
    a1, p, a2, n = miners.MultiSimilarityMiner(epsilon=0.3)(embeddings, labels)
    lengths = {int(a): int((a1 == a).sum() + (a2 == a).sum()) for a in a1.unique()}
    assert len(set(lengths.values())) > 1  # ragged rows
    ours = value_and_grad(lambda e: adapter(e, labels, (a1, p, a2, n)), embeddings)
    anchors = torch.cat([a1, a2])
    positives = torch.cat([p, torch.full_like(a2, -1)])
    negatives = torch.cat([torch.full_like(a1, -1), n])
    theirs = value_and_grad(lambda e: rows_reference(loss, e, anchors, positives, negatives), embeddings)
    assert_same(ours, theirs)


def test_triplets_give_each_anchor_the_set_of_its_positives_and_negatives():
    """A triplet tuple (a, p, n) is read as: anchor a ranks its listed p (relevant) and n."""
    embeddings, labels = torch.randn(16, 5), torch.randint(0, 3, (16,))
    a, p, n = miners.TripletMarginMiner(margin=0.2, type_of_triplets="semihard")(embeddings, labels)
    assert a.numel()
    ours = value_and_grad(lambda e: RaMBOAPLoss(0.0, 0.5)(e, labels, (a, p, n)), embeddings)
    theirs = value_and_grad(lambda e: rows_reference(APLoss(0.0, 0.5), e, a, p, n), embeddings)
    assert_same(ours, theirs)


def test_mean_reducers_and_per_query_losses():
    """DoNothingReducer returns one loss per query (queries = rows with a positive); MeanReducer
    is their mean (rambo.core); AvgNonZeroReducer is rambo.core's loss of the non-zero queries."""
    embeddings, labels = torch.randn(14, 6), torch.randint(0, 4, (14,))
    labels[0] = 50  # no positive: not a query
    per_query = RaMBORecallLoss(0.0, 4.0, reducer=reducers.DoNothingReducer())(embeddings, labels)["loss"]
    scores, relevant = pairwise_scores(embeddings, labels)
    assert per_query["reduction_type"] == "element"
    assert per_query["indices"].tolist() == list(range(1, 14))
    torch.testing.assert_close(per_query["losses"], RecallLoss(0.0, 4.0).row_losses(scores, relevant)[1:])
    nonzero = per_query["indices"][per_query["losses"] > 0]
    assert 0 < nonzero.numel() < 13
    ours = value_and_grad(
        lambda e: RaMBORecallLoss(0.0, 4.0, reducer=reducers.AvgNonZeroReducer())(e, labels), embeddings
    )
    theirs = value_and_grad(
        lambda e: RecallLoss(0.0, 4.0)(*(x[nonzero] for x in pairwise_scores(e, labels))), embeddings
    )
    assert_same(ours, theirs)


@pytest.mark.parametrize(
    "distance",
    [
        distances.LpDistance(),
        distances.LpDistance(normalize_embeddings=False),
        distances.DotProductSimilarity(normalize_embeddings=False),
        distances.CosineSimilarity(power=2),
        distances.SNRDistance(),
    ],
    ids=["lp", "lp-raw", "dot-raw", "cosine-squared", "snr"],
)
def test_other_distances_are_refused(distance):
    """Only cosine similarity: the margin and lambda are in units of scores in [-1, 1]."""
    with pytest.raises(ValueError, match="cosine similarity"):
        RaMBORecallLoss(distance=distance)


@pytest.mark.parametrize(
    "reducer",
    [
        reducers.SumReducer(),
        reducers.ClassWeightedReducer(torch.ones(3)),
        reducers.DivisorReducer(),
        reducers.PerAnchorReducer(reducers.SumReducer()),
    ],
    ids=["sum", "class-weighted", "divisor", "per-anchor-sum"],
)
def test_weighting_reducers_are_refused(reducer):
    """A weight on a rank loss's value changes its lambda: only means over queries are accepted."""
    with pytest.raises(ValueError, match="changes lambda"):
        RaMBOAPLoss(reducer=reducer)


def test_accepted_options_and_refused_losses():
    """Cosine as a normalised dot product, the mean reducers; MAPLoss (ranks per class) is refused."""
    RaMBOAPLoss(distance=distances.DotProductSimilarity(normalize_embeddings=True))
    RaMBOAPLoss(reducer=reducers.PerAnchorReducer(reducers.ThresholdReducer(high=0.9)))
    with pytest.raises(ValueError, match="last dimension"):
        RankLossAdapter(MAPLoss())
    with pytest.raises(ValueError, match="indices_tuple"):
        RaMBOAPLoss()(torch.randn(4, 3), torch.tensor([0, 0, 1, 1]), (torch.tensor([0]), torch.tensor([1])))
    with pytest.raises(Exception, match="not supported"):  # PML's own class refuses unknown losses
        pml_losses.CrossBatchMemory(RaMBOAPLoss(), embedding_size=3)


def test_rambo_core_imports_without_pml():
    """rambo.core never imports PML; rambo.core.pml says how to install it."""
    code = (
        "import sys; sys.modules['pytorch_metric_learning'] = None\n"
        "import rambo.core\n"
        "try:\n    import rambo.core.pml\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == 'rambo.core.pml needs pytorch-metric-learning: pip install "./core[pml]" from a clone'
