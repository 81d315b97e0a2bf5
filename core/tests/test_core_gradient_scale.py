"""scale_gradient: a weight that scales the gradient after the rank and leaves lambda alone."""

import pytest
import torch

from rambo.core import RecallLoss, pairwise_scores, scale_gradient


def test_identity_forward_and_scaled_backward():
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    y = scale_gradient(x, 3.0)
    assert torch.equal(y, x)
    (y * torch.arange(15.0, dtype=torch.float64).reshape(5, 3)).sum().backward()
    assert torch.equal(x.grad, 3.0 * torch.arange(15.0, dtype=torch.float64).reshape(5, 3))
    assert scale_gradient(x, 1.0) is x


@pytest.mark.parametrize("factor", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_factors_are_refused(factor):
    with pytest.raises(ValueError, match="gradient scale must be a finite number > 0"):
        scale_gradient(torch.ones(2), factor)


def test_on_the_scores_it_weights_a_rank_loss_without_changing_lambda():
    """w * loss would perturb by w * lam * dL/drank (Alg. 1), i.e. run at lambda w * lam."""
    generator = torch.Generator(torch.get_default_device()).manual_seed(0)
    embeddings = torch.nn.functional.normalize(torch.randn(32, 8, generator=generator, dtype=torch.float64), dim=1)
    labels = torch.arange(8).repeat_interleave(4)
    scores, relevant = pairwise_scores(embeddings, labels)
    loss = RecallLoss(margin=0.02, lam=0.2)

    def gradient(weight: float, on_value: bool) -> torch.Tensor:
        s = scores.clone().requires_grad_(True)
        value = loss(s if on_value else scale_gradient(s, weight), relevant)
        (weight * value if on_value else value).backward()
        return s.grad

    unit = gradient(1.0, on_value=False)
    assert unit.abs().sum() > 0
    assert torch.allclose(gradient(8.0, on_value=False), 8.0 * unit, atol=1e-12)
    assert not torch.allclose(gradient(8.0, on_value=True), 8.0 * unit)
