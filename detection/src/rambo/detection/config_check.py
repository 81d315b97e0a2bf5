"""The detection run's config checked before anything is created
([`rambo.harness.config_check`][rambo.harness.config_check]).

[`problems`][rambo.detection.config_check.problems] is what `configs/train.yaml` names under `hydra.callbacks`: every
numeric option and its range, the choices of the string options, the paths that must exist: the VOC
folders (a `data.root` given on the command line is read, never generated into) and
`init_checkpoint`, and a training batch no larger than the training images.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from omegaconf import DictConfig

from rambo.harness.config_check import (
    Bound,
    Problem,
    named_on_command_line,
    option_problems,
    select,
    task_overrides,
)

from .synthetic import DIFFICULT_SIDE
from .voc import read_image_set

BOUNDS = (
    Bound("schedule.epochs", 0, integer=True, meaning="training epochs; 0 evaluates the starting weights"),
    Bound("schedule.batch_size", 1, integer=True, meaning="images per training batch"),
    Bound("schedule.lr", 0, low_open=True, meaning="learning rate"),
    Bound("schedule.steps", 1, integer=True, meaning="epochs after which the learning rate drops"),
    Bound("schedule.momentum", 0, 1, high_open=True),
    Bound("schedule.weight_decay", 0),
    Bound("schedule.warmup_iterations", 0, integer=True),
    Bound("schedule.warmup_ratio", 0, 1, low_open=True),
    Bound("schedule.max_iterations_per_epoch", 1, integer=True, optional=True),
    Bound("schedule.grad_clip_max_norm", 0, low_open=True, optional=True),
    Bound("eval.batch_size", 1, integer=True, meaning="images per forward pass of evaluation"),
    Bound("data.max_train_images", 1, integer=True, optional=True),
    Bound("data.max_test_images", 1, integer=True, optional=True),
    Bound("data.generate.trainval", 1, integer=True),
    Bound("data.generate.test", 1, integer=True),
    Bound("data.generate.size", 4 * DIFFICULT_SIDE, integer=True, meaning="the generated images' side in pixels"),
)
CHOICES = {
    "eval.method": ("11point", "area"),
    "data.batch_grouping": ("aspect_ratio", "none"),
}


def voc_problem(root: Path, image_set: str) -> str | None:
    """Why `root` is not a VOC year folder with the image set `image_set`, or None."""
    expected = f"{root}/ImageSets/Main/{image_set}.txt, {root}/Annotations/ and {root}/JPEGImages/"
    if not root.is_dir():
        return f"{root}: no such folder; expected a VOC folder ({expected})"
    if not (root / "ImageSets" / "Main" / f"{image_set}.txt").is_file():
        return f"{root}: no ImageSets/Main/{image_set}.txt; expected a VOC folder ({expected})"
    return None


def data_problems(cfg: DictConfig, overrides: list[str]) -> list[Problem]:
    """The data folders. A generated set (`data.generate`) is made under the profile's folder
    when absent; a `data.root` named on the command line is read, never generated into."""
    data = cfg.data
    named = named_on_command_line("data.root", overrides)
    if data.get("generate") and not named:
        return []
    folders = [(Path(root), data.train_set) for root in data.train_roots] + [(Path(data.test_root), data.test_set)]
    for root, image_set in folders:
        problem = voc_problem(root, image_set)
        if problem is None:
            continue
        if data.get("generate"):
            spec = data.generate
            command = (
                f"python -m rambo.detection.synthetic {shlex.quote(str(data.root))} --seed {spec.seed} "
                f"--trainval {spec.trainval} --test {spec.test} --size {spec.size}"
            )
            step = f"a folder named on the command line is read, never written: generate the set with `{command}`, or leave data.root out"
        else:
            step = f"download it with `python -m rambo.detection.download {data.root}` (it prints the manual steps without a network)"
        return [Problem("data.root", f"data.root={data.root}: {problem}; {step}")]
    return []


def training_images(cfg: DictConfig, overrides: list[str]) -> int | None:
    """How many images a training epoch draws from: the image set of every training root (the
    generated set's `data.generate.trainval` while it is not on disk yet), at most
    `data.max_train_images`; None when the folders are not readable
    ([`data_problems`][rambo.detection.config_check.data_problems] says why)."""
    data = cfg.data
    try:
        count = sum(len(read_image_set(root, data.train_set)) for root in data.train_roots)
    except (ValueError, OSError):
        if not (data.get("generate") and not named_on_command_line("data.root", overrides)):
            return None
        count = int(data.generate.trainval)
    cap = data.get("max_train_images")
    return count if cap is None else min(count, int(cap))


def batch_problems(cfg: DictConfig, overrides: list[str]) -> list[Problem]:
    """`schedule.batch_size` against the training images: a batch larger than the training set
    would be filled by repeating its images
    ([`group_sampler.GroupedBatchSampler`][rambo.detection.group_sampler.GroupedBatchSampler] pads a group to a full
    batch), every step a pass over the set many times over."""
    batch = select(cfg, "schedule.batch_size", None)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        return []  # the bound says why
    count = training_images(cfg, overrides)
    if count is None or batch <= count:
        return []
    capped = cfg.data.get("max_train_images")
    source = f"data.train_set={cfg.data.train_set}" + (f", data.max_train_images={capped}" if capped else "")
    return [
        Problem(
            "schedule.batch_size",
            f"schedule.batch_size={batch}: more than the {count} training images ({source}), so every batch "
            f"would repeat images to fill itself; the largest that fits is schedule.batch_size={count}",
        )
    ]


def checkpoint_problems(cfg: DictConfig) -> list[Problem]:
    """`init_checkpoint`, when set, must be a file."""
    path = cfg.get("init_checkpoint")
    if path and not Path(path).is_file():
        return [
            Problem(
                "init_checkpoint",
                f"init_checkpoint={path}: no such file; train the warm start first (the pipeline's "
                "detection_warm_start stage), or set init_checkpoint=null",
            )
        ]
    return []


def problems(cfg: DictConfig) -> list[Problem]:
    """Every problem of the composed run config `cfg` (with or without its `hydra` node)."""
    found = option_problems(cfg, BOUNDS, CHOICES)
    overrides = task_overrides(cfg)
    folders = data_problems(cfg, overrides)
    return found + folders + (batch_problems(cfg, overrides) if not folders else []) + checkpoint_problems(cfg)
