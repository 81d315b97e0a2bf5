import json

import pytest
import torch

from rambo.core import exact_rank
from rambo.figures.sodeep_sorter import SoDeepSorter, load_sorter, sorting_loss, synthetic_sequences


class _ExactSorter(SoDeepSorter):
    """A sorter that returns the true normalised ranks: the sorting loss must be 0 for it."""

    def normalised_ranks(self, scores):
        return exact_rank(scores).float() / scores.shape[-1]


def test_sorting_loss_is_the_mean_rank_error():
    scores = torch.tensor([[0.3, -1.0, 2.0, 0.5]])  # ranks 3, 4, 1, 2
    assert float(sorting_loss(_ExactSorter(4, 1), scores)) == 0.0
    sorter = SoDeepSorter(4, 1)
    predicted = sorter.normalised_ranks(scores).detach()
    target = torch.tensor([[3.0, 4.0, 1.0, 2.0]]) / 4
    with torch.no_grad():
        l1, l2 = float(sorting_loss(sorter, scores, "l1")), float(sorting_loss(sorter, scores, "l2"))
    assert l1 == pytest.approx(float((predicted - target).abs().mean()), abs=1e-6)
    assert l2 == pytest.approx(float((predicted - target).square().mean()), abs=1e-6)
    with pytest.raises(ValueError, match="l1"):
        sorting_loss(sorter, scores, "huber")


def test_sorter_keeps_leading_dimensions_and_synthetic_sequences_vary_in_scale():
    sorter = SoDeepSorter(4, 1)
    assert sorter(torch.randn(3, 5, 7)).shape == (3, 5, 7)
    sequences = synthetic_sequences(500, 20, torch.Generator().manual_seed(0))
    spread = sequences.std(-1)
    assert sequences.shape == (500, 20) and spread.min() < 0.4 and spread.max() > 1.4


def test_load_sorter_explains_a_missing_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="rambo.figures.train_sodeep"):
        load_sorter(tmp_path / "sodeep_sorter.pt")


@pytest.mark.outcome
def test_training_lowers_the_loss_and_fig6_draws_all_surrogates(run_figure, tmp_path, assert_figure_written):
    out = run_figure(
        "train_sodeep",
        "--length",
        "20",
        "--steps",
        "40",
        "--batch",
        "32",
        "--hidden",
        "8",
        "--layers",
        "1",
        "--lr",
        "0.01",
    )
    record = json.loads((out / "sodeep_sorter.json").read_text())
    assert record["validation_loss_after"] < 0.8 * record["validation_loss_before"]
    assert sorted(p.name for p in out.iterdir()) == ["sodeep_sorter.json", "sodeep_sorter.pt"]  # no temp file left
    sorter, checkpoint = load_sorter(out / "sodeep_sorter.pt")
    assert checkpoint["config"] == {"hidden": 8, "layers": 1, "length": 20}

    run_figure("fig6_surrogate_landscapes", "--sodeep", str(out / "sodeep_sorter.pt"), "--resolution", "30")
    assert_figure_written(out, "fig6_surrogate_landscapes")
    numbers = json.loads((out / "fig6_surrogate_landscapes.json").read_text())
    assert numbers["mean_abs_difference_from_true"]["true"] == 0.0
    # Exact ranks are piecewise constant; every surrogate has a gradient nearly everywhere.
    for surrogate in ("blackbox", "fastap", "sodeep"):
        assert numbers["flat_fraction"][surrogate] < numbers["flat_fraction"]["true"]


@pytest.mark.outcome
def test_fig5_evolution_tends_to_the_true_loss(run_figure, assert_figure_written):
    out = run_figure(
        "fig5_landscape_evolution", "--lams", "0.001", "0.01", "0.1", "--bins", "3", "12", "48", "--resolution", "40"
    )
    assert_figure_written(out, "fig5_landscape_evolution")
    numbers = json.loads((out / "fig5_landscape_evolution.json").read_text())
    blackbox = [numbers["blackbox"][f"lam={lam}"]["mean_abs_difference_from_true"] for lam in ("0.001", "0.01", "0.1")]
    fastap = [numbers["fastap"][f"bins={bins}"]["mean_abs_difference_from_true"] for bins in (3, 12, 48)]
    assert blackbox[0] < blackbox[1] < blackbox[2]  # smaller lambda: closer to the true loss
    assert fastap[0] > fastap[1] > fastap[2]  # more bins: closer to the true loss
