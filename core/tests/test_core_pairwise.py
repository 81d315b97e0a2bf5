import pytest
import torch

from rambo.core import pairwise_scores
from rambo.core.pairwise import off_diagonal, unit_rows


def test_pairwise_scores_are_cosines_of_every_other_element():
    embeddings = torch.randn(7, 3, dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 2, 2, 2, 3])
    scores, relevant = pairwise_scores(embeddings, labels)
    assert scores.shape == relevant.shape == (7, 6)
    cos = torch.nn.functional.cosine_similarity
    for q in range(7):
        others = [j for j in range(7) if j != q]
        assert torch.allclose(scores[q], torch.stack([cos(embeddings[q], embeddings[j], dim=0) for j in others]))
        assert relevant[q].tolist() == [bool(labels[q] == labels[j]) for j in others]


def test_the_query_is_never_its_own_positive():
    """Regression: a singleton class has no relevant item in its row."""
    scores, relevant = pairwise_scores(torch.randn(5, 4), torch.tensor([0, 1, 1, 2, 3]))
    assert relevant.sum(1).tolist() == [0, 1, 1, 0, 0]


def test_off_diagonal_keeps_order():
    m = torch.arange(16).view(4, 4)
    assert off_diagonal(m).tolist() == [[1, 2, 3], [4, 6, 7], [8, 9, 11], [12, 13, 14]]


@pytest.mark.parametrize(
    "embeddings, labels, message",
    [
        (torch.randn(4, 3), torch.tensor([0, 1, 2]), "shape mismatch"),
        (torch.randn(4, 3), torch.tensor([0.0, 1, 2, 3]), "integer"),
        (torch.randn(1, 3), torch.tensor([0]), "at least 2"),
        (torch.tensor([[float("nan"), 1.0], [0.0, 1.0]]), torch.tensor([0, 1]), "NaN"),
    ],
)
def test_bad_input_is_named(embeddings, labels, message):
    with pytest.raises(ValueError, match=message):
        pairwise_scores(embeddings, labels)


def brute_force_unit(rows: torch.Tensor) -> torch.Tensor:
    """``x / ||x||`` (the cosine's normalisation, paper Sec. 5.1) row by row, in float64 from the
    Python sum of squares: exact references for rows a float32 norm overflows on."""
    out = []
    for row in rows.double().tolist():
        norm = sum(v * v for v in row) ** 0.5
        out.append([v / norm for v in row])
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("scale", [1e-30, 1e-3, 1.0, 1e3, 1e30, 3e38])
def test_unit_rows_are_of_unit_length_at_any_scale(scale):
    rows = torch.randn(6, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    embeddings = (rows * scale).float()  # 3e38 * |N(0,1)| > float32's largest: some entries become inf
    embeddings = torch.where(embeddings.isfinite(), embeddings, torch.full_like(embeddings, 3e38))
    unit = unit_rows(embeddings)
    assert torch.allclose(unit.double(), brute_force_unit(embeddings), atol=1e-6)
    assert torch.allclose(unit.double().norm(dim=1), torch.ones(6, dtype=torch.float64), atol=1e-6)


def test_unit_rows_gradient_is_that_of_x_over_its_norm():
    rows = torch.randn(5, 7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    rows[2] = torch.tensor([0.0, 0, 3e-5, 0, 0, 0, 0], dtype=torch.float64)  # one non-zero entry: scaled sum is 1
    assert torch.autograd.gradcheck(unit_rows, (rows.requires_grad_(),))


def test_a_zero_row_scores_zero_and_passes_its_gradient_unchanged():
    embeddings = torch.randn(4, 8, generator=torch.Generator().manual_seed(2))
    embeddings[1] = 0
    embeddings.requires_grad_()
    unit = unit_rows(embeddings)
    upstream = torch.randn(4, 8, generator=torch.Generator().manual_seed(3))
    unit.backward(upstream)
    assert unit[1].eq(0).all()
    assert torch.equal(embeddings.grad[1], upstream[1])  # the Jacobian of a zero row is the identity


@pytest.mark.parametrize("loss_class", ["APLoss", "RecallLoss", "SmoothAPLoss"])
def test_embedding_losses_give_a_zero_row_a_bounded_gradient_and_huge_rows_a_real_one(loss_class):
    import rambo.core as core

    embeddings = torch.randn(8, 16, generator=torch.Generator().manual_seed(4))
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    zero = embeddings.clone()
    zero[3] = 0
    zero.requires_grad_()
    core.EmbeddingLoss(getattr(core, loss_class)())(zero, labels).backward()
    # every score's gradient is at most 1 in size for these losses over 8 queries, and a unit vector's
    # gradient is a sum of 2 * 7 scores' gradients times unit vectors: far below F.normalize's 1e11
    assert zero.grad[3].norm() < 14

    huge = (embeddings * 1e30).requires_grad_()  # squares overflow float32: F.normalize gives zeros
    value = core.EmbeddingLoss(getattr(core, loss_class)())(huge, labels)
    reference = core.EmbeddingLoss(getattr(core, loss_class)())(embeddings, labels)
    assert torch.allclose(value, reference, atol=1e-6)
    value.backward()
    assert huge.grad.abs().sum() > 0 and huge.grad.isfinite().all()
