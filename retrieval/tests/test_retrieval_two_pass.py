import pytest
import torch

from rambo.core import EmbeddingMemory, RecallLoss
from rambo.retrieval.contrastive_loss import ContrastiveLoss
from rambo.retrieval.model import EmbeddingNet
from rambo.retrieval.two_pass import two_pass_backward

torch.set_num_threads(1)


def _gradients(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _batch(n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 16, 16, generator=g), torch.arange(n) % 6


@pytest.mark.parametrize(
    "make_loss",
    [lambda: ContrastiveLoss(0.5), lambda: EmbeddingMemory(RecallLoss(margin=0.02, lam=4.0), tau=3)],
    ids=["contrastive", "rambo_recall_with_memory"],
)
@pytest.mark.parametrize("chunk_size", [5, 8, 24])
def test_parameter_gradients_equal_one_pass(make_loss, chunk_size):
    torch.manual_seed(0)
    model = EmbeddingNet("small_convnet", embedding_dim=8, pretrained=False, width=4, freeze_batchnorm=True)
    images, labels = _batch()
    one_pass_loss = make_loss()
    reference = one_pass_loss(model(images), labels)
    reference.backward()
    expected = _gradients(model)
    model.zero_grad()

    loss = make_loss()
    value = two_pass_backward(model, images, labels, loss, chunk_size)
    assert float(value) == pytest.approx(float(reference.detach()), rel=1e-6)
    got = _gradients(model)
    assert got.keys() == expected.keys() and len(got) > 0
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-6, msg=name)
    if isinstance(loss, EmbeddingMemory):  # the memory saw the batch once, as in one pass
        assert len(loss) == len(one_pass_loss) == 1


class _DropoutNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(3 * 16 * 16, 32),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.5),
            torch.nn.Linear(32, 8),
            torch.nn.BatchNorm1d(8),
        )

    def forward(self, x):
        return torch.nn.functional.normalize(self.body(x), dim=1)


def test_stochastic_layers_and_batchnorm_replay_pass_one():
    """Dropout masks are replayed and BatchNorm running statistics are updated once per chunk:
    two-pass equals a chunk-by-chunk forward with one graph (same random stream)."""
    images, labels = _batch(seed=1)
    chunk = 8
    torch.manual_seed(0)
    model = _DropoutNet().train()
    initial = {k: v.clone() for k, v in model.state_dict().items()}

    torch.manual_seed(123)
    embeddings = torch.cat([model(images[i : i + chunk]) for i in range(0, len(images), chunk)])
    ContrastiveLoss(0.5)(embeddings, labels).backward()
    expected = _gradients(model)
    expected_stats = model.body[5].running_mean.clone()

    model.load_state_dict(initial)
    model.zero_grad()
    torch.manual_seed(123)
    two_pass_backward(model, images, labels, ContrastiveLoss(0.5), chunk)
    for name, grad in _gradients(model).items():
        torch.testing.assert_close(grad, expected[name], rtol=1e-4, atol=1e-6, msg=name)
    torch.testing.assert_close(model.body[5].running_mean, expected_stats)
    assert int(model.body[5].num_batches_tracked) == len(images) // chunk


def test_bad_chunk_size_raises():
    model = EmbeddingNet("small_convnet", embedding_dim=8, pretrained=False, width=4)
    images, labels = _batch(n=4)
    with pytest.raises(ValueError, match="chunk_size"):
        two_pass_backward(model, images, labels, ContrastiveLoss(0.5), 0)
