"""The retrieval run's config checked before anything is created (:mod:`rambo.harness.config_check`).

:func:`problems` is what ``configs/train.yaml`` names under ``hydra.callbacks``: every numeric
option and its range, the batch's shape (a multiple of the samples per class), the choices of the
string options, and the data folder: a ``data.root`` given on the command line is the data, read
and never written (:func:`data_problems`).
"""

from __future__ import annotations

import shlex
from dataclasses import asdict
from pathlib import Path

from omegaconf import DictConfig

from rambo.harness.config_check import (
    Bound,
    Problem,
    bound_problems,
    choice_problems,
    named_on_command_line,
    select,
    task_overrides,
    without_derived,
)

from .datasets.synthetic import SyntheticParameters, _matches
from .own_data import is_stand_in, layout_problem

BOUNDS = (
    Bound("epochs", 0, integer=True, meaning="training epochs; 0 evaluates the untrained model"),
    Bound("batch_size", 2, integer=True, meaning="images per training batch; a rank needs two"),
    Bound("eval_batch_size", 1, integer=True, meaning="images per forward pass of evaluation"),
    Bound("image_size", 1, integer=True, meaning="pixels per side of a training image"),
    Bound("steps_per_epoch", 1, integer=True, optional=True, meaning="batches per epoch; null: one pass"),
    Bound("eval_every", 1, integer=True, meaning="evaluate every this many epochs"),
    Bound("validation_fraction", 0, 1, high_open=True, meaning="share of the training classes held out"),
    Bound("num_workers", 0, integer=True, meaning="DataLoader worker processes; 0 loads in the training process"),
    Bound("threads", 0, integer=True, meaning="torch CPU threads; 0 keeps torch's default"),
    Bound("seed", 0, integer=True),
    Bound("max_epochs_this_run", 1, integer=True, optional=True, meaning="epochs of this invocation"),
    Bound("two_pass_chunk_size", 1, integer=True, optional=True),
    Bound("optimizer.lr", 0, low_open=True, meaning="learning rate"),
    Bound("optimizer.weight_decay", 0),
    Bound("optimizer.embedding_lr_multiplier", 0, low_open=True),
    Bound("scheduler.milestones", 1, integer=True, meaning="epochs after which the learning rate drops"),
    Bound("scheduler.gamma", 0, low_open=True, meaning="the learning rate's factor at a milestone"),
    Bound("augmentation.min_scale", 0, 1, low_open=True, meaning="smallest area fraction of a random crop"),
    Bound("data.ks", 1, integer=True, meaning="the K of Recall@K"),
    Bound("data.sampler.samples_per_class", 1, integer=True, meaning="images of each class in a batch"),
    Bound("data.sampler.batches_per_super_pair", 1, integer=True),
    Bound("loss.lam", 0, low_open=True, meaning="the blackbox interpolation strength lambda"),
    Bound("loss.margin", 0, meaning="the score margin alpha"),
    Bound("loss.tau", 0, integer=True, meaning="batches of score memory"),
)
CHOICES = {
    "resume": (False, True, "auto"),
    "precision": ("float32", "bfloat16"),
    "data.sampler.name": ("super_label", "m_per_class"),
    "data.skip_unreadable": (False, True),
}


def batch_problems(cfg: DictConfig) -> list[Problem]:
    """The batch's shape: ``batch_size`` a multiple of ``data.sampler.samples_per_class`` (and an
    even number of classes for the super-label sampler's ``halves``)."""
    batch, per_class = select(cfg, "batch_size", None), select(cfg, "data.sampler.samples_per_class", None)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (batch, per_class)):
        return []  # the ranges say what is wrong
    if batch % per_class:
        lower = max(per_class, batch - batch % per_class)
        return [
            Problem(
                "batch_size",
                f"batch_size={batch}: must be a multiple of data.sampler.samples_per_class={per_class} "
                f"(a batch is classes x {per_class} images), e.g. batch_size={lower} or {lower + per_class}",
            )
        ]
    sampler = cfg.data.sampler
    if sampler.get("name") == "super_label" and sampler.get("split") == "halves" and (batch // per_class) % 2:
        return [
            Problem(
                "batch_size",
                f"batch_size={batch}: data.sampler.split=halves takes half the batch's classes from each "
                f"super-label, so batch_size / samples_per_class ({batch // per_class}) must be even, "
                f"e.g. batch_size={batch + per_class}",
            )
        ]
    return []


def synthetic_command(root: Path, generate: DictConfig) -> str:
    """The generator's command line that writes this config's synthetic set at ``root``."""
    params = {k: v for k, v in asdict(SyntheticParameters(**generate)).items() if k != "generator_version"}
    flags = " ".join(f"--{key.replace('_', '-')} {value}" for key, value in params.items())
    return f"python -m rambo.retrieval.datasets.synthetic {shlex.quote(str(root))} {flags}"


def data_problems(cfg: DictConfig, overrides: list[str]) -> list[Problem]:
    """The data folder. A ``data.root`` named on the command line is read, never created or
    written: it must hold the layout of ``data.name`` (or, for ``data=synthetic``, this config's
    synthetic set). Where ``data.root`` is not named the profile's folder is used as it is: the
    synthetic set is generated there (and, under the mini and tiny profiles, stands in for the
    row's dataset), and a real dataset must have been prepared there."""
    data = cfg.data
    root = Path(data.root)
    named = named_on_command_line("data.root", overrides)
    generated = data.get("generate") is not None
    if is_stand_in(data):
        if not named:
            return []  # the profile's folder for the stand-in
        problem = layout_problem(data.name, root)
        if problem:
            problem += "; the synthetic set stands in only where no data.root is given"
    elif generated:
        if not named or _matches(root, SyntheticParameters(**data.generate)):
            return []
        state = "no such folder" if not root.exists() else "no synthetic set of this config's parameters there"
        problem = (
            f"data.root={root}: {state}; a folder named on the command line is read, never written: "
            f"generate the set with `{synthetic_command(root, data.generate)}`, or leave data.root out "
            "(the set is then generated under data_dir)"
        )
    else:
        problem = layout_problem(data.format, root)
        if problem and data.format in ("sop", "cub", "inshop"):
            problem += f"; download it with `python -m rambo.retrieval.datasets.download {data.format} {root}`"
    return [Problem("data.root", problem)] if problem else []


def sampler_problems(cfg: DictConfig, overrides: list[str]) -> list[Problem]:
    """Whether the training split (after the validation hold-out) has the classes a batch needs,
    read from the dataset's index (no image is opened); nothing when the data is still to be generated."""
    from copy import deepcopy

    from .datasets import load_dataset
    from .own_data import use_own_data
    from .train import build_batch_sampler
    from .validation_split import split_validation_classes

    data = deepcopy(cfg.data)
    use_own_data(data, named=named_on_command_line("data.root", overrides))
    if data.get("generate") is not None and not _matches(Path(data.root), SyntheticParameters(**data.generate)):
        return []
    full = load_dataset(data.format, data.root, "train")
    train, _ = split_validation_classes(full, cfg.validation_fraction, cfg.seed)
    try:
        build_batch_sampler(cfg, train)
    except ValueError as error:
        return [Problem("batch_size", str(error))]
    return []


def problems(cfg: DictConfig) -> list[Problem]:
    """Every problem of the composed run config ``cfg`` (with or without its ``hydra`` node)."""
    found = without_derived(cfg, bound_problems(cfg, BOUNDS) + choice_problems(cfg, CHOICES))
    found += batch_problems(cfg)
    overrides = task_overrides(cfg)
    found += data_problems(cfg, overrides)
    if not found:  # the options and the folder are sound: does the data fill a batch?
        found += sampler_problems(cfg, overrides)
    return found
