"""The embedded synthetic retrieval dataset, written in the Stanford Online Products layout.

Each class is an object: a shape from its super-class's *shape family* (disc, square, star, ...)
with a class-specific aspect ratio, two colours, a surface texture (stripes, checker, rings, ...)
and a small coloured marker at a fixed place on its outline. Each image of the class shows that
object under a new pose (rotation, scale, position), with colour jitter, a cluttered background
(gradient + distractor shapes) and sensor noise. Classes of one super-class share the shape
family, so they are the hard negatives, as SOP's super-classes are.

Train classes are the first half of the class ids, test classes the second half (disjoint, like
SOP), and both contain every super-class. Because it is written as `Ebay_train.txt` /
`Ebay_test.txt` + image folders, `load_sop` is what reads it.

Everything is drawn from `numpy.random.default_rng([seed, class_id])` (the class) and
`default_rng([seed, class_id, image])` (the image), so the files depend only on the seed and
the size parameters, never on generation order.

CLI: `python -m rambo.retrieval.datasets.synthetic ROOT --seed 0`.
"""

from __future__ import annotations

import argparse
import colorsys
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from rambo.harness.atomic import give_default_permissions

from .layout import detect_layout

# Bump when the drawing changes, so an old copy on disk is not mistaken for the current one.
GENERATOR_VERSION = 1
MANIFEST = "synthetic.json"
SHAPE_FAMILIES = (
    "disc",
    "square",
    "triangle",
    "star",
    "plus",
    "ring",
    "diamond",
    "hexagon",
    "crescent",
    "corner",
    "bars",
    "saltire",
)
TEXTURES = ("solid", "stripes", "checker", "rings", "halves")
# Drawn at SUPERSAMPLE x the image size and averaged down: anti-aliased edges at 32 px.
SUPERSAMPLE = 2


@dataclass(frozen=True)
class SyntheticParameters:
    """What the files depend on; stored in `synthetic.json` beside the SOP index files."""

    seed: int = 0
    num_classes: int = 200
    images_per_class: int = 20
    image_size: int = 32
    num_super_classes: int = 12
    generator_version: int = GENERATOR_VERSION

    def check(self) -> None:
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be >= 2 (half train, half test), got {self.num_classes}")
        if self.images_per_class < 2:
            raise ValueError(f"images_per_class must be >= 2 (a query needs a positive), got {self.images_per_class}")
        if self.image_size < 16:
            raise ValueError(f"image_size must be >= 16 pixels, got {self.image_size}")
        if not 1 <= self.num_super_classes <= len(SHAPE_FAMILIES):
            raise ValueError(
                f"num_super_classes must be in 1..{len(SHAPE_FAMILIES)} (one shape family each), "
                f"got {self.num_super_classes}"
            )
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")


@dataclass(frozen=True)
class ObjectClass:
    """The fixed appearance of one class; every image of the class redraws it."""

    family: int
    aspect: float  # height / width of the shape in its own frame
    colours_hsv: tuple[tuple[float, float, float], ...]  # body, texture, marker
    texture: int
    wavelength: float  # texture period, in units of the object radius
    texture_angle: float
    marker_angle: float  # where the marker sits on the outline


def super_class_of(class_id: int, num_super_classes: int) -> int:
    """0-based super-class of 1-based `class_id`: round robin, so every split has every family."""
    return (class_id - 1) % num_super_classes


def draw_class(seed: int, class_id: int, num_super_classes: int) -> ObjectClass:
    """The appearance of class `class_id` (1-based), from its own random stream."""
    rng = np.random.default_rng([seed, class_id])
    hue = rng.random()
    # Texture and marker hues are kept away from the body hue so the texture is visible.
    texture_hue = (hue + rng.uniform(0.25, 0.75)) % 1.0
    marker_hue = (hue + rng.uniform(0.3, 0.7)) % 1.0
    colours = (
        (hue, rng.uniform(0.55, 1.0), rng.uniform(0.55, 1.0)),
        (texture_hue, rng.uniform(0.4, 1.0), rng.uniform(0.3, 1.0)),
        (marker_hue, rng.uniform(0.6, 1.0), rng.uniform(0.6, 1.0)),
    )
    return ObjectClass(
        family=super_class_of(class_id, num_super_classes),
        aspect=float(rng.uniform(0.65, 1.0)),
        colours_hsv=tuple(tuple(float(c) for c in colour) for colour in colours),
        texture=int(rng.integers(len(TEXTURES))),
        wavelength=float(rng.uniform(0.6, 1.1)),
        texture_angle=float(rng.uniform(0, np.pi)),
        marker_angle=float(rng.uniform(0, 2 * np.pi)),
    )


def _regular_polygon(radius: np.ndarray, angle: np.ndarray, sides: int, size: float) -> np.ndarray:
    # A point is inside when its distance along the nearest edge normal is below the apothem.
    sector = 2 * np.pi / sides
    offset = np.mod(angle, sector) - sector / 2
    return radius * np.cos(offset) < size * np.cos(np.pi / sides)


def shape_mask(family: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Inside-test of shape family `family` in its own frame (radius about 1). `u, v: [H, W]`."""
    radius = np.hypot(u, v)
    angle = np.arctan2(v, u)
    name = SHAPE_FAMILIES[family]
    if name == "disc":
        return radius < 1.0
    if name == "square":
        return np.maximum(np.abs(u), np.abs(v)) < 0.8
    if name == "triangle":
        return _regular_polygon(radius, angle + np.pi / 2, 3, 1.05)
    if name == "star":
        return radius < 0.62 + 0.38 * np.cos(5 * angle)
    if name == "plus":
        return ((np.abs(u) < 0.33) & (np.abs(v) < 0.95)) | ((np.abs(v) < 0.33) & (np.abs(u) < 0.95))
    if name == "ring":
        return (radius < 1.0) & (radius > 0.55)
    if name == "diamond":
        return np.abs(u) + np.abs(v) < 1.05
    if name == "hexagon":
        return _regular_polygon(radius, angle, 6, 0.95)
    if name == "crescent":
        return (radius < 1.0) & (np.hypot(u - 0.45, v) > 0.78)
    if name == "corner":
        return (np.maximum(np.abs(u), np.abs(v)) < 0.9) & ((u < -0.15) | (v > 0.15))
    if name == "bars":
        return (np.maximum(np.abs(u), np.abs(v)) < 0.9) & (np.mod(v + 0.9, 0.72) < 0.4)
    # saltire: a diagonal cross
    return (np.minimum(np.abs(u - v), np.abs(u + v)) < 0.42) & (radius < 1.05)


def texture_mask(kind: int, u: np.ndarray, v: np.ndarray, wavelength: float, angle: float) -> np.ndarray:
    """Where the texture colour replaces the body colour, in the object's frame. `[H, W]` bool."""
    name = TEXTURES[kind]
    along = u * np.cos(angle) + v * np.sin(angle)
    if name == "solid":
        return np.zeros(u.shape, dtype=bool)
    if name == "stripes":
        return np.sin(2 * np.pi * along / wavelength) > 0
    if name == "checker":
        across = -u * np.sin(angle) + v * np.cos(angle)
        return np.sin(2 * np.pi * along / wavelength) * np.sin(2 * np.pi * across / wavelength) > 0
    if name == "rings":
        return np.sin(2 * np.pi * np.hypot(u, v) / wavelength) > 0
    return along > 0  # halves: two-tone split


def _hsv_to_rgb(hue: float, saturation: float, value: float) -> np.ndarray:
    return np.array(colorsys.hsv_to_rgb(hue % 1.0, min(max(saturation, 0.0), 1.0), min(max(value, 0.0), 1.0)))


def _jitter(colour: tuple[float, float, float], rng: np.random.Generator) -> np.ndarray:
    hue, saturation, value = colour
    return _hsv_to_rgb(
        hue + rng.uniform(-0.03, 0.03), saturation * rng.uniform(0.8, 1.1), value * rng.uniform(0.75, 1.15)
    )


def render_image(appearance: ObjectClass, rng: np.random.Generator, image_size: int) -> np.ndarray:
    """One view of `appearance`: `uint8 [image_size, image_size, 3]`.

    Variation per image: background gradient and 2-5 distractor shapes (clutter), rotation within
    +-45 degrees (pose), object radius 24-38 % of the image (scale), position, colour jitter of
    every colour, Gaussian noise.
    """
    size = image_size * SUPERSAMPLE
    # Pixel centres in [-1, 1].
    axis = (np.arange(size) + 0.5) / size * 2 - 1
    x, y = np.meshgrid(axis, axis)

    # Background: a low-saturation base colour with a linear gradient in a random direction.
    base = _hsv_to_rgb(rng.random(), rng.uniform(0.0, 0.35), rng.uniform(0.25, 0.85))
    direction = rng.uniform(0, 2 * np.pi)
    ramp = (x * np.cos(direction) + y * np.sin(direction))[..., None]
    image = np.clip(base + rng.uniform(0.05, 0.25) * ramp, 0, 1)

    # Clutter: distractor discs, boxes and bars of random colours behind the object.
    for _ in range(int(rng.integers(2, 6))):
        cx, cy = rng.uniform(-1, 1, size=2)
        extent = rng.uniform(0.08, 0.25)
        kind = rng.integers(3)
        if kind == 0:
            mask = np.hypot(x - cx, y - cy) < extent
        elif kind == 1:
            mask = np.maximum(np.abs(x - cx), np.abs(y - cy)) < extent
        else:
            theta = rng.uniform(0, np.pi)
            along = (x - cx) * np.cos(theta) + (y - cy) * np.sin(theta)
            across = -(x - cx) * np.sin(theta) + (y - cy) * np.cos(theta)
            mask = (np.abs(along) < 2.5 * extent) & (np.abs(across) < 0.04)
        image[mask] = _hsv_to_rgb(rng.random(), rng.uniform(0, 1), rng.uniform(0.2, 1))

    # Pose: object frame (u, v) = rotate(-theta)((x, y) - centre) / radius, then the class aspect.
    theta = rng.uniform(-np.pi / 4, np.pi / 4)
    radius = rng.uniform(0.48, 0.76)
    centre = rng.uniform(-0.18, 0.18, size=2)
    dx, dy = x - centre[0], y - centre[1]
    u = (dx * np.cos(theta) + dy * np.sin(theta)) / radius
    v = (-dx * np.sin(theta) + dy * np.cos(theta)) / (radius * appearance.aspect)

    body, texture_colour, marker_colour = (_jitter(c, rng) for c in appearance.colours_hsv)
    inside = shape_mask(appearance.family, u, v)
    textured = inside & texture_mask(appearance.texture, u, v, appearance.wavelength, appearance.texture_angle)
    image[inside] = body
    image[textured] = texture_colour
    marker = np.hypot(u - np.cos(appearance.marker_angle), v - np.sin(appearance.marker_angle)) < 0.3
    image[marker] = marker_colour

    # Average SUPERSAMPLE x SUPERSAMPLE blocks: anti-aliasing, then noise at the output resolution.
    image = image.reshape(image_size, SUPERSAMPLE, image_size, SUPERSAMPLE, 3).mean(axis=(1, 3))
    image = image + rng.normal(0, rng.uniform(0.01, 0.05), size=image.shape)
    return np.round(np.clip(image, 0, 1) * 255).astype(np.uint8)


def _image_path(class_id: int, image: int, num_super_classes: int) -> str:
    # SOP style: "<super-class>_final/<product id>_<view>.<ext>".
    family = SHAPE_FAMILIES[super_class_of(class_id, num_super_classes)]
    return f"{family}_final/{class_id:05d}_{image}.png"


def _write_dataset(folder: Path, params: SyntheticParameters, show_progress: bool) -> None:
    num_train = params.num_classes // 2
    rows: dict[str, list[str]] = {"train": [], "test": []}
    image_id = 0
    total = params.num_classes * params.images_per_class
    with tqdm(
        total=total, desc="synthetic images", unit="img", disable=not (show_progress and sys.stderr.isatty())
    ) as progress:
        for class_id in range(1, params.num_classes + 1):
            appearance = draw_class(params.seed, class_id, params.num_super_classes)
            split = "train" if class_id <= num_train else "test"
            for image in range(params.images_per_class):
                image_id += 1
                relative = _image_path(class_id, image, params.num_super_classes)
                (folder / relative).parent.mkdir(parents=True, exist_ok=True)
                rng = np.random.default_rng([params.seed, class_id, image])
                pixels = render_image(appearance, rng, params.image_size)
                Image.fromarray(pixels).save(folder / relative, format="PNG")
                super_class_id = appearance.family + 1
                rows[split].append(f"{image_id} {class_id} {super_class_id} {relative}")
                progress.update(1)
    header = "image_id class_id super_class_id path"
    for split, lines in rows.items():
        (folder / f"Ebay_{split}.txt").write_text("\n".join([header, *lines]) + "\n")
    (folder / "Ebay_info.txt").write_text("\n".join([header, *rows["train"], *rows["test"]]) + "\n")
    # Written last: its presence with matching parameters marks a complete copy.
    (folder / MANIFEST).write_text(json.dumps(asdict(params), indent=2, sort_keys=True) + "\n")


def _matches(root: Path, params: SyntheticParameters) -> bool:
    try:
        return json.loads((root / MANIFEST).read_text()) == asdict(params)
    except (OSError, ValueError):
        return False


def _previous_synthetic(root: Path) -> dict | None:
    """The parameters of the synthetic set in `root` (its manifest), or None if it holds none."""
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def generate_synthetic(
    root: Path | str,
    seed: int = 0,
    num_classes: int = 200,
    images_per_class: int = 20,
    image_size: int = 32,
    num_super_classes: int = 12,
    show_progress: bool = True,
) -> Path:
    """Write the synthetic dataset in the SOP layout under `root` and return `root`.

    The defaults are the `mini` profile's: 200 classes (100 train, 100 test) x 20 images of
    32 x 32 px = 4,000 images, 12 super-classes. Idempotent: if `root` already holds a complete
    copy with the same parameters it returns at once. Atomic: the files are written into a
    temporary sibling folder that is renamed to `root` when complete, so an interrupted run
    leaves no half-written dataset. A `root` holding a synthetic set of other parameters (its
    `synthetic.json` says so) is replaced by the new one; a non-empty `root` holding anything
    else is a `ValueError`.
    """
    params = SyntheticParameters(
        int(seed), int(num_classes), int(images_per_class), int(image_size), int(num_super_classes)
    )
    params.check()
    root = Path(root)
    if _matches(root, params):
        return root
    previous = _previous_synthetic(root)
    if previous is None and root.exists() and (not root.is_dir() or any(root.iterdir())):
        layout = detect_layout(root)
        if layout is not None:
            raise ValueError(
                f"{root} holds a dataset in the {layout} layout, not the synthetic set this config generates "
                f"(data.generate is set, as the mini and tiny profiles do); nothing was written. To train on it: "
                f"data={layout} data.root={root} (docs/own-data.md)"
            )
        raise ValueError(
            f"{root} is not empty and holds no synthetic set (no {MANIFEST}); nothing was written there. "
            "Point data.root at an empty or new folder for the synthetic set, or, for a dataset of yours, choose "
            "its layout: data=sop, cub, inshop or imagefolder with data.root=DIR (docs/own-data.md)"
        )
    root.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{root.name}.partial-", dir=root.parent))
    aside = Path(tempfile.mkdtemp(prefix=f".{root.name}.old-", dir=root.parent))
    try:
        _write_dataset(partial, params, show_progress)
        give_default_permissions(partial)  # mkdtemp's folder is owner-only
        if previous is not None:  # another synthetic set: moved aside, replaced, then deleted
            print(f"{root}: replacing the synthetic set of parameters {previous}", file=sys.stderr)
            os.replace(root, aside / root.name)
        try:
            # Renaming onto an empty folder is allowed; onto a non-empty one it fails.
            os.replace(partial, root)
        except OSError:
            if not _matches(root, params):  # another process finishing the same copy first is fine
                raise
    finally:
        for folder in (partial, aside):
            if folder.exists():
                shutil.rmtree(folder)
    return root


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m rambo.retrieval.datasets.synthetic",
        description="Write the embedded synthetic retrieval dataset (SOP layout) under ROOT.",
    )
    parser.add_argument("root", type=Path, help="output folder (created; must be empty or absent)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-classes", type=int, default=200, help="half train, half test")
    parser.add_argument("--images-per-class", type=int, default=20)
    parser.add_argument("--image-size", type=int, default=32, help="pixels per side")
    parser.add_argument("--num-super-classes", type=int, default=12, help=f"at most {len(SHAPE_FAMILIES)}")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        root = generate_synthetic(
            args.root,
            seed=args.seed,
            num_classes=args.num_classes,
            images_per_class=args.images_per_class,
            image_size=args.image_size,
            num_super_classes=args.num_super_classes,
            show_progress=not args.quiet,
        )
    except ValueError as error:
        parser.error(str(error))
    print(root)


if __name__ == "__main__":
    main()
