"""The paired 95% t interval, its verdict and the seeds a half-width needs, by hand."""

import math
import statistics

import pytest

from rambo.harness.paired_interval import paired_interval, seeds_for_half_width, t_quantile, verdict


def test_paired_interval_is_the_t_interval_of_the_differences():
    a, b = [60.0, 55.0, 58.0], [50.0, 49.0, 55.0]
    differences = [10.0, 6.0, 3.0]
    mean, low, high = paired_interval(a, b)
    half = 4.303 * statistics.stdev(differences) / math.sqrt(3)  # t_0.975 with 2 degrees of freedom
    assert mean == pytest.approx(19 / 3) and (low, high) == pytest.approx((19 / 3 - half, 19 / 3 + half))
    assert t_quantile(1) == 12.706 and t_quantile(100) == 1.96
    with pytest.raises(ValueError, match="same seeds"):
        paired_interval([1.0], [1.0, 2.0])
    assert math.isnan(paired_interval([1.0], [0.0])[1])


def test_verdicts():
    assert verdict(0.5, 3.0) == "holds"
    assert verdict(-3.0, -0.1) == "contradicted"
    assert verdict(-1.0, 1.0) == "not resolved"
    assert verdict(float("nan"), float("nan")).startswith("not resolved")


def test_seeds_for_half_width_is_the_first_n_whose_interval_fits():
    # sd 2.0, half-width 2.0: n = 6 gives t(5) 2.571 * 2 / sqrt(6) = 2.10 > 2; n = 7: 2.447 * 2 / sqrt(7) = 1.85
    assert seeds_for_half_width(2.0, 2.0) == 7
    assert t_quantile(5) * 2.0 / math.sqrt(6) > 2.0 >= t_quantile(6) * 2.0 / math.sqrt(7)
    assert seeds_for_half_width(0.0, 2.0) == 2
    assert seeds_for_half_width(100.0, 0.1, most=50) is None
