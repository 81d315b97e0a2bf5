"""The training apps' console scripts (rambo.harness.console) run the Hydra apps as `python -m` does.

A console script imports its entry point as a module, and Hydra would then look for the configs
as a package (``rambo.retrieval.configs``) that has no ``__init__.py``; ``--cfg job`` proves the
configs are found and composed. ``rambo-eval`` is tested in retrieval/tests/test_retrieval_eval_cli.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("script", ["rambo-retrieval-train", "rambo-detection-train"])
def test_training_console_script_composes_its_config(script, tmp_path):
    path = BIN / script
    if not path.exists():
        pytest.skip(f"{script} is not installed next to {sys.executable} (pip install -e ./retrieval -e ./detection)")
    result = subprocess.run([str(path), "--cfg", "job"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "experiment_name:" in result.stdout
    assert not any(tmp_path.iterdir())  # --cfg job writes nothing
