"""The checkout the pipeline's tools work on: `params.yaml`, `README.md` and `dvc.yaml` at its
root, the profiles, the paper-settings ledger and the plot templates in `ablations/`. These are the
repository's files, not package data: the tools are installed in editable mode (`make install`),
so this module stays at `ablations/src/rambo/ablations/checkout.py` in the checkout."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
ABLATIONS = REPO / "ablations"
PROFILE_FOLDER = ABLATIONS / "profiles"  # one parameters file per profile
