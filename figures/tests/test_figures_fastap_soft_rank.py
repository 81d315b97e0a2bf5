import pytest
import torch

from rambo.core import exact_rank
from rambo.figures.fastap_soft_rank import bin_weights, fastap_soft_rank


def brute_force_soft_rank(scores, bins, lo, hi):
    """The definition, loop by loop: 1 + sum_l k_il sum_{j != i} sum_{l' < l} k_jl'."""
    delta = (hi - lo) / bins
    centres = [hi - l * delta for l in range(bins + 1)]  # noqa: E741 (the paper's bin index l)

    def kernel(s, z):
        return max(0.0, 1 - abs(min(max(s, lo), hi) - z) / delta)

    n = len(scores)
    ranks = []
    for i in range(n):
        total = 1.0
        for l in range(bins + 1):  # noqa: E741 (the paper's bin index l)
            for j in range(n):
                if j != i:
                    for better in range(l):
                        total += kernel(scores[i], centres[l]) * kernel(scores[j], centres[better])
        ranks.append(total)
    return ranks


def test_soft_rank_matches_the_definition():
    scores = torch.tensor([0.31, -0.7, 0.95, 0.3, 1.4, -0.05, 0.3], dtype=torch.float64)  # a tie, one clamped
    for bins in (1, 3, 10):
        assert fastap_soft_rank(scores, bins, (-1.0, 1.0)).tolist() == pytest.approx(
            brute_force_soft_rank(scores.tolist(), bins, -1.0, 1.0), abs=1e-12
        )


def test_soft_rank_works_on_batches():
    scores = torch.randn(3, 4, 8, dtype=torch.float64)
    batched = fastap_soft_rank(scores, 5, (-3.0, 3.0))
    assert torch.allclose(batched[2, 1], fastap_soft_rank(scores[2, 1], 5, (-3.0, 3.0)))


def test_kernel_weights_sum_to_one_and_fine_bins_give_exact_ranks():
    scores = torch.rand(30, dtype=torch.float64) * 2 - 1
    assert torch.allclose(bin_weights(scores, 7, (-1.0, 1.0)).sum(-1), torch.ones(30, dtype=torch.float64))
    # Bins much finer than the smallest gap: each item alone in better bins than all lower items.
    gap = (scores.unsqueeze(0) - scores.unsqueeze(1)).abs().add(torch.eye(30, dtype=torch.float64)).min()
    bins = int(8 / gap) + 1
    assert torch.allclose(fastap_soft_rank(scores, bins, (-1.0, 1.0)), exact_rank(scores).double())


def test_soft_rank_rejects_bad_binning():
    with pytest.raises(ValueError, match="bins"):
        fastap_soft_rank(torch.randn(4), 0, (-1.0, 1.0))
    with pytest.raises(ValueError, match="score_range"):
        fastap_soft_rank(torch.randn(4), 4, (1.0, 1.0))
