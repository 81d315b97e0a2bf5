"""Files that are either complete or absent: write to a temporary sibling, then rename."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch


def _temporary_sibling(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    return Path(name)


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader never sees a half-written file."""
    path = Path(path)
    tmp = _temporary_sibling(path)
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_atomically(obj, path: str | os.PathLike) -> None:
    """``torch.save`` to ``path`` atomically (a killed run leaves the previous checkpoint intact)."""
    path = Path(path)
    tmp = _temporary_sibling(path)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
