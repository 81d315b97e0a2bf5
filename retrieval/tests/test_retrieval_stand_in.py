"""The stand-in archives of CUB, SOP and In-shop: the same bytes for a seed, and the real path reads them.

The archives are served from ``file://`` URLs through the project's downloader (MD5 check,
extraction), then read by ``load_dataset``; the configs' batch samplers accept the splits.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rambo.harness.download import ensure_dataset, md5_of
from rambo.retrieval.datasets import load_dataset, stand_in
from rambo.retrieval.datasets.download import DATASETS
from rambo.retrieval.samplers import MPerClassBatchSampler, SuperLabelBatchSampler
from rambo.retrieval.validation_split import split_validation_classes

CONFIGS = Path(stand_in.__file__).parents[1] / "configs" / "data"
TABLE_FILES = [item.filename for files in DATASETS.values() for item in files]


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict[str, Path]:
    """The stand-ins of seed 0, by file name."""
    paths = stand_in.write_archives(tmp_path_factory.mktemp("served"), seed=0)
    return {path.name: path for path in paths}


@pytest.fixture(scope="module")
def extracted(served, tmp_path_factory):
    """``extracted(name)``: the data root of dataset ``name``, downloaded from the stand-ins."""
    roots: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in roots:
            root = tmp_path_factory.mktemp(name)
            files = [
                dataclasses.replace(item, urls=(served[item.filename].as_uri(),), md5=md5_of(served[item.filename]))
                for item in DATASETS[name]
            ]
            ready = ensure_dataset(root, files, verify=True, show_progress=False)
            assert ready == [root / item.ready for item in DATASETS[name]] and all(path.exists() for path in ready)
            for item in DATASETS[name]:  # downloaded whole and kept, as the real ones
                assert md5_of(root / item.filename) == md5_of(served[item.filename])
            roots[name] = root
        return roots[name]

    return get


def test_writes_the_table_files_with_the_same_bytes_for_a_seed(served, tmp_path, capsys):
    assert list(served) == TABLE_FILES
    assert stand_in.main([str(tmp_path / "again"), "--seed", "0"]) == 0
    printed = [Path(line) for line in capsys.readouterr().out.split()]
    assert printed == [tmp_path / "again" / name for name in TABLE_FILES]
    assert {path.name: md5_of(path) for path in printed} == {name: md5_of(path) for name, path in served.items()}
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == sorted(TABLE_FILES)  # no temporary left


def test_sop(extracted):
    root = extracted("sop")
    folder = root / "Stanford_Online_Products"
    header = "image_id class_id super_class_id path"
    raw = {}
    for split in ("train", "test"):
        lines = (folder / f"Ebay_{split}.txt").read_text().splitlines()
        assert lines[0] == header
        raw[split] = [line.split() for line in lines[1:]]
    info = (folder / "Ebay_info.txt").read_text().splitlines()
    assert info == [header] + [" ".join(row) for row in raw["train"] + raw["test"]]
    assert [int(row[0]) for row in raw["train"] + raw["test"]] == list(range(1, 161))  # 1-based, continuing
    train_classes, test_classes = ({int(row[1]) for row in raw[split]} for split in ("train", "test"))
    assert train_classes == set(range(1, 21)) and test_classes == set(range(21, 41))

    for split in ("train", "test"):
        dataset = load_dataset("sop", root, split)
        assert len(dataset) == 80 and dataset.num_classes == 20
        assert set(Counter(dataset.labels.tolist()).values()) == {4}
        assert dataset.super_labels.unique().numel() == 4
        # Each class lies in one super-class folder, named as in the real SOP.
        folders: dict[int, set[str]] = {}
        for path, label in zip(dataset.image_paths, dataset.labels.tolist()):
            folders.setdefault(label, set()).add(path.parent.name)
        assert len(folders) == 20 and all(len(names) == 1 for names in folders.values())
        assert set.union(*folders.values()) == {"bicycle_final", "chair_final", "lamp_final", "mug_final"}
        assert all(p.suffix == ".JPG" and p.is_file() for p in dataset.image_paths)
        image, label, index = dataset[5]
        assert image.mode == "RGB" and image.size == stand_in.IMAGE_SIZE and (label, index) == (1, 5)
    products = [{p.name.split("_")[0] for p in load_dataset("sop", root, s).image_paths} for s in ("train", "test")]
    assert len(products[0]) == len(products[1]) == 20 and not products[0] & products[1]


def test_cub(extracted):
    root = extracted("cub")
    folder = root / "CUB_200_2011"
    class_ids = [int(line.split()[0]) for line in (folder / "classes.txt").read_text().splitlines()]
    assert class_ids == [1, 2, 3, 4, 5, 101, 102, 103, 104, 105]
    for name in ("images", "image_class_labels", "train_test_split", "bounding_boxes"):
        rows = [line.split() for line in (folder / f"{name}.txt").read_text().splitlines()]
        assert [int(row[0]) for row in rows] == list(range(1, 61)), name
    assert {line.split()[1] for line in (folder / "train_test_split.txt").read_text().splitlines()} == {"0", "1"}
    train, test = load_dataset("cub", root, "train"), load_dataset("cub", folder, "test")
    for dataset, numbers in ((train, range(1, 6)), (test, range(101, 106))):
        assert len(dataset) == 30 and dataset.num_classes == 5 and dataset.super_labels is None
        assert {int(p.parent.name.split(".")[0]) for p in dataset.image_paths} == set(numbers)
        assert set(Counter(dataset.labels.tolist()).values()) == {6}
        assert dataset[0][0].size == stand_in.IMAGE_SIZE


def test_inshop(extracted):
    root = extracted("inshop")
    lines = (root / "list_eval_partition.txt").read_text().splitlines()
    assert lines[1] == "image_name item_id evaluation_status" and int(lines[0]) == len(lines) - 2 == 192
    train, query, gallery = (load_dataset("inshop", root, split) for split in ("train", "query", "gallery"))
    assert (len(train), len(query), len(gallery)) == (128, 24, 40)
    assert (train.num_classes, query.num_classes, gallery.num_classes) == (16, 8, 8)
    assert set(Counter(train.labels.tolist()).values()) == {8}
    assert set(Counter(query.labels.tolist()).values()) == {3} and set(Counter(gallery.labels.tolist()).values()) == {5}

    def items(dataset) -> dict[int, set[str]]:
        found: dict[int, set[str]] = {}
        for path, label in zip(dataset.image_paths, dataset.labels.tolist()):
            found.setdefault(label, set()).add(path.parent.name)
        return found

    # Query and gallery share their items and label map; train items are other items.
    assert items(query) == items(gallery) and all(len(names) == 1 for names in items(query).values())
    assert not set.union(*items(train).values()) & set.union(*items(query).values())
    assert not set(query.image_paths) & set(gallery.image_paths)
    for dataset in (train, query, gallery):
        assert dataset.super_labels.unique().numel() == 4
        assert all(p.relative_to(root).parts[0] == "img" and p.is_file() for p in dataset.image_paths)
    assert gallery[0][0].size == stand_in.IMAGE_SIZE


@pytest.mark.parametrize("name", ["sop", "cub", "inshop"])
def test_the_configs_samplers_accept_the_training_split(extracted, name):
    """Batch 16 (the smoke runs'), 20 % of the classes held out for validation, as train.py does."""
    config = OmegaConf.load(CONFIGS / f"{name}.yaml").sampler
    train, validation = split_validation_classes(load_dataset(name, extracted(name), "train"), 0.2, seed=0)
    assert validation is not None and validation.num_classes >= 1
    if config.name == "super_label":
        sampler = SuperLabelBatchSampler(
            train.labels,
            train.super_labels,
            16,
            config.samples_per_class,
            config.batches_per_super_pair,
            batches_per_epoch=4,
        )
    else:
        sampler = MPerClassBatchSampler(train.labels, 16, config.samples_per_class, batches_per_epoch=4)
    for batch in sampler:
        labels = train.labels[batch].tolist()
        assert len(batch) == 16 and set(Counter(labels).values()) == {config.samples_per_class}
        assert len(set(batch)) == 16  # every class has the images a batch takes of it, no repeats


def test_seed_changes_the_images_not_the_layout(served, tmp_path):
    other = {path.name: path for path in stand_in.write_archives(tmp_path, seed=1)}
    for name in ("CUB_200_2011.tgz", "Stanford_Online_Products.zip", "img.zip"):
        assert md5_of(other[name]) != md5_of(served[name])
    with pytest.raises(ValueError, match="seed"):
        stand_in.write_archives(tmp_path, seed=-1)
