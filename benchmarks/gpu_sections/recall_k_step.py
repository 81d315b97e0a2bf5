"""``recall_k_step``: the two-pass Recall@k surrogate with SiMix at batch 4,000
(``experiment=sop_recallk_simix profile=paper``, chunks of 250), images/s and peak memory."""

from __future__ import annotations

import torch

from .common import Sizes
from .training_steps import retrieval_steps, steps_markdown


def run(device: torch.device, sizes: Sizes) -> dict:
    """The Recall@k rows' training step at their batch, in two passes of ``sizes.recall_k["chunk"]`` images."""
    s = sizes.recall_k
    return retrieval_steps(
        device, ["experiment=sop_recallk_simix", "profile=paper"], s["batch"], s["image_size"], s["steps"], s["chunk"]
    )


def markdown(result: dict, report: dict) -> list[str]:
    """Its run in the retrieval steps' table (which ``retrieval_step`` renders when that one ran)."""
    return steps_markdown("recall_k_step", report)
