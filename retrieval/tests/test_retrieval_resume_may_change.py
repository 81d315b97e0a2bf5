"""``resume_may_change`` proven, not declared: every key of the list is changed in the middle of a
tiny run (``python -m rambo.retrieval.train``: epoch 1 with one value, ``resume=true`` with another)
and the run ends where an uninterrupted run ends. And the worker count is one of them: 0 and 2
workers write the same run (the augmentation is drawn per sample: rambo.retrieval.sample_seeds).
Before, 0 and 2 workers ended at test R@1 0.1944 and 0.3472, and a change on resume matched neither.

Two kinds of key:

* :data:`EXACT`: where the run's files are, what it is called, how it reports, how many processes
  load its images, which keys the resume itself compares. Changed on resume, every file of the
  run's result is the same (the metrics' experiment name is the new one).
* :data:`ROUNDING`: the device, the CPU thread count and the evaluation's batch size compute the
  same numbers in another order, so they change the last bits of the weights and the embeddings
  (and with them a rank where two distances all but tie). They stay changeable: a requeued job may
  land on another machine, and ``threads=0`` / ``device=auto`` are the machine's anyway; the
  machine and thread count that finished a run are in its provenance. Changed on resume, the
  weights and the losses agree with the uninterrupted run's to rounding.
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

from rambo.harness.checkpoint import load_checkpoint
from rambo.retrieval.train import CONFIG_DIR

# the keys changed in the exact resume, and in the rounding one (`resume` and `max_epochs_this_run` in both)
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
    "num_workers",
    "progress",
    "wandb",
    "identity_defaults",
    "identity_renamed",
    "data.table9",
}
ROUNDING = {"device", "threads", "eval_batch_size"}


def listed() -> list[str]:
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return list(compose("train", overrides=["profile=tiny"]).resume_may_change)


def train(out: Path, data_dir: Path, *extra: str) -> None:
    command = [
        sys.executable,
        "-m",
        "rambo.retrieval.train",
        "profile=tiny",
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
    """``zero`` and ``two``: uninterrupted runs with 0 and 2 workers; ``cut``: epoch 1 of ``zero``."""
    root = tmp_path_factory.mktemp("runs")
    for name, workers, extra in [("zero", 0, []), ("two", 2, []), ("cut", 0, ["max_epochs_this_run=1"])]:
        (root / name).mkdir()
        train(root / name, root / "data", f"num_workers={workers}", *extra)
    return root


def test_zero_and_two_workers_write_the_same_run(runs):
    zero, two = runs / "zero", runs / "two"
    assert result(zero / "metrics.json") == result(two / "metrics.json")
    assert (zero / "curve.json").read_bytes() == (two / "curve.json").read_bytes()
    assert (zero / "headline.json").read_bytes() == (two / "headline.json").read_bytes()
    for name, tensor in weights(zero / "checkpoint.pt").items():
        assert torch.equal(weights(two / "checkpoint.pt")[name], tensor), name


def test_every_key_of_resume_may_change_is_changed_on_resume_by_one_of_the_tests():
    assert set(listed()) == EXACT | ROUNDING


def test_keys_that_cannot_change_the_result_change_on_resume_and_the_result_is_the_same(runs, tmp_path):
    """Epoch 1 as ``cut`` (0 workers), epoch 2 with every key of :data:`EXACT` changed: the run's
    checkpoint, data and every output somewhere else, 2 workers, another name and W&B project."""
    moved = tmp_path / "moved"
    (moved / "checkpoint").mkdir(parents=True)
    shutil.copy(runs / "cut" / "checkpoint.pt", moved / "checkpoint" / "checkpoint.pt")  # the user moved it
    own_data = tmp_path / "copy_of_the_data"
    shutil.copytree(runs / "data" / "synthetic_tiny", own_data)
    train(
        moved,
        tmp_path / "another_data_dir",
        "resume=true",
        "experiment_name=renamed",
        f"resume_may_change=[{','.join([*listed(), 'two_pass_chunk_size'])}]",
        f"metrics_path={moved / 'metrics' / 'metrics.json'}",
        f"headline_path={moved / 'headline' / 'headline.json'}",
        f"curve_path={moved / 'curve' / 'curve.json'}",
        f"checkpoint_path={moved / 'checkpoint' / 'checkpoint.pt'}",
        f"data.root={own_data}",  # named: read as it is (the stand-in is not generated there)
        "num_workers=2",
        "progress=true",
        "wandb.project=another",
        "wandb.job_type=another",
        "+identity_defaults.two_pass_chunk_size=null",
        "+identity_renamed.old_name=two_pass_chunk_size",
        "data.table9.margin=0.5",
        "data.table9.lam=1.0",
        "loss.margin=0.02",  # the synthetic set's Table 9 values, which the loss took from data.table9 in epoch 1
        "loss.lam=4.0",
    )
    uninterrupted = runs / "two"
    expected = {**result(uninterrupted / "metrics.json"), "experiment": "renamed"}
    assert result(moved / "metrics" / "metrics.json") == expected
    assert (moved / "curve" / "curve.json").read_bytes() == (uninterrupted / "curve.json").read_bytes()
    assert (moved / "headline" / "headline.json").read_bytes() == (uninterrupted / "headline.json").read_bytes()
    for name, tensor in weights(uninterrupted / "checkpoint.pt").items():
        assert torch.equal(weights(moved / "checkpoint" / "checkpoint.pt")[name], tensor), name


def test_keys_that_change_only_the_rounding_change_on_resume_and_the_result_agrees_to_rounding(runs):
    """Epoch 2 of ``cut`` on 2 threads, ``device=cpu`` (the same device as ``auto`` here: where a
    GPU is, it is the other one) and evaluation batches of 5 in place of 8."""
    cut, uninterrupted = runs / "cut", runs / "zero"
    train(cut, runs / "data", "resume=true", "threads=2", "device=cpu", "eval_batch_size=5")
    resumed, expected = result(cut / "metrics.json"), result(uninterrupted / "metrics.json")
    assert resumed["epochs_trained"] == expected["epochs_trained"] == 2 and resumed["complete"]
    curve = json.loads((cut / "curve.json").read_text())
    for row, want in zip(curve, json.loads((uninterrupted / "curve.json").read_text()), strict=True):
        assert (row["epoch"], row["lr"]) == (want["epoch"], want["lr"])
        assert row["loss"] == pytest.approx(want["loss"], rel=1e-6, abs=1e-9)
    for name, tensor in weights(uninterrupted / "checkpoint.pt").items():
        torch.testing.assert_close(weights(cut / "checkpoint.pt")[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
