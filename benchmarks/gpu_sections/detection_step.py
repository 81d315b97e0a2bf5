"""``detection_step``: Faster R-CNN R-50 FPN training steps of the paper config (batch 8, VOC sized images,
``experiment=table5_r50_voc07_{rambo,ce}``), images/s and peak memory, and the RoI classifier loss alone at
that size with its memory full (the paper: "< 5 ms")."""

from __future__ import annotations

import time

import torch

from rambo.core.benchmark import median_ms, synchronize

from .common import (
    PAPER_DETECTION_MS,
    Sizes,
    compose,
    format_gib,
    format_ms,
    loss_fwd_bwd,
    peak_gib,
    reset_peak,
    section_table,
)


def _detection_batches(batch: int, height: int, width: int, seed: int = 0) -> list:
    """One batch of random images with 1-4 random boxes each (labels 1..20, torchvision's convention)."""
    generator = torch.Generator().manual_seed(seed)
    images, targets = [], []
    for _ in range(batch):
        images.append(torch.rand(3, height, width, generator=generator, device="cpu"))
        count = int(torch.randint(1, 5, (1,), generator=generator, device="cpu"))
        corner = torch.rand(count, 2, generator=generator, device="cpu") * torch.tensor([width * 0.6, height * 0.6])
        size = (0.2 + 0.2 * torch.rand(count, 2, generator=generator, device="cpu")) * torch.tensor([width, height])
        targets.append(
            {
                "boxes": torch.cat([corner, corner + size], 1),
                "labels": torch.randint(1, 21, (count,), generator=generator, device="cpu"),
            }
        )
    return [(images, targets)]


def _detection_steps(device: torch.device, experiment: str, s: dict) -> dict:
    """``s["steps"]`` timed training steps (after two warm-up steps) of the detection engine on random boxes."""
    from rambo.detection.engine import train_one_epoch
    from rambo.detection.model import build_detector
    from rambo.harness.engine_options import EngineOptions

    cfg = compose(
        "detection",
        [
            f"experiment={experiment}",
            "model.pretrained=false",
            f"model.min_size={s['min_size']}",
            f"model.max_size={s['max_size']}",
        ],
    )
    torch.manual_seed(0)
    model = build_detector(cfg.model, cfg.loss, 20).to(device)
    schedule = cfg.schedule
    # The first iteration's learning rate of the paper schedule (warm-up from lr * warmup_ratio).
    optimizer = torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad],
        lr=schedule.lr * schedule.warmup_ratio,
        momentum=schedule.momentum,
        weight_decay=schedule.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda iteration: 1.0)
    batches = _detection_batches(s["batch"], s["height"], s["width"])
    flips, options = torch.Generator().manual_seed(0), EngineOptions(device=device)
    train_one_epoch(model, batches * 2, optimizer, scheduler, flips, options=options)  # warm-up
    reset_peak(device)
    synchronize(device)
    started = time.perf_counter()
    _, images_seen = train_one_epoch(model, batches * s["steps"], optimizer, scheduler, flips, options=options)
    synchronize(device)
    seconds = time.perf_counter() - started
    return {
        "experiment": experiment,
        "backbone": cfg.model.backbone,
        "batch": s["batch"],
        "image": [s["height"], s["width"]],
        "resized_to": [s["min_size"], s["max_size"]],
        "steps": s["steps"],
        "seconds_per_step": seconds / s["steps"],
        "images_per_second": images_seen / seconds,
        "peak_gib": peak_gib(device),
        "rois_per_image": int(cfg.model.box_batch_size_per_image),
        "loss": dict(cfg.loss),
    }


def _classifier_loss_ms(device: torch.device, experiment: str, rois: int, repeats: int) -> dict:
    """The RoI classifier loss alone on ``[rois, 21]`` logits, its score memory full (tau batches)."""
    from rambo.detection.model import build_classifier_loss

    cfg = compose("detection", [f"experiment={experiment}"])
    loss_fn = build_classifier_loss(cfg.loss, 20).to(device)
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(rois, 21, generator=generator, device="cpu").to(device)
    labels = (
        torch.randint(0, 21, (rois,), generator=generator, device="cpu")
        * (torch.rand(rois, generator=generator, device="cpu") < 0.25)
    ).to(device)
    for _ in range(int(cfg.loss.get("tau", 0)) + 1):  # fill the memory
        loss_fwd_bwd(loss_fn, logits, labels)
    ms = median_ms(lambda: loss_fwd_bwd(loss_fn, logits, labels), device, repeats)
    ranked = rois * 20 * (int(cfg.loss.get("tau", 0)) + 1)
    return {"rois": rois, "elements_ranked_per_class_column_total": ranked, "ms": ms}


def run(device: torch.device, sizes: Sizes) -> dict:
    """The RaMBO and the cross-entropy detection step of Table 5's R-50 rows, and the RaMBO RoI loss alone."""
    s = sizes.detection
    runs = [_detection_steps(device, experiment, s) for experiment in ("table5_r50_voc07_rambo", "table5_r50_voc07_ce")]
    loss = _classifier_loss_ms(device, "table5_r50_voc07_rambo", s["batch"] * runs[0]["rois_per_image"], sizes.repeats)
    return {"runs": runs, "classifier_loss": loss, "paper_ms": PAPER_DETECTION_MS, "ok": True}


def markdown(result: dict, report: dict) -> list[str]:
    """One row per experiment's step, then the RoI classifier loss's time beside the paper's."""
    if not result.get("runs"):
        return []
    rows = [
        [
            r["experiment"],
            r["backbone"],
            r["batch"],
            f"{r['image'][0]}x{r['image'][1]} -> {r['resized_to'][0]}-{r['resized_to'][1]}",
            f"{r['seconds_per_step']:.3f}",
            f"{r['images_per_second']:.1f}",
            format_gib(r["peak_gib"]),
        ]
        for r in result["runs"]
    ]
    lines = section_table(
        "Detection training steps (Faster R-CNN FPN, random init)",
        ["experiment", "backbone", "batch", "image -> resized", "s / step", "images / s", "peak memory"],
        "llrlrrr",
        rows,
    )[:-1]
    loss = result["classifier_loss"]
    return lines + [
        "",
        f"RoI classifier loss alone (RaMBO, memory full), {loss['rois']} RoIs x 20 classes: "
        f"{format_ms(loss['ms'])} forward+backward (paper: < {format_ms(result['paper_ms'])}).",
        "",
    ]
