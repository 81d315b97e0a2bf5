"""The peers benchmark at toy sizes: every peer measured in both settings, the memory
guard refusing a run whose estimate exceeds the budget, the table and the per-element costs."""

import pytest
import torch

pytest.importorskip("pytorch_metric_learning")

from rambo.core import benchmark_peers as peers  # noqa: E402


def test_the_batches_have_four_consecutive_images_per_class_of_distinct_classes():
    embeddings, labels = peers.make_batch(32, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert embeddings.shape == (32, peers.DIM)
    assert torch.equal(labels.view(8, 4), labels.view(8, 4)[:, :1].expand(8, 4))
    assert labels.unique().numel() == 8


def test_every_peer_runs_in_both_settings_and_the_table_shows_them():
    result = peers.peers_table("cpu", sizes=(16, 32), element_batches=(16,))
    by_setting = {m: {r["loss"] for r in result["rows"] if r["memory"] == m} for m in (False, True)}
    assert {"RaMBO recall", "RaMBO AP", "FastAP", "SmoothAP", "MultiSimilarity", "Contrastive"} <= by_setting[False]
    assert {"RaMBO recall", "RaMBO AP", "MultiSimilarity", "Contrastive"} <= by_setting[True]
    assert ("torchsort AP" in by_setting[False]) == (result["meta"]["torchsort"] == "ok")
    for row in result["rows"]:
        assert row["ms"] > 0 and row["peak_gib"] > 0 and row["runs"] == peers.repeats_for(row["batch"])
    (cost,) = result["element_costs"]
    assert cost["shape"] == [16, 4 * 16 - 1] and cost["relevant_per_row"] >= 3
    text = peers.markdown(result)
    assert "| RaMBO recall |" in text and "B = 32" in text and "batched / one row" in text


def test_a_loss_whose_estimated_peak_exceeds_the_budget_is_not_run():
    """The estimate scales the previous size's peak as the batch squared (cubed for PML's SmoothAP)."""
    first = peers.measure_size(16, False, torch.device("cpu"), {}, 1.0, False)
    previous = {r["loss"]: r for r in first}
    smooth = previous["SmoothAP"]
    budget = smooth["peak_gib"] * 8 * 0.99  # twice the batch: 8x for SmoothAP's cube, 4x for the others
    second = {r["loss"]: r for r in peers.measure_size(32, False, torch.device("cpu"), previous, budget, False)}
    assert second["SmoothAP"]["skipped"].startswith("out of memory (est. ")
    assert second["SmoothAP"]["estimate_gib"] == pytest.approx(smooth["peak_gib"] * 8)
    assert "ms" not in second["SmoothAP"]
