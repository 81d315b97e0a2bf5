"""APLoss (Eq. 21-22), RecallLoss (Eq. 16-20), MAPLoss (Eq. 6), APCLoss (Eq. 23) against brute force."""

import core_brute_force as bf
import pytest
import torch

from rambo.core import APCLoss, APLoss, MAPLoss, RecallLoss
from rambo.core.metrics import average_precision

DTYPES = [torch.float32, torch.float64]
SHAPES = [(6, 6), (3, 17), (9, 4), (1, 40)]


def make_input(shape, dtype, ties=False, fraction=0.3):
    scores = torch.randint(-4, 4, shape).to(dtype) / 4 if ties else torch.randn(shape, dtype=dtype)
    relevant = torch.rand(shape) < fraction
    relevant[0, 0] = True  # at least one row with a relevant item
    return scores, relevant


def losses():
    return {
        "ap": (lambda m: APLoss(margin=m, lam=0.5), bf.ap_row, {}),
        "recall_log": (lambda m: RecallLoss(margin=m, lam=4.0), bf.recall_row, {"weighting": "log"}),
        "recall_loglog": (
            lambda m: RecallLoss(margin=m, lam=4.0, weighting="loglog"),
            bf.recall_row,
            {"weighting": "loglog"},
        ),
    }


@pytest.mark.parametrize("name", ["ap", "recall_log", "recall_loglog"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("margin", [0.0, 0.1])
def test_loss_value_matches_brute_force(name, dtype, shape, ties, margin):
    make, brute, kwargs = losses()[name]
    scores, relevant = make_input(shape, dtype, ties)
    expected = bf.mean_over_rows(brute, scores.tolist(), relevant.tolist(), margin=margin, **kwargs)
    value = make(margin)(scores, relevant)
    assert value.dtype == dtype
    assert value.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("weighting", ["log", "loglog"])
def test_recall_closed_form_equals_the_weighted_sum_of_eq19(weighting):
    """Prop. 2 / Appendix B: Eq. 20 is Eq. 19 with w_K = log(1+1/K) (log) or its loglog analogue."""
    for _ in range(10):
        scores, relevant = make_input((1, 30), torch.float64, ties=True)
        closed = RecallLoss(margin=0.0, lam=1.0, weighting=weighting)(scores, relevant).item()
        by_sum = bf.recall_row_by_eq19(scores[0].tolist(), relevant[0].tolist(), weighting=weighting)
        assert closed == pytest.approx(by_sum, rel=1e-9)


def test_ap_loss_is_one_minus_the_ap_metric_without_margin():
    scores, relevant = make_input((5, 23), torch.float64, ties=True)
    assert APLoss(0.0, 0.5)(scores, relevant).item() == pytest.approx(1 - average_precision(scores, relevant))


def test_rows_without_relevant_items_contribute_nothing():
    scores, relevant = make_input((4, 10), torch.float64)
    extended_scores = torch.cat([scores, torch.randn(2, 10, dtype=torch.float64)]).requires_grad_(True)
    extended_relevant = torch.cat([relevant, torch.zeros(2, 10, dtype=torch.bool)])
    for loss in (APLoss(0.1, 0.5), RecallLoss(0.1, 4.0)):
        value = loss(extended_scores, extended_relevant)
        assert value.item() == pytest.approx(loss(scores, relevant).item())
        value.backward()
        assert torch.equal(extended_scores.grad[4:], torch.zeros(2, 10, dtype=torch.float64))
        extended_scores.grad = None


def test_no_relevant_item_at_all_gives_zero_loss_and_zero_gradient():
    scores = torch.randn(3, 5, requires_grad=True)
    value = APLoss(0.1, 0.5)(scores, torch.zeros(3, 5, dtype=torch.bool))
    value.backward()
    assert value.item() == 0.0 and torch.equal(scores.grad, torch.zeros(3, 5))


@pytest.mark.parametrize(
    "make", [lambda: APLoss(0.05, 4.0), lambda: RecallLoss(0.05, 4.0), lambda: RecallLoss(0.05, 4.0, "loglog")]
)
def test_gradient_signs(make):
    """Irrelevant items get gradient >= 0, the relevant items' gradients sum to < 0.

    (With a lambda too small for the perturbation to move any item, the gradient is 0 instead.)
    """
    for _ in range(10):
        scores = 0.1 * torch.randn(4, 50)
        relevant = torch.rand(4, 50) < 0.2
        relevant[:, 0] = True
        relevant[:, 1] = False
        scores[:, 0] = scores.min() - 0.01  # a relevant item below every irrelevant one: the loss can improve
        scores.requires_grad_(True)
        make()(scores, relevant).backward()
        assert (scores.grad[~relevant] >= 0).all()
        assert (scores.grad * relevant).sum(-1).lt(0).all()


@pytest.mark.parametrize("name", ["ap", "recall_log", "recall_loglog"])
def test_zero_gradient_when_the_ranking_is_already_perfect(name):
    make, _, _ = losses()[name]
    relevant = torch.tensor([[True, True, False, False, False]])
    scores = torch.tensor([[1.0, 0.9, 0.1, 0.0, -0.5]], requires_grad=True)
    value = make(0.1)(scores, relevant)
    value.backward()
    assert value.item() == pytest.approx(0.0, abs=1e-7)
    assert torch.equal(scores.grad, torch.zeros(1, 5))


@pytest.mark.outcome
@pytest.mark.parametrize("name, lam", [("ap", 0.5), ("recall_log", 4.0), ("recall_log", 0.2), ("recall_loglog", 0.2)])
def test_gradient_steps_raise_the_true_metric(name, lam):
    """With Table 9's lambdas, plain gradient steps on the raw scores improve the exact metric."""
    torch.manual_seed(1)
    make = {
        "ap": lambda: APLoss(0.02, lam),
        "recall_log": lambda: RecallLoss(0.02, lam),
        "recall_loglog": lambda: RecallLoss(0.02, lam, "loglog"),
    }[name]
    loss = make()
    scores = (0.1 * torch.randn(8, 100)).requires_grad_(True)  # the spread of cosine scores
    relevant = torch.rand(8, 100) < 0.05
    relevant[:, 0] = True
    before = average_precision(scores.detach(), relevant)
    optimizer = torch.optim.SGD([scores], lr=1.0)
    for _ in range(30):
        optimizer.zero_grad()
        loss(scores, relevant).backward()
        optimizer.step()
    after = average_precision(scores.detach(), relevant)
    assert after > before + 0.05


def test_non_square_rows_are_independent_and_normalised_by_their_own_length():
    """Regression: a recall/AP denormalised by the wrong dimension breaks for non-square [Q, N]."""
    scores = torch.randn(3, 40, requires_grad=True)
    relevant = torch.rand(3, 40) < 0.2
    relevant[:, 0] = True
    for loss in (RecallLoss(0.02, 4.0), APLoss(0.02, 0.5)):
        loss(scores, relevant).backward()
        together = scores.grad.clone()
        scores.grad = None
        for q in range(3):
            row = scores[q : q + 1].detach().clone().requires_grad_(True)
            (loss(row, relevant[q : q + 1]) / 3).backward()
            assert torch.allclose(row.grad, together[q : q + 1])
        assert together.abs().sum() > 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(20, 5), (7, 3)])
def test_map_loss_is_the_mean_over_present_classes(dtype, shape):
    scores = torch.randn(shape, dtype=dtype)
    labels = torch.rand(shape) < 0.3
    labels[:, -1] = False  # a class absent from the batch is left out
    labels[0, 0] = True
    columns = [(scores[:, c].tolist(), labels[:, c].tolist()) for c in range(shape[1]) if labels[:, c].any()]
    expected = sum(bf.ap_row(s, l, margin=0.15) for s, l in columns) / len(columns)
    assert MAPLoss(0.15, 0.5)(scores, labels).item() == pytest.approx(expected, rel=1e-5)


def test_apc_loss_ranks_the_flattened_matrix():
    scores = torch.randn(12, 4, dtype=torch.float64)
    labels = torch.rand(12, 4) < 0.25
    labels[0, 0] = True
    expected = bf.ap_row(scores.flatten().tolist(), labels.flatten().tolist(), margin=0.15)
    assert APCLoss(0.15, 0.5)(scores, labels).item() == pytest.approx(expected)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: APLoss(margin=-0.1), "margin"),
        (lambda: APLoss(lam=0), "lam"),
        (lambda: RecallLoss(lam=-1), "lam"),
        (lambda: RecallLoss(weighting="linear"), "weighting"),
    ],
)
def test_bad_hyper_parameters_are_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(
    "scores, relevant, message",
    [
        (torch.tensor([[1.0, float("nan")]]), torch.tensor([[True, False]]), "NaN"),
        (torch.tensor([[1.0, float("-inf")]]), torch.tensor([[True, False]]), "inf"),
        (torch.randn(2, 3), torch.ones(2, 4, dtype=torch.bool), "shape mismatch"),
        (torch.randn(2, 3), torch.ones(2, 3), "bool"),
        (torch.randn(3), torch.ones(3, dtype=torch.bool), "dimension"),
    ],
)
def test_bad_input_is_named(scores, relevant, message):
    for loss in (APLoss(0.1, 0.5), RecallLoss(0.1, 4.0)):
        with pytest.raises(ValueError, match=message):
            loss(scores, relevant)
