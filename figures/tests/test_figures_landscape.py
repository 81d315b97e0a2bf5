import itertools
import json

import pytest
import torch

from rambo.core import exact_rank, rank
from rambo.figures.blackbox_interpolation import blackbox_interpolation, min_over_permutations
from rambo.figures.landscape_plot import flat_fraction
from rambo.figures.loss_section import LossSection


def brute_force_min_over_permutations(values):
    n = values.shape[-1]
    return min(sum(float(values[i]) * (p[i]) for i in range(n)) for p in itertools.permutations(range(1, n + 1)))


def test_min_over_permutations_is_the_brute_force_minimum():
    for _ in range(5):
        values = torch.randn(6, dtype=torch.float64)
        assert float(min_over_permutations(values)) == pytest.approx(
            brute_force_min_over_permutations(values), abs=1e-12
        )
    tied = torch.tensor([0.5, 0.5, -1.0, 2.0, 0.5], dtype=torch.float64)
    assert float(min_over_permutations(tied)) == pytest.approx(brute_force_min_over_permutations(tied), abs=1e-12)


def _away_from_kinks(w, shifted, eps):
    """True when no coordinate step of size eps changes rank(w) or rank(w + lam_raw a)."""
    for point in (w, shifted):
        gaps = (point.unsqueeze(0) - point.unsqueeze(1)).abs() + torch.eye(len(point), dtype=point.dtype)
        if gaps.min() <= 4 * eps:
            return False
    return True


@pytest.mark.parametrize("lam", [0.002, 0.01, 0.2])
def test_finite_difference_gradient_of_interpolation_equals_rank_backward(lam):
    n, eps = 20, 1e-4
    generator = torch.Generator().manual_seed(1)
    weights = torch.randn(n, dtype=torch.float64, generator=generator)
    checked = 0
    while checked < 5:
        w = torch.randn(n, dtype=torch.float64, generator=generator)
        if not _away_from_kinks(w, w + lam * n * weights, eps):
            continue
        steps = torch.eye(n, dtype=torch.float64) * eps
        finite_difference = (
            blackbox_interpolation(w + steps, weights, lam) - blackbox_interpolation(w - steps, weights, lam)
        ) / (2 * eps)
        leaf = w.clone().requires_grad_(True)
        (rank(leaf, lam) * weights).sum().backward()
        assert torch.allclose(finite_difference, leaf.grad, atol=1e-6), (finite_difference, leaf.grad)
        assert leaf.grad.abs().sum() > 0  # the interpolation is informative here, unlike the true loss
        checked += 1


def test_interpolation_lies_below_the_true_loss_and_tends_to_it():
    n = 20
    generator = torch.Generator().manual_seed(2)
    weights = torch.randn(n, dtype=torch.float64, generator=generator)
    w = torch.randn(50, n, dtype=torch.float64, generator=generator)
    true_loss = (exact_rank(w).double() * weights).sum(-1)
    for lam in (0.5, 0.05, 0.005):
        assert (blackbox_interpolation(w, weights, lam) <= true_loss + 1e-9).all()
    # Within lam_raw * |a| of no tie the perturbed ranking is unchanged and f equals L exactly.
    assert torch.allclose(blackbox_interpolation(w, weights, 1e-9), true_loss, atol=1e-6)


def test_interpolation_rejects_bad_input():
    with pytest.raises(ValueError, match="lam"):
        blackbox_interpolation(torch.randn(3, 4), torch.randn(4), 0.0)
    with pytest.raises(ValueError, match="weights"):
        blackbox_interpolation(torch.randn(3, 4), torch.randn(5), 0.1)


def test_section_grid_is_the_affine_plane():
    section = LossSection.random(dim=7, extent=2.0, seed=3)
    assert torch.allclose(section.plane @ section.plane.T, torch.eye(2, dtype=torch.float64), atol=1e-12)
    grid = section.grid(5)
    coords = section.coordinates(5)
    t, s = 1, 4
    assert torch.allclose(grid[t, s], section.centre + coords[s] * section.plane[0] + coords[t] * section.plane[1])
    with pytest.raises(ValueError, match="resolution"):
        section.grid(1)


def test_flat_fraction_counts_equal_neighbours():
    values = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 2.0]])
    # along s: (0,0) equal, (0,1) not, (0,2) not, (2,2) equal; along t: 0=0, 0!=2, 1!=2 -> 3 of 7
    assert flat_fraction(values) == pytest.approx(3 / 7)


@pytest.mark.outcome
def test_fig1_script_writes_figure_and_numbers(run_figure, assert_figure_written):
    out = run_figure("fig1_landscape", "--resolution", "40", "--lams", "0.002", "0.02")
    assert_figure_written(out, "fig1_landscape")
    numbers = json.loads((out / "fig1_landscape.json").read_text())
    flat = numbers["flat_fraction"]
    # The true loss is piecewise constant; the interpolations have informative gradients almost everywhere.
    assert flat["true"] > 0.5
    assert flat["lam=0.02"] < flat["lam=0.002"] < flat["true"]
    assert numbers["min_gap_below_true"]["lam=0.002"] >= -1e-9
    assert numbers["max_gap_below_true"]["lam=0.02"] > numbers["max_gap_below_true"]["lam=0.002"]


def test_interpolation_decreases_with_lambda_pointwise():
    # f_lam is a difference quotient of the concave min_pi <., pi>, hence non-increasing in lam.
    generator = torch.Generator().manual_seed(4)
    weights = torch.randn(20, dtype=torch.float64, generator=generator)
    w = torch.randn(200, 20, dtype=torch.float64, generator=generator)
    values = [blackbox_interpolation(w, weights, lam) for lam in (0.001, 0.01, 0.1, 1.0)]
    for smaller_lam, larger_lam in zip(values, values[1:]):
        assert (larger_lam <= smaller_lam + 1e-9).all()
