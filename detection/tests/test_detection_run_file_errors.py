"""A run's own files going wrong under ``python -m rambo.detection.train``: a damaged checkpoint
under ``resume=true``, and a disk that fills up during the run. Each is one line naming the file and
the next step, exit code 2 (before: a traceback ending with the error)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from rambo.harness.testing import listing, small_disk  # noqa: F401 (small_disk: a fixture, taken by importing it)


def train(out: Path, data_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "rambo.detection.train",
        "experiment=tiny_rambo",
        "schedule.epochs=2",
        f"data_dir={data_dir}",
        f"output_dir={out}",
        f"hydra.run.dir={out}",
        "hydra.output_subdir=null",
        "wandb.mode=disabled",
        "progress=false",
        "threads=1",
        *extra,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=out.parent)


def test_a_damaged_checkpoint_under_resume_true_is_one_line_naming_it_and_the_next_step(tmp_path):
    out = tmp_path / "run"
    first = train(out, tmp_path / "data", "max_epochs_this_run=1")  # as if killed after epoch 1
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoint = out / "checkpoint.pt"
    whole = checkpoint.read_bytes()
    checkpoint.write_bytes(whole[: len(whole) // 2])
    before = {name: (out / name).read_bytes() for name in listing(out) if name != "train.log"}

    refused = train(out, tmp_path / "data", "resume=true")
    assert refused.returncode == 2, refused.stderr[-3000:]
    (line,) = refused.stderr.splitlines()  # one line, no traceback
    assert re.fullmatch(
        re.escape(f"error: {checkpoint} is a damaged checkpoint (")
        + r"[^;]+"
        + re.escape("); run again with resume=auto to set it aside (renamed checkpoint.pt.damaged) and ")
        + r".+",
        line,
    ), line
    assert {name: (out / name).read_bytes() for name in listing(out) if name != "train.log"} == before


def test_a_disk_that_fills_up_during_a_run_is_one_line_naming_the_file(tmp_path, small_disk):  # noqa: F811 (a fixture)
    out = small_disk / "run"  # 1 MiB: a tiny detector's checkpoint is some 45 MB
    done = train(out, tmp_path / "data")
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = done.stderr.splitlines()  # one line, no traceback
    assert re.fullmatch(
        re.escape(f"error: {out / 'checkpoint.pt'} was not written: no space left on the device (it needs ")
        + r"[\d.]+ MiB, [\d.]+ (bytes|KiB) free there"
        + re.escape(
            "); a file already at that path is kept as it was. Free space on that disk (or write to another one), "
            "then run again"
        ),
        line,
    ), line
    assert not [name for name in listing(small_disk) if name.endswith(".tmp")]  # no temporary file left
