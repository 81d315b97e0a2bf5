"""``retrieval_step``: training steps of the paper profile (ResNet-50, 224 px, batch 128, RaMBO recall log with
the batch memory; ``experiment=sop_log profile=paper``), images/s and peak memory, and the same step with
bfloat16 autocast and channels-last (options of the apps, off in the paper profile)."""

from __future__ import annotations

import torch

from .common import Sizes
from .training_steps import retrieval_steps, steps_markdown


def run(device: torch.device, sizes: Sizes) -> dict:
    """The paper profile's step, and the same step with bfloat16 autocast and channels-last (options of
    the apps, off in the paper profile)."""
    s = sizes.retrieval
    paper = ["experiment=sop_log", "profile=paper"]
    runs = [
        retrieval_steps(device, overrides, s["batch"], s["image_size"], s["steps"], None)
        for overrides in (paper, [*paper, "precision=bfloat16", "channels_last=true"])
    ]
    return {**runs[0], "runs": runs, "bf16_speed_up": runs[0]["seconds_per_step"] / runs[1]["seconds_per_step"]}


def markdown(result: dict, report: dict) -> list[str]:
    """Its runs in the retrieval steps' table (with ``recall_k_step``'s, which shares it)."""
    return steps_markdown("retrieval_step", report)
