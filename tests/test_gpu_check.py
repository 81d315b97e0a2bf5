"""``make gpu-check`` (benchmarks/gpu_check.py) at toy sizes on the CPU: every section runs the same
code as on a GPU, so the script cannot rot between the sessions that have one."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_section_runs_at_toy_sizes_on_the_cpu(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--toy", "--device", "cpu", "--out-dir", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    sections = report["sections"]
    assert list(sections) == list(load_script().SECTIONS)
    assert all(section["ok"] for section in sections.values())
    assert sections["core_tests"]["counts"]["passed"] > 0 and sections["core_tests"]["device"] == "cpu"
    assert [row["n"] for row in sections["rank_losses"]["rows"]] == [1000, 10000, 3200]
    assert all(row["ap_ms"] > 0 and row["recall_ms"] > 0 for row in sections["rank_losses"]["rows"])
    assert all(case["ranks_equal"] and case["ap_gradient_equal"] for case in sections["ranks_identical"]["cases"])
    free = sections["sync_free"]["rows"]
    assert len(free) == 5 and all(row["compiled_gradient_equal"] for row in free)
    assert all(row["dispatched"] > 0 for row in free)  # the CPU eager path reads on the host; the device path: 0
    assert sections["recall_k_step"]["two_pass_chunk_size"] == 4 and sections["recall_k_step"]["images_per_second"] > 0
    assert sections["recall_at_k_eval"]["agree"]
    assert [run["experiment"] for run in sections["detection_step"]["runs"]] == ["table5_r50_voc07_rambo", "table5_r50_voc07_ce"]
    table = (tmp_path / "gpu_check.md").read_text()
    if not torch.cuda.is_available():
        assert "No GPU was found" in table and not report["meta"]["gpu_found"]
    assert "| detection_step | ok |" in table


def test_a_failing_section_is_reported_not_hidden():
    script = load_script()
    report = {"meta": {"toy": True, "gpu_found": False, "device": "cpu", "device_name": "CPU", "torch": "x",
                       "python": "3", "date": "today", "command": "c"},
              "sections": {"rank_losses": {"ok": False, "error": "Traceback ...\nRuntimeError: out of memory"}}}  # fmt: skip
    assert "| rank_losses | FAILED: RuntimeError: out of memory |" in script.markdown(report)


def test_the_check_refuses_a_core_test_device_torch_cannot_see(tmp_path):
    """RAMBO_TEST_DEVICE=cuda without a GPU is a usage error, not a silent CPU run."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the refusal is for machines without one")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "core/tests/test_core_ranking.py"], cwd=REPO,
                          env={**__import__("os").environ, "RAMBO_TEST_DEVICE": "cuda"}, capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0 and "torch sees no CUDA device" in done.stdout + done.stderr
