"""Two runs of the real app given one output folder: exactly one trains; the other stops at
once with an error naming the folder and the run that holds it, and nothing of the first is touched.

The second run starts while the first trains, with ``resume=auto`` (the README's cluster command):
without the folder claim it set the first run's checkpoint aside, trained, and the last to finish
won (measured before rambo.harness.claim existed: both exited 0, seed 0's results were gone)."""

import json
import subprocess
import sys
import time

from rambo.harness.claim import CLAIM_NAME

EPOCHS = 400  # long enough (several seconds) for the second run to arrive while the first trains


def command(tmp_path, seed, output):
    return [
        sys.executable,
        "-m",
        "rambo.retrieval.train",
        "experiment=synthetic_log",
        "profile=tiny",
        f"seed={seed}",
        f"data_dir={tmp_path / 'data'}",
        f"output_dir={output}",
        f"hydra.run.dir={output}",
        "hydra.output_subdir=null",
        "threads=1",
        "progress=false",
        f"epochs={EPOCHS}",
        "eval_every=100000",
        "resume=auto",
    ]


def test_a_second_run_in_a_folder_that_a_run_is_training_in_stops_at_once(tmp_path):
    subprocess.run(command(tmp_path, 0, tmp_path / "alone"), check=True, capture_output=True, timeout=300, cwd=tmp_path)
    alone = json.loads((tmp_path / "alone" / "metrics.json").read_text())

    shared = tmp_path / "shared"
    first = subprocess.Popen(
        command(tmp_path, 0, shared), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path
    )
    deadline = time.time() + 120
    while not (shared / "checkpoint.pt").exists():  # the first run has trained an epoch
        assert first.poll() is None and time.time() < deadline, (
            first.stdout.read() if first.poll() is not None else "timeout"
        )
        time.sleep(0.05)
    second = subprocess.run(command(tmp_path, 1, shared), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    still_training = first.poll() is None
    output = first.communicate(timeout=300)[0]

    assert first.returncode == 0, output[-3000:]
    assert second.returncode != 0, "the second run trained in the folder the first was training in"
    assert "FolderClaimedError" in second.stderr and str(shared) in second.stderr
    assert "'synthetic_log seed 0'" in second.stderr  # the run that holds it
    assert still_training, "the second run did not stop before the first ended"
    assert sorted(path.name for path in shared.iterdir()) == sorted(
        path.name for path in (tmp_path / "alone").iterdir()
    )
    assert not (shared / CLAIM_NAME).exists()  # given back at the end
    metrics = json.loads((shared / "metrics.json").read_text())
    assert metrics["seed"] == 0
    assert {k: v for k, v in metrics.items() if k != "provenance"} == {
        k: v for k, v in alone.items() if k != "provenance"
    }
