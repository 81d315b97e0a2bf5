"""What ``python -m rambo.retrieval.train`` does with the file already at its checkpoint path when it may
not continue it: one ``error:`` line naming the file and what to do, exit code 2, the file untouched
(rambo.harness.resume); under ``resume=auto`` the file is set aside under a name of its own, never
over one set aside before.

Before: rerunning a finished run (``RunExistsError``), ``resume=true`` over another configuration,
over ``torch.save({"a": 1}, ...)`` or over a detection checkpoint each ended in a traceback, exit code 1
(the dict reported as "a different configuration (... and 37 more)"); a second ``resume=auto`` over
another run's checkpoint overwrote the ``checkpoint.pt.stale`` of the first."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rambo.harness.testing import md5, tree_digest

# Hydra writes these into the run's folder before the run looks at its checkpoint: the refused
# command's own configuration and log, beside the files it refuses to touch.
HYDRA_FILES = (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "train.log")
OWN_FOLDER = "(hydra.run.dir=..., or checkpoint_path=...)"


def train(cwd: Path, data_dir: Path, run: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "rambo.retrieval.train",
        "profile=tiny",
        "wandb.mode=disabled",
        "progress=false",
        "threads=1",
        f"data_dir={data_dir}",
        f"hydra.run.dir={run}",
        *overrides,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """``(data_dir, run folder)`` of a finished tiny run (2 epochs)."""
    root = tmp_path_factory.mktemp("finished")
    done = train(root, root / "data", root / "run")
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "data", root / "run"


@pytest.fixture
def run(tmp_path, finished) -> Path:
    """A copy of the finished run in this test's folder."""
    shutil.copytree(finished[1], tmp_path / "run")
    return tmp_path / "run"


def without_hydra_files(digest: dict[str, str], folder: str = "run") -> dict[str, str]:
    return {name: value for name, value in digest.items() if name not in {f"{folder}/{f}" for f in HYDRA_FILES}}


def refused(tmp_path, finished, run, *overrides) -> subprocess.CompletedProcess:
    """The command's result; asserts it changed nothing: no byte of a run folder that held files (the earlier
    run's ``.hydra/*.yaml`` and ``train.log`` included: rambo.harness.job_files.restore_job_files); a new one holds
    just the refused run's Hydra files and log."""
    fresh = not run.exists()
    before = tree_digest(tmp_path), tree_digest(finished[0])
    done = train(tmp_path, finished[0], run, *overrides)
    assert done.returncode == 2, done.stderr[-3000:]
    if fresh:
        assert without_hydra_files(tree_digest(tmp_path)) == without_hydra_files(before[0])
    else:
        assert tree_digest(tmp_path) == before[0]
    assert tree_digest(finished[0]) == before[1]  # the data
    return done


def test_rerunning_a_finished_run_is_one_line(tmp_path, finished, run):
    done = refused(tmp_path, finished, run)
    assert done.stderr == (
        f"error: {run / 'checkpoint.pt'} holds this run already (epoch 2); a new run would overwrite it. Continue it "
        "with resume=true (a finished run writes its results again), or delete the checkpoint to train it from the "
        "start\n"
    )


def test_rerunning_a_finished_run_with_another_setting_leaves_its_folder_byte_for_byte(tmp_path, finished, run):
    """Refused over a finished run (another lr): every byte of its folder is kept, ``.hydra/*.yaml`` and
    ``train.log`` included. Before: Hydra had saved the refused command's config and overrides over the run's
    own, and the refusal was appended to its log."""
    done = refused(tmp_path, finished, run, "optimizer.lr=0.5")
    assert done.stderr.startswith(f"error: {run / 'checkpoint.pt'} holds another run (optimizer.lr: ")
    assert done.stderr.count("\n") == 1


def test_resuming_another_configuration_is_one_line(tmp_path, finished, run):
    done = refused(tmp_path, finished, run, "resume=true", "epochs=3")
    assert done.stderr == (
        f"error: {run / 'checkpoint.pt'} was written by a different configuration (epochs: 2 -> 3); resume=true "
        f"continues only the same run. Give this run a folder of its own {OWN_FOLDER}, or run with resume=auto, "
        "which sets that checkpoint aside (renamed checkpoint.pt.stale) and starts over\n"
    )


@pytest.mark.parametrize("resume", ["true", "false"])
@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (
            {"a": 1},
            "it holds a dict of 'a', without the state, epoch, curve, extra, rng, identity of a run",
        ),
        (torch.zeros(3), "it holds a Tensor, not a checkpoint dict"),
    ],
    ids=["dict", "tensor"],
)
def test_a_file_that_is_no_checkpoint_of_this_app_is_one_line_and_kept(tmp_path, finished, resume, content, reason):
    run = tmp_path / "run"
    run.mkdir()
    torch.save(content, run / "checkpoint.pt")
    done = refused(tmp_path, finished, run, f"resume={resume}")
    assert done.stderr == (
        f"error: {run / 'checkpoint.pt'} is not a checkpoint of rambo.retrieval.train ({reason}); this run neither "
        f"continues nor overwrites it. Move it away, or give this run a folder of its own {OWN_FOLDER}, or run with "
        "resume=auto, which sets it aside (renamed checkpoint.pt.stale)\n"
    )


def test_a_second_checkpoint_of_another_run_set_aside_keeps_the_first(tmp_path, finished):
    """``resume=auto`` twice over a file of another run: ``.stale``, then ``.stale.1``, both whole."""
    run = tmp_path / "run"
    run.mkdir()
    kept = []
    for number, content in enumerate(({"a": 1}, {"b": 2})):
        torch.save(content, run / "checkpoint.pt")
        kept.append(md5(run / "checkpoint.pt"))
        done = train(tmp_path, finished[0], run, "resume=auto", "epochs=1")
        assert done.returncode == 0, done.stderr[-3000:]
        aside = run / ("checkpoint.pt.stale" if number == 0 else "checkpoint.pt.stale.1")
        key = "'a'" if number == 0 else "'b'"
        line = (
            f"{run / 'checkpoint.pt'} is not a checkpoint of rambo.retrieval.train (it holds a dict of {key}, without "
            f"the state, epoch, curve, extra, rng, identity of a run): set aside {run / 'checkpoint.pt'} as {aside}; "
            "starting over"
        )
        assert any(text.endswith(line) for text in (run / "train.log").read_text().splitlines()), line
    assert [md5(run / "checkpoint.pt.stale"), md5(run / "checkpoint.pt.stale.1")] == kept
    assert not (run / "checkpoint.pt.stale.2").exists()


def test_a_batch_augmentation_that_the_in_memory_images_cannot_take_is_one_line(tmp_path, finished):
    run = tmp_path / "run"
    done = train(tmp_path, finished[0], run, "augmentation.train=square_resize_random_crop")
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr == (
        "error: data.in_memory augments a batch at a time with random_resized_crop only; got "
        "augmentation.train='square_resize_random_crop'\n"
    )
