"""One epoch of detector training and one evaluation on a test set (as in the torchvision
references): no configuration, only objects, so a user's own loop can call them."""

from __future__ import annotations

import torch

from rambo.harness.engine_options import EngineOptions
from rambo.harness.loss_sums import DeviceLossSums, reads_every_step
from rambo.harness.run_log import progress

from .augmentation import random_flips
from .evaluation import evaluate_voc
from .predict import collect_detections

AP_METHODS = ("area", "11point")


def train_one_epoch(
    model,
    loader,
    optimizer,
    scheduler,
    flips: torch.Generator,
    grad_clip_max_norm: float | None = None,
    *,
    options: EngineOptions,
) -> tuple[dict, int]:
    """One step per `(images, targets)` batch of `loader` (its length is the epoch's iterations:
    `schedule.max_iterations_per_epoch` cuts the loader, [`train.epoch_loader`][rambo.detection.train.epoch_loader]),
    random horizontal flips drawn from `flips`, the learning rate stepped every iteration, and the
    gradient's 2-norm over all parameters clipped at `grad_clip_max_norm` when given (as
    mmdetection's `optimizer_config.grad_clip`). `options`: device, forward context, progress
    bar and its label ([`rambo.harness.engine_options.EngineOptions`][rambo.harness.engine_options.EngineOptions]; the
    images are 3-D, so `channels_last` is the model's, the caller's); the RoI heads compute their losses in float32
    outside the autocast context
    ([`roi_heads.ConfigurableLossRoIHeads`][rambo.detection.roi_heads.ConfigurableLossRoIHeads]).

    Returns `({loss name: mean over the steps}, images seen)`; a non-finite loss is a
    `FloatingPointError` naming the step and each loss term (on a GPU, where the losses are summed
    on the device and read once, [`rambo.harness.loss_sums`][rambo.harness.loss_sums]: the epoch and the means).
    """
    device, autocast, description = options.device, options.autocast, options.description
    model.train()
    sums, count, images_seen = {}, 0, 0
    on_device = None if reads_every_step(device) else DeviceLossSums()  # a GPU: no host read per step
    for step, (images, targets) in enumerate(progress(loader, options.show_progress, desc=description)):
        images, targets = random_flips(images, targets, flips)
        images = [image.to(device) for image in images]
        targets = [{"boxes": t["boxes"].to(device), "labels": t["labels"].to(device)} for t in targets]
        with autocast():
            losses = model(images, targets)
        loss = sum(losses.values())
        if on_device is None and not torch.isfinite(loss):
            raise FloatingPointError(
                f"non-finite loss at {description}, step {step}: { {k: float(v) for k, v in losses.items()} }"
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip_max_norm is not None:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], grad_clip_max_norm)
        optimizer.step()
        scheduler.step()
        images_seen += len(images)
        count += 1
        if on_device is not None:
            on_device.add(losses)
            continue
        for key, value in losses.items():
            sums[key] = sums.get(key, 0.0) + value.item()
    if on_device is not None:
        return on_device.means(description), images_seen
    return {k: v / max(count, 1) for k, v in sums.items()}, images_seen


def evaluate(model, dataset, batch_size: int, num_classes: int, *, options: EngineOptions) -> dict:
    """VOC AP50 of `model` on `dataset` (kept with its difficult objects) by both AP methods:
    `{"area": {"map", "ap"}, "11point": {...}}`; `options` as in training (device, autocast,
    progress bar)."""
    predictions, ground_truths = collect_detections(
        model, dataset, options.device, batch_size, options.show_progress, options.autocast
    )
    return {method: evaluate_voc(predictions, ground_truths, num_classes, method) for method in AP_METHODS}
