"""A disk that fills up during a run of ``python -m rambo.retrieval.train``: one line naming the file
and the space it needs, exit code 2, no temporary file left. Before, three chained tracebacks
(torch's ``inline_container.cc`` among them) ended ``OSError: [Errno 28] No space left on device``;
then a 16-line traceback ended with the named error."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from rambo.harness.testing import listing, small_disk  # noqa: F401 (small_disk: a fixture, taken by importing it)
from rambo.retrieval.datasets import generate_synthetic

TINY = {"seed": 0, "num_classes": 24, "images_per_class": 6, "image_size": 16, "num_super_classes": 4}
LEFT_FREE = 40 * 1024  # less than a checkpoint of the tiny profile (about 39 KiB and 60 KiB)


def test_a_disk_that_fills_up_during_a_run_is_one_line_naming_the_file(tmp_path, small_disk):  # noqa: F811 (a fixture)
    data_dir = tmp_path / "data"
    generate_synthetic(data_dir / "synthetic_tiny", **TINY, show_progress=False)
    names = listing(data_dir)
    data_before = {name: (data_dir / name).read_bytes() for name in names if (data_dir / name).is_file()}
    (small_disk / "filler").write_bytes(b"\0" * (shutil.disk_usage(small_disk).free - LEFT_FREE))
    out = small_disk / "run"
    command = [
        sys.executable,
        "-m",
        "rambo.retrieval.train",
        "profile=tiny",
        f"data_dir={data_dir}",
        f"output_dir={out}",
        f"hydra.run.dir={out}",
        "hydra.output_subdir=null",
        "wandb.mode=disabled",
        "progress=false",
        "threads=1",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = done.stderr.splitlines()  # one line, no traceback
    match = re.fullmatch(
        r"error: (?P<path>\S+) was not written: no space left on the device \(it needs [\d.]+ KiB, "
        r"[\d.]+ KiB free there\); a file already at that path is kept as it was\. "
        r"Free space on that disk \(or write to another one\), then run again",
        line,
    )
    assert match, line
    assert str(out) in match["path"]
    assert not [name for name in listing(small_disk) if name.endswith(".tmp")]  # no temporary file left
    assert listing(data_dir) == names  # nothing else changed
    assert {name: (data_dir / name).read_bytes() for name in data_before} == data_before
