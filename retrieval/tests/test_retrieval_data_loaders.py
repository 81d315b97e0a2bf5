"""The official-layout loaders on tiny fake copies of CUB-200-2011, SOP and In-shop written here."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from rambo.retrieval.datasets import ImageRetrievalDataset, load_cub, load_dataset, load_inshop, load_sop
from rambo.retrieval.datasets.imagefolder import load_imagefolder


def write_jpeg(path: Path, colour: tuple[int, int, int], mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGB", (8, 6), colour)
    (image.convert("L") if mode == "L" else image).save(path, format="JPEG")


def make_sop(root: Path) -> dict[str, list[tuple[int, int, int, str]]]:
    """Stanford_Online_Products/ with Ebay_train.txt / Ebay_test.txt; returns the rows written."""
    folder = root / "Stanford_Online_Products"
    # (image_id, class_id, super_class_id, path); class ids are sparse and interleaved like the real file.
    rows = {
        "train": [
            (1, 1, 1, "bicycle_final/111_0.JPG"),
            (2, 1, 1, "bicycle_final/111_1.JPG"),
            (3, 7, 3, "chair_final/777_0.JPG"),
            (4, 3, 1, "bicycle_final/333_0.JPG"),
            (5, 7, 3, "chair_final/777_1.JPG"),
        ],
        "test": [
            (6, 20, 2, "cabinet_final/2020_0.JPG"),
            (7, 12, 3, "chair_final/1212_0.JPG"),
            (8, 20, 2, "cabinet_final/2020_1.JPG"),
        ],
    }
    for split, split_rows in rows.items():
        lines = ["image_id class_id super_class_id path"]
        for image_id, class_id, super_id, path in split_rows:
            write_jpeg(folder / path, (10 * class_id, 5 * super_id, image_id), mode="L" if image_id == 2 else "RGB")
            lines.append(f"{image_id} {class_id} {super_id} {path}")
        (folder / f"Ebay_{split}.txt").write_text("\n".join(lines) + "\n")
    return rows


def make_cub(root: Path, num_classes: int = 4, per_class: int = 2) -> Path:
    """CUB_200_2011/ with classes.txt, images.txt, image_class_labels.txt and images/."""
    folder = root / "CUB_200_2011"
    classes, images, image_labels = [], [], []
    image_id = 0
    for class_id in range(1, num_classes + 1):
        name = f"{class_id:03d}.Bird_{class_id}"
        classes.append(f"{class_id} {name}")
        for k in range(per_class):
            image_id += 1
            relative = f"{name}/Bird_{class_id}_{k}.jpg"
            write_jpeg(folder / "images" / relative, (class_id * 40, k * 60, 0))
            images.append(f"{image_id} {relative}")
            image_labels.append(f"{image_id} {class_id}")
    # The real image_class_labels.txt is in image-id order; shuffle ours to check we join by id.
    image_labels = image_labels[::-1]
    (folder / "classes.txt").write_text("\n".join(classes) + "\n")
    (folder / "images.txt").write_text("\n".join(images) + "\n")
    (folder / "image_class_labels.txt").write_text("\n".join(image_labels) + "\n")
    return folder


INSHOP_ROWS = [
    ("img/MEN/Denim/id_00000080/01_1_front.jpg", "id_00000080", "train"),
    ("img/MEN/Denim/id_00000080/01_2_side.jpg", "id_00000080", "train"),
    ("img/WOMEN/Dresses/id_00000002/02_1_front.jpg", "id_00000002", "train"),
    ("img/WOMEN/Dresses/id_00000007/01_1_front.jpg", "id_00000007", "query"),
    ("img/WOMEN/Dresses/id_00000007/01_2_side.jpg", "id_00000007", "gallery"),
    ("img/MEN/Jackets_Vests/id_00000003/01_1_front.jpg", "id_00000003", "gallery"),
    ("img/MEN/Jackets_Vests/id_00000003/01_3_back.jpg", "id_00000003", "query"),
    ("img/MEN/Jackets_Vests/id_00000003/01_4_full.jpg", "id_00000003", "gallery"),
]


def make_inshop(root: Path, eval_folder: bool = False) -> None:
    """img/<GENDER>/<Category>/<item>/ images + list_eval_partition.txt (count, header, rows)."""
    lines = [str(len(INSHOP_ROWS)), "image_name item_id evaluation_status"]
    for i, (name, item, status) in enumerate(INSHOP_ROWS):
        write_jpeg(root / name, (i * 30, 0, 100))
        # The real file pads the name column with spaces.
        lines.append(f"{name:<60}{item} {status}")
    index = root / "Eval" / "list_eval_partition.txt" if eval_folder else root / "list_eval_partition.txt"
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text("\n".join(lines) + "\n")


def all_items(dataset: ImageRetrievalDataset) -> list:
    return [dataset[i] for i in range(len(dataset))]


def test_dataset_returns_rgb_image_label_and_index(tmp_path):
    write_jpeg(tmp_path / "a.jpg", (255, 0, 0))
    write_jpeg(tmp_path / "b.jpg", (0, 0, 255), mode="L")
    seen = []
    paths = [tmp_path / "a.jpg", str(tmp_path / "b.jpg")]
    dataset = ImageRetrievalDataset(paths, [1, 0], [0, 0], transform=lambda im: seen.append(im.mode) or im.size)
    assert len(dataset) == 2
    assert dataset[1] == ((8, 6), 0, 1)
    assert seen == ["RGB"]  # the grayscale JPEG is converted before the transform
    assert dataset.labels.dtype == torch.long and dataset.labels.tolist() == [1, 0]
    assert dataset.super_labels.tolist() == [0, 0]
    image, label, index = ImageRetrievalDataset([tmp_path / "a.jpg"], [0])[0]
    assert image.mode == "RGB" and image.getpixel((0, 0))[0] > 200 and (label, index) == (0, 0)
    assert ImageRetrievalDataset([tmp_path / "a.jpg"], [0]).super_labels is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(image_paths=["a", "b"], labels=[0]), "2 image paths but 1 labels"),
        (dict(image_paths=["a"], labels=[0], super_labels=[0, 1]), "super-labels"),
        (dict(image_paths=["a"], labels=[-1]), "labels must be >= 0"),
        (dict(image_paths=["a"], labels=[0], transform="resize"), "transform must be callable"),
    ],
)
def test_dataset_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ImageRetrievalDataset(**kwargs)


def test_dataset_index_out_of_range(tmp_path):
    write_jpeg(tmp_path / "a.jpg", (1, 2, 3))
    with pytest.raises(IndexError):
        ImageRetrievalDataset([tmp_path / "a.jpg"], [0])[1]


@pytest.mark.parametrize("use_subfolder", [True, False])
def test_sop_splits_labels_and_super_labels(tmp_path, use_subfolder):
    rows = make_sop(tmp_path)
    root = tmp_path if use_subfolder else tmp_path / "Stanford_Online_Products"
    for split, split_rows in rows.items():
        dataset = load_sop(root, split)
        assert [p.relative_to(tmp_path / "Stanford_Online_Products").as_posix() for p in dataset.image_paths] == [
            r[3] for r in split_rows
        ]
        # Brute force: label = position of the raw id among the split's sorted distinct ids.
        class_ids = sorted({r[1] for r in split_rows})
        super_ids = sorted({r[2] for r in split_rows})
        assert dataset.labels.tolist() == [class_ids.index(r[1]) for r in split_rows]
        assert dataset.super_labels.tolist() == [super_ids.index(r[2]) for r in split_rows]
        for image, label, index in all_items(dataset):
            assert image.mode == "RGB" and label == dataset.labels[index]
    assert load_sop(root, "train").labels.tolist() == [0, 0, 2, 1, 2]


def test_cub_first_half_of_classes_train_second_half_test(tmp_path):
    folder = make_cub(tmp_path, num_classes=6, per_class=3)
    train, test = load_cub(tmp_path, "train"), load_cub(folder, "test")
    assert len(train) == len(test) == 9
    train_dirs = {p.parent.name for p in train.image_paths}
    test_dirs = {p.parent.name for p in test.image_paths}
    assert train_dirs == {"001.Bird_1", "002.Bird_2", "003.Bird_3"}
    assert test_dirs == {"004.Bird_4", "005.Bird_5", "006.Bird_6"}
    for dataset in (train, test):
        assert dataset.super_labels is None
        assert sorted(set(dataset.labels.tolist())) == [0, 1, 2]
        for path, label in zip(dataset.image_paths, dataset.labels.tolist()):
            # Brute force: the class folder's number, shifted to 0 within the split.
            class_id = int(path.parent.name.split(".")[0])
            assert label == (class_id - 1) % 3
            assert path.is_file()


@pytest.mark.parametrize("eval_folder", [False, True])
def test_inshop_splits_share_query_gallery_labels(tmp_path, eval_folder):
    make_inshop(tmp_path, eval_folder=eval_folder)
    train = load_inshop(tmp_path, "train")
    query, gallery = load_inshop(tmp_path, "query"), load_inshop(tmp_path, "gallery")
    assert (len(train), len(query), len(gallery)) == (3, 2, 3)
    assert train.labels.tolist() == [1, 1, 0]  # id_00000002 -> 0, id_00000080 -> 1
    # Query and gallery share one map: id_00000003 -> 0, id_00000007 -> 1.
    assert query.labels.tolist() == [1, 0]
    assert gallery.labels.tolist() == [1, 0, 0]
    categories = sorted({f"{Path(n).parts[1]}/{Path(n).parts[2]}" for n, _, _ in INSHOP_ROWS})
    for dataset in (train, query, gallery):
        for path, super_label in zip(dataset.image_paths, dataset.super_labels.tolist()):
            relative = path.relative_to(tmp_path)
            assert categories[super_label] == f"{relative.parts[1]}/{relative.parts[2]}"
            assert path.is_file()
    assert all(image.mode == "RGB" for image, _, _ in all_items(gallery))


def test_load_dataset_dispatches(tmp_path):
    make_sop(tmp_path / "sop")
    make_cub(tmp_path / "cub", num_classes=2, per_class=2)
    make_inshop(tmp_path / "inshop")
    assert len(load_dataset("sop", tmp_path / "sop", "test")) == 3
    assert len(load_dataset("synthetic", tmp_path / "sop", "train")) == 5
    assert len(load_dataset("cub", tmp_path / "cub", "train")) == 2
    assert len(load_dataset("inshop", tmp_path / "inshop", "gallery")) == 3
    dataset = load_dataset("sop", tmp_path / "sop", "test", transform=lambda image: image.size)
    assert dataset[0][0] == (8, 6)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda root: load_dataset("cars", root, "train"), ValueError, "unknown dataset 'cars'"),
        (lambda root: load_sop(root, "val"), ValueError, "split must be one of"),
        (lambda root: load_cub(root, "query"), ValueError, "split must be one of"),
        (lambda root: load_inshop(root, "test"), ValueError, "split must be one of"),
        (lambda root: load_sop(root, "train"), FileNotFoundError, "datasets.download sop"),
        (lambda root: load_cub(root, "train"), FileNotFoundError, "no images.txt"),
        (lambda root: load_inshop(root, "train"), FileNotFoundError, "no list_eval_partition.txt"),
    ],
)
def test_loaders_reject_bad_names_and_missing_files(tmp_path, call, error, message):
    with pytest.raises(error, match=message):
        call(tmp_path)


def test_malformed_index_files_name_file_and_line(tmp_path):
    (tmp_path / "Ebay_train.txt").write_text("image_id class_id super_class_id path\n1 1 1 a.jpg\n2 1\n")
    with pytest.raises(ValueError, match=r"Ebay_train.txt:3: expected 4 columns"):
        load_sop(tmp_path, "train")
    (tmp_path / "Ebay_test.txt").write_text("image_id class_id super_class_id path\n1 x 1 a.jpg\n")
    with pytest.raises(ValueError, match="must be integers"):
        load_sop(tmp_path, "test")
    partition = "1\nimage_name item_id evaluation_status\nimg/A/B/id_1/x.jpg id_1 val\n"
    (tmp_path / "list_eval_partition.txt").write_text(partition)
    with pytest.raises(ValueError, match="unknown evaluation_status"):
        load_inshop(tmp_path, "train")


def make_imagefolder(root: Path, classes: dict[str, int]) -> None:
    for index, (name, count) in enumerate(classes.items()):
        for image in range(count):
            write_jpeg(root / name / f"{image}.JPG", (index * 40 % 256, image * 50 % 256, 90))


def test_imagefolder_splits_sorted_class_folders_in_halves(tmp_path):
    make_imagefolder(tmp_path, {"b_shoe": 2, "a_bag": 3, "d_hat": 2, "c_cup": 4, "e_pen": 1})
    (tmp_path / "a_bag" / "notes.txt").write_text("not an image")
    (tmp_path / ".thumbnails").mkdir()
    write_jpeg(tmp_path / ".thumbnails" / "x.jpg", (1, 2, 3))
    write_jpeg(tmp_path / "a_bag" / ".hidden" / "x.jpg", (1, 2, 3))
    (tmp_path / "empty_class").mkdir()  # no images: not a class
    train, test = load_imagefolder(tmp_path, "train"), load_imagefolder(tmp_path, "test")
    # 5 classes with images, sorted: a_bag, b_shoe | c_cup, d_hat, e_pen
    assert [p.parent.name for p in train.image_paths] == ["a_bag"] * 3 + ["b_shoe"] * 2
    assert train.labels.tolist() == [0, 0, 0, 1, 1] and train.super_labels is None
    assert [p.parent.name for p in test.image_paths] == ["c_cup"] * 4 + ["d_hat"] * 2 + ["e_pen"]
    assert test.labels.tolist() == [0, 0, 0, 0, 1, 1, 2]
    assert load_dataset("imagefolder", tmp_path, "test", transform=lambda image: image.size)[0][0] == (8, 6)


def test_imagefolder_reads_the_users_own_train_and_test_folders(tmp_path):
    make_imagefolder(tmp_path / "train", {"x": 2, "y": 2})
    make_imagefolder(tmp_path / "test", {"p": 3, "q": 2, "r": 2})
    assert len(load_imagefolder(tmp_path, "train")) == 4
    test = load_imagefolder(tmp_path, "test")
    assert test.num_classes == 3 and len(test) == 7


@pytest.mark.parametrize(
    "make, split, error, message",
    [
        (lambda root: None, "train", FileNotFoundError, "is not a folder"),
        (lambda root: make_imagefolder(root, {"only": 3}), "train", ValueError, "holds 1 class folder"),
        (lambda root: make_imagefolder(root, {"a": 2, "b": 2}), "val", ValueError, "split must be one of"),
        (
            lambda root: (
                make_imagefolder(root / "train", {"a": 2, "b": 2}),
                make_imagefolder(root / "test", {"c": 2}),
            ),
            "test",
            ValueError,
            r"test holds 1 class folder",
        ),
    ],
)
def test_imagefolder_rejects_what_it_cannot_split(tmp_path, make, split, error, message):
    root = tmp_path / "images"
    make(root)
    with pytest.raises(error, match=message):
        load_imagefolder(root, split)
