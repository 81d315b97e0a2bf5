import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

FIGURES = Path(__file__).resolve().parents[1]
# The figure scripts and their helper modules live in figures/ (not an installed package); the tests
# share figures_testing.py beside this file.
sys.path.insert(0, str(FIGURES))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    torch.set_num_threads(1)


@pytest.fixture
def run_script(tmp_path):
    """Run ``figures/<script>`` as the pipeline does (a fresh interpreter); return the output folder."""

    def run(script: str, *args: str):
        out = tmp_path / "out"
        completed = subprocess.run(
            [sys.executable, str(FIGURES / script), "--out", str(out), *args],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"},
        )
        assert completed.returncode == 0, completed.stderr
        return out

    return run
