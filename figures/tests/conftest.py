import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    torch.set_num_threads(1)


@pytest.fixture
def run_figure(tmp_path):
    """Run ``python -m rambo.figures.<module>`` as the pipeline does (a fresh interpreter); return the output folder."""

    def run(module: str, *args: str):
        out = tmp_path / "out"
        completed = subprocess.run(
            [sys.executable, "-m", f"rambo.figures.{module}", "--out", str(out), *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"},
        )
        assert completed.returncode == 0, completed.stderr
        return out

    return run


@pytest.fixture
def assert_figure_written():
    """Check that ``<out>/<name>.png`` and ``.pdf`` were written (and are not empty stubs)."""

    def check(out: Path, name: str) -> None:
        for ext in ("png", "pdf"):
            path = out / f"{name}.{ext}"
            assert path.is_file() and path.stat().st_size > 1000, path

    return check
