"""`load_dataset(name, root, split)`: one entry point for the configs, dispatching on the name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .cub import load_cub
from .image_retrieval_dataset import ImageRetrievalDataset
from .imagefolder import load_imagefolder
from .inshop import load_inshop
from .sop import load_sop

# "synthetic" is written in the SOP layout on purpose, so the real SOP loader is what reads it.
LOADERS: dict[str, Callable[..., ImageRetrievalDataset]] = {
    "sop": load_sop,
    "cub": load_cub,
    "inshop": load_inshop,
    "synthetic": load_sop,
    "imagefolder": load_imagefolder,
}


def load_dataset(name: str, root: Path | str, split: str, transform: Callable | None = None) -> ImageRetrievalDataset:
    """Load split `split` of dataset `name` (`sop`, `cub`, `inshop`, `synthetic` or `imagefolder`) from `root`."""
    if name not in LOADERS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {sorted(LOADERS)}")
    return LOADERS[name](root, split, transform=transform)
