"""Detection under torchrun: the real app and engine, DDP over gloo on this CPU machine."""

import json
import subprocess
import sys


def test_the_training_app_runs_under_torchrun_with_two_processes(tmp_path):
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "rambo.detection.train",
        "experiment=tiny_rambo",
        f"data_dir={tmp_path / 'data'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        "schedule.epochs=2",
        "schedule.max_iterations_per_epoch=2",
        "data.max_test_images=2",
        "wandb.mode=disabled",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["epochs"] == 2 and [row["epoch"] for row in metrics["history"]] == [1, 2]
    assert 0.0 <= metrics["AP50"] <= 1.0
    log = (tmp_path / "run" / "train.log").read_text()
    assert "epoch 1/2" in log and "epoch 2/2" in log and "done: AP50" in log
    assert "%|" not in log  # no progress bar in the log when not on a terminal


def test_mmdetection_batchnorm_and_the_authors_margin_run_under_torchrun(tmp_path):
    """Two processes with a pretrained backbone in mmdetection's BatchNorm (statistics frozen, affine
    trained in layer2..4, no SyncBN), aspect-ratio batches, the authors' random margin and the rank
    loss over all proposals (each process's own number of RoIs, gathered) run end to end; the
    checkpoint keeps the loaded statistics, a trained layer3 and a frozen layer1 BN weight, and the
    margin generator's state. (That the processes draw alike is not checked here: each
    seeds its generator from the same global seed before any data-dependent draw.)"""
    import torch

    from rambo.detection.backbones import build_resnet

    torch.save(build_resnet("resnet18").state_dict(), tmp_path / "r18.pth")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "rambo.detection.train",
        "experiment=tiny_rambo",
        f"data_dir={tmp_path / 'data'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        "experiment_name=tiny_rambo_ddp_check",
        "model.pretrained=true",
        f"model.weights_path={tmp_path / 'r18.pth'}",
        "model.trainable_layers=3",
        "loss.margin_mode=authors_random",
        "loss.classifier_rois=all_proposals",
        "schedule.epochs=1",
        "schedule.max_iterations_per_epoch=2",
        "data.max_test_images=2",
        "wandb.mode=disabled",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["epochs"] == 1 and 0.0 <= metrics["AP50"] <= 1.0
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["state"]["model"]
    loaded = torch.load(tmp_path / "r18.pth", weights_only=True)
    assert torch.equal(state["backbone.body.layer3.0.bn1.running_mean"], loaded["layer3.0.bn1.running_mean"])
    assert not torch.equal(state["backbone.body.layer3.0.bn1.weight"], loaded["layer3.0.bn1.weight"])
    assert torch.equal(state["backbone.body.layer1.0.bn1.weight"], loaded["layer1.0.bn1.weight"])
    assert "roi_heads.classifier_loss.margin_noise._extra_state" in state
