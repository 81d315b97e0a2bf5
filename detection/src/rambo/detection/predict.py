"""Run a detector over a dataset and collect what the VOC evaluator takes."""

from __future__ import annotations

import contextlib

import torch

from rambo.harness.run_log import progress as progress_bar

from .voc import collate_detection


@torch.no_grad()
def collect_detections(
    model, dataset, device: torch.device, batch_size: int = 4, progress: bool = False, autocast=contextlib.nullcontext
):
    """`(predictions, ground_truths)`, both `image_id -> dict of numpy arrays` (see `evaluate_voc`).

    `dataset` must keep difficult objects (`train=False`) so the evaluator can ignore them.
    `autocast`: the factory of the forward pass's context
    ([`rambo.harness.precision.autocast`][rambo.harness.precision.autocast]); the RoI heads score and place the
    detections in float32 ([`roi_heads.ConfigurableLossRoIHeads`][rambo.detection.roi_heads.ConfigurableLossRoIHeads]).
    """
    model.eval()
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_detection)
    predictions, ground_truths = {}, {}
    for images, targets in progress_bar(loader, progress, desc="evaluate"):
        with autocast():
            outputs = model([image.to(device) for image in images])
        for output, target in zip(outputs, targets):
            image_id = target["image_id"]
            predictions[image_id] = {key: output[key].cpu().numpy() for key in ("boxes", "scores", "labels")}
            ground_truths[image_id] = {
                "boxes": target["boxes"].numpy(),
                "labels": target["labels"].numpy(),
                "difficult": target["difficult"].numpy().astype(bool),
            }
    return predictions, ground_truths
