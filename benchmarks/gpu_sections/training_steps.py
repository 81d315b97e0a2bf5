"""Timed training steps of the retrieval engine, shared by the ``retrieval_step`` and ``recall_k_step`` sections,
and the one table that shows the runs of both (the report has a single "Retrieval training steps" table)."""

from __future__ import annotations

import time

import torch

from rambo.core.benchmark import synchronize

from .common import compose, format_gib, peak_gib, reset_peak, section_table

STEP_SECTIONS = ("retrieval_step", "recall_k_step")


def retrieval_steps(
    device: torch.device, overrides: list[str], batch: int, image_size: int, steps: int, chunk: int | None
) -> dict:
    """``steps`` timed training steps (after one warm-up) of the retrieval engine on random images."""
    from hydra.utils import instantiate

    from rambo.harness.engine_options import EngineOptions
    from rambo.harness.precision import autocast, to_channels_last
    from rambo.retrieval.engine import train_one_epoch
    from rambo.retrieval.model import build_model
    from rambo.retrieval.train import build_optimizer

    cfg = compose(
        "retrieval", [*overrides, "model.pretrained=false", f"image_size={image_size}", f"batch_size={batch}"]
    )
    torch.manual_seed(0)
    model = build_model(cfg.model).to(device)
    if cfg.channels_last:
        model = to_channels_last(model)
    options = EngineOptions(
        device=device, autocast=autocast(cfg.precision, device), channels_last=bool(cfg.channels_last)
    )
    optimizer = build_optimizer(cfg, model)
    loss_fn = instantiate(cfg.loss.module).to(device)
    per_class = int(cfg.data.sampler.samples_per_class)
    images = torch.randn(batch, 3, image_size, image_size, device=device)
    labels = torch.arange(batch, device=device) // per_class
    batches = [(images, labels, None)]
    chunk = chunk if chunk is not None else cfg.get("two_pass_chunk_size")
    train_one_epoch(model, batches, loss_fn, optimizer, chunk, options=options)  # warm-up (cuDNN autotune, memory)
    reset_peak(device)
    synchronize(device)
    started = time.perf_counter()
    train_one_epoch(model, batches * steps, loss_fn, optimizer, chunk, options=options)
    synchronize(device)
    seconds = time.perf_counter() - started
    return {
        "overrides": overrides,
        "backbone": cfg.model.backbone,
        "loss": cfg.loss.name,
        "batch": batch,
        "image_size": image_size,
        "two_pass_chunk_size": chunk,
        "steps": steps,
        "seconds_per_step": seconds / steps,
        "images_per_second": batch * steps / seconds,
        "peak_gib": peak_gib(device),
        "ok": True,
    }


def steps_markdown(section: str, report: dict) -> list[str]:
    """The table of every run of the step sections that ran ok, rendered once: by the first of them that did
    (``section`` is the one asking; the other gets nothing)."""
    status = report["sections"]
    done = [name for name in STEP_SECTIONS if status.get(name, {}).get("ok")]
    if not done or done[0] != section:
        return []
    steps = [run for name in done for run in status[name].get("runs", [status[name]])]
    rows = [
        [
            f"`{' '.join(s['overrides'])}`",
            s["backbone"],
            s["batch"],
            f"{s['image_size']} px",
            s["two_pass_chunk_size"] or "-",
            f"{s['seconds_per_step']:.3f}",
            f"{s['images_per_second']:.0f}",
            format_gib(s["peak_gib"]),
        ]
        for s in steps
    ]
    return section_table(
        "Retrieval training steps (paper profile, random init)",
        ["config", "backbone", "batch", "image", "two-pass chunk", "s / step", "images / s", "peak memory"],
        "llrrrrrr",
        rows,
    )
