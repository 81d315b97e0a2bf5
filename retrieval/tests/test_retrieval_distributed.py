import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rambo.retrieval.distributed import ShardedBatchSampler, detect_setup, gather_with_grad

torch.set_num_threads(1)
WORKER = Path(__file__).with_name("distributed_worker.py")


def _worker_module():
    spec = importlib.util.spec_from_file_location("distributed_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_processes_give_the_loss_and_gradients_of_one_process(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER), str(tmp_path)]
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
                torch.testing.assert_close(result[mode]["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=f"{mode} {name}")


def test_detect_setup_prefers_torchrun_then_slurm_then_single():
    torchrun = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    assert detect_setup(torchrun) == detect_setup(torchrun).__class__(3, 8, 1, "torchrun")
    slurm = detect_setup({"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"})
    assert (slurm.rank, slurm.world_size, slurm.local_rank, slurm.source) == (1, 4, 1, "slurm")
    single = detect_setup({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert (single.world_size, single.source, single.is_main) == (1, "single", True)


def test_gather_is_identity_in_one_process():
    x = torch.randn(3, 2, requires_grad=True)
    assert gather_with_grad(x) is x


def test_sharded_batches_concatenate_to_the_global_batch():
    class Batches:
        def __iter__(self):
            return iter([[0, 1, 2, 3], [4, 5, 6, 7]])

        def __len__(self):
            return 2

        def set_epoch(self, epoch):
            pass

    shards = [list(ShardedBatchSampler(Batches(), r, 2)) for r in (0, 1)]
    assert [a + b for a, b in zip(*shards)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ValueError, match="does not split"):
        list(ShardedBatchSampler(Batches(), 0, 3))
