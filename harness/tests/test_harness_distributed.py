import pytest
import torch

from rambo.harness.distributed import ShardedBatchSampler, detect_setup, world_size, wrap_model
from rambo.harness.runtime import resolve_device, set_threads


class Batches:
    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)

    def set_epoch(self, epoch):
        pass


def test_detect_setup_prefers_torchrun_then_slurm_then_single():
    torchrun = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    assert detect_setup(torchrun) == detect_setup(torchrun).__class__(3, 8, 1, "torchrun")
    slurm = detect_setup({"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"})
    assert (slurm.rank, slurm.world_size, slurm.local_rank, slurm.source) == (1, 4, 1, "slurm")
    single = detect_setup({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert (single.world_size, single.source, single.is_main) == (1, "single", True)


def test_sharded_batches_concatenate_to_the_global_batch():
    batches = Batches([[0, 1, 2, 3], [4, 5, 6, 7]])
    shards = [list(ShardedBatchSampler(batches, r, 2)) for r in (0, 1)]
    assert [a + b for a, b in zip(*shards)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(ValueError, match="does not split"):
        list(ShardedBatchSampler(batches, 0, 3))
    uneven = [list(ShardedBatchSampler(Batches([[0, 1, 2, 3, 4]]), r, 3, even=False)) for r in range(3)]
    assert uneven == [[[0, 1]], [[2, 3]], [[4]]]
    with pytest.raises(ValueError, match="smaller than"):
        list(ShardedBatchSampler(Batches([[0]]), 0, 2, even=False))
    with pytest.raises(ValueError, match="rank must be"):
        ShardedBatchSampler(batches, 2, 2)


def test_one_process_needs_no_wrapper_and_auto_device_is_the_cpu_here():
    model = torch.nn.Linear(2, 2)
    assert world_size() == 1 and wrap_model(model, torch.device("cpu")) is model
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cuda", local_rank=3) == torch.device("cuda", 3)
    assert resolve_device("cuda:1", local_rank=3) == torch.device("cuda", 1)
    threads = torch.get_num_threads()
    set_threads(0)
    assert torch.get_num_threads() == threads
    set_threads(1)
    assert torch.get_num_threads() == 1
    torch.set_num_threads(threads)


def test_threads_zero_takes_the_cpus_slurm_gave_the_task():
    threads = torch.get_num_threads()
    try:
        set_threads(0, env={"SLURM_CPUS_PER_TASK": "1"})
        assert torch.get_num_threads() == 1
        torch.set_num_threads(2)
        set_threads(3, env={"SLURM_CPUS_PER_TASK": "1"})  # an explicit count wins
        assert torch.get_num_threads() == 3
        set_threads(0, env={})  # outside SLURM: torch's default, untouched
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(threads)
