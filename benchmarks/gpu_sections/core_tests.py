"""``core_tests``: the core test suite on the device (``RAMBO_TEST_DEVICE``, see core/tests/conftest.py),
so that every test of the ranking and the losses also holds on the GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import torch

from .common import REPO, Sizes


def run(device: torch.device, sizes: Sizes) -> dict:
    """The core test suite with ``RAMBO_TEST_DEVICE`` set to the device; counts from pytest's summary."""
    env = {**os.environ, "RAMBO_TEST_DEVICE": str(device), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *sizes.core_tests]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    output = done.stdout + done.stderr
    summary = output.strip().splitlines()[-1] if output.strip() else ""
    counts = {word: int(number) for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary)}
    failures = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return {
        "device": str(device),
        "exit_code": done.returncode,
        "summary": summary,
        "counts": counts,
        "failures": failures[:50],
        "output_tail": output[-6000:] if done.returncode else "",
        "ok": done.returncode == 0,
    }


def markdown(result: dict, report: dict) -> list[str]:
    """pytest's summary line on the device and each failing test."""
    if "summary" not in result:
        return []
    lines = [f"Core test suite on `{result['device']}`: {result['summary']}", ""]
    return lines + [f"- {failure}" for failure in result["failures"]] + ([""] if result["failures"] else [])
