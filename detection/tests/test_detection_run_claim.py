"""A run of ``python -m rambo.detection.train`` given a folder that another run holds: one ``error:``
line naming the folder and the run that holds it, exit code 2, and no byte of any file there
changed, ``.hydra/*.yaml`` and the log included (rambo.harness.claim, claimed before Hydra writes).

Before: Hydra rewrote the other run's ``.hydra/*.yaml`` and appended to its ``train.log``, then the
run ended in a ``FolderClaimedError`` traceback, exit code 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rambo.harness.claim import CLAIM_NAME
from rambo.harness.testing import held_by_another_process, tree_digest


def claimed(folder: Path, holder: dict, run: str, options: str) -> str:
    return (
        f"error: {folder} is claimed by run {holder['run']!r} (host {holder['host']}, process {holder['pid']}, "
        f"since {holder['since']}); this run ({run!r}) would overwrite its checkpoint and metrics there, so it stops "
        f"before writing anything. Give this run a folder of its own ({options}), or wait for that run to end. If "
        f"that run is gone (killed on another host, no scheduler to requeue it), delete {folder / CLAIM_NAME} and "
        "start again.\n"
    )


def a_run_in(folder: Path) -> None:
    """The files a run leaves in its folder (what must stay as it is)."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("- schedule.epochs=40\n")
    (folder / ".hydra" / "config.yaml").write_text("schedule:\n  epochs: 40\n")
    (folder / "train.log").write_text("[...] epoch 3/40\n")
    (folder / "checkpoint.pt").write_bytes(b"epoch 3")


@pytest.mark.parametrize("mode", ["run", "multirun"])
def test_a_run_in_a_folder_another_run_holds_writes_nothing_there(tmp_path, mode):
    command = [sys.executable, "-m", "rambo.detection.train"]
    common = ["profile=tiny", "wandb.mode=disabled", "progress=false", f"data_dir={tmp_path / 'data'}"]
    if mode == "run":
        folder = tmp_path / "run"
        command += [*common, f"hydra.run.dir={folder}", "schedule.epochs=7"]
    else:
        folder = tmp_path / "sweep" / "seed0"
        command += ["--multirun", *common, "seed=0", f"hydra.sweep.dir={tmp_path / 'sweep'}", "schedule.epochs=7"]
    a_run_in(folder)
    with held_by_another_process(folder, "synthetic_rambo seed 0") as holder:
        before = tree_digest(tmp_path)
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        after = tree_digest(tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    options = "hydra.run.dir=..." if mode == "run" else "hydra.sweep.dir=..."
    assert done.stderr == claimed(folder, holder, "synthetic_rambo seed 0", options)
    if mode == "multirun":
        assert after.pop("sweep/multirun.yaml")  # the sweep's own file, beside the job folders
    assert after == before
