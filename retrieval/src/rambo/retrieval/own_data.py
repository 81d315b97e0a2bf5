"""A user's own folder under a profile that trains every row on the synthetic set (mini, tiny).

The mini and tiny profiles put the synthetic set in place of every row's dataset
(``data.format: synthetic`` with ``data.generate``), keeping the row's hyper-parameters. A user who
names a dataset layout and a folder, ``data=sop data.root=DIR`` (or ``cub``, ``inshop``,
``imagefolder``), means that folder: when ``DIR`` holds that layout the run trains on it at the
profile's scale (its model, image size, epochs), read from disk, and says so in its log.

Without a folder of the layout the profile's behaviour is kept: an absent or empty ``DIR``, or one
holding a synthetic set, gets the synthetic set. A folder in another layout, or in none, is an error
that names the layout found and the override that trains on it; nothing is ever written into it.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, open_dict

from .datasets.imagefolder import class_folders, has_own_split
from .datasets.layout import LAYOUT_MARKERS, detect_layout
from .datasets.synthetic import MANIFEST

OWN_LAYOUTS = (*LAYOUT_MARKERS, "imagefolder")


def holds_stand_in(root: Path) -> bool:
    """True when the synthetic set belongs in ``root``: absent, empty, or holding one already."""
    return not root.exists() or (root / MANIFEST).is_file() or (root.is_dir() and not any(root.iterdir()))


def use_own_data(data: DictConfig) -> str | None:
    """Point ``data`` (the run config's ``data`` node, changed in place) at the user's folder when
    ``data.root`` holds the layout of ``data.name`` under a synthetic stand-in; returns the line to
    log (what the run trains on), or ``None`` when the profile does not substitute the synthetic set.

    Raises ``ValueError`` when ``data.root`` is neither a place for the synthetic set nor a folder in
    the ``data.name`` layout."""
    if data.format != "synthetic" or data.get("generate") is None or data.name not in OWN_LAYOUTS:
        return None
    root = Path(data.root)
    if holds_stand_in(root):
        return (
            f"data: the synthetic set in {root} stands in for {data.name} (this profile trains every row on it); "
            f"to train on a copy of {data.name}, set data.root to its folder"
        )
    found = detect_layout(root)
    if data.name == "imagefolder" and found is None:
        found = "imagefolder" if has_own_split(root) or len(class_folders(root)) >= 2 else None
    if found != data.name:
        wanted = (
            "class folders of images"
            if data.name == "imagefolder"
            else " or ".join(str(root / marker) for marker in LAYOUT_MARKERS[data.name])
        )
        hint = f"; it holds the {found} layout: data={found} data.root={root} trains on it" if found else ""
        raise ValueError(
            f"data={data.name} data.root={root}: no {data.name} layout there (expected {wanted}){hint}. "
            "Nothing was written there"
        )
    with open_dict(data):
        data.format = data.name
        data.generate = None
        data.in_memory = False  # the profile's in-memory path holds same-size images only
    return f"data: training on {data.name} at {root} (your folder; the profile's scale, images read from disk)"
