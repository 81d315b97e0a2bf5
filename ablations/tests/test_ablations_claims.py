"""The claims table: paired differences, their 95% interval and the verdict."""

import json

import pytest

from rambo.ablations.claims import CLAIMS, evaluate_claims, minibatch_bias_claims


def test_claims_are_evaluated_on_the_cells_a_profile_runs():
    run_map = {
        "retrieval/sop/rambo_recall_log": "full",
        "retrieval/sop/contrastive": "contrastive",
        "retrieval/sop/rambo_recall-table7_full": "full",
        "retrieval/sop/rambo_recall-no_margin": "no_margin",
    }
    values = {"full": [60.0, 62.0, 61.0], "contrastive": [40.0, 41.0, 43.0], "no_margin": [70.0, 71.0, 75.0]}
    rows = evaluate_claims(lambda task, experiment, metric: values[experiment], run_map)
    assert [row["claim"] for row in rows] == [CLAIMS[0].text, CLAIMS[1].text]  # the others are not run
    beats, margin = rows
    assert beats["verdict"] == "holds" and beats["paper_difference"] == pytest.approx(35.8)
    assert margin["verdict"] == "contradicted" and margin["paper_difference"] is None


def test_minibatch_bias_claims_read_figure_2(tmp_path):
    figure = tmp_path / "fig2.json"
    stat = lambda mean: {"mean": mean, "std": 0.05, "batches": 100}  # noqa: E731
    figure.write_text(
        json.dumps(
            {
                "true_map": 0.6,
                "tau": 3,
                "curves": ["no memory", "memory tau=3"],
                "rows": [
                    {"batch_size": 4, "no memory": stat(0.9), "memory tau=3": stat(0.8)},
                    {"batch_size": 64, "no memory": stat(0.61), "memory tau=3": stat(0.605)},
                ],
            }
        )
    )
    size, memory = minibatch_bias_claims(figure)
    assert size["difference"] == pytest.approx(29.0) and size["verdict"] == "holds"
    assert memory["difference"] == pytest.approx(10.0) and memory["values"] == pytest.approx([30.0, 20.0])
    assert minibatch_bias_claims(tmp_path / "absent.json") == []
