import json

import torch

from rambo.core import benchmark
from rambo.core.ap_loss import APLoss


def test_reference_algorithm_and_ours_agree_on_tie_free_input():
    check = benchmark.compare_with_reference(5000, torch.get_default_device())
    assert check["loss_abs_diff"] < 1e-6
    assert check["grad_entries_differing"] == 0


def test_reference_loss_matches_ours_on_several_rows():
    scores = torch.randperm(60).float().view(3, 20)
    relevant = torch.rand(3, 20) < 0.3
    relevant[:, 0] = True
    assert torch.allclose(benchmark.reference_ap_loss(scores, relevant, 0.1, 0.5), APLoss(0.1, 0.5)(scores, relevant))


def test_benchmark_writes_json_and_markdown(tmp_path):
    rows = benchmark.main(
        [
            "--sizes",
            "1000",
            "--repeats",
            "1",
            "--check-size",
            "1000",
            "--out",
            str(tmp_path / "b.json"),
            "--markdown",
            str(tmp_path / "b.md"),
        ]
    )
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["rows"][0]["n"] == 1000 and data["rows"][0]["ours_ms"] > 0
    assert data["rows"] == rows
    assert "| 1e+03 |" in (tmp_path / "b.md").read_text()
