"""Example retrievals read from the retrieval pipeline: query images, their top-k results, correctness.

The input is a `.npz` with

- `query`: `[Q]` image paths (str) or `[Q, H, W, 3]` uint8 images;
- `results`: `[Q, K]` image paths or `[Q, K, H, W, 3]` uint8 images, best result first;
- `correct`: `[Q, K]` bool, whether each result has the query's class.

Relative paths are taken relative to an image root (the dataset folder). A dump (or an image it names) that is missing,
damaged or not of that form is a [`rambo.harness.run_files.RunFileError`][rambo.harness.run_files.RunFileError] naming
the file and what to do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from rambo.harness.run_files import bad_file, read_npz

from .figure_style import export_fix


def load_retrievals(path: Path) -> dict:
    """Read and check a retrieval dump; returns `{"query", "results", "correct"}` numpy arrays."""
    path = Path(path)
    fix = export_fix(path)
    dump = read_npz(path, fix, ("query", "results", "correct"))
    if dump["correct"].ndim != 2:
        raise bad_file(path, f"correct must be [queries, k], got shape {dump['correct'].shape}", fix)
    q, k = dump["correct"].shape
    if dump["query"].ndim < 1 or len(dump["query"]) != q or dump["results"].shape[:2] != (q, k):
        raise bad_file(
            path,
            f"query {dump['query'].shape}, results {dump['results'].shape} and correct "
            f"{dump['correct'].shape} disagree on the number of queries / results",
            fix,
        )
    dump["correct"] = dump["correct"].astype(bool)
    return dump


def as_image(item, image_root: Path | None) -> np.ndarray:
    """`[H, W, 3]` uint8 from a path (relative to `image_root`) or an image array."""
    if isinstance(item, np.ndarray) and item.dtype == np.uint8:
        if item.ndim != 3 or item.shape[-1] != 3:
            raise ValueError(f"image arrays must be [H, W, 3] uint8, got shape {item.shape}")
        return item
    path = Path(str(item))
    if not path.is_absolute() and image_root is not None:
        path = Path(image_root) / path
    fix = "the retrieval dump names it: pass --image-root, the dataset folder its relative paths start from"
    if not path.is_file():
        raise bad_file(path, "image not found", fix)
    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))
    except OSError as error:  # PIL's UnidentifiedImageError among them: not an image, or cut short
        raise bad_file(path, f"not a readable image ({error})", "replace it with the dataset's own copy") from None


def thumbnail(image: np.ndarray, size: int) -> np.ndarray:
    """`[size, size, 3]`: the image scaled to fit, centred on white (aspect ratio kept)."""
    picture = Image.fromarray(image)
    scale = size / max(picture.width, picture.height)  # up or down: small dataset images fill the cell too
    picture = picture.resize(
        (max(1, round(picture.width * scale)), max(1, round(picture.height * scale))), Image.LANCZOS
    )
    canvas = Image.new("RGB", (size, size), "white")
    canvas.paste(picture, ((size - picture.width) // 2, (size - picture.height) // 2))
    return np.asarray(canvas)


def with_border(image: np.ndarray, colour: str, width: int) -> np.ndarray:
    """`[H + 2w, W + 2w, 3]`: the image framed by `width` pixels of `colour` (`#RRGGBB`)."""
    rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.uint8)
    framed = np.empty((image.shape[0] + 2 * width, image.shape[1] + 2 * width, 3), dtype=np.uint8)
    framed[:] = rgb
    framed[width : width + image.shape[0], width : width + image.shape[1]] = image
    return framed
