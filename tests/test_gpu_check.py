"""``make gpu-check`` (benchmarks/gpu_check.py and its sections, benchmarks/gpu_sections/) at toy sizes on the
CPU: every section runs the same code as on a GPU, so the script cannot rot between the sessions that have one."""

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"
PACKAGE = REPO / "benchmarks" / "gpu_sections"
NOT_SECTIONS = {"__init__", "common", "targets", "training_steps"}  # the package's shared modules


def load_sections():
    """benchmarks/gpu_sections as the package ``gpu_sections``, as the command imports it from its own folder
    (registered in sys.modules, so that the command's ``import gpu_sections`` finds it)."""
    if "gpu_sections" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "gpu_sections", PACKAGE / "__init__.py", submodule_search_locations=[str(PACKAGE)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_sections"] = module
        spec.loader.exec_module(module)
    return sys.modules["gpu_sections"]


def load_script():
    load_sections()
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_section_runs_at_toy_sizes_on_the_cpu(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--toy", "--device", "cpu", "--out-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
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
    retrieval = sections["retrieval_step"]["runs"]
    assert [run["overrides"][2:] for run in retrieval] == [[], ["precision=bfloat16", "channels_last=true"]]
    if not torch.cuda.is_available():
        assert sections["cuda_graphs"]["skipped"] and sections["cuda_graphs"]["rows"] == []
    assert [run["experiment"] for run in sections["detection_step"]["runs"]] == [
        "table5_r50_voc07_rambo",
        "table5_r50_voc07_ce",
    ]
    table = (tmp_path / "gpu_check.md").read_text()
    if not torch.cuda.is_available():
        assert "No GPU was found" in table and not report["meta"]["gpu_found"]
    assert "| detection_step | ok |" in table
    # the report is each section's own rendering of its result, in the registry's order
    blocks = ["\n".join(section.markdown(sections[name], report)) for name, section in load_sections().SECTIONS.items()]
    assert all(block in table for block in blocks)
    rendered = [block for block in blocks if block]
    assert [table.index(block) for block in rendered] == sorted(table.index(block) for block in rendered)


def test_a_failing_section_is_reported_not_hidden():
    script = load_script()
    report = {
        "meta": {
            "toy": True,
            "gpu_found": False,
            "device": "cpu",
            "device_name": "CPU",
            "torch": "x",
            "python": "3",
            "date": "today",
            "command": "c",
        },
        "sections": {"rank_losses": {"ok": False, "error": "Traceback ...\nRuntimeError: out of memory"}},
    }
    assert "| rank_losses | FAILED: RuntimeError: out of memory |" in script.markdown(report)


def test_the_check_refuses_a_core_test_device_torch_cannot_see(tmp_path):
    """RAMBO_TEST_DEVICE=cuda without a GPU is a usage error, not a silent CPU run."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the refusal is for machines without one")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "core/tests/test_core_ranking.py"],
        cwd=REPO,
        env={**__import__("os").environ, "RAMBO_TEST_DEVICE": "cuda"},
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "torch sees no CUDA device" in done.stdout + done.stderr


def test_the_targets_table_sets_each_measurement_beside_its_target():
    """The performance targets (0 syncs; AP <= 0.3 ms at 1e5, <= 1 ms at 1e6; peak <= 4.6 GiB at 1e8; the
    RoI loss <= 1 ms; a RaMBO detection step within 5% of CE), read from a report."""
    row = lambda n, ms, gib=None: {"n": n, "ap_ms": ms, "peak_gib": gib, "detection_sequence": False}  # noqa: E731
    report = {
        "sections": {
            "sync_free": {"rows": [{"dispatched": 3, "cuda_reported": 0}, {"dispatched": 0, "cuda_reported": 0}]},
            "rank_losses": {"rows": [row(10**5, 0.25), row(10**6, 1.5), row(10**8, 40.0, 4.2)]},
            "detection_step": {
                "runs": [{"seconds_per_step": 0.106}, {"seconds_per_step": 0.100}],
                "classifier_loss": {"ms": 0.8},
            },
            "cuda_graphs": {"lengths": [{"n": 10**6, "compiled_ms": 0.9, "graph_ms": 0.7}]},
        }
    }
    met = {target: (measured, ok) for target, measured, ok in load_script().targets(report)}
    assert met["0 host syncs per loss call"] == ("at most 0", True)  # CUDA's own count wins over the dispatch count
    assert (
        met["AP loss fwd+bwd <= 0.3 ms at 1e+05"] == ("0.25 ms eager", True)
        and not met["AP loss fwd+bwd <= 1.0 ms at 1e+06"][1]
    )
    assert met["AP loss fwd+bwd <= 1.0 ms at 1e+06, compiled or CUDA graph"] == (
        "0.70 ms",
        True,
    )  # the faster of the two
    assert met["peak memory <= 4.6 GiB at 1e8"][1] and met["detection RoI loss <= 1 ms"][1]
    assert met["RaMBO detection step within 5% of CE"] == ("1.060 x CE", False)


def test_the_cpu_paths_agree_on_the_checks_tied_rows():
    """The 2026-11-30 GPU run found the AP gradient of the one-row case (1 x 1e6, 100 distinct values,
    1e5 negative zeros) different from the CPU's. The GPU now runs the dense path: on the CPU the
    dense and the sparse path give these rows the same gradient bits, so a difference there is the
    device's kernels (ranks_identical records where it starts: the gradient reaching the ranking).
    The recall loss is compared where its gradient is not 0 (the several-row case, lambda 4)."""
    from rambo.core import APLoss, RecallLoss
    from rambo.core.benchmark import LAM, MARGIN
    from rambo.core.loss_path import loss_path

    load_sections()
    common, ranks_identical = (
        importlib.import_module(f"gpu_sections.{name}") for name in ("common", "ranks_identical")
    )
    for seed, (shape, loss_fn) in enumerate(
        [
            ((1, 10**6), APLoss(MARGIN, LAM)),
            ((64, 8192), APLoss(MARGIN, LAM)),
            ((64, 8192), RecallLoss(0.02, 4.0, weighting="log")),
        ]
    ):
        scores = ranks_identical.tied_scores(shape, seed=min(seed, 1))
        relevant = torch.rand(shape, generator=torch.Generator().manual_seed(7)) < 0.05
        relevant[:, 0] = True
        with loss_path("sparse"):
            sparse = common.loss_fwd_bwd(loss_fn, scores, relevant)[1]
        with loss_path("dense"):
            dense = common.loss_fwd_bwd(loss_fn, scores, relevant)[1]
        assert torch.equal(sparse, dense) and (sparse != 0).sum() > 100, (shape, type(loss_fn).__name__)


def test_the_registry_holds_each_section_once_with_its_own_measurement_and_rendering():
    """Every module of benchmarks/gpu_sections but the shared ones is a section, registered once under its
    module's name, in the command's order; each measures (``run``) and renders (``markdown``) itself."""
    registry = load_sections().SECTIONS
    modules = sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem not in NOT_SECTIONS)
    assert sorted(registry) == modules and len(set(registry.values())) == len(registry)
    assert all(section.__name__ == f"gpu_sections.{name}" for name, section in registry.items())
    assert all(callable(section.run) and callable(section.markdown) for section in registry.values())
    assert load_script().SECTIONS == tuple(registry)
    failed = {
        "meta": {"device": "cpu"},
        "sections": {name: {"ok": False, "error": "RuntimeError"} for name in registry},
    }
    assert all(section.markdown(failed["sections"][name], failed) == [] for name, section in registry.items())


def test_each_section_renders_the_result_it_measured():
    """Three cheap sections measured for real at toy sizes on the CPU, each rendered by its own ``markdown``:
    one row per length measured, one per case compared, and nothing for a section that was skipped."""
    sections = load_sections()
    common = importlib.import_module("gpu_sections.common")
    device, sizes = torch.device("cpu"), common.Sizes(toy=True)
    report = {"meta": {"device": "cpu"}, "sections": {}}
    for name in ("rank_losses", "ranks_identical", "cuda_graphs"):
        report["sections"][name] = sections.SECTIONS[name].run(device, sizes)
    losses = sections.rank_losses.markdown(report["sections"]["rank_losses"], report)
    assert losses[0] == "## Rank losses, forward + backward (one row, 1 relevant in 100)"
    assert [line.split(" | ")[0] for line in losses[4:-1]] == ["| 1.0e+03", "| 1.0e+04", "| 3.2e+03 (detection)"]
    same = sections.ranks_identical.markdown(report["sections"]["ranks_identical"], report)
    assert same[0] == "## Ranks and gradients, cpu vs cpu, tied input"
    ties = [str(case["ties"]) for case in report["sections"]["ranks_identical"]["cases"]]
    assert [line.split(" | ")[:4] for line in same[4:-1]] == [
        ["| one row", "[1, 2000]", ties[0], "True"],
        ["| several rows", "[4, 500]", ties[1], "True"],
    ]
    if not torch.cuda.is_available():  # skipped without CUDA: measured nothing, so it renders nothing
        assert sections.cuda_graphs.markdown(report["sections"]["cuda_graphs"], report) == []
