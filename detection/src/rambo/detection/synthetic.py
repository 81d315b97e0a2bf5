"""An embedded synthetic detection dataset written in the Pascal VOC layout.

`python -m rambo.detection.synthetic ROOT --seed 0` writes `ROOT/Annotations/*.xml`,
`ROOT/JPEGImages/*.jpg` and `ROOT/ImageSets/Main/{trainval,test}.txt` (plus `classes.txt`),
so the VOC parser and evaluator are what read and score it.

Twenty object classes, each a distinct (shape, colour, texture) triple, are drawn on cluttered
backgrounds (a colour gradient, noise and random distractor strokes that belong to no class).
Every image holds several objects of random size and aspect jitter; objects may overlap (a later
one occludes an earlier one). As in VOC, an object is marked *difficult* when it is tiny or mostly
occluded. Everything is a function of the seed (numpy `default_rng`), so the files are identical
on every machine.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
from PIL import Image, ImageDraw

from rambo.harness.atomic import write_text

SHAPES = ("circle", "square", "triangle", "diamond", "star", "cross", "ring", "hexagon", "crescent", "bar")
COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 210, 40),
    "magenta": (210, 50, 200),
    "cyan": (40, 200, 210),
    "orange": (240, 140, 30),
    "white": (245, 245, 245),
}
# Twenty classes: every shape twice, with a different colour and texture each time.
CLASS_SPECS = (
    ("circle", "red", "solid"),
    ("circle", "blue", "stripes"),
    ("square", "green", "solid"),
    ("square", "orange", "checker"),
    ("triangle", "yellow", "solid"),
    ("triangle", "magenta", "stripes"),
    ("diamond", "cyan", "solid"),
    ("diamond", "red", "checker"),
    ("star", "orange", "solid"),
    ("star", "white", "stripes"),
    ("cross", "blue", "solid"),
    ("cross", "yellow", "checker"),
    ("ring", "green", "solid"),
    ("ring", "magenta", "stripes"),
    ("hexagon", "white", "solid"),
    ("hexagon", "green", "checker"),
    ("crescent", "cyan", "stripes"),
    ("crescent", "yellow", "solid"),
    ("bar", "magenta", "solid"),
    ("bar", "cyan", "checker"),
)
SYNTHETIC_CLASSES = tuple(f"{colour}_{texture}_{shape}" for shape, colour, texture in CLASS_SPECS)

MIN_SIDE, DIFFICULT_SIDE = 10, 14  # pixels; objects below DIFFICULT_SIDE are marked difficult
OCCLUDED_DIFFICULT = 0.6  # fraction of an object's pixels hidden by later objects that makes it difficult


def _polygon(shape: str, box) -> list[tuple[float, float]] | None:
    x1, y1, x2, y2 = box
    cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2

    def ring(count, radii, phase=-math.pi / 2):
        return [
            (
                cx + radii[k % len(radii)] * rx * math.cos(phase + 2 * math.pi * k / count),
                cy + radii[k % len(radii)] * ry * math.sin(phase + 2 * math.pi * k / count),
            )
            for k in range(count)
        ]

    if shape == "triangle":
        return [(cx, y1), (x2, y2), (x1, y2)]
    if shape == "diamond":
        return [(cx, y1), (x2, cy), (cx, y2), (x1, cy)]
    if shape == "star":
        return ring(10, (1.0, 0.42))
    if shape == "hexagon":
        return ring(6, (1.0,), phase=0.0)
    if shape == "cross":
        a, b = 0.32, 0.32
        return [
            (cx - a * rx, y1),
            (cx + a * rx, y1),
            (cx + a * rx, cy - b * ry),
            (x2, cy - b * ry),
            (x2, cy + b * ry),
            (cx + a * rx, cy + b * ry),
            (cx + a * rx, y2),
            (cx - a * rx, y2),
            (cx - a * rx, cy + b * ry),
            (x1, cy + b * ry),
            (x1, cy - b * ry),
            (cx - a * rx, cy - b * ry),
        ]
    return None


def shape_mask(shape: str, box, size: tuple[int, int]) -> Image.Image:
    """A binary `L` mask of `shape` filling `box` (x1, y1, x2, y2) in an image of `size`."""
    mask = Image.new("L", size, 0)
    draw = ImageDraw.Draw(mask)
    x1, y1, x2, y2 = box
    polygon = _polygon(shape, box)
    if polygon is not None:
        draw.polygon(polygon, fill=255)
    elif shape == "circle":
        draw.ellipse(box, fill=255)
    elif shape == "square":
        draw.rectangle(box, fill=255)
    elif shape == "ring":
        draw.ellipse(box, fill=255)
        inset_x, inset_y = 0.3 * (x2 - x1), 0.3 * (y2 - y1)
        draw.ellipse((x1 + inset_x, y1 + inset_y, x2 - inset_x, y2 - inset_y), fill=0)
    elif shape == "crescent":
        draw.ellipse(box, fill=255)
        shift = 0.4 * (x2 - x1)
        draw.ellipse((x1 + shift, y1 - 0.1 * (y2 - y1), x2 + shift, y2 - 0.1 * (y2 - y1)), fill=0)
    elif shape == "bar":
        height = y2 - y1
        draw.rectangle((x1, y1 + 0.3 * height, x2, y2 - 0.3 * height), fill=255)
        draw.rectangle((x1, y1, x1 + 0.2 * (x2 - x1), y2), fill=255)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return mask


def texture(kind: str, colour, size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """`[H, W, 3]` uint8 fill: solid, diagonal stripes or checker in `colour` and a dark shade of it."""
    width, height = size
    base = np.asarray(colour, dtype=np.float32)
    brightness = rng.uniform(0.8, 1.1)
    light = np.clip(base * brightness, 0, 255)
    dark = light * 0.35
    yy, xx = np.mgrid[0:height, 0:width]
    period = int(rng.integers(4, 7))
    if kind == "solid":
        pattern = np.ones((height, width), dtype=bool)
    elif kind == "stripes":
        pattern = ((xx + yy) // period) % 2 == 0
    elif kind == "checker":
        pattern = ((xx // period) + (yy // period)) % 2 == 0
    else:
        raise ValueError(f"unknown texture {kind!r}")
    fill = np.where(pattern[..., None], light, dark)
    return np.clip(fill + rng.normal(0, 6, fill.shape), 0, 255).astype(np.uint8)


def cluttered_background(size: tuple[int, int], rng: np.random.Generator) -> Image.Image:
    """A gradient plus noise plus grey-ish distractor strokes and blobs that belong to no class."""
    width, height = size
    start, end = rng.uniform(40, 170, 3), rng.uniform(40, 170, 3)
    ramp = np.linspace(0, 1, width)[None, :, None] if rng.random() < 0.5 else np.linspace(0, 1, height)[:, None, None]
    pixels = start + (end - start) * ramp + rng.normal(0, 12, (height, width, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(6, 14))):
        grey = tuple(int(v) for v in rng.uniform(60, 200) + rng.normal(0, 20, 3))
        x, y = rng.uniform(0, width), rng.uniform(0, height)
        if rng.random() < 0.6:
            draw.line(
                (x, y, x + rng.normal(0, width / 4), y + rng.normal(0, height / 4)),
                fill=grey,
                width=int(rng.integers(1, 4)),
            )
        else:
            r = rng.uniform(2, 7)
            draw.ellipse((x - r, y - r, x + r, y + r), fill=grey)
    return image


def render_image(rng: np.random.Generator, image_size: int, max_objects: int = 5):
    """One image and its objects `[(class_index, (xmin, ymin, xmax, ymax) 1-based inclusive, difficult)]`."""
    size = (image_size, image_size)
    image = cluttered_background(size, rng)
    placed = []  # (class_index, box, visible mask as bool array)
    for _ in range(int(rng.integers(2, max_objects + 1))):
        class_index = int(rng.integers(len(CLASS_SPECS)))
        shape, colour, kind = CLASS_SPECS[class_index]
        side = rng.uniform(MIN_SIDE, 0.45 * image_size)
        aspect = rng.uniform(0.75, 1.33) if shape != "bar" else rng.uniform(1.6, 2.2)
        w, h = side * math.sqrt(aspect), side / math.sqrt(aspect)
        x1, y1 = rng.uniform(0, image_size - w), rng.uniform(0, image_size - h)
        box = (x1, y1, x1 + w, y1 + h)
        mask = shape_mask(shape, box, size)
        image.paste(Image.fromarray(texture(kind, COLOURS[colour], size, rng)), (0, 0), mask)
        drawn = np.asarray(mask) > 0
        for previous in placed:
            previous[2][drawn] = False  # the new object occludes earlier ones
        placed.append([class_index, box, drawn.copy(), int(drawn.sum())])
    objects = []
    for class_index, box, visible, area in placed:
        if area == 0:
            continue
        ys, xs = np.nonzero(np.asarray(shape_mask(CLASS_SPECS[class_index][0], box, size)) > 0)
        xmin, ymin, xmax, ymax = xs.min() + 1, ys.min() + 1, xs.max() + 1, ys.max() + 1  # VOC: 1-based inclusive
        hidden = 1.0 - visible.sum() / area
        if hidden > 0.95:
            continue  # practically invisible: not annotated
        difficult = min(xmax - xmin + 1, ymax - ymin + 1) < DIFFICULT_SIDE or hidden > OCCLUDED_DIFFICULT
        objects.append((class_index, (int(xmin), int(ymin), int(xmax), int(ymax)), bool(difficult)))
    return image, objects


def annotation_xml(image_id: str, image_size: int, objects) -> ET.ElementTree:
    root = ET.Element("annotation")
    ET.SubElement(root, "folder").text = "SYNTHETIC"
    ET.SubElement(root, "filename").text = f"{image_id}.jpg"
    size = ET.SubElement(root, "size")
    for tag, value in (("width", image_size), ("height", image_size), ("depth", 3)):
        ET.SubElement(size, tag).text = str(value)
    ET.SubElement(root, "segmented").text = "0"
    for class_index, (xmin, ymin, xmax, ymax), difficult in objects:
        obj = ET.SubElement(root, "object")
        ET.SubElement(obj, "name").text = SYNTHETIC_CLASSES[class_index]
        ET.SubElement(obj, "pose").text = "Unspecified"
        ET.SubElement(obj, "truncated").text = "0"
        ET.SubElement(obj, "difficult").text = "1" if difficult else "0"
        bndbox = ET.SubElement(obj, "bndbox")
        for tag, value in zip(("xmin", "ymin", "xmax", "ymax"), (xmin, ymin, xmax, ymax)):
            ET.SubElement(bndbox, tag).text = str(value)
    return ET.ElementTree(root)


def generate(
    root: str | Path, seed: int = 0, num_trainval: int = 160, num_test: int = 80, image_size: int = 96
) -> Path:
    """Write the dataset under `root` (a VOC folder) and return it. Same seed, same files."""
    if num_trainval < 1 or num_test < 1:
        raise ValueError(f"need at least one trainval and one test image, got {num_trainval} and {num_test}")
    if image_size < 4 * DIFFICULT_SIDE:
        raise ValueError(f"image_size must be >= {4 * DIFFICULT_SIDE} pixels, got {image_size}")
    root = Path(root)
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    splits = {"trainval": [], "test": []}
    for index in range(num_trainval + num_test):
        split = "trainval" if index < num_trainval else "test"
        image_id = f"{index:06d}"
        image, objects = render_image(rng, image_size)
        image.save(root / "JPEGImages" / f"{image_id}.jpg", quality=92)
        annotation_xml(image_id, image_size, objects).write(root / "Annotations" / f"{image_id}.xml")
        splits[split].append(image_id)
    for split, ids in splits.items():
        write_text(root / "ImageSets" / "Main" / f"{split}.txt", "".join(f"{i}\n" for i in ids))
    write_text(root / "classes.txt", "".join(f"{name}\n" for name in SYNTHETIC_CLASSES))
    return root


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write the synthetic VOC-layout detection dataset.")
    parser.add_argument("root", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trainval", type=int, default=160, help="number of trainval images")
    parser.add_argument("--test", type=int, default=80, help="number of test images")
    parser.add_argument("--size", type=int, default=96, help="image side in pixels")
    args = parser.parse_args(argv)
    problems = [
        f"--{name} {value}: must be at least {least}"
        for name, value, least in (
            ("trainval", args.trainval, 1),
            ("test", args.test, 1),
            ("size", args.size, 4 * DIFFICULT_SIDE),
        )
        if value < least
    ]
    for problem in problems:  # nothing written yet
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 2
    print(generate(args.root, args.seed, args.trainval, args.test, args.size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
