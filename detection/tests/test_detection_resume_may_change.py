"""``resume_may_change`` proven, not declared: every key of the list is changed in the middle of a
tiny run (``python -m rambo.detection.train``: epoch 1 with one value, ``resume=true`` with another)
and the run ends where an uninterrupted run ends. The worker count among them: 0 and 2 workers
write the same run, as they did before (the dataset draws nothing; the batches come from
(seed, epoch) and the flips from a generator of (seed, epoch) in the training process).

Three kinds of key:

* where the run's files and data are, what it is called, how it reports, how many processes load
  its images, which keys the resume itself compares: changed on resume, the result is the same;
* ``eval.batch_size``: read once, by the evaluation after the last epoch (a batch is padded to its
  largest image, so it may move AP50): a resumed run is the uninterrupted run at its new value;
* the device and the CPU thread count compute the same numbers in another order: changed on resume,
  the weights and the losses agree with the uninterrupted run's to rounding. They stay changeable
  (a requeued job may land on another machine; ``threads=0`` and ``device=auto`` are the machine's
  anyway); the machine and thread count that finished a run are in its provenance.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

import rambo.detection
from rambo.harness.checkpoint import load_checkpoint

CONF = Path(rambo.detection.__file__).parent / "configs"
EXACT = {
    "experiment_name",
    "resume",
    "resume_may_change",
    "max_epochs_this_run",
    "output_dir",
    "metrics_path",
    "headline_path",
    "curve_path",
    "checkpoint_path",
    "data_dir",
    "data.root",
    "data.train_roots",
    "data.test_root",
    "num_workers",
    "progress",
    "wandb",
    "identity_defaults",
    "eval.batch_size",
}
ROUNDING = {"device", "threads"}


def listed() -> list[str]:
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return list(compose("train", overrides=["experiment=tiny_rambo", "output_dir=unused"]).resume_may_change)


def train(out: Path, data_dir: Path, *extra: str) -> None:
    command = [
        sys.executable,
        "-m",
        "rambo.detection.train",
        "experiment=tiny_rambo",
        "schedule.epochs=2",
        "schedule.max_iterations_per_epoch=2",
        f"data_dir={data_dir}",
        f"output_dir={out}",
        f"hydra.run.dir={out}",
        "hydra.output_subdir=null",
        "wandb.mode=disabled",
        "progress=false",
        "threads=1",
        "num_workers=0",
        *extra,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=out.parent)
    assert done.returncode == 0, done.stderr[-3000:]


def result(metrics_path: Path) -> dict:
    """The run's metrics less the machine that made them (provenance)."""
    metrics = json.loads(metrics_path.read_text())
    metrics.pop("provenance")
    return metrics


def weights(checkpoint: Path) -> dict:
    return load_checkpoint(checkpoint)["state"]["model"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """``zero`` and ``two``: uninterrupted runs with 0 and 2 workers (evaluated one image at a
    time); ``cut``: epoch 1 with 0 workers and the default evaluation batch."""
    root = tmp_path_factory.mktemp("runs")
    plans = [
        ("zero", ["num_workers=0", "eval.batch_size=1"]),
        ("two", ["num_workers=2", "eval.batch_size=1"]),
        ("cut", ["num_workers=0", "max_epochs_this_run=1"]),
    ]
    for name, extra in plans:
        (root / name).mkdir()
        train(root / name, root / "data", *extra)
    return root


def test_zero_and_two_workers_write_the_same_run(runs):
    zero, two = runs / "zero", runs / "two"
    assert result(zero / "metrics.json") == result(two / "metrics.json")
    assert (zero / "curve.json").read_bytes() == (two / "curve.json").read_bytes()
    torch.testing.assert_close(weights(two / "checkpoint.pt"), weights(zero / "checkpoint.pt"), rtol=0, atol=0)


def test_every_key_of_resume_may_change_is_changed_on_resume_by_one_of_the_tests():
    assert set(listed()) == EXACT | ROUNDING


def test_keys_that_cannot_change_the_result_change_on_resume_and_the_result_is_the_same(runs, tmp_path):
    """Epoch 1 as ``cut``, epoch 2 with every key of :data:`EXACT` changed: the checkpoint, the data
    and every output somewhere else, 2 workers, another name and W&B project, evaluation batches of 1."""
    moved = tmp_path / "moved"
    (moved / "checkpoint").mkdir(parents=True)
    shutil.copy(runs / "cut" / "checkpoint.pt", moved / "checkpoint" / "checkpoint.pt")  # the user moved it
    own_data = tmp_path / "copy_of_the_data"
    shutil.copytree(runs / "data" / "tiny", own_data)
    train(
        moved,
        tmp_path / "another_data_dir",
        "resume=true",
        "experiment_name=renamed",
        f"resume_may_change=[{','.join([*listed(), 'data.max_test_images'])}]",
        f"metrics_path={moved / 'metrics' / 'metrics.json'}",
        f"headline_path={moved / 'headline' / 'headline.json'}",
        f"curve_path={moved / 'curve' / 'curve.json'}",
        f"checkpoint_path={moved / 'checkpoint' / 'checkpoint.pt'}",
        f"data.root={own_data}",  # data.train_roots and data.test_root follow it
        "num_workers=2",
        "progress=true",
        "wandb.project=another",
        "wandb.job_type=another",
        "+identity_defaults.init_checkpoint=null",
        "eval.batch_size=1",
    )
    uninterrupted = runs / "two"
    expected = {**result(uninterrupted / "metrics.json"), "experiment": "renamed"}
    assert result(moved / "metrics" / "metrics.json") == expected
    assert (moved / "curve" / "curve.json").read_bytes() == (uninterrupted / "curve.json").read_bytes()
    assert (moved / "headline" / "headline.json").read_bytes() == (uninterrupted / "headline.json").read_bytes()
    torch.testing.assert_close(
        weights(moved / "checkpoint" / "checkpoint.pt"), weights(uninterrupted / "checkpoint.pt"), rtol=0, atol=0
    )


def test_keys_that_change_only_the_rounding_change_on_resume_and_the_result_agrees_to_rounding(runs):
    """Epoch 2 of ``cut`` on 2 threads and ``device=cpu`` (the same device as ``auto`` here: where
    a GPU is, it is the other one)."""
    cut, uninterrupted = runs / "cut", runs / "zero"
    train(cut, runs / "data", "resume=true", "threads=2", "device=cpu")
    resumed = result(cut / "metrics.json")
    assert resumed["epochs"] == 2 and [row["epoch"] for row in resumed["history"]] == [1, 2]
    expected = result(uninterrupted / "metrics.json")["history"]
    for row, want in zip(resumed["history"], expected, strict=True):
        assert row.keys() == want.keys()
        for key, value in want.items():
            assert row[key] == pytest.approx(value, rel=1e-5, abs=1e-7), (row["epoch"], key)
    torch.testing.assert_close(
        weights(cut / "checkpoint.pt"), weights(uninterrupted / "checkpoint.pt"), rtol=1e-4, atol=1e-5
    )
