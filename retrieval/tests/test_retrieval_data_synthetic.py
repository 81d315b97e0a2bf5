"""The embedded synthetic dataset: SOP layout, determinism, disjoint classes, atomic and idempotent writes."""

from __future__ import annotations

import hashlib
import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rambo.retrieval.datasets import generate_synthetic, load_dataset, load_sop

synthetic = importlib.import_module("rambo.retrieval.datasets.synthetic")

SMALL = dict(num_classes=24, images_per_class=4, image_size=16, num_super_classes=6, show_progress=False)


def file_digests(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def pixels(dataset, index: int) -> np.ndarray:
    return np.asarray(dataset[index][0], dtype=np.float32) / 255


def test_layout_is_sop_and_load_sop_reads_it(tmp_path):
    root = generate_synthetic(tmp_path / "synthetic", seed=3, **SMALL)
    assert root == tmp_path / "synthetic"
    header = "image_id class_id super_class_id path"
    train_lines = (root / "Ebay_train.txt").read_text().splitlines()
    test_lines = (root / "Ebay_test.txt").read_text().splitlines()
    assert train_lines[0] == header and test_lines[0] == header
    assert (root / "Ebay_info.txt").read_text().splitlines() == [header, *train_lines[1:], *test_lines[1:]]
    rows = [line.split() for line in train_lines[1:] + test_lines[1:]]
    assert [int(r[0]) for r in rows] == list(range(1, 24 * 4 + 1))
    for _image_id, class_id, super_id, path in rows:
        # Brute force of the documented grouping: super-class = (class - 1) mod S, folder named after it.
        assert int(super_id) == (int(class_id) - 1) % 6 + 1
        assert path.startswith(f"{synthetic.SHAPE_FAMILIES[int(super_id) - 1]}_final/")
        assert (root / path).is_file()

    train, test = load_sop(root, "train"), load_dataset("synthetic", root, "test")
    assert len(train) == len(test) == 12 * 4
    train_ids = {int(r[1]) for r in (line.split() for line in train_lines[1:])}
    test_ids = {int(r[1]) for r in (line.split() for line in test_lines[1:])}
    assert train_ids == set(range(1, 13)) and test_ids == set(range(13, 25))  # disjoint halves
    for dataset in (train, test):
        assert torch.bincount(dataset.labels).tolist() == [4] * 12
        assert sorted(set(dataset.super_labels.tolist())) == list(range(6))  # every super-class in both
        image, label, index = dataset[5]
        assert image.size == (16, 16) and image.mode == "RGB" and index == 5


def test_same_seed_same_files_other_seed_other_files(tmp_path):
    first = file_digests(generate_synthetic(tmp_path / "a", seed=7, **SMALL))
    second = file_digests(generate_synthetic(tmp_path / "b", seed=7, **SMALL))
    other = file_digests(generate_synthetic(tmp_path / "c", seed=8, **SMALL))
    assert first == second
    assert first.keys() == other.keys()
    changed = [name for name in first if name.endswith(".png") and first[name] != other[name]]
    assert len(changed) == 24 * 4


@pytest.mark.outcome
def test_images_vary_within_a_class_and_classes_are_separable(tmp_path):
    sizes = dict(num_classes=40, images_per_class=6, image_size=32)
    root = generate_synthetic(tmp_path / "s", seed=0, show_progress=False, **sizes)
    test = load_sop(root, "test")
    features = torch.tensor(np.stack([pixels(test, i).ravel() for i in range(len(test))]))
    labels = test.labels
    # Intra-class variation: no two views of a class are the same picture.
    for label in range(int(labels.max()) + 1):
        views = features[labels == label]
        differences = (views[:, None] - views[None]).abs().mean(-1)
        assert bool((differences + torch.eye(len(views)) > 0.02).all())
    # A real but learnable task: raw-pixel nearest neighbour (query excluded, brute force) beats
    # chance (5 positives among 119 other images) clearly, yet is far from solving it.
    chance = 5 / 119
    centred = torch.nn.functional.normalize(features - features.mean(0), dim=1)
    scores = centred @ centred.T
    scores.fill_diagonal_(-float("inf"))
    recall_at_1 = (labels[scores.argmax(1)] == labels).float().mean().item()
    assert 2.5 * chance < recall_at_1 < 0.9


def test_existing_complete_copy_is_returned_without_rewriting(tmp_path, monkeypatch):
    root = generate_synthetic(tmp_path / "s", seed=1, **SMALL)
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*")}

    def must_not_render(*args, **kwargs):
        raise AssertionError("regenerated an existing copy")

    monkeypatch.setattr(synthetic, "render_image", must_not_render)
    assert generate_synthetic(root, seed=1, **SMALL) == root
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*")} == before
    assert json.loads((root / "synthetic.json").read_text())["seed"] == 1


def test_a_synthetic_set_of_other_parameters_is_replaced(tmp_path, capsys):
    root = generate_synthetic(tmp_path / "s", seed=1, **SMALL)
    (root / "stale.txt").write_text("from the old set")
    assert generate_synthetic(root, seed=2, **SMALL) == root
    assert json.loads((root / "synthetic.json").read_text())["seed"] == 2
    assert not (root / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # nothing left aside
    assert "replacing the synthetic set of parameters" in capsys.readouterr().err


def test_interrupted_generation_leaves_nothing(tmp_path, monkeypatch):
    original, calls = synthetic.render_image, []

    def fail_late(*args, **kwargs):
        calls.append(1)
        if len(calls) == 50:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(synthetic, "render_image", fail_late)
    with pytest.raises(KeyboardInterrupt):
        generate_synthetic(tmp_path / "s", seed=0, **SMALL)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(synthetic, "render_image", original)
    (tmp_path / "s").mkdir()  # an empty folder may be the target
    assert (generate_synthetic(tmp_path / "s", seed=0, **SMALL) / "synthetic.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_non_empty_foreign_folder_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not empty and holds no synthetic set") as error:
        generate_synthetic(tmp_path, **SMALL)
    assert "delete" not in str(error.value)  # a user's data is never what the message says to remove
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_users_dataset_at_the_synthetic_root_gets_the_command_that_trains_on_it(tmp_path):
    """The bug this guards against: `data.root=MYDATA` under the mini profile said to delete the user's
    SOP-layout photos."""
    (tmp_path / "Ebay_train.txt").write_text("image_id class_id super_class_id path\n")
    with pytest.raises(ValueError, match=r"holds a dataset in the sop layout.*To train on it: data=sop data.root="):
        generate_synthetic(tmp_path, **SMALL)
    assert [p.name for p in tmp_path.iterdir()] == ["Ebay_train.txt"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_classes=1), "num_classes must be >= 2"),
        (dict(images_per_class=1), "images_per_class must be >= 2"),
        (dict(image_size=8), "image_size must be >= 16"),
        (dict(num_super_classes=13), "num_super_classes must be in 1..12"),
        (dict(seed=-1), "seed must be >= 0"),
    ],
)
def test_bad_parameters(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate_synthetic(tmp_path / "s", **{**SMALL, **kwargs})
    assert not (tmp_path / "s").exists()


def test_cli_writes_the_dataset(tmp_path):
    command = [
        sys.executable,
        "-m",
        "rambo.retrieval.datasets.synthetic",
        str(tmp_path / "cli"),
        "--seed",
        "4",
        "--num-classes",
        "24",
        "--images-per-class",
        "4",
        "--image-size",
        "16",
        "--num-super-classes",
        "6",
        "--quiet",
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == str(tmp_path / "cli")
    assert file_digests(tmp_path / "cli") == file_digests(generate_synthetic(tmp_path / "api", seed=4, **SMALL))


@pytest.mark.slow
def test_default_size(tmp_path):
    root = generate_synthetic(tmp_path / "default", show_progress=False)
    train, test = load_sop(root, "train"), load_sop(root, "test")
    assert (len(train), len(test), train.num_classes, test.num_classes) == (2000, 2000, 100, 100)
    assert int(train.super_labels.max()) + 1 == 12
    assert train[0][0].size == (32, 32)
