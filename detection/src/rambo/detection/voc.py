"""Pascal VOC in its official layout: `Annotations/*.xml`, `JPEGImages/`, `ImageSets/Main/*.txt`.

The XML is parsed here rather than through `torchvision.datasets.VOCDetection` because its v2
wrapper drops the `difficult` flag, which the VOC protocol needs: difficult objects are kept out
of the training targets and ignored (neither true nor false positives) in evaluation.

Images are read as RGB values with [`rambo.harness.images.rgb_image`][rambo.harness.images.rgb_image] (16-bit grayscale
scaled to 8 bits; integer and floating-point images refused); one that cannot be read is an
[`UnreadableImage`][rambo.harness.images.UnreadableImage] naming its file.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torchvision.transforms.functional import pil_to_tensor

from rambo.harness.config_check import InputError
from rambo.harness.images import rgb_image

VOC_CLASSES = (
    "aeroplane",
    "bicycle",
    "bird",
    "boat",
    "bottle",
    "bus",
    "car",
    "cat",
    "chair",
    "cow",
    "diningtable",
    "dog",
    "horse",
    "motorbike",
    "person",
    "pottedplant",
    "sheep",
    "sofa",
    "train",
    "tvmonitor",
)


@dataclass
class VOCAnnotation:
    """One image's annotation: `boxes [K, 4]` (x1, y1, x2, y2 in pixels), class names, difficult flags."""

    image_id: str
    filename: str
    width: int
    height: int
    boxes: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), dtype=np.float32))
    names: list[str] = field(default_factory=list)
    difficult: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


class BadAnnotation(InputError, ValueError):
    """An `Annotations/<id>.xml` that cannot be read as a VOC annotation: the message names the file, what is
    wrong and what to do (the apps print it as one `error:` line, exit code 2); `path` and `reason` (what is
    wrong) apart, for a list of bad files."""

    def __init__(self, message: str, path: Path | None = None, reason: str | None = None):
        super().__init__(message)
        self.path, self.reason = path, message if reason is None else reason


def bad_annotation(path: Path, problem: str) -> BadAnnotation:
    """The error of the annotation `path`: `<path>: <problem>; <what to do>`."""
    return BadAnnotation(
        f"{path}: {problem}; replace it with a whole copy (download or generate the dataset again), or take "
        f"image {path.stem} out of {path.parent.parent / 'ImageSets' / 'Main'}/*.txt",
        path,
        problem,
    )


def _text(node: ET.Element, tag: str, path: Path) -> str:
    child = node.find(tag)
    if child is None or child.text is None or not child.text.strip():
        raise bad_annotation(path, f"<{node.tag}> has no <{tag}>")
    return child.text.strip()


def _number(node: ET.Element, tag: str, path: Path) -> float:
    text = _text(node, tag, path)
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value):
        raise bad_annotation(path, f"<{node.tag}><{tag}> is {text!r}, not a number")
    return value


def parse_annotation(path: str | Path) -> VOCAnnotation:
    """Read one `Annotations/<id>.xml`.

    VOC boxes are 1-based inclusive pixel indices; they are returned as continuous corners
    `(xmin - 1, ymin - 1, xmax, ymax)` so that a box of one pixel has width 1, which is what
    torchvision's detector and the IoU below assume. A missing `<difficult>` means 0 (VOC 2012
    omits it for some objects).
    """
    path = Path(path)
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as error:
        raise bad_annotation(path, f"not a valid VOC annotation XML ({error})") from None
    except FileNotFoundError:
        raise bad_annotation(path, "no such file (the annotation of an image the image set lists)") from None
    except OSError as error:
        raise bad_annotation(path, f"cannot be read ({error.strerror or error})") from None
    size = root.find("size")
    if size is None:
        raise bad_annotation(path, "no <size> (the image's <width> and <height>)")
    boxes, names, difficult = [], [], []
    for number, obj in enumerate(root.findall("object"), 1):
        bndbox = obj.find("bndbox")
        if bndbox is None:
            raise bad_annotation(path, f"<object> {number} has no <bndbox>")
        x1, y1, x2, y2 = (_number(bndbox, tag, path) for tag in ("xmin", "ymin", "xmax", "ymax"))
        if x2 < x1 or y2 < y1:
            raise bad_annotation(path, f"box ({x1}, {y1}, {x2}, {y2}) of <object> {number} has max < min")
        boxes.append((x1 - 1.0, y1 - 1.0, x2, y2))
        names.append(_text(obj, "name", path))
        flag = obj.find("difficult")
        difficult.append(flag is not None and flag.text is not None and flag.text.strip() == "1")
    return VOCAnnotation(
        image_id=path.stem,
        filename=_text(root, "filename", path),
        width=int(_number(size, "width", path)),
        height=int(_number(size, "height", path)),
        boxes=np.asarray(boxes, dtype=np.float32).reshape(-1, 4),
        names=names,
        difficult=np.asarray(difficult, dtype=bool),
    )


def read_image_set(root: str | Path, image_set: str) -> list[str]:
    """Image ids listed in `ROOT/ImageSets/Main/<image_set>.txt` (e.g. `trainval`, `test`)."""
    root = Path(root)
    path = root / "ImageSets" / "Main" / f"{image_set}.txt"
    if not path.is_file():
        hint = ""
        # data.root=.../VOC2007 or .../VOCdevkit where the config appends VOCdevkit/VOC2007 to it
        given = root.parents[1] if root.parent.name == "VOCdevkit" and len(root.parents) > 1 else None
        if given is not None and not root.exists() and ((given / "ImageSets").is_dir() or (given / root.name).is_dir()):
            hint = f"; {given} looks like a VOC folder itself: data.root is the folder that holds VOCdevkit/{root.name}"
        raise ValueError(f"image set file not found: {path} (is {root} a VOC folder like VOCdevkit/VOC2007?){hint}")
    return [line.split()[0] for line in path.read_text().splitlines() if line.strip()]


class VOCDetectionDataset(torch.utils.data.Dataset):
    """Images and targets for torchvision's detectors from one or more VOC folders.

    Args:
        roots: VOC folders (`VOCdevkit/VOC2007`, ...); several make e.g. the 07+12 trainval set.
        image_set: the `ImageSets/Main` list to read in every root.
        classes: class names; label `c + 1` is `classes[c]` (torchvision keeps 0 for background).
        train: when True, difficult objects are left out of the targets (VOC protocol); in
            evaluation they stay, flagged, so that the evaluator can ignore them.
        max_images: keep only the first `max_images` ids (tiny profiles); None keeps all.

    Item: `(image [3, H, W] float in [0, 1], target)` with `target` holding `boxes [K, 4]`
    float32, `labels [K]` int64 in 1..C, `difficult [K]` bool and `image_id` (str).
    """

    def __init__(self, roots, image_set: str, classes=VOC_CLASSES, train: bool = False, max_images: int | None = None):
        if isinstance(roots, (str, Path)):
            roots = [roots]
        self.classes = tuple(classes)
        self.class_to_label = {name: index + 1 for index, name in enumerate(self.classes)}
        self.train = train
        self.items: list[tuple[Path, str]] = [
            (Path(root), image_id) for root in roots for image_id in read_image_set(root, image_set)
        ]
        if max_images is not None:
            self.items = self.items[:max_images]
        if not self.items:
            raise ValueError(f"no images in image set {image_set!r} of {list(map(str, roots))}")

    def __len__(self) -> int:
        return len(self.items)

    def image_sizes(self) -> list[tuple[int, int]]:
        """`(width, height)` of every image from its annotation's `<size>` (no image decoded);
        read once, then kept."""
        if getattr(self, "_sizes", None) is None:
            self._sizes = [(a.width, a.height) for a in map(self.annotation, range(len(self)))]
        return self._sizes

    def aspect_ratio_groups(self) -> list[int]:
        """mmdetection's group flag per image: 1 when width / height > 1, else 0
        ([`group_sampler`][rambo.detection.group_sampler])."""
        from .group_sampler import aspect_ratio_flags

        return aspect_ratio_flags(self.image_sizes())

    def annotation(self, index: int) -> VOCAnnotation:
        root, image_id = self.items[index]
        return parse_annotation(root / "Annotations" / f"{image_id}.xml")

    def __getitem__(self, index: int):
        root, _ = self.items[index]
        annotation = self.annotation(index)
        unknown = sorted(set(annotation.names) - set(self.class_to_label))
        if unknown:
            path = root / "Annotations" / f"{annotation.image_id}.xml"
            raise bad_annotation(path, f"classes {unknown} are not in the class list {list(self.classes)}")
        keep = ~annotation.difficult if self.train else np.ones(len(annotation.names), dtype=bool)
        pixels = pil_to_tensor(rgb_image(root / "JPEGImages" / annotation.filename)).float() / 255.0
        target = {
            "boxes": torch.from_numpy(annotation.boxes[keep]).reshape(-1, 4),
            "labels": torch.tensor(
                [self.class_to_label[n] for n, k in zip(annotation.names, keep) if k], dtype=torch.int64
            ),
            "difficult": torch.from_numpy(annotation.difficult[keep]),
            "image_id": annotation.image_id,
        }
        return pixels, target


def collate_detection(batch):
    """Keep images and targets as lists: torchvision's detectors take images of different sizes."""
    images, targets = zip(*batch)
    return list(images), list(targets)
