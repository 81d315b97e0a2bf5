"""ImageNet weights for a backbone, from a local file or the torchvision cache; never downloaded at
run time (tests and cluster nodes may have no network)."""

from __future__ import annotations

from pathlib import Path

import torch


def cache_path(url: str) -> Path:
    """Where torchvision's (and mmcv's) downloader keeps `url`: `<torch hub dir>/checkpoints/<file>`."""
    return Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[-1]


def weights_location(url: str, weights_path: str | Path | None = None) -> Path:
    """Where a run reads the weights of `url`: `weights_path` when given, else the cached copy."""
    return Path(weights_path).expanduser() if weights_path else cache_path(url)


def find_weights(name: str, url: str, weights_path: str | Path | None = None) -> Path:
    """The weights file of backbone `name`: `weights_path` when given, else the cached copy of
    `url`. `FileNotFoundError` with the manual steps when it is not there (the pipeline's data
    stages check every row's file and its hash before a run starts:
    [`rambo.harness.weights`][rambo.harness.weights])."""
    path = weights_location(url, weights_path)
    if path.is_file():
        return path
    raise FileNotFoundError(
        f"ImageNet weights for {name} not found at {path}. Weights are never downloaded at run time; "
        f"fetch them once with\n  mkdir -p {path.parent} && wget -O {path} {url}\n"
        "(or pass model.weights_path=FILE), or set model.pretrained=false to start from random initialisation."
    )
