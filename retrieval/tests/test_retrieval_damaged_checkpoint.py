"""A damaged checkpoint under the app's own command: ``resume=true`` stops with the file and what to
do; ``resume=auto`` (the pipeline's and SLURM's mode) sets it aside, continues from the checkpoint of
the epoch before and says so in the log and in metrics.json. Before, every rerun stopped on a
25-line traceback ending ``OSError: [Errno 22] Invalid argument``, without the path; then a
traceback ending with the named error; now that error alone, one line, exit code 2."""

import json
import re
import subprocess
import sys

import torch


def command(tmp_path, *extra):
    out = tmp_path / "run"
    return [
        sys.executable,
        "-m",
        "rambo.retrieval.train",
        "profile=tiny",
        f"data_dir={tmp_path / 'data'}",
        f"output_dir={out}",
        f"hydra.run.dir={out}",
        "hydra.output_subdir=null",
        "wandb.mode=disabled",
        "progress=false",
        "threads=1",
        "epochs=3",
        "scheduler.milestones=[2]",
        *extra,
    ]


def run(tmp_path, *extra):
    return subprocess.run(command(tmp_path, *extra), capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_a_checkpoint_cut_in_half_is_set_aside_and_the_run_continues_from_the_epoch_before(tmp_path):
    out = tmp_path / "run"
    first = run(tmp_path, "max_epochs_this_run=2")  # as if killed after epoch 2
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoint = out / "checkpoint.pt"
    whole = checkpoint.read_bytes()
    checkpoint.write_bytes(whole[: len(whole) // 2])
    damaged = checkpoint.read_bytes()
    others = {path.name: path.read_bytes() for path in out.iterdir() if path.name not in ("checkpoint.pt", "train.log")}

    refused = run(tmp_path, "resume=true")
    assert refused.returncode == 2, refused.stderr[-2000:]
    (last,) = refused.stderr.splitlines()  # one line, no traceback
    assert re.fullmatch(
        re.escape(f"error: {checkpoint} is a damaged checkpoint (")
        + r"[^;]+"
        + re.escape(
            "); run again with resume=auto to set it aside (renamed checkpoint.pt.damaged) and continue from "
            "checkpoint.prev.pt, the checkpoint of the epoch before, or move it away yourself"
        ),
        last,
    ), refused.stderr[-2000:]
    assert checkpoint.read_bytes() == damaged  # nothing touched
    assert {name: (out / name).read_bytes() for name in others} == others

    resumed = run(tmp_path, "resume=auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    damage = metrics["checkpoint_recovery"][0]["damage"]  # what torch said (the Errno 22 of the issue, here)
    assert metrics["checkpoint_recovery"] == [
        {
            "damaged_checkpoint": "checkpoint.pt.damaged",
            "damage": damage,
            "resumed_from": "checkpoint.prev.pt",
            "resumed_epoch": 1,
        }
    ]
    assert f"({damage})" in last
    log = resumed.stdout + resumed.stderr
    assert f"{checkpoint} is a damaged checkpoint ({damage}): set it aside as {out / 'checkpoint.pt.damaged'}" in log
    assert f"continuing from {out / 'checkpoint.prev.pt'} (epoch 1), the checkpoint of the epoch before" in log
    assert metrics["complete"] and metrics["epochs_trained"] == 3
    assert [row["epoch"] for row in json.loads((out / "curve.json").read_text())] == [1, 2, 3]
    assert (out / "checkpoint.pt.damaged").read_bytes() == damaged  # kept, never deleted
    assert torch.load(checkpoint, weights_only=True)["epoch"] == 3
    assert not (out / "checkpoint.prev.pt").exists()  # the run finished: the earlier checkpoint is removed
