"""A bad run file (truncated JSON, a missing key, a wrong type) stops the tables, the plots, the
W&B report and the timing record with one line naming the file and what to do, exit code 2, and
nothing written."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rambo.ablations.paper_smoke import filled_cells
from rambo.ablations.pipeline_timing import read_measurements
from rambo.harness.run_files import RunFileError

ABLATIONS = Path(__file__).resolve().parents[1]
SEEDS = [0, 1, 2]
FIGURE2 = {
    "true_map": 0.5,
    "tau": 3,
    "curves": ["no memory", "memory tau=3"],
    "rows": [
        {
            "batch_size": size,
            **{curve: {"mean": 0.6, "std": 0.1, "batches": 100} for curve in ("no memory", "memory tau=3")},
        }
        for size in (4, 1024)
    ],
}


def tree_digest(folder: Path) -> dict[str, str]:
    """``{path: SHA-256}`` of every file under ``folder``."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def metrics(task: str, seed: int) -> dict:
    value = 0.5 + 0.1 * seed
    if task == "retrieval":
        return {"paper_protocol": {f"R@{k}": value for k in (1, 2, 4, 8, 10, 16, 100, 1000)}, "provenance": {}}
    return {"AP50": value, "epochs": 2, "history": [{"epoch": 1, "loss": 1.0}, {"epoch": 2, "loss": 0.5}]}


@pytest.fixture
def pipeline(tmp_path) -> Path:
    """The mini profile's params (no second draw), every run it names with its metrics and curve, and Fig. 2's numbers."""
    params = yaml.safe_load((ABLATIONS / "profiles" / "mini.yaml").read_text())
    del params["tables"]["second_draw"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    for key, experiment in params["tables"]["runs"].items():
        task = key.split("/")[0]
        for seed in SEEDS:
            folder = tmp_path / "runs" / task / experiment / f"seed{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "metrics.json").write_text(json.dumps(metrics(task, seed), indent=2))
            (folder / "curve.json").write_text(json.dumps([{"epoch": 1, "loss": 1.0, "test/R@1": 0.5}]))
    (tmp_path / "fig2.json").write_text(json.dumps(FIGURE2))
    return tmp_path


def tables(folder: Path) -> subprocess.CompletedProcess:
    """``make tables``'s command in ``folder`` (relative paths, as the Makefile gives them)."""
    command = [
        "--runs",
        "runs",
        "--params",
        "params.yaml",
        "--out",
        "out",
        "--figure2",
        "fig2.json",
        "--plots",
        "plots",
    ]
    return subprocess.run(
        [sys.executable, "-m", "rambo.ablations.tables", *command],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_good_runs_make_their_tables(pipeline):
    done = tables(pipeline)
    assert done.returncode == 0, done.stderr
    assert (pipeline / "out" / "tables.md").is_file() and (pipeline / "plots" / "retrieval_loss.json").is_file()


RERUN_LOG = "rerun its stage: `dvc repro retrieval_train@synthetic_log`, or delete the run folder"
LOG_METRICS = "runs/retrieval/synthetic_log/seed1/metrics.json"


def truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


CASES = {
    "truncated metrics": (
        lambda root: truncate(root / LOG_METRICS, 60),
        f"{LOG_METRICS}: not valid JSON (truncated at byte 60); {RERUN_LOG}",
    ),
    "a metric missing": (
        lambda root: edit_json(root / LOG_METRICS, lambda d: d["paper_protocol"].pop("R@1")),
        f"{LOG_METRICS}: paper_protocol.R@1 is missing (paper_protocol has R@10, R@100, R@1000, R@16, R@2, R@4, "
        f"R@8); {RERUN_LOG}",
    ),
    "a metric of the wrong type": (
        lambda root: edit_json(root / LOG_METRICS, lambda d: d["paper_protocol"].update({"R@1": "0.7"})),
        f"{LOG_METRICS}: paper_protocol.R@1 is the string '0.7', not a number; {RERUN_LOG}",
    ),
    "an ablation's metrics truncated": (
        lambda root: truncate(root / "runs/detection/mini_table8_lam0p5_nomargin/seed2/metrics.json", 10),
        "runs/detection/mini_table8_lam0p5_nomargin/seed2/metrics.json: not valid JSON (truncated at byte 10); "
        "rerun its stage: `dvc repro detection_ablation@mini_table8_lam0p5_nomargin`, or delete the run folder",
    ),
    "a run missing": (
        lambda root: (root / LOG_METRICS).unlink(),
        f"{LOG_METRICS}: not found; {RERUN_LOG}",
    ),
    "a curve row without its epoch": (
        lambda root: (root / "runs/retrieval/synthetic_log/seed1/curve.json").write_text('[{"loss": 1.0}]'),
        f"runs/retrieval/synthetic_log/seed1/curve.json: [0].epoch is missing ([0] has loss); {RERUN_LOG}",
    ),
    "figure 2's numbers lacking the rows": (
        lambda root: edit_json(root / "fig2.json", lambda d: d.pop("rows")),
        "fig2.json: rows is missing (the file has curves, tau, true_map); rebuild it: `dvc repro figure_2` "
        "(or `python -m rambo.figures.fig2_minibatch_map --out DIR`)",
    ),
    "params that are not YAML": (
        lambda root: (root / "params.yaml").write_text("profile: mini\nseeds: [0, 1\n"),
        "params.yaml: not valid YAML (line 3, column 1: expected ',' or ']', but got '<stream end>'); give the "
        "pipeline's params file (params.yaml; `python -m rambo.ablations.set_profile <profile>` writes it from "
        "ablations/profiles/<profile>.yaml)",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_run_file_is_one_error_line_and_nothing_is_written(pipeline, case):
    spoil, message = CASES[case]
    spoil(pipeline)
    before = tree_digest(pipeline)

    done = tables(pipeline)

    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"error: {message}\n")
    assert tree_digest(pipeline) == before
    assert not (pipeline / "out").exists() and not (pipeline / "plots").exists()


def test_the_wandb_report_names_a_bad_params_file(tmp_path):
    (tmp_path / "params.yaml").write_text("profile: mini\nseeds: 0,1,2\n")
    before = tree_digest(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "rambo.ablations.wandb_report", "--params", "params.yaml", "--print"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "error: params.yaml: tables is missing (the file has profile, seeds); give the pipeline's params file "
        "(params.yaml; `python -m rambo.ablations.set_profile <profile>` writes it from "
        "ablations/profiles/<profile>.yaml)\n"
    )
    assert tree_digest(tmp_path) == before


def test_a_bad_timing_record_is_named_before_a_measurement_is_spent_on_it(tmp_path):
    record = tmp_path / "pipeline_timing.json"
    text = '{"native": {"date": "2025-01-01 10:00 UTC", "seconds": 12'
    record.write_text(text)
    before = tree_digest(tmp_path)
    with pytest.raises(RunFileError) as raised:
        read_measurements(record)
    assert str(raised.value) == (
        f"{record}: not valid JSON (truncated at byte {len(text)}); restore it (`git checkout -- {record}`) or "
        "delete it: the next measurement writes it anew"
    )
    assert tree_digest(tmp_path) == before
    record.write_text('{"native": {"date": "d", "machine": "m", "commit": "c", "seconds": "long"}}')
    before = tree_digest(tmp_path)
    with pytest.raises(RunFileError, match=r"native.seconds is the string 'long', not a number"):
        read_measurements(record)
    assert read_measurements(tmp_path / "absent.json") == {}
    assert tree_digest(tmp_path) == before


def test_the_paper_smoke_names_a_bad_table_of_its_copy(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"profile": "p", "tables": {"runs": {"a/b/c": "x"}}}))
    tables_folder = tmp_path / "results" / "p" / "tables"
    tables_folder.mkdir(parents=True)
    (tables_folder / "table2.json").write_text('{"rows": [{"cells": [{"status": "ok", "experiment": "x"}]}]}')
    assert filled_cells(tmp_path) == (1, [])
    (tables_folder / "table5.json").write_text('{"rows": [{"cells": [{"experiment": "x"}]}]}')
    before = tree_digest(tmp_path)
    with pytest.raises(RunFileError) as raised:
        filled_cells(tmp_path)
    assert str(raised.value) == (
        f"{tables_folder / 'table5.json'}: rows[0].cells[0].status is missing (rows[0].cells[0] has experiment); "
        f"the smoke's stages wrote it: run `make paper-smoke` again ({tmp_path} is kept to be looked at)"
    )
    assert tree_digest(tmp_path) == before
