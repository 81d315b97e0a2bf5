"""Small stand-ins of the real retrieval datasets' downloads, in their archive formats and layouts.

`write_archives(out_dir, seed=0)` writes into `out_dir` exactly the files that the download
table (`rambo.retrieval.datasets.download.DATASETS`) names, each small, so that a smoke test
(CI) can run the real path: download from a `file://` URL, MD5 check, extraction, loader,
training. They extract to what the official archives extract to:

* `Stanford_Online_Products.zip` -> `Stanford_Online_Products/` with `Ebay_train.txt`,
  `Ebay_test.txt`, `Ebay_info.txt` (header `image_id class_id super_class_id path`) and
  `<super-class>_final/<product id>_<n>.JPG`: 4 of the 12 real super-classes (real ids and names),
  5 classes x 4 images each for train and again for test. Class ids are 1-based and grouped by
  super-class, train classes first and test classes after them (disjoint); image ids continue
  from train into test, as in the real files.
* `CUB_200_2011.tgz` -> `CUB_200_2011/` with `classes.txt`, `images.txt`,
  `image_class_labels.txt`, `train_test_split.txt`, `bounding_boxes.txt` and
  `images/<NNN.Name>/<Name>_<NNNN>_<n>.jpg`: 10 real classes x 6 images, 5 of the first 100
  (001-005, train in the metric-learning split) and 5 of the last 100 (101-105, test); `load_cub`
  splits the listed classes in halves, so it picks exactly those.
* `img.zip` -> `img/<MEN|WOMEN>/<Category>/id_XXXXXXXX/NN_N_<view>.jpg` and
  `list_eval_partition.txt` (a count line, the header `image_name item_id evaluation_status`,
  then padded rows): 4 real categories, each with 4 train items of 8 images and 2 test items whose
  8 images are 3 query + 5 gallery (query and gallery share the items; train items are other ones).

Why these sizes: the training configs draw batches of 4 images per class (SOP, CUB) or 8 (In-shop)
and hold 20 % of the training classes of each super-label out for validation (class-disjoint).
With `batch_size=16` a CUB batch needs 4 distinct classes after that hold-out, hence 5 training
classes (4 would leave 3); SOP and In-shop keep 4 and 3 classes per super-label, and every In-shop
item has the 8 images a batch takes of it.

Images are 40 x 48 px JPEGs: a shape (per super-class / category; per class for CUB) in the
class's two colours with class-specific stripes, on a random background, with random pose, scale,
colour jitter and noise, so the task is learnable. Everything comes from
`numpy.random.default_rng([seed, dataset, class, image])`, and the archives are written with
fixed timestamps, owners and permissions, members sorted (folders before their contents) and a
gzip header without name or time: the same seed gives the same bytes, hence the same MD5, with
the same Pillow / zlib builds (their JPEG and deflate encoders decide the bytes).

CLI: `python -m rambo.retrieval.datasets.stand_in OUT_DIR [--seed N]` prints the paths written.
"""

from __future__ import annotations

import colorsys
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from rambo.harness.archive_writer import stand_in_main, write_tar, write_zip
from rambo.harness.atomic import atomic_path

from .download import DATASETS
from .synthetic import SHAPE_FAMILIES, shape_mask

__all__ = ["IMAGE_SIZE", "cub_files", "inshop_files", "main", "sop_files", "write_archives"]

IMAGE_SIZE = (40, 48)  # (width, height): not square, as the real photos are not
_TAG = {"sop": 1, "cub": 2, "inshop": 3}  # the dataset's entry of every random stream

# SOP: (super_class_id, name) of the 12 real super-classes, ids as in Ebay_*.txt; 5 classes x 4 images each.
SOP_SUPER_CLASSES = ((1, "bicycle"), (3, "chair"), (7, "lamp"), (8, "mug"))
SOP_CLASSES_PER_SUPER = 5
SOP_IMAGES_PER_CLASS = 4
# CUB: real class folders; load_cub trains on the first half of the listed ids, tests on the rest.
CUB_CLASSES = (
    (1, "Black_footed_Albatross"),
    (2, "Laysan_Albatross"),
    (3, "Sooty_Albatross"),
    (4, "Groove_billed_Ani"),
    (5, "Crested_Auklet"),
    (101, "White_Pelican"),
    (102, "Western_Wood_Pewee"),
    (103, "Sayornis"),
    (104, "American_Pipit"),
    (105, "Whip_poor_Will"),
)
CUB_IMAGES_PER_CLASS = 6
# In-shop: real category folders; per category 4 train items and 2 query/gallery items.
INSHOP_CATEGORIES = ("MEN/Denim", "MEN/Tees_Tanks", "WOMEN/Blouses_Shirts", "WOMEN/Dresses")
INSHOP_TRAIN_ITEMS, INSHOP_TEST_ITEMS = 4, 2
INSHOP_VIEWS = tuple(f"{v:02d}_{view}" for v in (1, 2) for view in ("1_front", "2_side", "3_back", "4_full"))
INSHOP_QUERIES = 3  # of a test item's 8 images; the other 5 are gallery images

# Archive timestamps (around the datasets' releases); zip stores local time, tar a POSIX time.
_SOP_DATE = (2016, 4, 1, 0, 0, 0)
_INSHOP_DATE = (2016, 7, 1, 0, 0, 0)
_CUB_MTIME = 1306886400  # 2011-06-01 00:00 UTC


# ---------------------------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------------------------

SHAPES = SHAPE_FAMILIES[:6]  # the synthetic set's shapes (its shape_mask draws them)


@dataclass(frozen=True)
class Look:
    """A class's fixed appearance: shape, body and stripe colours (HSV), stripe direction and period."""

    shape: int
    body: tuple[float, float, float]
    stripes: tuple[float, float, float]
    angle: float
    period: float


def class_look(rng: np.random.Generator, shape: int) -> Look:
    """A random look of shape `shape` (index into `SHAPES`)."""
    hue = rng.random()
    return Look(
        shape=shape,
        body=(hue, rng.uniform(0.6, 1.0), rng.uniform(0.6, 1.0)),
        stripes=((hue + rng.uniform(0.3, 0.7)) % 1.0, rng.uniform(0.5, 1.0), rng.uniform(0.3, 1.0)),
        angle=rng.uniform(0, np.pi),
        period=rng.uniform(0.35, 0.8),
    )


def _rgb(hsv, rng: np.random.Generator | None = None) -> np.ndarray:
    hue, saturation, value = hsv
    if rng is not None:  # colour jitter of one view
        hue += rng.uniform(-0.03, 0.03)
        saturation *= rng.uniform(0.85, 1.1)
        value *= rng.uniform(0.8, 1.15)
    return np.array(colorsys.hsv_to_rgb(hue % 1.0, min(max(saturation, 0.0), 1.0), min(max(value, 0.0), 1.0)))


def render(
    look: Look, rng: np.random.Generator, size: tuple[int, int] = IMAGE_SIZE
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """One view of `look`: `(uint8 [height, width, 3], object box (x, y, width, height) in pixels)`."""
    width, height = size
    x = (np.arange(width) + 0.5) / width * 2 - 1
    y = (np.arange(height) + 0.5) / height * 2 - 1
    x, y = np.meshgrid(x, y)
    # Background: a dull colour with a gradient in a random direction.
    direction = rng.uniform(0, 2 * np.pi)
    ramp = (x * np.cos(direction) + y * np.sin(direction))[..., None]
    base = _rgb((rng.random(), rng.uniform(0.0, 0.3), rng.uniform(0.3, 0.8)))
    image = np.clip(base + rng.uniform(0.05, 0.2) * ramp, 0, 1)
    # Pose: rotation, scale and position of the object.
    theta = rng.uniform(-0.35, 0.35)
    scale = rng.uniform(0.55, 0.8)
    cx, cy = rng.uniform(-0.15, 0.15, size=2)
    u = ((x - cx) * np.cos(theta) + (y - cy) * np.sin(theta)) / scale
    v = (-(x - cx) * np.sin(theta) + (y - cy) * np.cos(theta)) / scale
    inside = shape_mask(look.shape, u, v)
    striped = inside & (np.sin(2 * np.pi * (u * np.cos(look.angle) + v * np.sin(look.angle)) / look.period) > 0)
    image[inside] = _rgb(look.body, rng)
    image[striped] = _rgb(look.stripes, rng)
    image = image + rng.normal(0, 0.025, size=image.shape)
    rows, columns = np.nonzero(inside)
    box = (int(columns.min()), int(rows.min()), int(np.ptp(columns)) + 1, int(np.ptp(rows)) + 1)
    return np.round(np.clip(image, 0, 1) * 255).astype(np.uint8), box


def jpeg(pixels: np.ndarray, quality: int = 90) -> bytes:
    """`pixels` (`uint8 [H, W, 3]`) as JPEG bytes (no EXIF, no timestamps: deterministic)."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def _view(seed: int, dataset: str, look: Look, class_key: int, image: int) -> tuple[bytes, tuple[int, int, int, int]]:
    pixels, box = render(look, np.random.default_rng([seed, _TAG[dataset], class_key, image]))
    return jpeg(pixels), box


def _look(seed: int, dataset: str, class_key: int, shape: int) -> Look:
    return class_look(np.random.default_rng([seed, _TAG[dataset], class_key]), shape)


def _distinct(rng: np.random.Generator, low: int, high: int, count: int) -> list[int]:
    """`count` distinct integers in `[low, high)`, in the order drawn."""
    return [low + int(v) for v in rng.choice(high - low, size=count, replace=False)]


# ---------------------------------------------------------------------------------------------
# Dataset contents: {path inside the archive: bytes}
# ---------------------------------------------------------------------------------------------


def _lines(rows) -> bytes:
    return "".join(f"{row}\n" for row in rows).encode()


def sop_files(seed: int = 0) -> dict[str, bytes]:
    """The members of the SOP stand-in zip (`Stanford_Online_Products/...`)."""
    folder = "Stanford_Online_Products"
    per_split = len(SOP_SUPER_CLASSES) * SOP_CLASSES_PER_SUPER
    rng = np.random.default_rng([seed, _TAG["sop"]])
    products = iter(_distinct(rng, 110_000_000_000, 400_000_000_000, 2 * per_split))  # eBay item numbers
    files: dict[str, bytes] = {}
    rows: dict[str, list[str]] = {"train": [], "test": []}
    class_id = image_id = 0
    for split in ("train", "test"):
        for shape, (super_id, super_name) in enumerate(SOP_SUPER_CLASSES):
            for _ in range(SOP_CLASSES_PER_SUPER):
                class_id += 1
                product = next(products)
                look = _look(seed, "sop", class_id, shape)
                for n in range(SOP_IMAGES_PER_CLASS):
                    image_id += 1
                    path = f"{super_name}_final/{product}_{n}.JPG"
                    files[f"{folder}/{path}"] = _view(seed, "sop", look, class_id, n)[0]
                    rows[split].append(f"{image_id} {class_id} {super_id} {path}")
    header = "image_id class_id super_class_id path"
    files[f"{folder}/Ebay_train.txt"] = _lines([header, *rows["train"]])
    files[f"{folder}/Ebay_test.txt"] = _lines([header, *rows["test"]])
    files[f"{folder}/Ebay_info.txt"] = _lines([header, *rows["train"], *rows["test"]])
    return files


def cub_files(seed: int = 0) -> dict[str, bytes]:
    """The members of the CUB stand-in tgz (`CUB_200_2011/...`)."""
    folder = "CUB_200_2011"
    rng = np.random.default_rng([seed, _TAG["cub"]])
    files: dict[str, bytes] = {}
    classes, images, labels, splits, boxes = [], [], [], [], []
    image_id = 0
    for shape, (class_id, name) in enumerate(CUB_CLASSES):
        folder_name = f"{class_id:03d}.{name}"
        classes.append(f"{class_id} {folder_name}")
        look = _look(seed, "cub", class_id, shape % len(SHAPES))
        # Real file names: the species title-cased, a 4-digit number and a photo id.
        stem = "_".join(part[:1].upper() + part[1:] for part in name.split("_"))
        numbers = sorted(_distinct(rng, 1, 150, CUB_IMAGES_PER_CLASS))
        photos = _distinct(rng, 1, 800_000, CUB_IMAGES_PER_CLASS)
        half = CUB_IMAGES_PER_CLASS // 2  # the official train_test_split.txt: about half of each class
        training = rng.permutation([1] * half + [0] * (CUB_IMAGES_PER_CLASS - half))
        for k, (number, photo) in enumerate(zip(numbers, photos)):
            image_id += 1
            relative = f"{folder_name}/{stem}_{number:04d}_{photo}.jpg"
            data, (x, y, w, h) = _view(seed, "cub", look, class_id, k)
            files[f"{folder}/images/{relative}"] = data
            images.append(f"{image_id} {relative}")
            labels.append(f"{image_id} {class_id}")
            splits.append(f"{image_id} {int(training[k])}")
            boxes.append(f"{image_id} {x:.1f} {y:.1f} {w:.1f} {h:.1f}")
    for name, rows in (
        ("classes", classes),
        ("images", images),
        ("image_class_labels", labels),
        ("train_test_split", splits),
        ("bounding_boxes", boxes),
    ):
        files[f"{folder}/{name}.txt"] = _lines(rows)
    return files


def inshop_files(seed: int = 0) -> tuple[dict[str, bytes], bytes]:
    """The members of the In-shop stand-in `img.zip` and the bytes of `list_eval_partition.txt`."""
    rng = np.random.default_rng([seed, _TAG["inshop"]])
    slots = [
        (category, split)
        for category in INSHOP_CATEGORIES
        for split in ("train",) * INSHOP_TRAIN_ITEMS + ("test",) * INSHOP_TEST_ITEMS
    ]
    # Item numbers spread over the real range, train and test interleaved as in the real file.
    numbers = sorted(_distinct(rng, 1, 8000, len(slots)))
    files: dict[str, bytes] = {}
    rows = []
    for number, slot in zip(numbers, rng.permutation(len(slots))):
        category, split = slots[slot]
        item = f"id_{number:08d}"
        look = _look(seed, "inshop", number, INSHOP_CATEGORIES.index(category))
        queries = set(rng.permutation(len(INSHOP_VIEWS))[:INSHOP_QUERIES].tolist()) if split == "test" else set()
        for k, view in enumerate(INSHOP_VIEWS):
            name = f"img/{category}/{item}/{view}.jpg"
            files[name] = _view(seed, "inshop", look, number, k)[0]
            status = "train" if split == "train" else "query" if k in queries else "gallery"
            rows.append(f"{name:<63} {item:<15} {status}")  # the real file pads its columns with spaces
    partition = _lines([str(len(rows)), "image_name item_id evaluation_status", *rows])
    return files, partition


def _write_bytes(path: Path, data: bytes) -> Path:
    with atomic_path(path) as partial:
        partial.write_bytes(data)
    return path


def write_archives(out_dir: Path | str, seed: int = 0) -> list[Path]:
    """Write the stand-in of every file of `DATASETS` into `out_dir`.

    Returns their paths, in the table's order (cub, sop, inshop): `CUB_200_2011.tgz`,
    `Stanford_Online_Products.zip`, `img.zip`, `list_eval_partition.txt`. Each is written
    atomically; existing files of those names are replaced. Same `seed`, same bytes.
    """
    if int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed}")
    seed = int(seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    inshop_images, partition = inshop_files(seed)  # both In-shop files come from one draw
    writers: dict[str, Callable[[Path], Path]] = {
        "CUB_200_2011.tgz": lambda path: write_tar(path, cub_files(seed), _CUB_MTIME, gzipped=True),
        "Stanford_Online_Products.zip": lambda path: write_zip(path, sop_files(seed), _SOP_DATE),
        "img.zip": lambda path: write_zip(path, inshop_images, _INSHOP_DATE),
        "list_eval_partition.txt": lambda path: _write_bytes(path, partition),
    }
    names = [item.filename for files in DATASETS.values() for item in files]
    unknown = sorted(set(names) - set(writers))
    if unknown:
        raise RuntimeError(f"the download table names {unknown}, which have no stand-in")
    return [writers[name](out_dir / name) for name in names]


def main(argv: list[str] | None = None) -> int:
    return stand_in_main(
        "python -m rambo.retrieval.datasets.stand_in",
        "Write small stand-ins of the CUB, SOP and In-shop downloads (official formats and layouts).",
        write_archives,
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
