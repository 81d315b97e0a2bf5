"""The whole DVC pipeline on the `tiny` profile: every stage runs, every table has its cells, and a
second `dvc repro` does nothing. Runs in a copy of the repository so the checkout is untouched."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rambo.ablations.paper_smoke import copy_repository

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(args, cwd, timeout=900):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", WANDB_MODE="disabled")
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory):
    """A copy of the repository's files (tracked, and untracked but not ignored) with the tiny profile."""
    if shutil.which("git") is None:
        pytest.skip("git is needed to list the repository's files")
    return copy_repository(tmp_path_factory.mktemp("pipeline") / "repo", "tiny")


def test_tiny_pipeline_runs_every_stage_and_a_second_repro_does_nothing(tiny_repo):
    first = run([str(BIN / "dvc"), "repro"], tiny_repo)
    assert "Running stage 'tables'" in first
    # one stage per experiment; its seeds are one Hydra multirun through the profile's launcher
    assert "Running stage 'retrieval_train@synthetic_log'" in first
    assert "Running stage 'detection_warm_start@mini_warm_start'" in first
    assert (
        tiny_repo / "results" / "tiny" / "checkpoints" / "detection" / "mini_rambo" / "seed0" / "checkpoint.pt"
    ).is_file()

    for key in ("table2", "table7", "table5", "table8"):
        table = json.loads((tiny_repo / "results" / "tiny" / "tables" / f"{key}.json").read_text())
        cells = [cell for row in table["rows"] for cell in row["cells"]]
        assert any(cell["status"] == "ok" for cell in cells), key
        for cell in cells:
            if cell["status"] == "ok":
                assert len(cell["values"]) == 1 and 0.0 <= cell["mean"] <= 100.0
    for figure in (
        "fig1_landscape",
        "fig2_minibatch_map",
        "fig3_margin_scores",
        "fig4_retrievals",
        "fig5_landscape_evolution",
        "fig6_surrogate_landscapes",
        "table6_speed",
    ):
        assert (tiny_repo / "figures" / "out" / "tiny" / f"{figure}.png").stat().st_size > 0, figure

    # every run says what made it, and the tables name the machine
    metrics = json.loads(
        (tiny_repo / "results" / "tiny" / "runs" / "retrieval" / "synthetic_log" / "seed0" / "metrics.json").read_text()
    )
    assert metrics["provenance"]["profile"] == "tiny" and metrics["provenance"]["threads"] >= 1
    assert metrics["provenance"]["numerics"]["mode"] in ("portable", "native")
    assert "cpu" not in metrics["provenance"]["device"]  # the mode, never the CPU model
    assert "Runs made with: " in (tiny_repo / "results" / "tiny" / "tables" / "tables.md").read_text()

    second = run([str(BIN / "dvc"), "repro"], tiny_repo)
    assert "Running stage" not in second
    assert "Data and pipelines are up to date" in second

    # `dvc metrics show` is a table a person can read: each run's headline numbers, nothing else
    shown = run([str(BIN / "dvc"), "metrics", "show"], tiny_repo).splitlines()
    assert any("results/tiny/headlines/detection/mini_rambo/seed0.json" in line for line in shown)
    assert not any("summary.json" in line or "metrics.json" in line for line in shown)
    assert all(line.startswith("results/tiny/headlines/") for line in shown[1:] if line.strip()), shown
    assert max(len(line) for line in shown) < 160, max(shown, key=len)
    assert any("results/tiny/headlines/retrieval/synthetic_log/seed0.json" in line for line in shown), shown
    headline = json.loads(
        (tiny_repo / "results" / "tiny" / "headlines" / "retrieval" / "synthetic_log" / "seed0.json").read_text()
    )
    assert set(headline) == {"R@1", "MAP@R", "fair_R@1"}

    # every learning curve renders in `dvc plots show` (retrieval's records used to break it)
    curves = [
        str(c.relative_to(tiny_repo))
        for c in sorted((tiny_repo / "results" / "tiny" / "runs").glob("*/*/seed0/curve.json"))
    ]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    shown = subprocess.run(
        [str(BIN / "dvc"), "plots", "show", "--json", *curves],
        cwd=tiny_repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    plots = json.loads(shown.stdout)
    assert {c.split("/")[3] for c in curves} == {"retrieval", "detection"}
    assert not plots.get("errors") and all(plots["data"][c] for c in curves), plots.get("errors")

    # `dvc plots show` with no arguments renders the pipeline's plots: a line per run and
    # seed of each task's loss and evaluations, the tables' rows per seed, Table 8's lambda curve
    shown = subprocess.run(
        [str(BIN / "dvc"), "plots", "show", "--json"],
        cwd=tiny_repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    rendered = json.loads(shown.stdout)
    assert not rendered.get("errors"), rendered.get("errors")

    def values(plot):
        (only,) = rendered["data"][plot]
        return only["content"]["data"]["values"]

    experiments = {p.name for p in (tiny_repo / "results" / "tiny" / "runs" / "retrieval").iterdir()}
    assert {v["run"] for v in values("retrieval_loss")} == {f"{e} seed0" for e in experiments}
    assert {v["run"] for v in values("retrieval_recall")} == {f"{e} seed0" for e in experiments}
    assert all(0 <= v["R@1"] <= 100 for v in values("retrieval_recall"))
    assert {"mini_ce seed0", "mini_rambo seed0"} <= {v["run"] for v in values("detection_ap50")}
    assert {v["row"] for v in values("table8")} >= {"CE", "RaMBO, lambda 0.5, margin"}
    assert {(v["lambda"], v["margin"]) for v in values("table8_lambda")} == {
        (0.1, "margin"),
        (0.5, "margin"),
        (2.5, "margin"),
        (0.5, "no margin"),
    }
    assert {v["row"] for v in values("table7")} >= {"Full RaMBO | Online Products", "No margin | Online Products"}
