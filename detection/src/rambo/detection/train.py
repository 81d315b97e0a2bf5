"""Train and evaluate Faster R-CNN with the `ce` or `rambo` classifier loss (paper 5.2, Tables 5
and 8): a thin Hydra app that wires the configuration (`configs/`) to objects; the loop's steps
are in [`engine`][rambo.detection.engine], the run's life (resume, checkpoints, curve, W&B, metrics) in
[`rambo.harness.run`][rambo.harness.run].

    python -m rambo.detection.train experiment=mini_rambo seed=1
    python -m rambo.detection.train experiment=table5_r50_voc07_rambo      # a paper row (VOC, GPU)
    python -m rambo.detection.train ... resume=true                        # continue a killed run
    python -m rambo.detection.train ... precision=bfloat16 channels_last=true  # bf16 autocast, NHWC model (rambo.harness.precision)
    torchrun --nproc_per_node=8 -m rambo.detection.train ...               # DDP: the batch split over processes

Writes `checkpoint_path` after every epoch, `curve_path` (per-epoch mean losses) and, after
evaluation on the test split (VOC 2007 test, or the synthetic test split), `metrics_path`.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import hydra
import numpy as np
import torch
from omegaconf import DictConfig

from rambo.harness.atomic import DiskFullError
from rambo.harness.checkpoint import DamagedCheckpoint
from rambo.harness.config_check import InputError, stop, stop_on_problems, task_overrides
from rambo.harness.distributed import (
    ShardedBatchSampler,
    barrier,
    detect_setup,
    init_process_group,
    world_size,
    wrap_model,
)
from rambo.harness.engine_options import EngineOptions
from rambo.harness.images import UnreadableImage
from rambo.harness.precision import to_channels_last
from rambo.harness.row_name import check_row_name
from rambo.harness.run import TrainingRun
from rambo.harness.runtime import resolve_device, seed_everything, set_threads
from rambo.harness.scheduler_signals import scheduler_signals
from rambo.harness.wandb_run import wandb_keys
from rambo.harness.workers import worker_init

from .config_check import problems
from .engine import evaluate, train_one_epoch
from .group_sampler import BATCH_GROUPINGS, GroupedBatchSampler
from .model import build_detector
from .prepare import check_hint
from .synthetic import SYNTHETIC_CLASSES, generate
from .voc import VOC_CLASSES, BadAnnotation, VOCDetectionDataset, collate_detection
from .warm_start import load_initial_weights

CLASS_LISTS = {"voc": VOC_CLASSES, "synthetic": SYNTHETIC_CLASSES}
APP = "rambo.detection.train"  # the command, as messages name it


def class_names(data: DictConfig) -> tuple[str, ...]:
    if data.classes not in CLASS_LISTS:
        raise InputError(f"data.classes must be one of {sorted(CLASS_LISTS)}, got {data.classes!r}")
    return CLASS_LISTS[data.classes]


def prepare_data(data: DictConfig) -> None:
    """Generate the synthetic dataset when it is configured and absent; VOC must be downloaded first."""
    if data.get("generate") and not (Path(data.test_root) / "ImageSets" / "Main" / f"{data.test_set}.txt").is_file():
        spec = data.generate
        generate(data.root, seed=spec.seed, num_trainval=spec.trainval, num_test=spec.test, image_size=spec.size)
    for root in list(data.train_roots) + [data.test_root]:
        if not Path(root).is_dir():
            raise FileNotFoundError(
                f"dataset folder {root} not found; for Pascal VOC run\n"
                f"  python -m rambo.detection.download {data.root}\n(it prints the manual steps if the network is missing)"
            )


def learning_rate_factor(iteration: int, iterations_per_epoch: int, schedule: DictConfig) -> float:
    """Linear warm-up over `warmup_iterations` from `warmup_ratio`, then x0.1 at each epoch in `steps`.

    Paper: 12 epochs, "reduced by a factor of 10 after 9 epochs" -> `steps: [9]`.
    """
    epoch = iteration // iterations_per_epoch
    factor = 0.1 ** sum(epoch >= step for step in schedule.steps)
    if iteration < schedule.warmup_iterations:
        progress = iteration / schedule.warmup_iterations
        factor *= schedule.warmup_ratio + (1.0 - schedule.warmup_ratio) * progress
    return factor


def epoch_batches(
    cfg: DictConfig, train_set, epoch: int, order: torch.Generator | None = None
) -> torch.utils.data.Sampler:
    """The global batches of `epoch` (1-based), a function of (seed, epoch) only, by `data.batch_grouping`:

    * `aspect_ratio`: mmdetection's GroupSampler
      ([`group_sampler.GroupedBatchSampler`][rambo.detection.group_sampler.GroupedBatchSampler]): each batch of one
      aspect-ratio group, groups padded to whole batches by repeating their images.
    * `none`: plain shuffled batches (`RandomSampler`), the last one short.

    `order`: the generator of `none`'s shuffle (the loader's own, as before the key existed)."""
    seed = cfg.seed * 1000 + epoch - 1
    grouping = cfg.data.batch_grouping
    if grouping == "aspect_ratio":
        if not hasattr(train_set, "aspect_ratio_groups"):
            raise ValueError(
                "data.batch_grouping=aspect_ratio needs a dataset with aspect_ratio_groups() (the image sizes)"
            )
        return GroupedBatchSampler(train_set.aspect_ratio_groups(), cfg.schedule.batch_size, seed)
    if grouping == "none":
        order = order if order is not None else torch.Generator().manual_seed(seed)
        return torch.utils.data.BatchSampler(
            torch.utils.data.RandomSampler(train_set, generator=order), cfg.schedule.batch_size, False
        )
    raise ValueError(f"data.batch_grouping must be one of {BATCH_GROUPINGS}, got {grouping!r}")


class FirstBatches(torch.utils.data.Sampler):
    """The first `count` batches of `batch_sampler`, drawn as the whole epoch's are (lazily, so
    the batches and the generators' draws are those of the full epoch, cut short)."""

    def __init__(self, batch_sampler, count: int):
        self.batch_sampler, self.count = batch_sampler, count

    def __len__(self) -> int:
        return min(len(self.batch_sampler), self.count)

    def __iter__(self):
        return itertools.islice(self.batch_sampler, self.count)


def epoch_loader(cfg: DictConfig, train_set, epoch: int, rank: int, processes: int) -> torch.utils.data.DataLoader:
    """The batches of `epoch` (1-based, [`epoch_batches`][rambo.detection.train.epoch_batches]): a function of (seed,
    epoch) only, so a resumed epoch sees the same batches. With several processes each takes its share (a
    contiguous slice) of every global batch, so with `aspect_ratio` grouping every process's
    batch is of one group. The loader's length is the epoch's iterations: its first
    `schedule.max_iterations_per_epoch` batches when that is set
    ([`FirstBatches`][rambo.detection.train.FirstBatches])."""
    order = torch.Generator().manual_seed(cfg.seed * 1000 + epoch - 1)
    batches = epoch_batches(cfg, train_set, epoch, order)
    if processes > 1:
        batches = ShardedBatchSampler(batches, rank, processes, even=False)
    if cfg.schedule.get("max_iterations_per_epoch"):
        batches = FirstBatches(batches, cfg.schedule.max_iterations_per_epoch)
    return torch.utils.data.DataLoader(
        train_set,
        batch_sampler=batches,
        generator=order,
        collate_fn=collate_detection,
        num_workers=cfg.num_workers,
        worker_init_fn=worker_init,
    )


def train(cfg: DictConfig) -> dict:
    """Train per `cfg`, evaluate on the test split, write the metrics JSON; returns the metrics."""
    setup = detect_setup()
    init_process_group(setup)
    device = resolve_device(cfg.device, setup.local_rank)
    set_threads(cfg.threads, device=device)
    seed_everything(cfg.seed)
    options = EngineOptions.from_config(cfg, device, setup.is_main)  # the engine's device, autocast, progress bar
    classes = class_names(cfg.data)
    if setup.is_main:
        prepare_data(cfg.data)
    barrier()  # rank 0 generated the synthetic set, if any
    train_set = VOCDetectionDataset(
        cfg.data.train_roots, cfg.data.train_set, classes, train=True, max_images=cfg.data.max_train_images
    )
    test_set = VOCDetectionDataset(
        [cfg.data.test_root], cfg.data.test_set, classes, train=False, max_images=cfg.data.max_test_images
    )
    model = build_detector(cfg.model, cfg.loss, len(classes)).to(device)
    if cfg.channels_last:  # the model only: its transform batches the 3-D images inside the forward pass
        to_channels_last(model)
    started_from = {}
    if cfg.get("init_checkpoint"):  # before TrainingRun: a resumed checkpoint then overrides these weights
        try:
            started_from["init_checkpoint_md5"] = load_initial_weights(model, cfg.init_checkpoint)
        except (ValueError, FileNotFoundError) as error:  # not a detector of this shape, or damaged: the user's file
            raise InputError(f"init_checkpoint={cfg.init_checkpoint}: {error}") from None
    schedule = cfg.schedule
    optimizer = torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad],
        lr=schedule.lr,
        momentum=schedule.momentum,
        weight_decay=schedule.weight_decay,
    )
    # batches per epoch: ceil(N / batch), or with aspect-ratio grouping the sum over groups (padded ones)
    iterations = min(len(epoch_batches(cfg, train_set, 1)), schedule.max_iterations_per_epoch or float("inf"))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda iteration: learning_rate_factor(iteration, iterations, schedule)
    )
    trained = wrap_model(model, device, broadcast_buffers=False)
    run = TrainingRun(
        cfg,
        {"model": model, "optimizer": optimizer, "scheduler": scheduler},
        is_main=setup.is_main,
        identity_extra=started_from,
        device=device,
        wandb_keys=wandb_keys(cfg, "detection"),
        app=APP,
    )
    train_seconds, train_images = 0.0, 0  # this invocation's, for the log's throughput (not checkpointed: a machine's)
    for epoch in run.epochs(schedule.epochs):
        flips = torch.Generator().manual_seed(cfg.seed * 1000 + epoch - 1 + 500 + 7919 * setup.rank)
        started = time.perf_counter()
        try:
            means, images = train_one_epoch(
                trained,
                epoch_loader(cfg, train_set, epoch, setup.rank, setup.world_size),
                optimizer,
                scheduler,
                flips,
                schedule.get("grad_clip_max_norm"),
                options=options.for_epoch(epoch, schedule.epochs),
            )
        except FloatingPointError as error:
            raise run.diverged(error) from None
        train_seconds += time.perf_counter() - started
        train_images += images * world_size()
        run.end_epoch({"epoch": epoch, "loss": sum(means.values()), **means}, schedule.epochs)
    if not setup.is_main:
        return {}
    started = time.perf_counter()
    results = evaluate(model, test_set, cfg.eval.batch_size, len(classes), options=options)
    eval_seconds = time.perf_counter() - started
    speed = {
        "train images/s": train_images / train_seconds if train_seconds > 0 else None,
        "eval images/s": len(test_set) / eval_seconds if eval_seconds > 0 else None,
    }  # the log's, not the metrics'
    headline = {"AP50": results[cfg.eval.method]["map"], "AP50_area": results["area"]["map"]}
    return run.finish(detection_metrics(cfg, classes, results, run), headline, speed)


def detection_metrics(cfg: DictConfig, classes, results: dict, run: TrainingRun) -> dict:
    """The metrics JSON: AP50 by the configured AP method (what the tables read), both methods, per
    class. Nothing machine-dependent (throughput goes to the log), so a rerun leaves it unchanged."""
    primary = results[cfg.eval.method]
    return {
        "experiment": cfg.experiment_name,
        "seed": cfg.seed,
        "loss": cfg.loss.name,
        "backbone": cfg.model.backbone,
        "AP50": primary["map"],
        "map50": primary["map"],  # the paper's metric (fraction), what the pipeline's tables read
        "ap_method": cfg.eval.method,
        "map50_area": results["area"]["map"],
        "map50_11point": results["11point"]["map"],
        "ap50_per_class": {name: (None if np.isnan(ap) else ap) for name, ap in zip(classes, primary["ap"])},
        "epochs": cfg.schedule.epochs,
        "history": run.curve,
    }


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:  # noqa: D103 (the Hydra entry point; see the module docstring)
    with scheduler_signals():  # under SLURM: a preempted or timed-out job leaves for its requeue, never failed
        check_row_name(Path(__file__).parent / "configs", cfg.experiment_name)  # one name per row
        stop_on_problems(problems(cfg))  # a single run was checked before Hydra made its folder; a multirun's job here
        try:
            train(cfg)
        except (BadAnnotation, UnreadableImage) as error:  # the file and what is wrong, and how to list them all
            stop([f"{error.line()}; {check_hint(cfg.data, cfg.data_dir, task_overrides())}"])
        except InputError as error:  # a folder another run holds, a checkpoint this run may not continue, ...
            stop([error.line()])
        except (DamagedCheckpoint, DiskFullError) as error:  # one line: the file and what to do
            stop([str(error)])


if __name__ == "__main__":
    main()
