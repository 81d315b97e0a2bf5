import itertools

import pytest
import torch

from rambo.retrieval.contrastive_loss import ContrastiveLoss

torch.set_num_threads(1)


def _brute_force(embeddings, labels, margin):
    unit = [e / e.norm() for e in embeddings]
    positives, negatives = [], []
    for i, j in itertools.permutations(range(len(labels)), 2):
        d = (unit[i] - unit[j]).norm()
        if labels[i] == labels[j]:
            positives.append(d**2)
        else:
            negatives.append(max(0.0, margin - d) ** 2)
    return sum(positives) / len(positives) + sum(negatives) / len(negatives)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_loop_over_pairs(dtype):
    g = torch.Generator().manual_seed(0)
    embeddings = torch.randn(12, 4, generator=g, dtype=dtype)
    labels = torch.randint(0, 3, (12,), generator=g)
    for margin in (0.3, 1.0, 1.8):
        expected = _brute_force(embeddings.double(), labels, margin)
        got = ContrastiveLoss(margin)(embeddings, labels)
        assert got.dtype == dtype
        assert float(got) == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.outcome
def test_gradient_pulls_positives_together():
    embeddings = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], requires_grad=True)
    labels = torch.tensor([0, 0, 1])
    ContrastiveLoss(0.5)(embeddings, labels).backward()
    step = embeddings.detach() - 0.1 * embeddings.grad
    before = torch.nn.functional.cosine_similarity(embeddings[0:1], embeddings[1:2])
    after = torch.nn.functional.cosine_similarity(step[0:1], step[1:2])
    assert after > before


def test_duplicates_give_finite_gradient():
    embeddings = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    ContrastiveLoss(0.5)(embeddings, torch.tensor([0, 1, 1])).backward()
    assert torch.isfinite(embeddings.grad).all()


def test_bad_margin_raises():
    with pytest.raises(ValueError, match="margin"):
        ContrastiveLoss(3.0)
