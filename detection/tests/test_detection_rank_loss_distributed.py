"""The RaMBO classifier loss under DDP (two real processes, torchrun, gloo on the CPU, float64): with
``global_batch=True`` the loss, the gradients as DDP combines them and the score memory are those of
one process that ranks the whole batch (paper Sec. 5.2); with ``global_batch=False`` each process's
are those of its own RoIs alone."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rambo.detection.rank_classifier_loss import RankClassifierLoss

torch.set_num_threads(1)
WORKER = Path(__file__).with_name("rank_loss_distributed_worker.py")
WORLD = 2


def _worker_module():
    spec = importlib.util.spec_from_file_location("rank_loss_distributed_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    out = tmp_path_factory.mktemp("rank_loss_ddp")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={WORLD}",
        str(WORKER),
        str(out),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(WORLD)]


def _memory(loss):
    return [(scores.clone(), relevant.clone()) for scores, relevant in loss.map_memory.remembered()]


def _assert_same_memory(got, expected, atol=0.0):
    assert len(got) == len(expected)
    for (scores, relevant), (want_scores, want_relevant) in zip(got, expected):
        torch.testing.assert_close(scores, want_scores, rtol=0, atol=atol)
        assert torch.equal(relevant, want_relevant)


def test_two_processes_rank_the_global_batch_as_one_process_does(two_processes):
    """Loss and memory exactly one process's. The local logits receive world_size x their rows of the
    one-process gradient; DDP averages over the processes (1/W), so what reaches the parameters through
    each process's logits is exactly its rows of the one-process gradient."""
    worker = _worker_module()
    one = worker.make_loss()
    nonzero = [0] * WORLD  # per rank, the gradient entries compared that are not zero
    for step in range(len(worker.SPLITS)):
        logits, labels, _ = worker.global_step(step)
        logits = logits.clone().requires_grad_()
        expected = one(logits, labels)
        expected.backward()
        for rank, result in enumerate(two_processes):
            got = result["leaf"][step]
            nonzero[rank] += int((got["grad"] != 0).sum())
            assert torch.equal(got["loss"], expected.detach()), (step, rank)
            mine = worker.rows(step, rank)
            assert got["grad"].shape == logits.grad[mine].shape
            assert torch.equal(got["grad"], WORLD * logits.grad[mine]), (step, rank)
            assert torch.equal(got["grad"] / WORLD, logits.grad[mine]), (step, rank)  # DDP's average of W copies
            _assert_same_memory(got["memory"], _memory(one))
    assert len(one.map_memory) == worker.TAU  # the memory was full, and dropped batches on the way
    assert min(nonzero) > 0, nonzero  # the comparison was not one of zeros on either process


def test_ddp_parameter_gradients_are_the_one_process_gradients(two_processes):
    """The same through a DDP-wrapped linear layer: DDP's averaged parameter gradients equal one
    process's on the whole batch, to float64 round-off (the layer's products run on fewer rows, and
    the sum over RoIs of the parameter gradient is split in two)."""
    worker = _worker_module()
    one, model = worker.make_loss(), worker.make_model()
    nonzero = 0
    for step in range(len(worker.SPLITS)):
        logits, labels, features = worker.global_step(step)
        model.zero_grad(set_to_none=True)
        expected = one(model(features), labels)
        expected.backward()
        nonzero += int((model.weight.grad != 0).sum())
        for rank, result in enumerate(two_processes):
            got = result["ddp"][step]
            torch.testing.assert_close(got["loss"], expected.detach(), rtol=0, atol=1e-15)
            for name, parameter in model.named_parameters():
                torch.testing.assert_close(
                    got["grads"][name], parameter.grad, rtol=0, atol=1e-15, msg=f"{step} {rank} {name}"
                )
            _assert_same_memory(got["memory"], _memory(one), atol=1e-15)
    assert nonzero > 0  # the comparison was not one of zeros


def test_global_batch_false_ranks_each_process_own_rois(two_processes):
    """``global_batch=False``: each process's loss, gradient (unscaled) and memory are those of one
    process fed only its own RoIs, and differ from the global batch's."""
    worker = _worker_module()
    for rank, result in enumerate(two_processes):
        alone, whole = worker.make_loss(global_batch=False), worker.make_loss()
        assert [got["step"] for got in result["local"]] == [
            s for s, split in enumerate(worker.SPLITS) if 0 not in split
        ]
        for got in result["local"]:
            logits, labels, _ = worker.global_step(got["step"])
            mine = worker.rows(got["step"], rank)
            local_logits = logits[mine].clone().requires_grad_()
            expected = alone(local_logits, labels[mine])
            expected.backward()
            assert torch.equal(got["loss"], expected.detach()) and torch.equal(got["grad"], local_logits.grad)
            _assert_same_memory(got["memory"], _memory(alone))
            assert not torch.equal(got["loss"], whole(logits, labels).detach())  # not the global batch's loss


def test_one_process_is_the_same_with_either_setting():
    worker = _worker_module()
    logits, labels, _ = worker.global_step(0)
    values = []
    for global_batch in (True, False):
        x = logits.clone().requires_grad_()
        value = worker.make_loss(global_batch)(x, labels)
        value.backward()
        values.append((value.detach(), x.grad))
    assert torch.equal(values[0][0], values[1][0]) and torch.equal(values[0][1], values[1][1])
    with pytest.raises(ValueError, match="global_batch must be true or false"):
        RankClassifierLoss(3, global_batch="yes")


def test_the_config_option_is_built_and_leaves_earlier_checkpoints_resumable():
    """``loss.global_batch`` reaches the loss; at its default (true) it is left out of the run identity
    (``identity_defaults``), so a checkpoint written before the key existed still resumes; false does not."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rambo.detection.model import build_classifier_loss
    from rambo.harness.resume import run_identity

    configs = Path(__file__).resolve().parents[1] / "src" / "rambo" / "detection" / "configs"
    identities = {}
    with initialize_config_dir(str(configs), version_base="1.3"):
        for global_batch in ("true", "false"):
            cfg = compose("train", overrides=["experiment=table5_r50_voc07_rambo", f"loss.global_batch={global_batch}"])
            assert build_classifier_loss(cfg.loss, 20).global_batch is (global_batch == "true")
            OmegaConf.update(cfg, "output_dir", "out")  # the Hydra runtime interpolation, not part of the identity
            config = OmegaConf.to_container(cfg, resolve=True)
            identities[global_batch] = run_identity(config, cfg.resume_may_change, config["identity_defaults"])
            if global_batch == "true":
                del (
                    config["loss"]["global_batch"],
                    config["loss"]["module"]["global_batch"],
                )  # a config from before the key
                identities["before"] = run_identity(config, cfg.resume_may_change, config["identity_defaults"])
    assert identities["true"] == identities["before"]
    assert identities["false"] != identities["before"]
