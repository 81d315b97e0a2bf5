import pytest
import torch

from rambo.core import pairwise_scores
from rambo.core.pairwise import off_diagonal


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
