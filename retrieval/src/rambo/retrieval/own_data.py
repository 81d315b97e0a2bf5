"""A user's own folder under a profile that trains every row on the synthetic set (mini, tiny).

The mini and tiny profiles put the synthetic set in place of every row's dataset
(`data.format: synthetic` with `data.generate`), keeping the row's hyper-parameters. That
stand-in lives in the profile's own folder (`${data_dir}/synthetic`, `synthetic_tiny`) and is
used only where no `data.root` is given; the run's first log line says so.

A `data.root` given on the command line is the data: `data=sop data.root=DIR` (or `cub`,
`inshop`, `imagefolder`) trains on DIR at the profile's scale (its model, image size, epochs),
read from disk, and says so in its log. DIR is never created, written into, or replaced by the
synthetic set: a missing or empty DIR, or one in another layout, is refused with one line naming
the folder and the layout expected ([`layout_problem`][rambo.retrieval.own_data.layout_problem]; the app checks it
before anything is
created: [`rambo.retrieval.config_check`][rambo.retrieval.config_check], which also counts the classes of its splits
against what the run needs).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, open_dict

from .datasets.imagefolder import IMAGEFOLDER_SPLITS, class_folders, has_own_split
from .datasets.layout import LAYOUT_MARKERS, detect_layout
from .datasets.synthetic import MANIFEST

OWN_LAYOUTS = (*LAYOUT_MARKERS, "imagefolder")


def holds_stand_in(root: Path) -> bool:
    """True when the synthetic set belongs in `root`: absent, empty, or holding one already."""
    return not root.exists() or (root / MANIFEST).is_file() or (root.is_dir() and not any(root.iterdir()))


def is_stand_in(data: DictConfig) -> bool:
    """True when the profile trains this row on the synthetic set in place of `data.name`."""
    return data.format == "synthetic" and data.get("generate") is not None and data.name in OWN_LAYOUTS


def expected_layout(name: str, root: Path) -> str:
    """The files or folders the layout `name` (`sop`, `cub`, `inshop`, `imagefolder`,
    `synthetic`: SOP's) has under `root`, in words."""
    if name == "imagefolder":
        return (
            f"class folders of images: {root}/<class>/<image>, or {root}/train/<class>/<image> "
            f"and {root}/test/<class>/<image>"
        )
    return " or ".join(str(root / marker) for marker in LAYOUT_MARKERS["sop" if name == "synthetic" else name])


def found_layout(root: Path) -> str | None:
    """The layout `root` holds ([`detect_layout`][rambo.retrieval.datasets.layout.detect_layout], or `imagefolder`), or
    None."""
    found = detect_layout(root)
    if found is None and root.is_dir() and (has_own_split(root) or len(class_folders(root)) >= 2):
        found = "imagefolder"
    return found


def layout_problem(name: str, root: Path | str) -> str | None:
    """Why `root` cannot be read as a dataset in layout `name`, in one line; None when it can."""
    root = Path(root)
    wanted = expected_layout(name, root)
    if not root.exists():
        return f"data.root={root}: no such folder; expected the {name} layout ({wanted}). Nothing was created there"
    if not root.is_dir():
        return f"data.root={root} is a file, not a folder; expected the {name} layout ({wanted})"
    if not any(root.iterdir()):
        return f"data.root={root} is an empty folder; expected the {name} layout ({wanted}). Nothing was written there"
    found = found_layout(root)
    if found == name or (name == "synthetic" and found == "sop"):
        return None
    if name == "imagefolder" and found is None:
        folders = set(class_folders(root))
        lone = [split for split in IMAGEFOLDER_SPLITS if (root / split).is_dir()]
        if len(lone) == 1 and folders <= {lone[0]}:
            (other,) = set(IMAGEFOLDER_SPLITS) - set(lone)
            return (
                f"data=imagefolder data.root={root}: there is {root / lone[0]} but no {root / other} "
                f"(expected {wanted}). Nothing was written there"
            )
        if folders:  # one class folder: the config check says how many the run needs (rambo.retrieval.config_check)
            return None
    hint = f"; it holds the {found} layout: data={found} data.root={root} trains on it" if found else ""
    return f"data={name} data.root={root}: no {name} layout there (expected {wanted}){hint}. Nothing was written there"


def use_own_data(data: DictConfig, named: bool = False) -> str | None:
    """Point `data` (the run config's `data` node, changed in place) at the user's folder when
    the profile stands the synthetic set in for `data.name`; returns the line to log (what the
    run trains on), or `None` when the profile does not substitute the synthetic set.

    `named`: `data.root` was given on the command line. Then it must hold the `data.name`
    layout, and the run trains on it. Otherwise `data.root` is the profile's folder: the
    synthetic set stands in (a copy of the row's dataset put there is trained on).

    Raises `ValueError` ([`layout_problem`][rambo.retrieval.own_data.layout_problem]'s line) when the folder cannot be
    read in that layout."""
    if not is_stand_in(data):
        return None
    root = Path(data.root)
    if not named and holds_stand_in(root):
        return (
            f"data: the synthetic set in {root} stands in for {data.name} (this profile trains every row on it; "
            f"no data.root was given); to train on a copy of {data.name}, set data.root to its folder"
        )
    problem = layout_problem(data.name, root)
    if problem:
        raise ValueError(problem)
    with open_dict(data):
        data.format = data.name
        data.generate = None
        data.in_memory = False  # the profile's in-memory path holds same-size images only
    return f"data: training on {data.name} at {root} (your folder; the profile's scale, images read from disk)"
