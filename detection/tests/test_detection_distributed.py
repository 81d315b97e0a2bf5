"""Detection under torchrun: the real app and engine, DDP over gloo on this CPU machine."""

import json
import subprocess
import sys


def test_the_training_app_runs_under_torchrun_with_two_processes(tmp_path):
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "rambo.detection.train",
        "experiment=tiny_rambo", f"data_dir={tmp_path / 'data'}", f"hydra.run.dir={tmp_path / 'run'}",
        "schedule.epochs=2", "schedule.max_iterations_per_epoch=2", "data.max_test_images=2", "wandb.mode=disabled",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and [row["epoch"] for row in metrics["history"]] == [1, 2]
    assert 0.0 <= metrics["AP50"] <= 1.0
    log = (tmp_path / "run" / "train.log").read_text()
    assert "epoch 1/2" in log and "epoch 2/2" in log and "done: AP50" in log
    assert "%|" not in log  # no progress bar in the log when not on a terminal
