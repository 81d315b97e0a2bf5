"""gather_with_grad on two real processes (torchrun, gloo on the CPU): shares of different sizes,
zero included, come back in rank order, and the gradient of each share is its rows of the global one."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import torch

from rambo.core.distributed import gather_with_grad

WORKER = Path(__file__).with_name("gather_worker.py")


def _worker_module():
    spec = importlib.util.spec_from_file_location("gather_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_uneven_shares_gather_in_rank_order_with_the_gradient_of_each_share(tmp_path):
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        str(WORKER),
        str(tmp_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    worker = _worker_module()
    results = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in (0, 1)]
    for index, split in enumerate(worker.SPLITS):
        rows, weights = worker.global_rows(split)
        for rank, result in enumerate(results):
            got = result["splits"][index]
            start = sum(split[:rank])
            assert torch.equal(got["gathered"], rows), (split, rank)  # every row, in rank order, on every process
            assert torch.equal(got["grad"], weights[start : start + split[rank]]), (split, rank)  # d(sum w x)/dx = w
            assert torch.equal(got["labels"], torch.arange(sum(split))), (split, rank)
    for result in results:
        trailing, dtype, scalar = result["refused"]
        assert "same trailing dimensions" in trailing and "[(2, 3), (2, 4)]" in trailing
        assert "dtypes ['torch.float32', 'torch.float64']" in dtype
        assert "at least one dimension" in scalar and "[(1,), ()]" in scalar
        assert result["still_in_step"] == [0, 1]


def test_gather_is_the_tensor_itself_in_one_process():
    x = torch.randn(3, 2, requires_grad=True)
    assert gather_with_grad(x) is x
