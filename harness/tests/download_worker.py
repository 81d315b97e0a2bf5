"""Run by test_harness_partial_downloads.py as a separate process; not a test module.

    python download_worker.py GATE MODULE [ARGS...]

Runs ``python -m MODULE ARGS...`` (a download command) in this process, stopped at the first
chunk its download writes (rambo.harness.download._pause, point "written"): it then creates the
file GATE and sleeps, so that the test kills it mid-copy at a known point.
"""

import runpy
import sys
import time
from pathlib import Path

from rambo.harness import download as download_module

gate, module, arguments = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]


def stop_here(point: str) -> None:
    if point == "written":
        gate.write_text("")
        time.sleep(600)  # a test that never kills it ends it here


download_module._pause = stop_here
sys.argv = [module, *arguments]
runpy.run_module(module, run_name="__main__", alter_sys=True)
