"""Bad input to the library is a ValueError that names the problem, never a raw torch error."""

import pytest
import torch

from rambo.core import APLoss, EmbeddingMemory, MAPLoss, RecallAtKSurrogate, RecallLoss, ScoreMemory, SiMix


def test_score_memory_refuses_a_last_batch_of_another_size():
    """A DataLoader without drop_last ends with a smaller batch: rows of different counts cannot be
    ranked together along the items."""
    memory = ScoreMemory(APLoss(0.1, 0.5), tau=3)
    memory(torch.randn(8, 20), torch.rand(8, 20) < 0.3)
    with pytest.raises(ValueError, match="drop_last=True"):
        memory(torch.randn(5, 20), torch.rand(5, 20) < 0.3)


def test_score_memory_over_items_takes_batches_of_any_size_but_not_other_classes():
    memory = ScoreMemory(MAPLoss(0.1, 0.5), tau=3)  # ranks dimension 0 (RoIs): their count may vary
    labels = torch.rand(8, 4) < 0.3
    labels[0] = True
    memory(torch.randn(8, 4), labels)
    memory(torch.randn(5, 4), labels[:5])
    with pytest.raises(ValueError, match="same size in dimension 1"):
        memory(torch.randn(5, 3), labels[:5, :3])


@pytest.mark.parametrize("loss", [RecallLoss(0.1, 0.5), APLoss(0.1, 0.5), MAPLoss(0.1, 0.5), RecallAtKSurrogate()])
def test_three_dimensional_scores_are_named(loss):
    with pytest.raises(ValueError, match="2-D"):
        loss(torch.randn(2, 3, 4), torch.rand(2, 3, 4) < 0.5)


def test_embedding_memory_refuses_a_changed_embedding_size():
    memory = EmbeddingMemory(RecallLoss(0.1, 0.5), tau=2)
    memory(torch.randn(8, 16), torch.arange(8) // 2)
    with pytest.raises(ValueError, match="embedding size changed"):
        memory(torch.randn(8, 32), torch.arange(8) // 2)
    memory.reset()
    memory(torch.randn(8, 32), torch.arange(8) // 2)  # after reset() the new size is fine


@pytest.mark.parametrize("mixes", [-1, 2.5, True, "4"])
def test_simix_mixes_must_be_a_count(mixes):
    with pytest.raises(ValueError, match="mixes must be an integer >= 0"):
        SiMix(RecallAtKSurrogate(), mixes=mixes)


@pytest.mark.parametrize(
    "make", [lambda v: RecallLoss(margin=v), lambda v: APLoss(margin=v), lambda v: MAPLoss(margin=v)]
)
@pytest.mark.parametrize("value", ["0.1", None, [0.1], True])
def test_a_non_numeric_margin_is_named(make, value):
    with pytest.raises(ValueError, match="margin must be a number"):
        make(value)


@pytest.mark.parametrize("value", ["4", None, object()])
def test_a_non_numeric_lambda_or_tau_is_named(value):
    with pytest.raises(ValueError, match="lam must be a number"):
        RecallLoss(0.1, lam=value)
    with pytest.raises(ValueError, match="tau"):
        ScoreMemory(APLoss(), tau=value)
