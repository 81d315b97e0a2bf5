"""A run's result does not depend on the x86-64 CPU: a tiny retrieval run and a tiny detection run,
each made twice in the portable numerics mode, once as this CPU's widest code paths and once as an
older CPU's, write the same ``metrics.json`` bytes.

Another CPU cannot be borrowed here; the libraries can be made to take the code paths another CPU
would take, through the settings they read (none of which the portable mode sets itself, except
torch's kernels, which it pins):

- MKL: ``MKL_ENABLE_INSTRUCTIONS=SSE4_2`` (its dispatch capped at SSE4.2) against no cap;
- oneDNN: ``ONEDNN_MAX_CPU_ISA=SSE41`` against no cap (the portable mode does not run it);
- torch: ``ATEN_CPU_CAPABILITY=avx2`` against this CPU's widest (the portable mode replaces both);
- faiss: ``FAISS_OPT_LEVEL=generic`` against its widest (the portable mode searches with torch);
- libjpeg-turbo: ``JSIMD_FORCESSE2=1`` against its widest (JPEG decoding, where images are JPEG);
- OpenBLAS (numpy's): ``OPENBLAS_CORETYPE=Haswell`` against its own choice, only where the machine
  does not set ``OPENBLAS_CORETYPE`` itself (some machines need theirs: it is never changed).

Each run generates its own synthetic data set under its settings, so data generation, image
decoding and resizing are inside what is compared. ``RAMBO_NUMERICS_UNDER_TEST=native`` runs the
same comparison in the native mode, where the bytes differ (the check's own check: it fails there).
``make test-numerics`` runs it (CI does); about 2 minutes on 2 cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.numerics, pytest.mark.slow]

MODE = os.environ.get("RAMBO_NUMERICS_UNDER_TEST", "portable")
THIS_CPU: dict[str, str] = {}
OLDER_CPU = {
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "ATEN_CPU_CAPABILITY": "avx2",
    "FAISS_OPT_LEVEL": "generic",
    "JSIMD_FORCESSE2": "1",
}
if "OPENBLAS_CORETYPE" not in os.environ:
    OLDER_CPU["OPENBLAS_CORETYPE"] = "Haswell"
APPS = {
    "retrieval": ["rambo.retrieval.train", "profile=tiny"],
    "detection": ["rambo.detection.train", "profile=tiny"],
}


def run(app: str, folder: Path, settings: dict[str, str]) -> bytes:
    env = {
        k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "NPY_DISABLE_CPU_FEATURES")
    }
    env.update(settings, RAMBO_NUMERICS=MODE, WANDB_MODE="disabled")
    module, *overrides = APPS[app]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            module,
            *overrides,
            f"data_dir={folder}/data",
            f"hydra.run.dir={folder}/run",
            "wandb.mode=disabled",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return (folder / "run" / "metrics.json").read_bytes()


@pytest.mark.parametrize("app", sorted(APPS))
def test_a_run_writes_the_same_metrics_bytes_as_on_an_older_cpu(app, tmp_path):
    this_cpu = run(app, tmp_path / "this-cpu", THIS_CPU)
    older_cpu = run(app, tmp_path / "older-cpu", OLDER_CPU)
    assert this_cpu == older_cpu, (
        f"{app}: metrics.json differs between this CPU's code paths and an older CPU's ({', '.join(OLDER_CPU)}) "
        f"in the {MODE} numerics mode"
    )
