import core_brute_force as bf
import pytest
import torch

from rambo.core import exact_rank, rank, rank_within_relevant
from rambo.core.ranking import descending_order

DTYPES = [torch.float32, torch.float64]


def brute_ranks(scores: torch.Tensor) -> torch.Tensor:
    flat = scores.reshape(-1, scores.shape[-1]).tolist()
    return torch.tensor([bf.ranks(row) for row in flat]).view(scores.shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (7,), (1, 50), (5, 13), (3, 4, 9), (40, 3)])
def test_forward_matches_eq2_without_ties(dtype, shape):
    scores = torch.randn(shape, dtype=dtype)
    assert torch.equal(rank(scores, 1.0).long(), brute_ranks(scores))


@pytest.mark.parametrize("dtype", DTYPES)
def test_ties_broken_by_position_and_zeros_tie(dtype):
    scores = torch.tensor([[0.0, -0.0, 1.0, 1.0, -2.0, 0.0], [3.0, 3.0, 3.0, -0.0, 0.0, -1.0]], dtype=dtype)
    expected = torch.tensor([[3, 4, 1, 2, 6, 5], [1, 2, 3, 4, 5, 6]])
    assert torch.equal(rank(scores, 1.0).long(), expected)
    assert torch.equal(brute_ranks(scores), expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_many_ties_and_extreme_values(dtype):
    finfo = torch.finfo(dtype)
    values = torch.tensor([finfo.max, -finfo.max, finfo.tiny, -finfo.tiny, 0.0, 1.0, -1.0], dtype=dtype)
    scores = values[torch.randint(len(values), (6, 40))]
    assert torch.equal(exact_rank(scores), brute_ranks(scores))


def test_single_row_and_batched_paths_agree():
    scores = torch.randint(-5, 5, (17, 300)).float()
    batched = exact_rank(scores)
    one_by_one = torch.stack([exact_rank(row.view(1, -1))[0] for row in scores])
    assert torch.equal(batched, one_by_one)
    assert torch.equal(descending_order(scores).gather(-1, batched - 1), torch.arange(300).expand(17, 300))


def test_half_precision_is_ranked_exactly_and_returned_as_float32():
    scores = torch.randn(4, 30).half()
    ranks = rank(scores, 1.0)
    assert ranks.dtype == torch.float32
    assert torch.equal(ranks.long(), brute_ranks(scores.float()))


def test_backward_is_algorithm_1_on_raw_ranks_with_lam_times_n():
    scores = torch.randn(3, 11, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 11, dtype=torch.float64)
    lam = 0.7
    (rank(scores, lam) * weights).sum().backward()
    lam_raw = lam * 11
    perturbed = scores.detach() + lam_raw * weights
    expected = -(brute_ranks(scores.detach()) - brute_ranks(perturbed)).double() / lam_raw
    assert torch.allclose(scores.grad, expected)


def normalised_ranker_gradient(scores, weights_on_normalised_ranks, lam):
    """The authors' formulation: ranks / N, perturbation lam * dL/d(rank/N)."""
    n = scores.shape[-1]
    r = brute_ranks(scores).double() / n
    r_lam = brute_ranks(scores + lam * weights_on_normalised_ranks).double() / n
    return -(r - r_lam) / lam


@pytest.mark.parametrize("lam", [4.0, 0.2, 0.5])
def test_lam_has_the_meaning_of_normalised_ranks(lam):
    """A loss L = <a, rank/N> gets the same gradient from rank(., lam) as from the normalised ranker."""
    n = 25
    scores = torch.randn(4, n, dtype=torch.float64, requires_grad=True)
    a = torch.randn(4, n, dtype=torch.float64)
    (rank(scores, lam) / n * a).sum().backward()
    assert torch.allclose(scores.grad, normalised_ranker_gradient(scores.detach(), a, lam))
    assert scores.grad.abs().sum() > 0


def test_gradient_zero_when_perturbation_cannot_change_the_order():
    scores = torch.tensor([[3.0, 2.0, 1.0]], requires_grad=True)
    # dL/drank > 0 on the best item pushes it further up: nothing can change.
    (rank(scores, 0.5) * torch.tensor([[1.0, 0.0, 0.0]])).sum().backward()
    assert torch.equal(scores.grad, torch.zeros(1, 3))


def test_rank_within_relevant_matches_brute_force():
    for _ in range(20):
        scores = torch.randint(-3, 3, (2, 15)).float()
        relevant = torch.rand(2, 15) < 0.4
        within = rank_within_relevant(exact_rank(scores), relevant)
        for q in range(2):
            expected = bf.ranks_within_relevant(scores[q].tolist(), relevant[q].tolist())
            for i, value in expected.items():
                assert within[q, i] == value


@pytest.mark.parametrize(
    "scores, lam, message",
    [
        (torch.tensor([1.0, float("nan")]), 1.0, "NaN"),
        (torch.tensor([1.0, float("inf")]), 1.0, "inf"),
        (torch.tensor([1, 2]), 1.0, "floating"),
        (torch.tensor([1.0, 2.0]), 0.0, "lam"),
        (torch.tensor([1.0, 2.0]), -1.0, "lam"),
        (torch.zeros(2, 0), 1.0, "empty"),
    ],
)
def test_bad_input_is_named(scores, lam, message):
    with pytest.raises(ValueError, match=message):
        rank(scores, lam)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cpu_and_gpu_break_ties_identically():
    scores = torch.randint(-3, 3, (8, 1000), device="cpu").float()
    scores[0, :10] = -0.0  # both zeros tie
    for rows in (scores, scores[:1]):  # the several-rows key and the one-row key
        assert torch.equal(exact_rank(rows), exact_rank(rows.cuda()).cpu())


@pytest.mark.parametrize(
    "shape, dtype",
    [
        ((1, 500), torch.float32),
        ((4, 300), torch.float32),
        ((1, 400), torch.float64),
        ((3, 200), torch.float64),
        ((2, 100), torch.float16),
    ],
)
def test_ranking_a_buffer_the_caller_gives_up_gives_the_same_ranks_and_leaves_other_input_alone(shape, dtype):
    """The backward builds its sort keys in the perturbed scores it owns
    (``owned=True``, no copy); without ``owned`` the input is never written."""
    scores = (torch.randint(-20, 20, shape, generator=torch.Generator().manual_seed(0)) / 4).to(dtype)
    scores.view(-1)[:7] = -0.0
    kept = scores.clone()
    expected = exact_rank(scores)
    assert torch.equal(scores, kept) and torch.equal(scores.signbit(), kept.signbit())
    assert torch.equal(exact_rank(scores.clone(), owned=True), expected)
    transposed = scores.T.contiguous().T  # not contiguous: the keys are then a copy after all
    assert torch.equal(exact_rank(transposed, owned=True), expected)
