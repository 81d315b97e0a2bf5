import core_brute_force as bf
import pytest
import torch

from rambo.core import metrics


def random_case(q, n, ties):
    scores = torch.randint(-3, 3, (q, n)).double() if ties else torch.randn(q, n, dtype=torch.float64)
    relevant = torch.rand(q, n) < 0.3
    relevant[0, 0] = True
    return scores, relevant


def brute_mean(fn, scores, relevant, **kw):
    rows = [fn(s, r, **kw) for s, r in zip(scores.tolist(), relevant.tolist()) if any(r)]
    return sum(rows) / len(rows)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("shape", [(4, 4), (3, 20), (10, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_metrics_match_their_definitions(ties, shape, dtype):
    scores, relevant = random_case(*shape, ties)
    scores = scores.to(dtype)
    assert metrics.average_precision(scores, relevant) == pytest.approx(
        brute_mean(bf.average_precision, scores, relevant)
    )
    assert metrics.map_at_r(scores, relevant) == pytest.approx(brute_mean(bf.map_at_r, scores, relevant))
    assert metrics.r_precision(scores, relevant) == pytest.approx(brute_mean(bf.r_precision, scores, relevant))
    ks = (1, 2, 4, 100)
    result = metrics.recall_at_k(scores, relevant, ks)
    for k in ks:
        assert result[k] == pytest.approx(brute_mean(bf.recall_at_k, scores, relevant, k=k))


def test_hand_computed_case():
    scores = torch.tensor([[0.9, 0.8, 0.7, 0.6]])
    relevant = torch.tensor([[False, True, False, True]])
    assert metrics.average_precision(scores, relevant) == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert metrics.recall_at_k(scores, relevant, (1, 2)) == {1: 0.0, 2: 1.0}
    assert metrics.recall_at_k(scores, relevant, [2]) == {2: 1.0}
    assert metrics.recall_at_k(scores, relevant, 2) == 1.0  # one K: its fraction
    assert metrics.recall_at_k(scores, relevant, torch.tensor([1, 2])) == {1: 0.0, 2: 1.0}
    assert metrics.map_at_r(scores, relevant) == pytest.approx(0.5 * (1 / 2))
    assert metrics.r_precision(scores, relevant) == pytest.approx(0.5)


def test_rows_without_relevant_items_are_left_out_and_none_gives_nan():
    scores = torch.randn(2, 5)
    relevant = torch.tensor([[True, False, False, False, False], [False] * 5])
    per_row = metrics.average_precision(scores, relevant, reduction="none")
    assert torch.isnan(per_row[1]) and metrics.average_precision(scores, relevant) == per_row[0].item()
    assert torch.isnan(torch.tensor(metrics.r_precision(scores, torch.zeros(2, 5, dtype=torch.bool))))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="K must be"):
        metrics.recall_at_k(torch.randn(2, 3), torch.ones(2, 3, dtype=torch.bool), (0,))
    for k, shown in ((True, "True"), ("1", "'1'"), (2.5, "2.5"), ([1, None], "None")):
        with pytest.raises(ValueError, match=f"K must be a positive integer, got {shown}"):
            metrics.recall_at_k(torch.randn(2, 3), torch.ones(2, 3, dtype=torch.bool), k)
    with pytest.raises(ValueError, match="reduction"):
        metrics.average_precision(torch.randn(2, 3), torch.ones(2, 3, dtype=torch.bool), reduction="sum")
    with pytest.raises(ValueError, match="bool"):
        metrics.average_precision(torch.randn(2, 3), torch.ones(2, 3))
