"""Small stand-ins of the Pascal VOC downloads, in their tar format and `VOCdevkit` layout.

`write_archives(out_dir, seed=0)` writes the three tars of `rambo.detection.download.ARCHIVES`
(`VOCtrainval_06-Nov-2007.tar`, `VOCtest_06-Nov-2007.tar`, `VOCtrainval_11-May-2012.tar`),
each small, so that a smoke test (CI) can run the real path from `file://` URLs: MD5 check,
extraction (both 2007 tars fill `VOCdevkit/VOC2007`, with no file in common), the VOC parser and
training. Members, as in the real tars:

* `VOCdevkit/VOC<year>/Annotations/<id>.xml`: the VOC XML of that year (2007: `folder`,
  `filename`, `source`, `owner`, `size`, `segmented`, objects with `name`, `pose`,
  `truncated`, `difficult`, 1-based inclusive `bndbox`; 2012: the same fields in the
  alphabetical order of the 2008+ files, with `occluded`), the 20 real class names;
* `VOCdevkit/VOC<year>/JPEGImages/<id>.jpg`: 128 x 96 px (landscape, as most VOC photos);
* `VOCdevkit/VOC<year>/ImageSets/Main/`: `train.txt`, `val.txt`, `trainval.txt` (trainval
  tars) or `test.txt` (2007 test tar), and `<class>_<set>.txt` with the real `id  1` / `id -1`
  / `id  0` (present, absent, only difficult) rows.

Image ids follow the real numbering: 2007 trainval `000005, 000007, ...` and test `000001,
000002, ...` (one sequence, interleaved), 2012 `2008_000002, ...`. Sizes: 8 trainval + 6 test
images in 2007, 6 trainval images in 2012, each with 1-3 objects. Objects are drawn with the
embedded synthetic set's shapes and textures ([`rambo.detection.synthetic`][rambo.detection.synthetic]; VOC class `c`
looks like its synthetic class `c`), so boxes are learnable. Every split has truncated objects (cut by the
image border, box clipped) and difficult ones (tiny, or mostly occluded), and every image at least
one object that is neither.

Everything comes from `numpy.random.default_rng([seed, year, image number])`; the tars are GNU
tars with fixed times, owner and permissions and sorted members (folders before their contents):
the same seed gives the same bytes, hence the same MD5 (with the same Pillow build, whose JPEG
encoder decides the image bytes).

CLI: `python -m rambo.detection.stand_in OUT_DIR [--seed N]` prints the paths written.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
from PIL import Image

from rambo.harness.archive_writer import stand_in_main, write_tar

from .download import ARCHIVES
from .synthetic import (
    CLASS_SPECS,
    COLOURS,
    DIFFICULT_SIDE,
    OCCLUDED_DIFFICULT,
    cluttered_background,
    shape_mask,
    texture,
)
from .voc import VOC_CLASSES

__all__ = ["IMAGE_SIZE", "STAND_INS", "main", "render_image", "write_archives"]

IMAGE_SIZE = (128, 96)  # (width, height)
POSES = ("Frontal", "Left", "Right", "Rear", "Unspecified")


@dataclass(frozen=True)
class StandIn:
    """One tar: its year, image sets (name -> ids) and the POSIX time of every member."""

    year: int
    image_sets: dict[str, tuple[str, ...]]
    mtime: int


_TRAINVAL_2007 = ("000005", "000007", "000009", "000012", "000016", "000017", "000019", "000020")
_TRAINVAL_2012 = ("2008_000002", "2008_000003", "2008_000007", "2008_000008", "2008_000009", "2008_000015")


def _trainval(ids: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    return {"train": ids[0::2], "val": ids[1::2], "trainval": ids}  # ids are listed sorted, as in the real files


STAND_INS: dict[str, StandIn] = {
    "voc2007-trainval": StandIn(2007, _trainval(_TRAINVAL_2007), 1194307200),  # 2007-11-06
    "voc2007-test": StandIn(2007, {"test": ("000001", "000002", "000003", "000004", "000006", "000008")}, 1194307200),
    "voc2012-trainval": StandIn(2012, _trainval(_TRAINVAL_2012), 1336694400),  # 2012-05-11
}


@dataclass
class VOCObject:
    """An annotated object: class index into `VOC_CLASSES`, 1-based inclusive box and flags."""

    label: int
    box: tuple[int, int, int, int]
    truncated: bool
    difficult: bool
    occluded: bool
    pose: str


def _box_from_mask(mask: np.ndarray) -> tuple[int, int, int, int] | None:
    rows, columns = np.nonzero(mask)
    if rows.size == 0:
        return None
    return int(columns.min()) + 1, int(rows.min()) + 1, int(columns.max()) + 1, int(rows.max()) + 1


def render_image(
    rng: np.random.Generator, size: tuple[int, int] = IMAGE_SIZE, truncated: bool = False, small: bool = False
):
    """One image and its objects: `(PIL image, [VOCObject])`.

    1-3 objects of 36-60 px (VOC class `c` drawn as the synthetic set's class `c`); with
    `truncated` 2-3, the first of which hangs over the left or right border; with `small` a last,
    tiny (difficult) object is added. An object is difficult when its visible box is under
    `DIFFICULT_SIDE` px or more than `OCCLUDED_DIFFICULT` of it is hidden by later ones; one
    that is entirely hidden or outside is not annotated.
    """
    width, height = size
    image = cluttered_background(size, rng)
    plans = []  # (label, box in continuous coordinates, may leave the image)
    for index in range(int(rng.integers(2 if truncated else 1, 4))):
        label = int(rng.integers(len(VOC_CLASSES)))
        shape = CLASS_SPECS[label][0]
        side = rng.uniform(36, 60)
        aspect = rng.uniform(1.6, 2.0) if shape == "bar" else rng.uniform(0.75, 1.33)
        w, h = side * math.sqrt(aspect), side / math.sqrt(aspect)
        if truncated and index == 0:  # 25-40 % of the width outside the image, on a random side
            outside = rng.uniform(0.25, 0.4) * w
            x1 = -outside if rng.random() < 0.5 else width - w + outside
        else:
            x1 = rng.uniform(0, width - w)
        y1 = rng.uniform(0, height - h)
        plans.append((label, (x1, y1, x1 + w, y1 + h)))
    if small:
        side = rng.uniform(8, DIFFICULT_SIDE - 3)
        x1, y1 = rng.uniform(0, width - side), rng.uniform(0, height - side)
        plans.append((int(rng.integers(len(VOC_CLASSES))), (x1, y1, x1 + side, y1 + side)))

    drawn = []  # [label, box, visible mask, drawn pixel count]
    for label, box in plans:
        shape, colour, kind = CLASS_SPECS[label]
        mask = shape_mask(shape, box, size)
        image.paste(Image.fromarray(texture(kind, COLOURS[colour], size, rng)), (0, 0), mask)
        pixels = np.asarray(mask) > 0
        for previous in drawn:
            previous[2][pixels] = False  # a later object occludes the earlier ones
        drawn.append([label, box, pixels.copy(), int(pixels.sum())])

    objects = []
    for label, box, visible, area in drawn:
        corners = _box_from_mask(np.asarray(shape_mask(CLASS_SPECS[label][0], box, size)) > 0)
        if corners is None or visible.sum() == 0:
            continue  # entirely hidden or outside: not annotated
        xmin, ymin, xmax, ymax = corners
        hidden = 1.0 - visible.sum() / area
        is_truncated = box[0] < 0 or box[1] < 0 or box[2] > width or box[3] > height
        difficult = min(xmax - xmin + 1, ymax - ymin + 1) < DIFFICULT_SIDE or hidden > OCCLUDED_DIFFICULT
        pose = POSES[int(rng.integers(len(POSES)))]
        objects.append(VOCObject(label, corners, bool(is_truncated), bool(difficult), bool(hidden > 0.05), pose))
    return image, objects


def _draw(rng: np.random.Generator, truncated: bool, small: bool):
    """[`render_image`][rambo.detection.stand_in.render_image], drawn again (same stream, so still deterministic) until
    the image has a plain object (neither truncated nor difficult) and the truncated / difficult one asked for."""
    for _ in range(100):
        image, objects = render_image(rng, IMAGE_SIZE, truncated=truncated, small=small)
        if (
            any(not (obj.truncated or obj.difficult) for obj in objects)
            and (not truncated or any(obj.truncated for obj in objects))
            and (not small or any(obj.difficult for obj in objects))
        ):
            return image, objects
    raise RuntimeError("could not draw an image with the objects asked for")  # not reached in practice


def _element(parent: ET.Element, tag: str, text=None) -> ET.Element:
    child = ET.SubElement(parent, tag)
    if text is not None:
        child.text = str(text)
    return child


def annotation_xml(year: int, image_id: str, size: tuple[int, int], objects: list[VOCObject], flickr_id: int) -> bytes:
    """The `Annotations/<id>.xml` of `year`'s format: tab-indented, no XML declaration."""
    width, height = size
    root = ET.Element("annotation")
    if year == 2007:
        _element(root, "folder", "VOC2007")
        _element(root, "filename", f"{image_id}.jpg")
        source = _element(root, "source")
        _element(source, "database", "The VOC2007 Database")
        _element(source, "annotation", "PASCAL VOC2007")
        _element(source, "image", "flickr")
        _element(source, "flickrid", flickr_id)
        owner = _element(root, "owner")
        _element(owner, "flickrid", "RaMBO stand-in")
        _element(owner, "name", "?")
        size_node = _element(root, "size")
        for tag, value in (("width", width), ("height", height), ("depth", 3)):
            _element(size_node, tag, value)
        _element(root, "segmented", 0)
        for obj in objects:
            node = _element(root, "object")
            _element(node, "name", VOC_CLASSES[obj.label])
            _element(node, "pose", obj.pose)
            _element(node, "truncated", int(obj.truncated))
            _element(node, "difficult", int(obj.difficult))
            bndbox = _element(node, "bndbox")
            for tag, value in zip(("xmin", "ymin", "xmax", "ymax"), obj.box):
                _element(bndbox, tag, value)
    else:  # the 2008+ files list every element's children in alphabetical order
        _element(root, "filename", f"{image_id}.jpg")
        _element(root, "folder", f"VOC{year}")
        for obj in objects:
            node = _element(root, "object")
            _element(node, "name", VOC_CLASSES[obj.label])
            bndbox = _element(node, "bndbox")
            for tag, value in sorted(zip(("xmin", "ymin", "xmax", "ymax"), obj.box)):
                _element(bndbox, tag, value)
            _element(node, "difficult", int(obj.difficult))
            _element(node, "occluded", int(obj.occluded))
            _element(node, "pose", obj.pose)
            _element(node, "truncated", int(obj.truncated))
        _element(root, "segmented", 0)
        size_node = _element(root, "size")
        for tag, value in (("depth", 3), ("height", height), ("width", width)):
            _element(size_node, tag, value)
        source = _element(root, "source")
        _element(source, "annotation", f"PASCAL VOC{image_id[:4]}")
        _element(source, "database", f"The VOC{image_id[:4]} Database")
        _element(source, "image", "flickr")
    ET.indent(root, space="\t")
    return (ET.tostring(root, encoding="unicode") + "\n").encode()


def _image_number(image_id: str) -> int:
    return int(image_id.replace("_", ""))


def voc_files(name: str, seed: int = 0) -> dict[str, bytes]:
    """The members of stand-in tar `name` (a key of `STAND_INS`), path -> bytes."""
    spec = STAND_INS[name]
    folder = f"VOCdevkit/VOC{spec.year}"
    files: dict[str, bytes] = {}
    annotations: dict[str, list[VOCObject]] = {}
    for set_name, ids in spec.image_sets.items():
        if set_name == "trainval":
            continue  # the union of train and val, drawn there
        for position, image_id in enumerate(ids):
            rng = np.random.default_rng([seed, spec.year, _image_number(image_id)])
            # Every set gets truncated objects (positions 1, 4, ...) and difficult ones (2, 5, ...).
            image, objects = _draw(rng, truncated=position % 3 == 1, small=position % 3 == 2)
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=92)
            files[f"{folder}/JPEGImages/{image_id}.jpg"] = buffer.getvalue()
            flickr_id = int(rng.integers(10_000_000, 400_000_000))
            xml = annotation_xml(spec.year, image_id, IMAGE_SIZE, objects, flickr_id)
            files[f"{folder}/Annotations/{image_id}.xml"] = xml
            annotations[image_id] = objects
    main = f"{folder}/ImageSets/Main"
    for set_name, ids in spec.image_sets.items():
        files[f"{main}/{set_name}.txt"] = "".join(f"{image_id}\n" for image_id in ids).encode()
        for label, class_name in enumerate(VOC_CLASSES):
            rows = []
            for image_id in ids:
                flags = [obj.difficult for obj in annotations[image_id] if obj.label == label]
                present = -1 if not flags else 0 if all(flags) else 1
                rows.append(f"{image_id} {present:2d}\n")
            files[f"{main}/{class_name}_{set_name}.txt"] = "".join(rows).encode()
    return files


def write_archives(out_dir: Path | str, seed: int = 0) -> list[Path]:
    """Write the stand-in of every tar of `ARCHIVES` into `out_dir`.

    Returns their paths, in the table's order. Each is written atomically; existing files of those
    names are replaced. Same `seed`, same bytes.
    """
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed}")
    if set(ARCHIVES) != set(STAND_INS):
        raise RuntimeError(f"the download table names {sorted(ARCHIVES)}; stand-ins exist for {sorted(STAND_INS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        write_tar(out_dir / item.filename, voc_files(name, int(seed)), STAND_INS[name].mtime)
        for name, item in ARCHIVES.items()
    ]


def main(argv=None) -> int:
    return stand_in_main(
        "python -m rambo.detection.stand_in",
        "Write small stand-ins of the Pascal VOC 2007 / 2012 tars (official format and layout).",
        write_archives,
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
