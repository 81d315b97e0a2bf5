"""Console scripts for the Hydra training apps: `rambo-retrieval-train`, `rambo-detection-train`.

A console script imports its entry point as a module (`rambo.retrieval.train`), and Hydra then
looks for the configs as the *package* `rambo.retrieval.configs`, which it accepts only with an
`__init__.py`; the config folders are plain data folders. `python -m rambo.retrieval.train`
works because the app runs as `__main__` and Hydra finds `configs/` next to the file. These
entry points run the app module exactly that way, so every command line (overrides, `-m`
sweeps, `--cfg job`, `--help`) behaves as with `python -m`.
"""

from __future__ import annotations

import runpy


def run_hydra_app(module: str) -> None:
    """Run `module` as `python -m module` would (`sys.argv[1:]` are its arguments)."""
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def retrieval_train() -> None:
    """`rambo-retrieval-train [overrides]` = `python -m rambo.retrieval.train [overrides]`."""
    run_hydra_app("rambo.retrieval.train")


def detection_train() -> None:
    """`rambo-detection-train [overrides]` = `python -m rambo.detection.train [overrides]`."""
    run_hydra_app("rambo.detection.train")
