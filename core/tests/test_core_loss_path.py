"""The dense, sync-free formulation of the RaMBO losses (rambo.core.loss_path) against the
sparse CPU one: bit-identical gradients (ties and both zeros included), the same values up to the
order of the summation, the brute-force definitions (Eq. 17-22), no host synchronisation, one graph."""

from __future__ import annotations

import math

import core_brute_force as brute
import pytest
import torch

from rambo.core import APCLoss, APLoss, EmbeddingMemory, MAPLoss, RecallLoss, RowMemory, ScoreMemory
from rambo.core.host_syncs import count_host_syncs
from rambo.core.loss_path import loss_path, loss_path_settings, set_loss_path, use_dense
from rambo.core.ranking import alg1_gradient, exact_rank

LOSSES = {
    "recall_log": lambda: RecallLoss(0.02, 4.0),
    "recall_loglog_no_margin": lambda: RecallLoss(0.0, 4.0, "loglog"),
    "ap": lambda: APLoss(0.05, 0.5),
    "map": lambda: MAPLoss(0.15, 0.5),
    "apc": lambda: APCLoss(0.15, 0.5),
}


def scores_of(kind: str, dtype=torch.float32, shape=(6, 40)) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    if kind == "random":
        scores = torch.randn(shape, generator=generator)
    elif kind == "ties":  # few distinct values: most items tie
        scores = torch.randint(-2, 3, shape, generator=generator).float() / 4
    else:  # "zeros": +0.0 and -0.0 mixed with ties and a few other values
        scores = torch.randint(-1, 2, shape, generator=generator).float() * 0.5
        scores[torch.rand(shape, generator=generator) < 0.5] = 0.0
        scores[torch.rand(shape, generator=generator) < 0.5] *= -1.0  # -0.0 where the value is 0
    return scores.to(dtype).to(torch.get_default_device())


def relevance_of(shape=(6, 40), empty_row: bool = True) -> torch.Tensor:
    relevant = torch.rand(shape, generator=torch.Generator().manual_seed(3)) < 0.2
    relevant[:, 0] = True
    if empty_row:
        relevant[2] = False  # a row (MAP/APC: a column of the transposed call) without a relevant item
    return relevant.to(torch.get_default_device())


def inputs_of(name: str, kind: str, dtype=torch.float32):
    """``[Q, N]`` rows for the recall and AP losses; ``[N, C]`` items x classes for MAP and AP-C (an
    empty column: a class without a positive; rows without one: background items)."""
    if name not in ("map", "apc"):
        return scores_of(kind, dtype), relevance_of()
    scores, relevant = scores_of(kind, dtype, shape=(40, 6)), relevance_of(shape=(40, 6), empty_row=False)
    relevant[:, 2] = False
    return scores, relevant


def value_and_gradient(loss, scores, relevant, path):
    leaf = scores.detach().clone().requires_grad_(True)
    with loss_path(path):
        value = loss(leaf, relevant)
        value.backward()
    return value.detach(), leaf.grad


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a, b) and torch.equal(torch.signbit(a), torch.signbit(b))


@pytest.mark.parametrize("kind", ["random", "ties", "zeros"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_dense_and_sparse_gradients_are_the_same_bits(name, dtype, kind):
    loss = LOSSES[name]()
    scores, relevant = inputs_of(name, kind, dtype)
    sparse = value_and_gradient(loss, scores, relevant, "sparse")
    dense = value_and_gradient(loss, scores, relevant, "dense")
    assert same_bits(dense[1], sparse[1]) and sparse[1].abs().sum() > 0
    assert dense[1].dtype == dtype
    torch.testing.assert_close(dense[0], sparse[0], rtol=1e-6, atol=1e-7)  # summation order only


@pytest.mark.parametrize("name", ["recall_log", "ap"])
def test_dense_values_match_the_brute_force_definitions(name):
    """Eq. 17-20 (recall) and Eq. 21-22 (AP), each row by a loop over the definitions."""
    loss = LOSSES[name]()
    scores, relevant = scores_of("ties"), relevance_of()
    with loss_path("dense"):
        value = float(loss(scores, relevant))
    row = brute.recall_row if name == "recall_log" else brute.ap_row
    expected = brute.mean_over_rows(row, scores.tolist(), relevant.tolist(), margin=loss.margin)
    assert value == pytest.approx(expected, rel=1e-6)


def test_no_relevant_item_anywhere_gives_zero_and_zero_gradients_on_both_paths():
    scores, relevant = scores_of("random"), torch.zeros(6, 40, dtype=torch.bool)
    for path in ("sparse", "dense"):
        value, gradient = value_and_gradient(APLoss(0.05, 0.5), scores, relevant, path)
        assert float(value) == 0.0 and same_bits(gradient, torch.zeros_like(gradient))


@pytest.mark.parametrize("wrap", ["score_memory", "embedding_memory", "row_memory"])
def test_memories_give_the_same_gradients_on_both_paths_while_they_fill(wrap):
    def make():
        if wrap == "score_memory":
            return ScoreMemory(MAPLoss(0.15, 0.5), 3)
        return (EmbeddingMemory if wrap == "embedding_memory" else RowMemory)(RecallLoss(0.02, 4.0), 3)

    memories = {"sparse": make(), "dense": make()}
    for step in range(5):
        generator = torch.Generator().manual_seed(step)
        if wrap == "score_memory":
            inputs = torch.randint(-3, 4, (32, 5), generator=generator).float() / 2
            labels = torch.rand(32, 5, generator=generator) < 0.2
        else:
            inputs = torch.randn(16, 4, generator=generator)
            labels = torch.randint(0, 4, (16,), generator=generator)
        gradients = {}
        for path, memory in memories.items():
            leaf = inputs.clone().requires_grad_(True)
            with loss_path(path):
                memory(leaf, labels).backward()
            gradients[path] = leaf.grad
        assert same_bits(gradients["dense"], gradients["sparse"]), f"step {step}"


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_the_dense_path_never_waits_for_the_host_and_the_count_can_fail(name):
    loss = LOSSES[name]()
    scores, relevant = inputs_of(name, "ties")

    def step(path):
        leaf = scores.clone().requires_grad_(True)
        with loss_path(path):
            loss(leaf, relevant).backward()

    assert count_host_syncs(step, "dense") == (0, {})
    assert count_host_syncs(step, "sparse")[0] >= 5  # nonzero, bincount, bool(...), masks: the counter sees them


def test_the_ranking_operators_inside_never_wait_either():
    scores = scores_of("ties")
    ranks = exact_rank(scores)
    assert count_host_syncs(exact_rank, scores)[0] == 0
    assert count_host_syncs(alg1_gradient, scores, ranks, torch.randn(scores.shape), 4.0)[0] == 0


def test_a_bad_score_propagates_as_nan_on_the_dense_path_and_raises_when_asked():
    scores, relevant = scores_of("random"), relevance_of()
    scores[1, 3] = float("nan")
    leaf = scores.clone().requires_grad_(True)
    with loss_path("dense"):
        value = APLoss(0.05, 0.5)(leaf, relevant)
        value.backward()
    assert math.isnan(float(value.detach())) and torch.isfinite(leaf.grad).all()
    with loss_path("dense", checks="raise"), pytest.raises(ValueError, match="contains NaN"):
        APLoss(0.05, 0.5)(scores, relevant)
    with loss_path("sparse"), pytest.raises(ValueError, match="contains NaN"):
        APLoss(0.05, 0.5)(scores, relevant)
    scores[1, 3] = float("inf")
    with loss_path("dense"):
        assert math.isnan(float(RecallLoss(0.02, 4.0)(scores, relevant)))


def test_the_switch_defaults_and_refusals():
    assert loss_path_settings() == {"path": "auto", "checks": "auto"}
    assert not use_dense(torch.zeros(2))  # auto on the CPU in eager mode: sparse
    with loss_path("dense"):
        assert use_dense(torch.zeros(2))
    assert loss_path_settings()["path"] == "auto"  # restored after the block
    with pytest.raises(ValueError, match="path must be one of"):
        set_loss_path("gpu")
    with pytest.raises(ValueError, match="checks must be one of"):
        set_loss_path("auto", checks="never")
