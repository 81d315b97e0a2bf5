"""What ``python -m rambo.detection.train`` does with a checkpoint it may not continue or a file it
cannot start from: one ``error:`` line naming the file and what to do, exit code 2, the file
untouched; and a checkpoint of either app given to the other (rambo.harness.resume, TrainingRun.foreign).

Before: rerunning a finished run (``RunExistsError``), ``resume=true`` over a retrieval checkpoint
("a different configuration (... and 75 more)"), an ``init_checkpoint`` of another model and
``data.classes=foo`` each ended in a traceback, exit code 1."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rambo.harness.testing import tree_digest

# Hydra writes these into the run's folder before the run looks at its checkpoint; a refused run puts back
# the ones of a folder that held files before (the earlier run's), byte for byte.
HYDRA_FILES = (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "train.log")
OWN_FOLDER = "(hydra.run.dir=..., or checkpoint_path=...)"


def train(app: str, cwd: Path, data_dir: Path, run: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", f"rambo.{app}.train", "profile=tiny", "wandb.mode=disabled", "progress=false"]
    command += ["threads=1", f"data_dir={data_dir}", f"hydra.run.dir={run}", *overrides]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> dict[str, Path]:
    """The data_dir and the folders of a finished tiny run of each app."""
    root = tmp_path_factory.mktemp("finished")
    for app in ("detection", "retrieval"):
        done = train(app, root, root / "data", root / app)
        assert done.returncode == 0, done.stderr[-3000:]
    return {"data": root / "data", "detection": root / "detection", "retrieval": root / "retrieval"}


def refused(app: str, tmp_path: Path, finished: dict, run: Path, *overrides: str) -> str:
    """The command's stderr; asserts exit code 2 and that nothing changed: no byte of a folder that held a run's
    files (its ``.hydra/*.yaml`` and log included, rambo.harness.job_files.restore_job_files); a new folder holds
    just the refused run's Hydra files and log."""
    mine = set() if run.exists() else {f"{run.relative_to(tmp_path).as_posix()}/{name}" for name in HYDRA_FILES}
    before = tree_digest(tmp_path), tree_digest(finished["data"])
    done = train(app, tmp_path, finished["data"], run, *overrides)
    assert done.returncode == 2, done.stderr[-3000:]
    after = {name: value for name, value in tree_digest(tmp_path).items() if name not in mine}
    assert after == {name: value for name, value in before[0].items() if name not in mine}
    assert tree_digest(finished["data"]) == before[1]
    return done.stderr


def test_rerunning_a_finished_run_is_one_line(tmp_path, finished):
    run = tmp_path / "run"
    shutil.copytree(finished["detection"], run)
    assert refused("detection", tmp_path, finished, run) == (
        f"error: {run / 'checkpoint.pt'} holds this run already (epoch 1); a new run would overwrite it. Continue it "
        "with resume=true (a finished run writes its results again), or delete the checkpoint to train it from the "
        "start\n"
    )


def test_rerunning_a_finished_run_with_another_setting_leaves_its_folder_byte_for_byte(tmp_path, finished):
    """A rerun refused (another lr over the finished run, with resume=false and resume=true) leaves every byte of
    the run's folder, ``.hydra/*.yaml`` and ``train.log`` included. Before: Hydra had saved the refused command's
    config and overrides over the run's own and appended the refusal to its log."""
    run = tmp_path / "run"
    shutil.copytree(finished["detection"], run)
    assert refused("detection", tmp_path, finished, run, "schedule.lr=0.5").startswith(
        f"error: {run / 'checkpoint.pt'} holds another run (schedule.lr: 0.01 -> 0.5, epoch 1); this run would "
        "overwrite it."
    )
    stderr = refused("detection", tmp_path, finished, run, "schedule.lr=0.5", "resume=true")
    assert stderr.startswith(
        f"error: {run / 'checkpoint.pt'} was written by a different configuration (schedule.lr: 0.01 -> 0.5); "
    ), stderr
    assert stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("app", "other", "reason"),
    [
        ("detection", "retrieval", "it holds the state of 'loss', 'model', where this app's checkpoints hold 'model'"),
        ("retrieval", "detection", "it holds the state of 'model', where this app's checkpoints hold 'loss', 'model'"),
    ],
)
def test_a_checkpoint_of_the_other_app_is_one_line_and_kept(tmp_path, finished, app, other, reason):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(finished[other] / "checkpoint.pt", run / "checkpoint.pt")
    assert refused(app, tmp_path, finished, run, "resume=true") == (
        f"error: {run / 'checkpoint.pt'} is not a checkpoint of rambo.{app}.train ({reason}); this run neither "
        f"continues nor overwrites it. Move it away, or give this run a folder of its own {OWN_FOLDER}, or run with "
        "resume=auto, which sets it aside (renamed checkpoint.pt.stale)\n"
    )


def test_an_init_checkpoint_of_another_model_is_one_line(tmp_path, finished):
    start = tmp_path / "retrieval.pt"
    shutil.copy(finished["retrieval"] / "checkpoint.pt", start)
    stderr = refused("detection", tmp_path, finished, tmp_path / "run", f"init_checkpoint={start}")
    assert re.fullmatch(
        rf"error: init_checkpoint={re.escape(str(start))}: {re.escape(str(start))} does not fit this model: "
        r"missing \['backbone[^\n]*\], unexpected \['[^\n]*\]\n",
        stderr,
    ), stderr


def test_an_unknown_class_list_is_one_line(tmp_path, finished):
    stderr = refused("detection", tmp_path, finished, tmp_path / "run", "data.classes=foo")
    assert stderr == "error: data.classes must be one of ['synthetic', 'voc'], got 'foo'\n"
