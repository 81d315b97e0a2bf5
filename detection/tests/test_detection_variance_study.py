"""The variance study's designs and report (rambo.detection.variance_study); its runner is checked by
hand end to end (it trains real runs: minutes)."""

import statistics

import pytest

from rambo.detection.variance_study import STUDIED_SCHEDULE, designs, report, studied


def test_the_designs_vary_one_source_each_and_the_pipeline_both():
    assert designs(3) == {
        "pipeline": [(0, 0), (1, 1), (2, 2)],
        "row_seed": [(0, 0), (1, 0), (2, 0)],
        "warm_start": [(0, 0), (0, 1), (0, 2)],
    }


def test_the_report_gives_standard_deviations_in_points_and_the_seeds_needed():
    maps = {}
    for s, w in {pair for pairs in designs(3).values() for pair in pairs}:
        base = 0.5 + 0.01 * s + 0.02 * w
        maps[("a", s, w)] = {
            "mini_test": base + 0.01,
            "extra_test": base,
            "parts": [base, base + 0.01],
            "bootstrap": [base, base + 0.02],
        }
        maps[("b", s, w)] = {
            "mini_test": base,
            "extra_test": base - 0.005 * s,
            "parts": [base, base],
            "bootstrap": [base, base],
        }
    result = report(maps, ("a", "b"), 3)
    table = result["sd_points"]
    assert table["row_seed (extra_test)"]["a"] == pytest.approx(statistics.stdev([50, 51, 52]))
    assert table["warm_start (extra_test)"]["b"] == pytest.approx(statistics.stdev([50, 52, 54]))
    assert table["pipeline (extra_test)"]["difference"] == pytest.approx(statistics.stdev([0, 0.5, 1.0]))
    assert table["pipeline (mini_test)"]["difference"] == pytest.approx(0, abs=1e-9)
    assert table["test images (80, bootstrap, same model)"]["difference"] == pytest.approx(statistics.stdev([0, 2]))
    assert result["pipeline_means"]["mini_test"]["a"] == pytest.approx(54)
    # sd 0.5 of the paired difference: n = 2 gives 12.706 * 0.5 / sqrt(2) = 4.5 > 2; n = 3: 4.303 * 0.5 / 1.73 = 1.24
    assert result["seeds_for_2_points"]["extra_test"] == 3


def test_the_studies_keep_the_4_epoch_design_they_measured_unless_an_override_sets_it():
    assert STUDIED_SCHEDULE == ("schedule.epochs=4", "schedule.steps=[3]")
    assert studied(["loss.lam=0.1"]) == ["schedule.epochs=4", "schedule.steps=[3]", "loss.lam=0.1"]
    assert studied(["schedule.epochs=8", "schedule.steps=[6]"]) == ["schedule.epochs=8", "schedule.steps=[6]"]
