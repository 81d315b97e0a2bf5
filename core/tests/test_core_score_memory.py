"""Score memory (Sec. 4.3): extends the ranking, not the queries; gradients reach the current batch only."""

import core_brute_force as bf
import pytest
import torch

from rambo.core import APLoss, EmbeddingMemory, MAPLoss, RecallLoss, RowMemory, ScoreMemory, pairwise_scores
from rambo.core.pairwise import unit_rows


class ShapeSpy(torch.nn.Module):
    """A loss that records what it receives and returns a differentiable sum."""

    def __init__(self, ranked_dim):
        super().__init__()
        self.ranked_dim = ranked_dim
        self.shapes = []

    def forward(self, scores, relevant):
        self.shapes.append(tuple(scores.shape))
        return scores.sum()


@pytest.mark.parametrize(
    "ranked_dim, shape, grown", [(-1, (4, 6), lambda k: (4, 6 * k)), (0, (6, 3), lambda k: (6 * k, 3))]
)
def test_memory_extends_the_ranked_dimension_not_the_queries(ranked_dim, shape, grown):
    spy = ShapeSpy(ranked_dim)
    memory = ScoreMemory(spy, tau=2)
    for _ in range(4):
        memory(torch.randn(shape), torch.rand(shape) < 0.5)
    assert spy.shapes == [grown(1), grown(2), grown(3), grown(3)]


def test_score_memory_value_and_gradients():
    # lambda 5: at lambda 0.5 the perturbation of this 20-item ranking swaps no pair for about a
    # third of the random draws (then every gradient is 0, and the last assert would depend on the seed;
    # 0 of 500 seeds at lambda 5).
    loss = MAPLoss(0.15, 5.0)
    memory = ScoreMemory(loss, tau=7)
    old_scores = torch.randn(10, 4, requires_grad=True)
    old_labels = torch.rand(10, 4) < 0.3
    memory(old_scores, old_labels)
    scores = torch.randn(10, 4, requires_grad=True)
    labels = torch.rand(10, 4) < 0.3
    labels[0] = True
    value = memory(scores, labels)
    expected = loss(torch.cat([scores, old_scores]), torch.cat([labels, old_labels]))
    assert value.item() == pytest.approx(expected.item())
    value.backward()
    assert old_scores.grad is None  # the remembered batch is detached
    assert scores.grad is not None and scores.grad.abs().sum() > 0


def test_memory_keeps_only_tau_batches_and_only_in_training_mode():
    memory = ScoreMemory(APLoss(0.0, 0.5), tau=3)
    for _ in range(5):
        memory(torch.randn(2, 4), torch.rand(2, 4) < 0.5)
    assert len(memory) == 3
    memory.eval()
    memory(torch.randn(2, 4), torch.rand(2, 4) < 0.5)
    assert len(memory) == 3
    memory.reset()
    assert len(memory) == 0


def test_tau_zero_is_no_memory():
    loss = APLoss(0.1, 0.5)
    memory = ScoreMemory(loss, tau=0)
    scores, relevant = torch.randn(3, 8), torch.rand(3, 8) < 0.5
    relevant[0, 0] = True
    memory(torch.randn(3, 8), torch.rand(3, 8) < 0.5)
    assert memory(scores, relevant).item() == loss(scores, relevant).item()


def test_memory_travels_with_the_state_dict():
    first = ScoreMemory(APLoss(0.0, 0.5), tau=2)
    for _ in range(2):
        first(torch.randn(2, 4), torch.rand(2, 4) < 0.5)
    second = ScoreMemory(APLoss(0.0, 0.5), tau=2)
    second.load_state_dict(first.state_dict())
    scores, relevant = torch.randn(2, 4), torch.tensor([[True, False, False, True]] * 2)
    assert first(scores, relevant).item() == second(scores, relevant).item()


def test_bad_tau_is_named():
    with pytest.raises(ValueError, match="tau"):
        ScoreMemory(APLoss(), tau=-1)
    with pytest.raises(ValueError, match="tau"):
        EmbeddingMemory(RecallLoss(), tau=1.5)


def test_embedding_memory_scores_queries_against_batch_and_memory():
    torch.manual_seed(3)
    loss = RecallLoss(0.02, 4.0)
    memory = EmbeddingMemory(loss, tau=3)
    old = torch.randn(6, 5, requires_grad=True)
    old_labels = torch.tensor([0, 0, 1, 1, 2, 2])
    memory(old, old_labels)
    embeddings = torch.randn(6, 5, requires_grad=True)
    labels = torch.tensor([0, 1, 1, 2, 3, 3])
    scores, relevant = memory.scores_and_relevance(embeddings, labels)
    assert scores.shape == (6, 5 + 6)  # B queries, B-1 batch items + M remembered ones
    unit = torch.nn.functional.normalize(embeddings.detach(), dim=1)
    unit_old = torch.nn.functional.normalize(old.detach(), dim=1)
    for q in range(6):
        others = [j for j in range(6) if j != q]
        expected = [float(unit[q] @ unit[j]) for j in others] + [float(unit[q] @ unit_old[j]) for j in range(6)]
        expected_rel = [bool(labels[q] == labels[j]) for j in others] + [
            bool(labels[q] == old_labels[j]) for j in range(6)
        ]
        assert torch.allclose(scores[q].detach(), torch.tensor(expected), atol=1e-6)
        assert relevant[q].tolist() == expected_rel
    value = memory(embeddings, labels)
    rows = [bf.recall_row(s, r, margin=0.02) for s, r in zip(scores.tolist(), relevant.tolist()) if any(r)]
    assert value.item() == pytest.approx(sum(rows) / len(rows), rel=1e-5)
    value.backward()
    assert old.grad is None and embeddings.grad.abs().sum() > 0


def test_embedding_memory_without_memory_is_the_plain_batch_loss():
    loss = APLoss(0.02, 0.5)
    memory = EmbeddingMemory(loss, tau=0)
    embeddings, labels = torch.randn(8, 4), torch.arange(8) // 2
    memory(torch.randn(8, 4), labels)
    assert memory(embeddings, labels).item() == loss(*pairwise_scores(embeddings, labels)).item()


def test_row_memory_is_the_authors_batch_memory_by_brute_force():
    """The authors' ``BatchMemoryRecallLoss`` (martius-lab/blackbox-backprop recall.py@075bf56):
    the score rows of the last tau batches are appended as more queries, detached, and ``RecallLoss``
    denormalises the ranks by the number of rows, so each r_i (Eq. 17) is multiplied by 1 + m."""
    torch.manual_seed(0)
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    memory = RowMemory(RecallLoss(margin=0.1, lam=4.0), tau=2)
    seen = []
    for step in range(4):
        embeddings = torch.randn(8, 5, requires_grad=True)
        value = memory(embeddings, labels)
        scores, relevant = pairwise_scores(embeddings.detach(), labels)
        seen.append((scores.tolist(), relevant.tolist()))
        window = seen[-3:]  # this batch and at most the 2 before it
        rows = [row for s, _ in window for row in s]
        rels = [row for _, r in window for row in r]
        expected = bf.mean_over_rows(bf.recall_row, rows, rels, margin=0.1, rank_scale=len(window))
        assert value.item() == pytest.approx(expected, rel=1e-6), step
        value.backward()
        assert embeddings.grad is not None and embeddings.grad.abs().sum() > 0
    assert len(memory.remembered()) == 2


def test_row_memory_without_memory_is_the_recall_loss_and_refuses_other_losses():
    torch.manual_seed(1)
    embeddings, labels = torch.randn(6, 4), torch.tensor([0, 0, 1, 1, 2, 2])
    loss = RecallLoss(margin=0.1, lam=4.0)
    assert torch.equal(RowMemory(loss, tau=0)(embeddings, labels), loss(*pairwise_scores(embeddings, labels)))
    memory = RowMemory(loss, tau=1)
    memory(embeddings, labels)
    with pytest.raises(ValueError, match="every batch needs the same size"):
        memory(embeddings[:4], labels[:4])
    with pytest.raises(TypeError, match="rank_scale"):
        RowMemory(APLoss(), tau=1)


def _reference_inputs(kind, window, scores, relevant):
    """What the wrapped loss receives, built from a list of the last batches (the deque the memory
    replaced): the current batch first, then the remembered ones, oldest first."""
    if kind in ("items", "rows"):
        dim = 0 if kind == "items" else -1
        return torch.cat([scores] + [s for s, _ in window], dim), torch.cat([relevant] + [r for _, r in window], dim)
    embeddings, labels = scores, relevant
    batch_scores, batch_relevant = pairwise_scores(embeddings, labels)
    if not window:
        return batch_scores, batch_relevant
    memory = torch.cat([unit_rows(e) for e, _ in window])
    memory_labels = torch.cat([l for _, l in window])
    unit = unit_rows(embeddings)
    return (
        torch.cat([batch_scores, unit @ memory.T], 1),
        torch.cat([batch_relevant, labels[:, None] == memory_labels[None]], 1),
    )


@pytest.mark.parametrize("kind", ["items", "rows", "embeddings"])
def test_a_full_memory_is_shifted_in_place_and_gives_the_losses_of_a_list_of_batches(kind):
    """Once full, the memory keeps its tensors (shape and address: what a CUDA graph
    replays) and shifts them in place; the loss value and gradient are those of the current batch
    and the last tau batches kept as a list, bit for bit (ties included: the order is the same)."""
    tau, generator = 3, torch.Generator().manual_seed(4)
    if kind == "embeddings":
        memory, loss = EmbeddingMemory(RecallLoss(0.02, 4.0), tau), RecallLoss(0.02, 4.0)
        batches = [
            (torch.randn(8, 5, generator=generator), torch.randint(0, 3, (8,), generator=generator)) for _ in range(8)
        ]
    else:
        loss = MAPLoss(0.15, 5.0) if kind == "items" else APLoss(0.1, 0.5)
        memory = ScoreMemory(loss, tau)
        shape = (6, 3) if kind == "items" else (3, 6)
        # few distinct values: ties between the current batch and the memory
        batches = [
            (torch.randint(-3, 3, shape, generator=generator).float(), torch.rand(shape, generator=generator) < 0.4)
            for _ in range(8)
        ]
    window, addresses = [], []
    for step, (scores, relevant) in enumerate(batches):
        leaf = scores.clone().requires_grad_(True)
        value = memory(leaf, relevant)
        value.backward()
        reference_leaf = scores.clone().requires_grad_(True)
        expected = loss(*_reference_inputs(kind, window, reference_leaf, relevant))
        expected.backward()
        assert torch.equal(value, expected) and torch.equal(leaf.grad, reference_leaf.grad), step
        window = (window + [(scores, relevant)])[-tau:]
        addresses.append(tuple(t.data_ptr() for t in memory.held()))
        assert len(memory) == min(step + 1, tau)
    assert len(set(addresses[tau:])) == 1  # full from the tau-th batch on: the same two tensors


def test_a_batch_of_another_size_rebuilds_the_memory_in_the_same_order():
    """Over items (ranked dimension 0) batches may differ in size: the memory is rebuilt, and what the
    loss receives is still the current batch and the last tau batches, oldest first."""
    spy = ShapeSpy(0)
    received = []
    spy.forward = lambda scores, relevant: received.append(scores.detach().clone()) or scores.sum()
    memory = ScoreMemory(spy, tau=2)
    batches = [torch.full((n, 2), float(i)) for i, n in enumerate([3, 3, 3, 4, 3, 3])]
    for scores in batches:
        memory(scores, scores > 100)
    for step, got in enumerate(received):
        expected = torch.cat([batches[step]] + batches[max(0, step - 2) : step])
        assert torch.equal(got, expected), step


def test_the_memory_loads_a_state_of_the_old_format_and_keeps_only_tau_batches():
    """Checkpoints hold ``{"batches": [(first, second), ...]}`` (oldest first), as before the memory
    became two tensors; a state with more batches than tau keeps the newest tau."""
    batches = [(torch.full((2, 3), float(i)), torch.zeros(2, 3, dtype=torch.bool)) for i in range(4)]
    memory = ScoreMemory(APLoss(), tau=3)
    memory.set_extra_state({"batches": batches})
    assert [float(a[0, 0]) for a, _ in memory.remembered()] == [1.0, 2.0, 3.0]
    again = ScoreMemory(APLoss(), tau=3)
    again.load_state_dict(memory.state_dict())
    assert torch.equal(again.held()[0], memory.held()[0]) and len(again) == 3
