import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rambo.core.distributed import gather_with_grad

torch.set_num_threads(1)
WORKER = Path(__file__).with_name("distributed_worker.py")


def _worker_module():
    spec = importlib.util.spec_from_file_location("distributed_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_processes_give_the_loss_and_gradients_of_one_process(tmp_path):
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(WORKER),
        str(tmp_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]

    worker = _worker_module()
    images, labels = worker.global_batch()
    model = worker.make_model()
    expected_loss = worker.make_loss()(model(images), labels)
    expected_loss.backward()
    expected = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    for rank in (0, 1):
        result = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        assert result["setup"] == (rank, 2, "torchrun")
        for mode in ("plain", "two_pass"):
            assert result[mode]["loss"] == pytest.approx(float(expected_loss.detach()), rel=1e-6)
            assert result[mode]["grads"].keys() == expected.keys()
            for name, grad in expected.items():
                torch.testing.assert_close(
                    result[mode]["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=f"{mode} {name}"
                )


def test_gather_is_identity_in_one_process():
    x = torch.randn(3, 2, requires_grad=True)
    assert gather_with_grad(x) is x


def test_the_training_app_runs_under_torchrun_with_two_processes(tmp_path):
    """The real app and engine, DDP over gloo on the CPU: 2 processes x 4 images of the tiny profile's
    global batch of 8; rank 0 writes the outputs, and the embeddings' ranks are over all 8."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "rambo.retrieval.train",
        "profile=tiny",
        f"data_dir={tmp_path / 'data'}",
        f"hydra.run.dir={tmp_path / 'run'}",
        "threads=1",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["complete"] and metrics["epochs_trained"] == 2
    assert 0.0 <= metrics["paper_protocol"]["R@1"] <= 1.0
    assert metrics["provenance"]["launch"] == {"launcher": "torchrun", "processes": 2}  # results differ by it
    assert "epoch 2/2" in (tmp_path / "run" / "train.log").read_text()  # one summary line per epoch
