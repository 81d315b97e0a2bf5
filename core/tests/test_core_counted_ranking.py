"""The counting path of Alg. 1 against today's paths on the same input: the same
ranks, losses and gradients, bit for bit (``torch.equal``), ties, -0.0/+0.0, rows with every item
or none relevant, float32 and float64, the memory on and off."""

import pytest
import torch

from rambo.core import APLoss, EmbeddingMemory, RecallLoss, counted_ranking
from rambo.core.counted_ranking import BlackboxCountedRank, counting_fits
from rambo.core.item_ranking import BlackboxItemRank, rank_items
from rambo.core.ranking import rank_with_integers


def through(rank_fn, scores, lam, relevant, upstream):
    leaf = scores.detach().clone().requires_grad_(True)
    ranks, integer_ranks = rank_fn(leaf, relevant.nonzero(as_tuple=True), lam)
    (ranks * upstream).sum().backward()
    return ranks.detach(), integer_ranks, leaf.grad


def counted(scores, index, lam):
    return BlackboxCountedRank.apply(scores, index[0] * scores.shape[1] + index[1], lam * scores.shape[1])


def sorted_items(scores, index, lam):  # today's batched path (float32): one sort of composite keys
    return BlackboxItemRank.apply(scores, index[0] * scores.shape[1] + index[1], lam * scores.shape[1])


def dense(scores, index, lam):  # the dense Alg. 1 (rambo::blackbox_rank)
    ranks, integer_ranks = rank_with_integers(scores, lam, validate=False)
    return ranks[index], integer_ranks[index]


def random_case(seed: int, dtype: torch.dtype):
    """Scores (tie-free, or a few integer values with -0.0/+0.0), relevance with empty and full rows, lambda, dL/drank."""
    generator = torch.Generator().manual_seed(seed)
    rows, n = int(torch.randint(1, 9, (1,), generator=generator)), int(torch.randint(1, 70, (1,), generator=generator))
    if seed % 3 == 0:
        scores = torch.randint(-3, 4, (rows, n), generator=generator).to(dtype)
        zeros = scores == 0
        scores[zeros] = torch.where(torch.rand(int(zeros.sum()), generator=generator) < 0.5, -0.0, 0.0).to(dtype)
    else:
        scores = torch.randn(rows, n, generator=generator, dtype=dtype)
    relevant = torch.rand(rows, n, generator=generator) < (0.05, 0.3, 0.9)[seed % 3]
    relevant[0] = seed % 4 != 0  # a row with every item relevant, or none
    if not relevant.any():
        relevant[-1, -1] = True
    upstream = torch.randn(int(relevant.sum()), generator=generator, dtype=dtype)
    if seed % 5 == 0:
        upstream[::2] = 0.0  # items that do not move
    lam = (1e-3, 0.01, 0.5, 4.0, 50.0)[seed % 5]
    return scores, relevant, lam, upstream


def assert_identical(got, expected):
    """Float ranks and gradient: same dtype, same bits; integer ranks: same values (the dense path's are int32)."""
    (ranks, integer_ranks, gradient), (ranks_e, integer_ranks_e, gradient_e) = got, expected
    assert ranks.dtype == ranks_e.dtype and torch.equal(ranks, ranks_e)
    assert torch.equal(integer_ranks.long(), integer_ranks_e.long())
    assert gradient.dtype == gradient_e.dtype and torch.equal(gradient, gradient_e)


@pytest.mark.parametrize("seed", range(200))
def test_counting_equals_the_sorting_path_and_the_dense_alg1_bit_for_bit(seed):
    scores, relevant, lam, upstream = random_case(seed, torch.float32)
    got = through(counted, scores, lam, relevant, upstream)
    assert_identical(got, through(sorted_items, scores, lam, relevant, upstream))
    assert_identical(got, through(dense, scores, lam, relevant, upstream))


@pytest.mark.parametrize("seed", range(100))
def test_counting_equals_the_dense_alg1_in_float64(seed):
    scores, relevant, lam, upstream = random_case(seed, torch.float64)
    assert_identical(through(counted, scores, lam, relevant, upstream), through(dense, scores, lam, relevant, upstream))


def test_far_moves_give_unmoved_items_gradient_and_are_still_identical():
    generator = torch.Generator().manual_seed(7)
    scores = torch.randn(6, 300, generator=generator)
    relevant = torch.rand(6, 300, generator=generator) < 0.02
    relevant[:, 0] = True
    upstream = torch.randn(int(relevant.sum()), generator=generator)
    got = through(counted, scores, 50.0, relevant, upstream)
    assert_identical(got, through(sorted_items, scores, 50.0, relevant, upstream))
    unmoved = got[2][~relevant]
    assert (unmoved != 0).sum() > 100


def test_rank_items_counts_while_the_items_per_row_are_few():
    assert counting_fits(4, 100, 4 * counted_ranking.ITEMS_PER_ROW_LIMIT, torch.float32)
    assert not counting_fits(4, 100, 4 * counted_ranking.ITEMS_PER_ROW_LIMIT + 1, torch.float32)
    assert not counting_fits(4, 100, 3, torch.float16) and not counting_fits(1, 2**24, 1, torch.float32)


def losses_and_gradients(make_loss, embeddings, labels, remembered, tau, dtype):
    loss = EmbeddingMemory(make_loss(), tau).train()
    for batch, batch_labels in remembered:
        loss.remember(torch.nn.functional.normalize(batch.to(dtype), dim=1), batch_labels)
    leaf = embeddings.to(dtype).requires_grad_(True)
    value = loss(leaf, labels)
    value.backward()
    return value.detach(), leaf.grad


@pytest.mark.parametrize(
    "make_loss", [lambda: RecallLoss(margin=0.05), lambda: RecallLoss(weighting="loglog"), lambda: APLoss(0.1)]
)
@pytest.mark.parametrize("tau", [0, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ties", [False, True])
def test_the_losses_on_embeddings_are_identical_to_todays_path(monkeypatch, make_loss, tau, dtype, ties):
    """The recall and AP losses of a batch (and its memory): loss and embedding gradient, counting vs
    today's path (the limit set to 0 turns counting off). Ties: embeddings of a few repeated rows."""
    generator = torch.Generator().manual_seed(tau + 10 * ties)

    def batch():
        embeddings = torch.randn(32, 16, generator=generator)
        if ties:
            embeddings = embeddings[torch.randint(0, 6, (32,), generator=generator)]
        return embeddings, torch.randint(0, 40, (32,), generator=generator)

    embeddings, labels = batch()
    remembered = [batch() for _ in range(tau)]
    memory = EmbeddingMemory(make_loss(), tau).train()
    for batch_embeddings, batch_labels in remembered:
        memory.remember(torch.nn.functional.normalize(batch_embeddings, dim=1), batch_labels)
    scores, relevant = memory.scores_and_relevance(embeddings, labels)
    assert counting_fits(*scores.shape, int(relevant.sum()), dtype)  # the counting path is the one compared
    counting = losses_and_gradients(make_loss, embeddings, labels, remembered, tau, dtype)
    monkeypatch.setattr(counted_ranking, "ITEMS_PER_ROW_LIMIT", 0)
    today = losses_and_gradients(make_loss, embeddings, labels, remembered, tau, dtype)
    assert torch.equal(counting[0], today[0]) and torch.equal(counting[1], today[1])
    assert counting[1].abs().sum() > 0


def test_rank_items_takes_the_counting_path_for_a_batch_and_the_sort_for_one_long_row():
    generator = torch.Generator().manual_seed(0)
    batch = torch.randn(16, 64, generator=generator)
    relevant = torch.zeros(16, 64, dtype=torch.bool)
    relevant[:, :3] = True
    ranks, _ = rank_items(batch.requires_grad_(True), relevant.nonzero(as_tuple=True), 0.5)
    assert ranks.grad_fn.name() == "BlackboxCountedRankBackward"
    row = torch.randn(1, 10_000, generator=generator).requires_grad_(True)
    ranks, _ = rank_items(row, (torch.zeros(100, dtype=torch.long), torch.arange(100) * 100), 0.5)
    assert ranks.grad_fn.name() == "BlackboxItemRankBackward"
