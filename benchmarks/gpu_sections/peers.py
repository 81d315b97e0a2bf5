"""``peers``: the peers table of ``make bench-peers`` on the device: the RaMBO recall and AP losses
beside PML's FastAP, SmoothAP, MultiSimilarity and Contrastive (and torchsort's soft-rank AP where the
environment has torchsort) at batches 128-4,096, with and without the memory, and the batch-shaped path's cost
per element (:mod:`rambo.core.benchmark_peers`)."""

from __future__ import annotations

import torch

from .common import Sizes


def run(device: torch.device, sizes: Sizes) -> dict:
    """The table at the full batches on a GPU (toy batches and one element shape on the CPU)."""
    from rambo.core.benchmark_peers import peers_table

    if sizes.toy:
        result = peers_table(device, sizes=(16, 32), element_batches=(16,))
    else:
        result = peers_table(device)
    return {**result, "ok": True}


def markdown(result: dict, report: dict) -> list[str]:
    """The benchmark's own rendering, under a heading of its own."""
    if "meta" not in result:
        return []
    from rambo.core.benchmark_peers import markdown as peers_markdown

    return ["## The losses beside their peers", "", peers_markdown(result), ""]
