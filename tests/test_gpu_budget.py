"""The GPU budget table: hours from gpu-check's measured step rates."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_budget", REPO / "benchmarks" / "gpu_budget.py")
gpu_budget = importlib.util.module_from_spec(spec)
sys.modules["gpu_budget"] = gpu_budget  # dataclasses look their module up there
spec.loader.exec_module(gpu_budget)


def check(**sections):
    return {
        "meta": {"toy": False, "gpu_found": True, "device_name": "Test GPU", "torch": "x", "date": "d"},
        "sections": sections,
    }


def test_hours_are_images_times_epochs_over_the_measured_rate():
    rows = gpu_budget.budget(
        check(
            retrieval_step={"ok": True, "images_per_second": 1000.0, "batch": 128, "peak_gib": 10.0},
            detection_step={
                "runs": [
                    {"experiment": "table5_r50_voc07_rambo", "images_per_second": 50.0, "batch": 8, "peak_gib": 8.0}
                ]
            },
        )
    )
    by_name = {row["experiment"]: row for row in rows}
    sop = by_name["sop_log, sop_loglog, ablations"]
    assert sop["hours"] == pytest.approx(660 * 128 * 80 / 1000.0 / 3600)  # FastAP's epoch: 66 pairs x 10 batches
    cub = by_name["cub_log, cub_loglog, ablations"]
    assert cub["hours"] == pytest.approx(5_864 * 80 / 1000.0 / 3600)  # one pass
    voc = by_name["table5_r50_voc0712_rambo"]
    assert voc["hours"] == pytest.approx(16_551 * 12 / 50.0 / 3600)
    # what gpu-check did not measure is said, not extrapolated
    assert by_name["sop_recallk(_simix)"]["hours"] is None
    assert by_name["table5_r101_voc0712_*, table5_x101_voc0712_*"]["hours"] is None
    text = gpu_budget.markdown(rows, check())
    assert "| sop_recallk(_simix) | sop (59,551) | 56,000 (14 batches of 4,000" in text and "not measured" in text


def test_the_committed_h200_run_gives_a_table_and_a_toy_run_is_refused(tmp_path, capsys):
    assert gpu_budget.main([]) == 0
    assert "NVIDIA H200" in capsys.readouterr().out
    toy = tmp_path / "gpu_check.json"
    toy.write_text(json.dumps({"meta": {"toy": True, "gpu_found": False}, "sections": {}}))
    with pytest.raises(SystemExit, match="toy run"):
        gpu_budget.main(["--check", str(toy)])
