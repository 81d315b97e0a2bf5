"""Two runs of the real app given one folder: exactly one trains; the other stops at once with one
``error:`` line (exit code 2) naming the folder and the run that holds it, and no byte of any file
of the first is touched, ``.hydra/*.yaml`` and the log included (rambo.harness.claim).

The second run starts while the first trains, with ``resume=auto`` (the README's cluster command):
without the folder claim it set the first run's checkpoint aside, trained, and the last to finish
won (measured before rambo.harness.claim existed: both exited 0, seed 0's results were gone). With
the claim taken only by the training run, Hydra had first rewritten the first run's
``.hydra/overrides.yaml`` (``epochs=400`` became the second's) and appended the refusal to its
``train.log``; the refusal was a traceback, exit code 1."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rambo.harness.claim import CLAIM_NAME
from rambo.harness.testing import held_by_another_process, tree_digest
from rambo.retrieval.datasets import generate_synthetic

EPOCHS = 400  # long enough (several seconds) for the second run to arrive while the first trains
TINY = {"seed": 0, "num_classes": 24, "images_per_class": 6, "image_size": 16, "num_super_classes": 4}


def command(tmp_path, seed, output, *extra, epochs=EPOCHS):
    return [
        sys.executable,
        "-m",
        "rambo.retrieval.train",
        "experiment=synthetic_log",
        "profile=tiny",
        f"seed={seed}",
        f"data_dir={tmp_path / 'data'}",
        f"output_dir={output}",
        f"hydra.run.dir={output}",
        "threads=1",
        "progress=false",
        f"epochs={epochs}",
        "eval_every=100000",
        "resume=auto",
        *extra,
    ]


def claimed(folder: Path, holder: dict, run: str, options: str) -> str:
    """The line a run refused by ``holder``'s claim of ``folder`` prints."""
    return (
        f"error: {folder} is claimed by run {holder['run']!r} (host {holder['host']}, process {holder['pid']}, "
        f"since {holder['since']}); this run ({run!r}) would overwrite its checkpoint and metrics there, so it stops "
        f"before writing anything. Give this run a folder of its own ({options}), or wait for that run to end. If "
        f"that run is gone (killed on another host, no scheduler to requeue it), delete {folder / CLAIM_NAME} and "
        "start again.\n"
    )


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """A data_dir holding the tiny profile's synthetic set, so that a run writes nothing there."""
    generate_synthetic(tmp_path / "data" / "synthetic_tiny", **TINY, show_progress=False)
    return tmp_path / "data"


def test_a_second_run_in_a_folder_that_a_run_is_training_in_stops_at_once(tmp_path, data_dir):
    subprocess.run(command(tmp_path, 0, tmp_path / "alone"), check=True, capture_output=True, timeout=300, cwd=tmp_path)
    alone = json.loads((tmp_path / "alone" / "metrics.json").read_text())

    shared = tmp_path / "shared"
    first = subprocess.Popen(
        command(tmp_path, 0, shared), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path
    )
    deadline = time.time() + 120
    while not (shared / "checkpoint.pt").exists():  # the first run has trained an epoch
        assert first.poll() is None and time.time() < deadline, (
            first.stdout.read() if first.poll() is not None else "timeout"
        )
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGSTOP)  # paused, alive and holding the folder: its files keep still
    try:
        before = tree_digest(tmp_path)
        second = subprocess.run(
            command(tmp_path, 1, shared, epochs=7), capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        after = tree_digest(tmp_path)
        holder = json.loads((shared / CLAIM_NAME).read_text())
    finally:
        os.kill(first.pid, signal.SIGCONT)
    still_training = first.poll() is None
    output = first.communicate(timeout=300)[0]

    assert first.returncode == 0, output[-3000:]
    assert second.returncode == 2, second.stderr[-3000:]
    assert holder["run"] == "synthetic_log seed 0" and holder["pid"] == first.pid
    assert second.stderr == claimed(shared, holder, "synthetic_log seed 1", "hydra.run.dir=...")
    assert after == before  # no byte of the first run's files (.hydra/overrides.yaml, train.log, ...) changed
    assert "epochs=400" in (shared / ".hydra" / "overrides.yaml").read_text()
    assert still_training, "the second run did not stop before the first ended"
    assert sorted(path.name for path in shared.iterdir()) == sorted(
        path.name for path in (tmp_path / "alone").iterdir()
    )
    assert not (shared / CLAIM_NAME).exists()  # given back at the end
    metrics = json.loads((shared / "metrics.json").read_text())
    assert metrics["seed"] == 0
    assert {k: v for k, v in metrics.items() if k != "provenance"} == {
        k: v for k, v in alone.items() if k != "provenance"
    }


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_a_multirun_job_whose_folder_another_run_holds_writes_nothing_there(tmp_path, data_dir, launcher):
    """Each job of a sweep claims its own folder before Hydra writes there, in the job's own process
    (a joblib worker, as the pipeline's mini profile runs them)."""
    sweep = tmp_path / "sweep"
    job = sweep / "seed0"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("- epochs=40\n")
    (job / "train.log").write_text("the run that trains here\n")
    sweep_command = [
        sys.executable,
        "-m",
        "rambo.retrieval.train",
        "--multirun",
        "experiment=synthetic_log",
        "profile=tiny",
        "seed=0",
        f"data_dir={data_dir}",
        f"hydra.sweep.dir={sweep}",
        "threads=1",
        "progress=false",
        "epochs=7",
        f"hydra/launcher={launcher}",
    ]
    with held_by_another_process(job, "synthetic_log seed 0") as holder:
        before = tree_digest(tmp_path)
        done = subprocess.run(sweep_command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        after = tree_digest(tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr == claimed(job, holder, "synthetic_log seed 0", "hydra.sweep.dir=...")
    assert after.pop("sweep/multirun.yaml")  # the sweep's own file, beside the job folders
    assert after == before


def test_a_run_whose_checkpoint_folder_another_run_holds_stops_before_writing_there(tmp_path, data_dir):
    """The checkpoint folder apart from the run's folder (as the pipeline keeps them): the run is
    refused there, its own folder holds its log with the refusal, nothing else changed."""
    checkpoints, run = tmp_path / "checkpoints", tmp_path / "run"
    checkpoints.mkdir()
    (checkpoints / "checkpoint.pt").write_bytes(b"the other run's checkpoint")
    with held_by_another_process(checkpoints, "synthetic_log seed 0") as holder:
        before = tree_digest(tmp_path)
        done = subprocess.run(
            command(tmp_path, 0, run, f"checkpoint_path={checkpoints / 'checkpoint.pt'}"),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        after = tree_digest(tmp_path)
    line = claimed(checkpoints, holder, "synthetic_log seed 0", "output_dir=..., checkpoint_path=...")
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr == line
    own = {name: after.pop(name) for name in list(after) if name.startswith("run/")}
    assert after == before
    assert sorted(own) == [
        "run/.hydra/config.yaml",
        "run/.hydra/hydra.yaml",
        "run/.hydra/overrides.yaml",
        "run/train.log",
    ]
    assert (run / "train.log").read_text().splitlines()[-1].endswith(line.rstrip("\n"))
