"""``make memory-plan`` (benchmarks/memory_plan.py): its arithmetic against brute force, its peak
measurement against known allocations, and a run of the tool at toy sizes on the CPU."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "memory_plan.py"


def load_script():
    spec = importlib.util.spec_from_file_location("memory_plan", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plan_tool = load_script()


@pytest.mark.parametrize("fixed, per_item", [(3.0, 0.5), (0.0, 2.0), (1e9, 7.5e7)])
def test_the_line_through_two_measurements_gives_them_back_and_extrapolates(fixed, per_item):
    line = plan_tool.fit_line(2, fixed + 2 * per_item, 4, fixed + 4 * per_item)
    assert line == pytest.approx((fixed, per_item))
    for n in (2, 4, 128, 4000):
        assert plan_tool.extrapolate(line, n) == pytest.approx(fixed + per_item * n)
    with pytest.raises(ValueError, match="two different sizes"):
        plan_tool.fit_line(2, 1.0, 2, 3.0)


@pytest.mark.parametrize(
    "fixed, per_item, budget", [(1.0, 0.25, 3.0), (1.0, 0.3, 3.0), (5.0, 1.0, 4.0), (0.5, 0.07, 15.0)]
)
def test_largest_fitting_is_the_brute_force_maximum(fixed, per_item, budget):
    brute = max([n for n in range(0, 10_000) if fixed + per_item * n <= budget], default=0)
    assert plan_tool.largest_fitting((fixed, per_item), budget) == brute
    with pytest.raises(ValueError, match="positive"):
        plan_tool.largest_fitting((fixed, 0.0), budget)


def test_a_card_fits_when_the_peak_plus_the_allowance_is_at_most_its_size():
    assert plan_tool.fits(15.0, (16, 24), allowance_gib=1.0) == {16: True, 24: True}
    assert plan_tool.fits(15.01, (16, 24), allowance_gib=1.0) == {16: False, 24: True}
    assert plan_tool.fits(79.5, allowance_gib=1.0) == {16: False, 24: False, 40: False, 80: False}


def test_the_cpu_peak_counts_the_live_tensors_at_their_highest():
    """Known allocations: 4 MB then 2 MB live together, then 4 MB freed and 1 MB allocated: 6 MB."""

    def run():
        a = torch.empty(1_000_000)
        b = torch.empty(500_000)
        del a
        c = torch.empty(250_000)
        return b, c

    assert plan_tool.measure_peak(run, torch.device("cpu"), resident=123) == 123 + 6_000_000


def test_the_tool_plans_rows_at_toy_sizes_on_the_cpu(tmp_path):
    rows = ["sop_log", "sop_recallk_simix", "table5_r50_voc07_rambo"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--toy", "--rows", *rows, "--out-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "memory_plan.json").read_text())
    assert [r["row"] for r in report["rows"]] == rows and report["meta"]["toy"]
    allowance = report["meta"]["cuda_allowance_gib"]
    for r in report["rows"]:
        m = r["measured"]
        assert all(peak > 0 for peak in m["train_peak_bytes"] + m["eval_peak_bytes"])
        peak = max(r["train_gib"], r["eval_gib"])
        assert r["fits"] == {str(card): peak + allowance <= card for card in report["meta"]["cards_gib"]}
    by_row = {r["row"]: r for r in report["rows"]}
    assert by_row["sop_recallk_simix"]["two_pass_chunk_size"] == 4 and by_row["sop_log"]["two_pass_chunk_size"] is None
    assert by_row["sop_log"]["eval_batch"] == 8 and by_row["table5_r50_voc07_rambo"]["eval_batch"] == 4
    table = (tmp_path / "memory_plan.md").read_text()
    assert "| 16 GB | 24 GB | 40 GB | 80 GB | to fit 16 GB |" in table
    assert all(f"| {row} |" in table for row in rows)
    # the checkpoints: a finished run's is the model's state, the score memory and the random states
    assert (
        "| experiment | parameters (M) | model state | score memory | finished checkpoint | while training |" in table
    )
    for r in report["rows"]:
        m = r["measured"]
        assert r["parameters"] > 0 and m["model_state_bytes"] >= 4 * r["parameters"]  # float32 weights, buffers
        assert r["finished_checkpoint_bytes"] == m["model_state_bytes"] + r["memory_bytes"] + m["rng_bytes"]
        assert r["training_checkpoint_bytes"] == r["finished_checkpoint_bytes"] + m["optimizer_state_bytes"]
    # Adam keeps two moments of every weight, SGD one (momentum); sop_log remembers 3 batches of 16 x 32 float32
    sop, voc = by_row["sop_log"], by_row["table5_r50_voc07_rambo"]
    assert sop["measured"]["optimizer_state_bytes"] >= 2 * 4 * sop["parameters"]
    assert sop["memory_bytes"] == 3 * 16 * (32 * 4 + 8)  # embeddings and int64 labels
    # tau x batch x RoIs per image (the paper RaMBO rows rank every RPN proposal) x (float32 + bool) per class
    assert voc["memory_bytes"] == 7 * 4 * 2000 * 20 * 5


def test_an_unknown_row_is_refused_with_the_rows_it_knows():
    done = subprocess.run([sys.executable, str(SCRIPT), "--rows", "sop_lgo"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and "not a paper experiment: ['sop_lgo']" in done.stderr and "sop_log" in done.stderr


def test_state_bytes_counts_each_storage_once_in_nested_states():
    weight = torch.zeros(10, 4)
    state = {"a": weight, "b": [weight[1], (torch.zeros(3, dtype=torch.int64), 7)], "c": {"d": "text"}}
    assert plan_tool.state_bytes(state) == 10 * 4 * 4 + 3 * 8
    model = torch.nn.Linear(5, 2)
    assert plan_tool.model_state(model) == {"parameters": 12, "model_state_bytes": 12 * 4}
