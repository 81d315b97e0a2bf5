import json

import pytest
import torch

from rambo.figures.minibatch_map import (
    MeanAveragePrecision,
    batch_stream,
    minibatch_map_estimates,
    synthetic_class_scores,
)


def brute_force_map(scores, relevant):
    """Eq. 4-6 by definition: for each class with a positive, mean over positives of precision at their rank."""
    per_class = []
    for row_scores, row_relevant in zip(scores.tolist(), relevant.tolist()):
        n = len(row_scores)
        positives = [i for i in range(n) if row_relevant[i]]
        if not positives:
            continue
        precisions = []
        for i in positives:
            # rank of i: 1 + items scored higher, ties broken by position (earlier first), as rambo.core does
            above = [j for j in range(n) if row_scores[j] > row_scores[i] or (row_scores[j] == row_scores[i] and j < i)]
            precisions.append((1 + sum(row_relevant[j] for j in above)) / (1 + len(above)))
        per_class.append(sum(precisions) / len(precisions))
    return sum(per_class) / len(per_class)


def test_synthetic_scores_have_one_class_per_item():
    scores, relevant = synthetic_class_scores(items=50, classes=4, signal=2.0, seed=0)
    assert scores.shape == relevant.shape == (4, 50)
    assert (relevant.sum(0) == 1).all()
    with pytest.raises(ValueError, match="items"):
        synthetic_class_scores(items=0, classes=4, signal=1.0, seed=0)


def test_mean_average_precision_matches_the_definition():
    scores, relevant = synthetic_class_scores(items=30, classes=5, signal=1.0, seed=1)
    scores[0, 3] = scores[0, 7]  # a tie, broken by position
    assert float(MeanAveragePrecision()(scores, relevant)) == pytest.approx(
        brute_force_map(scores, relevant), abs=1e-12
    )


def test_batch_stream_draws_permutations_epoch_by_epoch():
    stream = batch_stream(10, 3, torch.Generator().manual_seed(0))
    epoch = torch.cat([next(stream) for _ in range(3)])  # 3 batches of 3, the 10th item dropped
    assert len(set(epoch.tolist())) == 9
    with pytest.raises(ValueError, match="batch_size"):
        next(batch_stream(10, 11, torch.Generator()))


@pytest.mark.parametrize("tau", [0, 2])
def test_estimate_with_memory_is_the_map_of_the_last_tau_plus_one_batches(tau):
    scores, relevant = synthetic_class_scores(items=40, classes=3, signal=1.0, seed=2)
    estimates = minibatch_map_estimates(scores, relevant, batch_size=6, batches=4, tau=tau, seed=5)
    stream = batch_stream(40, 6, torch.Generator().manual_seed(5))
    batches = [next(stream) for _ in range(tau + 4)]
    expected = []
    for k in range(tau, tau + 4):
        columns = torch.cat(batches[k - tau : k + 1])  # column order only matters for ties; these scores have none
        expected.append(brute_force_map(scores[:, columns], relevant[:, columns]))
    assert estimates.tolist() == pytest.approx(expected, abs=1e-12)


@pytest.mark.outcome
def test_fig2_estimate_is_optimistic_for_small_batches_and_memory_reduces_the_bias(run_figure, assert_figure_written):
    out = run_figure(
        "fig2_minibatch_map",
        "--items",
        "400",
        "--classes",
        "5",
        "--batch-sizes",
        "4",
        "16",
        "64",
        "256",
        "--batches",
        "60",
        "--tau",
        "3",
    )
    assert_figure_written(out, "fig2_minibatch_map")
    numbers = json.loads((out / "fig2_minibatch_map.json").read_text())
    true_map = numbers["true_map"]
    gap = {name: [row[name]["mean"] - true_map for row in numbers["rows"]] for name in numbers["curves"]}
    plain, memory = gap["no memory"], gap["memory tau=3"]
    assert plain[0] > 0.1  # small batches overestimate mAP (paper Fig. 2)
    assert all(later < earlier for earlier, later in zip(plain, plain[1:]))  # and approach it as they grow
    assert abs(plain[-1]) < 0.25 * plain[0]
    assert memory[0] < plain[0] and memory[1] < plain[1]  # memory shrinks the gap
