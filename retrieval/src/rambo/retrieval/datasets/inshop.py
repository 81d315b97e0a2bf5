"""In-shop Clothes Retrieval (DeepFashion, Liu et al. 2016): train, query and gallery splits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .image_retrieval_dataset import ImageRetrievalDataset
from .layout import check_split, read_rows, resolve_root

INSHOP_FOLDER = "Eval"
INSHOP_SPLITS = ("train", "query", "gallery")


def find_image_root(root: Path, index_root: Path) -> Path:
    """The folder holding `img/` (the paths in the index start with "img/"): `root`, the index's
    folder, or `root/Img` (the official Drive folder's `Img/img.zip` extracted where it lies).

    `img_highres/` alone (the high-resolution release, `img_highres.zip`) is refused: the paper's
    numbers use `img.zip`, and the index's paths name `img/`.
    """
    candidates = list(dict.fromkeys((root, index_root, root / "Img")))
    for folder in candidates:
        if (folder / "img").is_dir():
            return folder
    highres = next((folder / "img_highres" for folder in candidates if (folder / "img_highres").is_dir()), None)
    if highres is not None:
        raise FileNotFoundError(
            f"inshop: found {highres} but no img/ folder: that is the high-resolution release "
            f"(img_highres.zip). The paper and the index use img.zip (Img/img.zip of the In-shop "
            f"Drive folder): download it with `python -m rambo.retrieval.datasets.download inshop {root}`"
        )
    raise FileNotFoundError(
        f"inshop: no img/ folder in {' or '.join(str(c) for c in candidates)} (extract Img/img.zip of the "
        f"In-shop Drive folder there, or run `python -m rambo.retrieval.datasets.download inshop {root}`)"
    )


def load_inshop(root: Path | str, split: str, transform: Callable | None = None) -> ImageRetrievalDataset:
    """Read `root/list_eval_partition.txt` (or `root/Eval/...`), images under `root/img/`
    (or `root/Img/img/`, the official folder's layout:
    [`find_image_root`][rambo.retrieval.datasets.inshop.find_image_root]).

    The file has a count line, a header line, then `image_name item_id evaluation_status` rows
    (paper 5.1: 25,882 train images of 3,997 items; 14,218 query + 12,612 gallery images of 3,985
    items). Super-label = the item's category folder, e.g. `img/MEN/Denim/id_00000080/...` ->
    `MEN/Denim` (23 of them). Query and gallery share one label map (the items of both, in
    item-id order) so a query's label equals its gallery matches' label; train gets its own
    `0..C-1`. Super-labels use one map over the whole file.
    """
    check_split(split, INSHOP_SPLITS, "inshop")
    index_root = resolve_root(root, "list_eval_partition.txt", INSHOP_FOLDER, "inshop")
    index_file = index_root / "list_eval_partition.txt"
    rows = read_rows(index_file, columns=3, skip=2)
    if not rows:
        raise ValueError(f"{index_file} lists no images")
    statuses = {fields[2] for _, fields in rows}
    unknown = statuses - set(INSHOP_SPLITS)
    if unknown:
        raise ValueError(f"{index_file}: unknown evaluation_status {sorted(unknown)}; expected {INSHOP_SPLITS}")

    def category(number: int, image_name: str) -> str:
        parts = Path(image_name).parts
        if len(parts) < 4:
            raise ValueError(f"{index_file}:{number}: expected img/<GENDER>/<Category>/<item>/..., got {image_name!r}")
        return f"{parts[1]}/{parts[2]}"

    categories = sorted({category(number, fields[0]) for number, fields in rows})
    label_splits = ("train",) if split == "train" else ("query", "gallery")
    items = sorted({fields[1] for _, fields in rows if fields[2] in label_splits})
    item_label = {item: i for i, item in enumerate(items)}
    category_label = {name: i for i, name in enumerate(categories)}
    selected = [(number, fields) for number, fields in rows if fields[2] == split]
    if not selected:
        raise ValueError(f"{index_file} lists no {split} images")
    image_root = find_image_root(Path(root), index_root)
    return ImageRetrievalDataset(
        [image_root / fields[0] for _, fields in selected],
        [item_label[fields[1]] for _, fields in selected],
        [category_label[category(number, fields[0])] for number, fields in selected],
        transform=transform,
    )
