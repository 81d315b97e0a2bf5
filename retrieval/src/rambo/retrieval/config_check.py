"""The retrieval run's config checked before anything is created
([`rambo.harness.config_check`][rambo.harness.config_check]).

[`problems`][rambo.retrieval.config_check.problems] is what `configs/train.yaml` names under `hydra.callbacks`: every
numeric option and its range, the batch's shape (a multiple of the samples per class), the choices of the
string options, and the data folder: a `data.root` given on the command line is the data, read
and never written ([`data_problems`][rambo.retrieval.config_check.data_problems]), and its splits must hold the classes
the run needs ([`split_problems`][rambo.retrieval.config_check.split_problems]: the validation hold-out, a batch, the
test split), counted from its folders or index files.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from rambo.harness.config_check import (
    Bound,
    Problem,
    named_on_command_line,
    option_problems,
    select,
    task_overrides,
)

from .datasets.census import Census, census, counted
from .datasets.synthetic import SyntheticParameters, _matches
from .own_data import is_stand_in, layout_problem
from .samplers import build_batch_sampler

BOUNDS = (
    Bound("epochs", 0, integer=True, meaning="training epochs; 0 evaluates the untrained model"),
    Bound("batch_size", 2, integer=True, meaning="images per training batch; a rank needs two"),
    Bound("eval_batch_size", 1, integer=True, meaning="images per forward pass of evaluation"),
    Bound("image_size", 1, integer=True, meaning="pixels per side of a training image"),
    Bound("steps_per_epoch", 1, integer=True, optional=True, meaning="batches per epoch; null: one pass"),
    Bound("eval_every", 1, integer=True, meaning="evaluate every this many epochs"),
    Bound("validation_fraction", 0, 1, high_open=True, meaning="share of the training classes held out"),
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
    "data.sampler.name": ("super_label", "m_per_class"),
    "data.skip_unreadable": (False, True),
}


def batch_problems(cfg: DictConfig) -> list[Problem]:
    """The batch's shape: `batch_size` a multiple of `data.sampler.samples_per_class` (and an
    even number of classes for the super-label sampler's `halves`)."""
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
    """The generator's command line that writes this config's synthetic set at `root`."""
    params = {k: v for k, v in asdict(SyntheticParameters(**generate)).items() if k != "generator_version"}
    flags = " ".join(f"--{key.replace('_', '-')} {value}" for key, value in params.items())
    return f"python -m rambo.retrieval.datasets.synthetic {shlex.quote(str(root))} {flags}"


def data_problems(cfg: DictConfig, overrides: list[str]) -> list[Problem]:
    """The data folder. A `data.root` named on the command line is read, never created or
    written: it must hold the layout of `data.name` (or, for `data=synthetic`, this config's
    synthetic set). Where `data.root` is not named the profile's folder is used as it is: the
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


def held_out(fraction: float, classes: int) -> int:
    """How many of a super-label's `classes` the validation split holds out at `fraction`:
    `round(fraction x classes)`, as
    [`split_validation_classes`][rambo.retrieval.validation_split.split_validation_classes] rounds it."""
    return int(round(fraction * classes))


def fewest_training_classes(fraction: float, per_batch: int) -> int:
    """The fewest training classes (of one super-label) a run needs: at `fraction` > 0 a
    validation hold-out of at least 2 classes (Recall@K ranks a class among others), and
    `max(2, per_batch)` left to train on (a rank loss needs another class in the batch)."""
    classes = 2
    while (fraction and held_out(fraction, classes) < 2) or classes - held_out(fraction, classes) < max(2, per_batch):
        classes += 1
    return classes


def overrides_that_fit(cfg: DictConfig, classes: int) -> str | None:
    """The overrides with which `classes` training classes (of one super-label) fill this run
    ([`fewest_training_classes`][rambo.retrieval.config_check.fewest_training_classes]), or None when no override can
    (fewer than 2)."""
    if classes < 2:
        return None
    fraction, per_class = cfg.validation_fraction, cfg.data.sampler.samples_per_class
    held = held_out(fraction, classes)
    if fraction and held >= 2 and classes - held >= 2:  # the hold-out fits: the batch is too large
        return f"batch_size={(classes - held) * per_class}"
    overrides = ["validation_fraction=0"] if fraction else []
    if cfg.batch_size // per_class > classes:
        overrides.append(f"batch_size={classes * per_class}")
    return " ".join(overrides)


def shortage(cfg: DictConfig, found: Census, need: int) -> str:
    """The line that refuses training classes fewer than `need`
    ([`fewest_training_classes`][rambo.retrieval.config_check.fewest_training_classes]): how many there are, how many
    the run needs and why, and what helps."""
    fraction, per_class, batch = cfg.validation_fraction, cfg.data.sampler.samples_per_class, cfg.batch_size
    per_batch, classes, held = batch // per_class, found.train.num_classes, held_out(cfg.validation_fraction, need)
    reasons = []
    if fraction:
        reasons.append(
            f"validation_fraction={fraction} holds out {held} of the {need} (a validation split needs 2 classes), "
            f"leaving {need - held} to train on"
        )
    if per_batch >= 2:
        reasons.append(
            f"a batch takes {per_batch} classes (batch_size={batch} / data.sampler.samples_per_class={per_class})"
        )
    else:
        reasons.append("a rank loss needs 2 classes to train on")
    total = f"{2 * need} {found.unit}, the first {need} to train" if found.halves else str(need)
    fit = overrides_that_fit(cfg, classes)
    helps = f"add {found.unit}{found.train_where}" + (f", or train on these {classes} with {fit}" if fit else "")
    return f"{found.train_words}; this run needs at least {total}: {', and '.join(reasons)}; {helps}"


def super_label_shortage(cfg: DictConfig, found: Census) -> str | None:
    """Why the training classes of a dataset with super-labels (SOP, In-shop) cannot be split into
    validation and training classes of 2 or more each, in one line; None when they can."""
    fraction, train = cfg.validation_fraction, found.train
    labels, supers = train.labels.numpy(), train.super_labels.numpy()
    per_super = [len(np.unique(labels[supers == s])) for s in np.unique(supers)]
    classes, held = train.num_classes, sum(held_out(fraction, n) for n in per_super)
    words = f"{found.train_words} in {counted(len(per_super), 'super-label')}"
    more = f"add {found.unit}{found.train_where}"
    if classes < 2:
        return (
            f"{words}; training needs at least 2 (a rank loss ranks other classes' images below a class's own): {more}"
        )
    if fraction and held < 2:
        return (
            f"{words}; validation_fraction={fraction} holds out round({fraction} x n) of a super-label's n classes, "
            f"{held} in all, and a validation split needs 2: train without one with validation_fraction=0, or {more}"
        )
    if classes - held < 2:
        return (
            f"{words}; validation_fraction={fraction} holds out {held} of them, leaving {classes - held} to train on, "
            f"and training needs 2: lower validation_fraction (validation_fraction=0 trains on all {classes})"
        )
    return None


def training_problems(cfg: DictConfig, found: Census) -> list[Problem]:
    """The training split's classes against the run: the validation hold-out (2 classes or more, one
    of them of 2 images or more), the classes left to train on, and the batch sampler."""
    from .validation_split import split_validation_classes

    fraction, train = cfg.validation_fraction, found.train
    if train.super_labels is None:
        need = fewest_training_classes(fraction, cfg.batch_size // cfg.data.sampler.samples_per_class)
        if train.num_classes < need:
            return [Problem("data.root", shortage(cfg, found, need))]
    elif (problem := super_label_shortage(cfg, found)) is not None:
        return [Problem("data.root", problem)]
    kept, validation = split_validation_classes(train, fraction, cfg.seed)
    if validation is not None and np.bincount(validation.labels.numpy()).max() < 2:
        return [
            Problem(
                "validation_fraction",
                f"validation_fraction={fraction} holds out {counted(validation.num_classes, 'training class', 'training classes')} "
                f"(seed={cfg.seed}), all of 1 image; Recall@K on the validation split needs a class of at least 2 images "
                "(a query and its match): validation_fraction=0 trains without one",
            )
        ]
    if (
        cfg.data.sampler.name == "super_label"
        and kept.super_labels is not None
        and len(np.unique(kept.super_labels.numpy())) < 2
    ):
        after = " after the validation hold-out" if fraction else ""
        return [
            Problem(
                "data.sampler.name",
                f"{found.train_words}, all of 1 super-label{after}, and data.sampler.name=super_label draws a batch "
                "from a pair of super-labels: data.sampler.name=m_per_class draws it from any classes",
            )
        ]
    try:
        build_batch_sampler(cfg, kept)
    except ValueError as error:
        return [Problem("batch_size", str(error))]
    return []


def evaluation_problems(found: Census) -> list[Problem]:
    """The test split's classes: at least 2, and a query with a match (a class of 2 images or more;
    In-shop: a query whose item is in the gallery). The second half of one list of classes holds
    at least as many classes as the first, the training half: [`shortage`][rambo.retrieval.config_check.shortage] counts
    those."""
    test = found.test
    if test.num_classes < 2 and not found.halves:  # one list cut in halves: the training half says how many
        return [
            Problem(
                "data.root",
                f"{found.test_words}; the test split needs at least 2 (Recall@K ranks a query's class among others): "
                f"add {found.unit}{found.test_where}",
            )
        ]
    if "query" in found.evaluation:
        queries = found.evaluation["query"].labels.numpy()
        if not np.isin(queries, test.labels.numpy()).any():
            return [
                Problem(
                    "data.root",
                    f"{found.test_words}, none of them an item of the {counted(len(np.unique(queries)), 'query item')}; "
                    "Recall@K needs a query whose item is in the gallery",
                )
            ]
    elif np.bincount(test.labels.numpy()).max() < 2:
        return [
            Problem(
                "data.root",
                f"{found.test_words}; every test class has 1 image, and Recall@K needs a class of at least 2 "
                f"(a query and its match): add images{found.test_where}",
            )
        ]
    return []


def readable_split_problems(cfg: DictConfig, train, evaluation: dict, skipped: dict[str, int]) -> list[Problem]:
    """What [`split_problems`][rambo.retrieval.config_check.split_problems] checks before the run,
    checked again on the splits `data.skip_unreadable` left: `train` (before the validation
    hold-out) and `evaluation` (`{"test": ...}` or In-shop's query and gallery) less the images
    counted in `skipped` (per split). Nothing when no image was skipped."""
    if not any(skipped.values()):
        return []

    def words(split: str, dataset) -> str:
        return (
            f"after data.skip_unreadable left out {counted(skipped.get(split, 0), 'unreadable image')}, the {split} "
            f"split holds {counted(dataset.num_classes, 'class', 'classes')}"
        )

    test = evaluation.get("test", evaluation.get("gallery"))
    found = Census(
        train,
        evaluation,
        words("train", train),
        words("test" if "test" in evaluation else "gallery", test),
        "whole copies of the unreadable images (the log names them)",
        False,
        "",
        "",
    )
    return training_problems(cfg, found) + evaluation_problems(found)


def split_problems(cfg: DictConfig, overrides: list[str]) -> list[Problem]:
    """Whether the dataset's splits hold the classes this run needs, counted from its folders or
    index files (no image is opened: [`datasets.census`][rambo.retrieval.datasets.census]): the training split enough
    classes for the validation hold-out and a batch, the validation and test splits 2 classes or more and
    a class of 2 images or more. Nothing when the data is still to be generated."""
    from copy import deepcopy

    from .own_data import use_own_data

    data = deepcopy(cfg.data)
    use_own_data(data, named=named_on_command_line("data.root", overrides))
    if data.get("generate") is not None and not _matches(Path(data.root), SyntheticParameters(**data.generate)):
        return []
    try:
        found = census(data.format, data.root)
    except (ValueError, FileNotFoundError) as error:  # an index file the loader cannot read
        return [Problem("data.root", str(error))]
    return training_problems(cfg, found) + evaluation_problems(found)


def problems(cfg: DictConfig) -> list[Problem]:
    """Every problem of the composed run config `cfg` (with or without its `hydra` node)."""
    found = option_problems(cfg, BOUNDS, CHOICES)
    found += batch_problems(cfg)
    overrides = task_overrides(cfg)
    found += data_problems(cfg, overrides)
    if not found:  # the options and the folder are sound: do the splits hold the classes the run needs?
        found += split_problems(cfg, overrides)
    return found
