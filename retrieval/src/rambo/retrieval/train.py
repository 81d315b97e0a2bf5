"""Training of retrieval embeddings with rank losses (paper Sec. 5.1, App. A): a thin Hydra app that
wires the configuration (`configs/`) to objects; the loop's steps are in
[`rambo.retrieval.engine`][rambo.retrieval.engine], the run's life (resume, checkpoints, curve, W&B,
metrics) in [`rambo.harness.run`][rambo.harness.run].

```bash
python -m rambo.retrieval.train                                   # mini profile, synthetic set
python -m rambo.retrieval.train experiment=sop_log profile=paper  # a paper row
python -m rambo.retrieval.train experiment=synthetic_contrastive seed=1
python -m rambo.retrieval.train data=sop data.root=DIR            # your folder, mini scale (.own_data)
python -m rambo.retrieval.train ... resume=true                   # continue a killed run
python -m rambo.retrieval.train ... precision=bfloat16 channels_last=true  # bf16 autocast, NHWC (rambo.harness.precision)
torchrun --nproc_per_node=4 -m rambo.retrieval.train ...          # DDP, ranks over the global batch
```

Every `eval_every` epochs (and at the end) the model is evaluated on the test split and on a
class-disjoint validation split of the training classes (both protocols:
[`rambo.retrieval.engine`][rambo.retrieval.engine]). Outputs (paths from the config): `metrics_path`,
`curve_path`, `checkpoint_path` (every epoch) and `best_validation.pt` beside it.

Images are read from disk and augmented one at a time
([`rambo.retrieval.transforms`][rambo.retrieval.transforms]), or, with `data.in_memory` (the mini and
tiny profiles' small same-size synthetic images), decoded once into memory and augmented a batch at a
time ([`rambo.retrieval.in_memory_dataset`][rambo.retrieval.in_memory_dataset],
[`rambo.retrieval.batch_transforms`][rambo.retrieval.batch_transforms]).
"""

from __future__ import annotations

import functools
import logging
import shlex
import time
from pathlib import Path

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from torchvision.transforms import PILToTensor

from rambo.harness.atomic import DiskFullError
from rambo.harness.checkpoint import DamagedCheckpoint, save_checkpoint
from rambo.harness.config_check import (
    InputError,
    named_on_command_line,
    override_key,
    stop,
    stop_on_problems,
    task_overrides,
)
from rambo.harness.distributed import ShardedBatchSampler, barrier, detect_setup, init_process_group, wrap_model
from rambo.harness.engine_options import EngineOptions
from rambo.harness.precision import to_channels_last
from rambo.harness.row_name import check_row_name
from rambo.harness.run import TrainingRun, placeless
from rambo.harness.runtime import resolve_device, seed_everything, set_threads
from rambo.harness.scheduler_signals import scheduler_signals
from rambo.harness.wandb_run import wandb_keys
from rambo.harness.workers import worker_init

from .batch_transforms import BatchTrainAugmentation
from .config_check import problems, readable_split_problems
from .datasets import generate_synthetic, load_dataset
from .datasets.image_retrieval_dataset import UnreadableImageError
from .engine import collapse_warning, evaluate, select_protocols, train_one_epoch
from .in_memory_dataset import InMemoryImageDataset
from .model import build_model
from .own_data import use_own_data
from .sample_seeds import SeededBatches, SeededSamples
from .samplers import build_batch_sampler
from .transforms import eval_transform_of, train_transform
from .validation_split import split_validation_classes

CONFIG_DIR = Path(__file__).parent / "configs"
APP = "rambo.retrieval.train"  # the command, as messages name it
log = logging.getLogger(__name__)


def build_splits(cfg: DictConfig, skipped: dict | None = None) -> dict:
    """The run's datasets with their transforms.

    With `data.in_memory` every split is an
    [`InMemoryImageDataset`][rambo.retrieval.in_memory_dataset.InMemoryImageDataset]: the training
    images as `uint8` tensors (augmented by [`train_collate`][rambo.retrieval.train.train_collate]),
    the others already through the evaluation transform.

    Args:
        cfg: the run's config.
        skipped: with `data.skip_unreadable`, every image is read once first and those that cannot
            be read are left out, logged, and counted per split here.

    Returns:
        `{"train", "validation", "test"}` (In-shop: `"query"` and `"gallery"` in place of `"test"`)
        -> dataset; `"validation"` is None with `validation_fraction=0`.

    Raises:
        InputError: `data.in_memory` with a training augmentation other than `random_resized_crop`;
            splits that `data.skip_unreadable` left too small for the run (the check before the run,
            again on the readable images).
    """
    data = cfg.data
    if data.get("generate") is not None:
        generate_synthetic(data.root, **data.generate, show_progress=False)
    in_memory = data.get("in_memory", False)
    test_transform = eval_transform_of(cfg)
    kinds = cfg.augmentation
    if in_memory and kinds.train != "random_resized_crop":
        raise InputError(
            f"data.in_memory augments a batch at a time with random_resized_crop only; got augmentation.train={kinds.train!r}"
        )
    augmentation = PILToTensor() if in_memory else train_transform(cfg.image_size, kinds.min_scale, kinds.train)
    full_train = skip_unreadable(
        cfg, "train", load_dataset(data.format, data.root, "train", transform=augmentation), skipped
    )
    train, validation = split_validation_classes(full_train, cfg.validation_fraction, cfg.seed, test_transform)
    splits = {"train": train, "validation": validation}
    for name in ("query", "gallery") if data.format == "inshop" else ("test",):
        splits[name] = skip_unreadable(
            cfg, name, load_dataset(data.format, data.root, name, transform=test_transform), skipped
        )
    evaluation = {name: split for name, split in splits.items() if name not in ("train", "validation")}
    if skipped and (left := readable_split_problems(cfg, full_train, evaluation, skipped)):
        raise InputError(str(left[0]))
    if in_memory:
        splits = {name: None if split is None else InMemoryImageDataset(split) for name, split in splits.items()}
    return splits


def skip_unreadable(cfg: DictConfig, split: str, dataset, skipped: dict | None):
    """`dataset` less its unreadable images when `data.skip_unreadable` is set (each logged, their
    number put in `skipped[split]`); else `dataset` as it is."""
    if not cfg.data.get("skip_unreadable", False):
        return dataset
    bad = dataset.unreadable()
    for index, path, reason in bad:
        log.warning("data.skip_unreadable: %s split, image %d skipped: %s (%s)", split, index, path, reason)
    if skipped is not None:
        skipped[split] = len(bad)
    return dataset.without(index for index, _, _ in bad) if bad else dataset


def train_collate(cfg: DictConfig):
    """The training loader's `collate_fn`: the batched augmentation with `data.in_memory`, else
    `None` (torch's default; the dataset augments each image)."""
    return (
        BatchTrainAugmentation(cfg.image_size, cfg.augmentation.min_scale).collate
        if cfg.data.get("in_memory", False)
        else None
    )


def training_loader(cfg: DictConfig, train_set, setup) -> tuple[torch.utils.data.Sampler, torch.utils.data.DataLoader]:
    """The training DataLoader and its batch sampler, whose `set_epoch` each epoch calls.

    Args:
        cfg: the run's config.
        train_set: the training split.
        setup: the process's place in the run ([`detect_setup`][rambo.harness.distributed.detect_setup]):
            under DDP the sampler gives this process its share of each global batch.

    Returns:
        `(sampler, loader)`: the loader yields each sample with its own seed
        ([`rambo.retrieval.sample_seeds`][rambo.retrieval.sample_seeds]).

    Raises:
        InputError: a batch shape the training classes cannot fill (the user's to change).
    """
    try:
        global_sampler = SeededBatches(build_batch_sampler(cfg, train_set), cfg.seed)  # (index, seed) keys
    except ValueError as error:  # the batch's shape against the training classes: the user's to change
        raise InputError(f"{error}") from None
    sampler = (
        ShardedBatchSampler(global_sampler, setup.rank, setup.world_size) if setup.is_distributed else global_sampler
    )
    loader = torch.utils.data.DataLoader(
        SeededSamples(train_set, carry_seed=cfg.data.get("in_memory", False)),  # .sample_seeds
        batch_sampler=sampler,
        num_workers=cfg.num_workers,
        collate_fn=train_collate(cfg),
        worker_init_fn=worker_init,
    )
    return sampler, loader


def build_optimizer(cfg: DictConfig, model) -> torch.optim.Optimizer:
    """Adam, weight decay 4e-4, higher lr for the embedding layer (App. A)."""
    groups = model.parameter_groups(cfg.optimizer.lr, cfg.optimizer.embedding_lr_multiplier)
    return torch.optim.Adam(groups, weight_decay=cfg.optimizer.weight_decay)


def train(cfg: DictConfig) -> dict:
    """Run (or resume) one training run.

    Args:
        cfg: the run's config, checked ([`problems`][rambo.retrieval.config_check.problems]).

    Returns:
        The metrics written to `cfg.metrics_path`.
    """
    setup = detect_setup()
    init_process_group(setup)
    device = resolve_device(cfg.device, setup.local_rank)
    options = EngineOptions.from_config(
        cfg, device, setup.is_main
    )  # the engine's device, autocast, channels-last, progress bar
    set_threads(cfg.threads, device=device)
    seed_everything(cfg.seed)
    skipped: dict[str, int] = {}  # data.skip_unreadable: unreadable images left out, per split
    splits = build_splits(cfg, skipped) if setup.is_main else None  # rank 0 generates the synthetic set, if any
    barrier()
    splits = splits or build_splits(cfg)
    sampler, loader = training_loader(cfg, splits["train"], setup)
    model = build_model(cfg.model).to(device)
    if cfg.channels_last:
        to_channels_last(model)
    optimizer = build_optimizer(cfg, model)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, list(cfg.scheduler.milestones), cfg.scheduler.gamma)
    loss_fn = instantiate(cfg.loss.module).to(device)
    trained = wrap_model(model, device)
    stateful = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "loss": loss_fn}
    run = TrainingRun(
        cfg,
        stateful,
        extra={"history": []},
        is_main=setup.is_main,
        summary_keys=("loss", "lr", "test/R@1", "validation/R@1", "seconds"),
        untracked_keys=("seconds",),
        device=device,
        wandb_keys=wandb_keys(cfg, "retrieval"),
        app=APP,
    )
    history = run.extra["history"]
    evaluation = functools.partial(
        evaluate, model, splits, cfg.data.ks, cfg.eval_batch_size, cfg.num_workers, options=options
    )
    for epoch in run.epochs(cfg.epochs):
        started = time.perf_counter()
        sampler.set_epoch(epoch)
        try:
            loss = train_one_epoch(
                trained,
                loader,
                loss_fn,
                optimizer,
                cfg.two_pass_chunk_size,
                options=options.for_epoch(epoch, cfg.epochs),
            )
        except FloatingPointError as error:
            raise run.diverged(error) from None
        scheduler.step()
        row = {
            "epoch": epoch,
            "loss": loss,
            "lr": scheduler.get_last_lr()[0],
            "seconds": round(time.perf_counter() - started, 3),
        }
        if setup.is_main and (epoch % cfg.eval_every == 0 or epoch == cfg.epochs):
            row.update(evaluate_epoch(history, evaluation, epoch))
            save_best_validation(cfg, run, model, history, epoch)
        run.end_epoch(row, cfg.epochs)
    if cfg.epochs == 0 and setup.is_main:  # the untrained model: the baseline a user compares against
        log.info("epochs=0: evaluating the untrained model (no training, no checkpoint)")
        history.append({"epoch": 0, **evaluation()})
    metrics, headline = run_metrics(cfg, run, history, skipped)
    return run.finish(metrics, headline)


def evaluate_epoch(history: list[dict], evaluation, epoch: int) -> dict:
    """Evaluate the model after epoch `epoch`, append the result to `history`, and warn when the
    embedding has collapsed ([`collapse_warning`][rambo.retrieval.engine.collapse_warning]).

    Args:
        history: the run's evaluations so far, one dict per evaluation; appended to.
        evaluation: called with no arguments, the metrics of the test and validation splits.
        epoch: the epoch just trained.

    Returns:
        The curve row's entries: `{"test/R@1": ..., "validation/R@1": ..., ...}`.
    """
    history.append({"epoch": epoch, **evaluation()})
    if warning := collapse_warning(history[-1]):
        log.warning("epoch %d: %s", epoch, warning)
    return {f"{split}/{k}": v for split in ("test", "validation") for k, v in history[-1].get(split, {}).items()}


def save_best_validation(cfg: DictConfig, run: TrainingRun, model, history: list[dict], epoch: int) -> None:
    """Save the model as `best_validation.pt` beside `cfg.checkpoint_path` when the evaluation of
    epoch `epoch` (the last of `history`) has the best validation R@1 so far: the model the fair
    protocol reports."""
    if history[-1].get("validation") and select_protocols(history)["fair_protocol"]["epoch"] == epoch:
        best = Path(cfg.checkpoint_path).with_name("best_validation.pt")
        save_checkpoint({"state": {"model": model.state_dict()}, "config": placeless(run.config), "epoch": epoch}, best)


def run_metrics(cfg: DictConfig, run: TrainingRun, history: list[dict], skipped: dict[str, int]) -> tuple[dict, dict]:
    """The finished run's metrics and its headline numbers.

    Args:
        cfg: the run's config.
        run: the run, after its last epoch.
        history: every evaluation of the run.
        skipped: the unreadable images left out, per split (written only with `data.skip_unreadable`).

    Returns:
        `(metrics, headline)`: the metrics file's content (both protocols of
        [`select_protocols`][rambo.retrieval.engine.select_protocols]) and the paper protocol's R@1
        and MAP@R with the fair protocol's R@1.
    """
    protocols = select_protocols(history)
    metrics = {
        "experiment": cfg.experiment_name,
        "seed": cfg.seed,
        "epochs_trained": run.epoch,
        "complete": run.epoch == cfg.epochs,
        **protocols,
    }
    if cfg.data.get("skip_unreadable", False):  # only then: the metrics of every other run are unchanged
        metrics["unreadable_images_skipped"] = skipped
    paper, fair = protocols.get("paper_protocol", {}), protocols.get("fair_protocol", {})
    headline = {"R@1": paper.get("R@1"), "MAP@R": paper.get("MAP@R"), "fair_R@1": fair.get("R@1")}
    return metrics, headline


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:  # noqa: D103 (the Hydra entry point; see the module docstring)
    with scheduler_signals():  # under SLURM: a preempted or timed-out job leaves for its requeue, never failed
        run_main(cfg)


def run_main(cfg: DictConfig) -> None:
    """The Hydra entry point's work: the config checked, the data named, the run trained."""
    check_row_name(Path(__file__).parent / "configs", cfg.experiment_name)  # one name per row (rambo.harness.row_name)
    overrides = task_overrides()
    stop_on_problems(problems(cfg))  # a single run was checked before Hydra made its folder; a multirun's job here
    try:
        # data=sop data.root=DIR under mini trains on DIR; without data.root the synthetic set stands in (.own_data)
        try:
            source = use_own_data(cfg.data, named=named_on_command_line("data.root", overrides))
        except ValueError as error:  # a folder in another layout (checked before the run for a named one)
            raise InputError(str(error)) from None
        if source:
            log.info(source)
        train(cfg)
    except UnreadableImageError as error:
        stop([f"{error.line()}; {check_hint(cfg, overrides)}, or skip such images with data.skip_unreadable=true"])
    except InputError as error:  # a folder another run holds, a checkpoint this run may not continue, ...
        stop([error.line()])
    except (DamagedCheckpoint, DiskFullError) as error:  # one line: the file and what to do
        stop([str(error)])


def check_hint(cfg: DictConfig, overrides: list[str]) -> str:
    """The command that reads every image of this run's dataset once and lists the unreadable ones."""
    name = cfg.data.name if cfg.data.format != "synthetic" or cfg.data.name == "synthetic" else cfg.data.format
    given = " ".join(
        shlex.quote(item)
        for item in overrides
        if override_key(item) in CHECK_KEYS or override_key(item).startswith("data.")
    )
    command = f"python -m rambo.retrieval.prepare --check --data-dir {shlex.quote(str(cfg.data_dir))} --data {name}"
    return f"list every unreadable image with `{command}{' -- ' + given if given else ''}`"


CHECK_KEYS = ("profile", "experiment")  # with data.*: the overrides that decide a run's dataset


if __name__ == "__main__":
    main()
