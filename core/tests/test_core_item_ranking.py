"""rank_items (Alg. 1 re-ranking only the moved items) against the dense Alg. 1 on the same input:
the same ranks and the same gradient, bit for bit, whatever the ties and however far items move."""

import pytest
import torch

from rambo.core import item_ranking
from rambo.core.item_ranking import positions_in_sorted, rank_items
from rambo.core.ranking import rank_with_integers


def through(rank_fn, scores, index, lam, upstream):
    leaf = scores.detach().clone().requires_grad_(True)
    ranks, integer_ranks = rank_fn(leaf, index, lam)
    (ranks * upstream).sum().backward()
    return ranks.detach(), integer_ranks, leaf.grad


def dense(scores, index, lam):
    ranks, integer_ranks = rank_with_integers(scores, lam, validate=False)
    return ranks[index], integer_ranks[index]


def assert_same_as_dense(scores, relevant, lam, upstream_scale=1.0, seed=0):
    index = relevant.nonzero(as_tuple=True)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    upstream = (torch.randn(index[0].shape[0], generator=generator, device="cpu") * upstream_scale).to(scores.device)
    expected = through(dense, scores, index, lam, upstream)
    got = through(rank_items, scores, index, lam, upstream)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    assert got[2].dtype == expected[2].dtype and torch.equal(got[2], expected[2])
    return got[2]


@pytest.mark.parametrize("shape", [(1, 1), (1, 2), (1, 300), (5, 40), (3, 1)])
@pytest.mark.parametrize("fraction", [0.05, 0.5, 1.0])
@pytest.mark.parametrize("lam", [1e-4, 0.5, 50.0])
def test_equals_dense_alg1_on_tie_free_scores(shape, fraction, lam):
    generator = torch.Generator(device="cpu").manual_seed(1)
    scores = torch.randn(shape, generator=generator, device="cpu")
    relevant = torch.rand(shape, generator=generator, device="cpu") < fraction
    relevant.view(-1)[0] = True
    gradient = assert_same_as_dense(scores, relevant, lam)
    if lam == 50.0 and shape[1] >= 40 and relevant.sum() < relevant.numel():
        assert gradient.abs().sum() > 0  # far moves: unmoved items are crossed, and get gradient


@pytest.mark.parametrize("shape", [(1, 500), (4, 120)])
@pytest.mark.parametrize("seed", range(4))
def test_equals_dense_alg1_under_massive_ties_and_both_zeros(shape, seed):
    """Integer scores (a few distinct values) and -0.0/+0.0: ties are broken by position in both."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    scores = torch.randint(-3, 4, shape, generator=generator, device="cpu").float()
    scores[scores == 0] = torch.where(
        torch.rand(int((scores == 0).sum()), generator=generator, device="cpu") < 0.5, -0.0, 0.0
    )
    relevant = torch.rand(shape, generator=generator, device="cpu") < 0.2
    relevant[:, 0] = True
    # small lambda: moves inside a run of equal scores; large: across runs
    for lam in (1e-3, 0.01, 1.0):
        assert_same_as_dense(scores, relevant, lam, seed=seed)


def test_equals_dense_alg1_for_one_float64_row_and_a_transposed_view():
    generator = torch.Generator(device="cpu").manual_seed(3)
    scores = torch.randn(1, 400, generator=generator, dtype=torch.float64, device="cpu")
    relevant = torch.rand(1, 400, generator=generator, device="cpu") < 0.1
    assert_same_as_dense(scores, relevant, 0.3)
    matrix = torch.randn(50, 6, generator=generator, device="cpu")  # [N, C] as MAPLoss transposes it
    labels = torch.rand(50, 6, generator=generator, device="cpu") < 0.2
    labels[0] = True
    assert_same_as_dense(matrix.t(), labels.t(), 0.5)


def test_other_dtypes_and_devices_take_the_dense_path(monkeypatch):
    calls = []
    monkeypatch.setattr(item_ranking.BlackboxItemRank, "apply", lambda *a: calls.append(a))
    scores = torch.randn(3, 10, dtype=torch.float64, device="cpu")  # several float64 rows: no integer key
    relevant = torch.rand(3, 10, device="cpu") < 0.5
    relevant[:, 0] = True
    assert_same_as_dense(scores, relevant, 0.5)
    assert calls == []


def test_unordered_indices_are_refused():
    scores = torch.randn(1, 5, device="cpu")
    with pytest.raises(ValueError, match="row-major order"):
        rank_items(scores, (torch.tensor([0, 0], device="cpu"), torch.tensor([3, 1], device="cpu")), 0.5)


def test_positions_in_sorted_counts_entries_before_each_query():
    keys = torch.tensor([5, 3, 3, 9, 3, 1], device="cpu")
    sorted_keys, order = torch.sort(keys, stable=True)
    queries = torch.tensor([3, 3, 3, 4, 0, 9, 10], device="cpu")
    index = torch.tensor([2, 0, 7, 0, 0, 3, 0], device="cpu")
    brute = [sum((int(k), int(i)) < (int(q), int(j)) for i, k in enumerate(keys)) for q, j in zip(queries, index)]
    assert positions_in_sorted(sorted_keys, order, queries, index).tolist() == brute
