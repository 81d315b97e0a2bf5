"""Shared look of every figure: the Agg backend, the Okabe-Ito palette, and atomic PNG + PDF output;
and what a figure's error says to do about a bad export it reads (`export_fix`).

The Okabe-Ito colours stay distinguishable under the common forms of colour blindness; sequential
maps use `cividis` for the same reason. Figures are written through a temporary file and
`os.replace` so that an interrupted run never leaves a half-written figure for DVC to cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: scripts run headless in tests and pipeline stages
import matplotlib.pyplot as plt  # noqa: E402

from rambo.harness.atomic import atomic_path  # noqa: E402

OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}
# Correct / relevant is bluish green, wrong / irrelevant vermillion (the paper's green / red).
POSITIVE = OKABE_ITO["bluish_green"]
NEGATIVE = OKABE_ITO["vermillion"]
SEQUENTIAL_MAP = "cividis"

plt.rcParams.update(
    {
        "figure.dpi": 100,
        "savefig.dpi": 150,
        "font.size": 9,
        "axes.titlesize": 10,
        "axes.labelsize": 9,
        "legend.fontsize": 8,
        "axes.prop_cycle": matplotlib.cycler(color=list(OKABE_ITO.values())[1:] + ["#000000"]),
    }
)


def _replace_atomically(path: Path, write) -> None:
    """`write(temporary)` then rename ([`rambo.harness.atomic.atomic_path`][rambo.harness.atomic.atomic_path]): no
    half-written figure."""
    with atomic_path(path, suffix=path.suffix) as temporary:
        write(str(temporary))


def save_figure(fig, out_dir: Path, name: str) -> list[Path]:
    """Write `fig` as `<out_dir>/<name>.png` and `.pdf`; close it; return the two paths."""
    paths = [Path(out_dir) / f"{name}.{ext}" for ext in ("png", "pdf")]
    for path in paths:
        ext = path.suffix[1:]
        # No creation date in the PDF: a rerun of an unchanged figure gives the same bytes.
        metadata = {"CreationDate": None} if ext == "pdf" else None
        _replace_atomically(
            path,
            lambda temporary, ext=ext, metadata=metadata: fig.savefig(
                temporary, format=ext, bbox_inches="tight", metadata=metadata
            ),
        )
    plt.close(fig)
    return paths


def save_numbers(numbers: dict, out_dir: Path, name: str) -> Path:
    """Write the numbers behind a figure as `<out_dir>/<name>.json` (read by tests and DVC metrics)."""
    path = Path(out_dir) / f"{name}.json"

    def write(temporary):
        Path(temporary).write_text(json.dumps(numbers, indent=2) + "\n")

    _replace_atomically(path, write)
    return path


def export_fix(path: Path) -> str:
    """What to do about a bad export of the retrieval pipeline (`results/<profile>/exports/<experiment>/`)."""
    path = Path(path)
    stage = (
        f" (the pipeline: `dvc repro retrieval_export@{path.parent.name}`)"
        if path.parent.parent.name == "exports"
        else ""
    )
    return f"write it again with `python -m rambo.retrieval.export`{stage}"
