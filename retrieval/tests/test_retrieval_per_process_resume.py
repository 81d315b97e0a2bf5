"""Score memories of ``global_batch=False`` under several processes: each process's own memory (and
random state) is checkpointed and each resumes with its own, so a run resumed on two gloo processes
computes what the uninterrupted run computes on each of them."""

import subprocess
import sys
from pathlib import Path

import torch

WORKER = Path(__file__).with_name("per_process_resume_worker.py")


def test_each_process_resumes_with_its_own_score_memory(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    done = subprocess.run([*command, str(WORKER), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) for rank in (0, 1)]
    for rank, result in enumerate(results):
        straight, first, resumed = result["straight"], result["first"], result["resumed"]
        assert list(first["losses"]) == [1] and list(resumed["losses"]) == [2, 3]
        assert {**first["losses"], **resumed["losses"]} == straight["losses"], rank
        assert len(resumed["memory"]) == len(straight["memory"]) == 2
        for (a, b), (c, d) in zip(resumed["memory"], straight["memory"]):
            assert torch.equal(a, c) and torch.equal(b, d), rank
        assert torch.equal(resumed["weight"], straight["weight"]) and torch.equal(resumed["next"], straight["next"])
    # the processes' memories differ (each its own batch size): process 1's is not process 0's
    assert results[0]["straight"]["memory"][0][0].shape[0] == 4 and results[1]["straight"]["memory"][0][0].shape[0] == 6

    checkpoint = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=True)
    processes = checkpoint["processes"]
    assert len(processes) == 2 and set(processes[0]) == {"state", "rng"}
    held = [p["state"]["loss"]["_extra_state"]["batches"] for p in processes]
    assert [batch[0].shape[0] for batch in held[0]] == [4, 4] and [batch[0].shape[0] for batch in held[1]] == [6, 6]
    assert set(checkpoint["state"]) == {"model", "loss"} and checkpoint["finished"] is True
