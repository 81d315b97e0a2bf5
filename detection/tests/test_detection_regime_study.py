"""The regime study's rule and report (rambo.detection.regime_study), on made-up scores, by hand; its
runner trains real runs (minutes) and is run by hand."""

import math
import statistics

import pytest

from rambo.detection.regime_study import HYPOTHESES, Hypothesis, markdown, report


def scores_of(table: dict) -> dict:
    return {
        (name, row, seed): {"AP50": value, "logit_sd": 1.0 + seed, "logit_top_margin": 0.5}
        for (name, row), values in table.items()
        for seed, value in enumerate(values)
    }


def test_the_rule_adopts_only_a_supported_hypothesis_with_the_largest_gain():
    hypotheses = (
        Hypothesis("up", "helps", ("a=1",)),
        Hypothesis("upmore", "helps more", ("a=2",)),
        Hypothesis("noisy", "unclear", ("a=3",)),
        Hypothesis("both", "both rows", ("a=4",), ("a=4",)),
    )
    scores = scores_of(
        {
            ("baseline", "rambo"): [0.40, 0.42, 0.44],
            ("baseline", "ce"): [0.45, 0.46, 0.47],
            ("up", "rambo"): [0.41, 0.43, 0.45],
            ("upmore", "rambo"): [0.43, 0.46, 0.47],
            ("noisy", "rambo"): [0.50, 0.30, 0.44],
            ("both", "rambo"): [0.38, 0.40, 0.42],
            ("both", "ce"): [0.30, 0.31, 0.32],
        }
    )
    result = report(scores, 3, hypotheses)
    rows = {row["name"]: row for row in result["hypotheses"]}
    assert rows["up"]["gain"]["difference"] == pytest.approx(1.0) and rows["up"]["gain"]["verdict"] == "holds"
    # upmore - baseline: 3, 4, 3 points; 95% t interval 10/3 +- 4.303 * sd / sqrt(3)
    half = 4.303 * statistics.stdev([3.0, 4.0, 3.0]) / math.sqrt(3)
    assert rows["upmore"]["gain"]["interval"] == pytest.approx([10 / 3 - half, 10 / 3 + half])
    assert rows["noisy"]["gain"]["verdict"] == "not resolved"
    assert rows["both"]["gain"]["verdict"] == "contradicted"
    # a hypothesis that changes CE too is compared with CE at its own regime: 38 - 30, 40 - 31, 42 - 32
    assert rows["both"]["rambo_minus_ce"]["difference"] == pytest.approx(9.0)
    assert rows["both"]["ce_gain"]["difference"] == pytest.approx(-15.0) and "ce_gain" not in rows["up"]
    assert rows["up"]["rambo_minus_ce"]["difference"] == pytest.approx(
        -3.0
    )  # against the unchanged CE: 41 - 45, 43 - 46, 45 - 47
    assert result["adopted"] == "upmore"
    assert result["baseline"]["logit_sd"]["rambo"] == pytest.approx(2.0)
    assert "Adopted by the rule: upmore" in markdown(result)


def test_nothing_is_adopted_when_nothing_is_supported():
    scores = scores_of(
        {
            ("baseline", "rambo"): [0.40, 0.42, 0.44],
            ("baseline", "ce"): [0.45, 0.46, 0.47],
            ("flat", "rambo"): [0.40, 0.43, 0.43],
        }
    )
    assert report(scores, 3, (Hypothesis("flat", "no effect", ("a=1",)),))["adopted"] is None


def test_every_hypothesis_names_real_overrides_once():
    assert len({h.name for h in HYPOTHESES}) == len(HYPOTHESES)
    assert all(h.rambo and all("=" in o for o in h.rambo) for h in HYPOTHESES)
