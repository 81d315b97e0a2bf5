"""A dataset too small for the run is refused before anything is created (rambo.retrieval.config_check,
rambo.retrieval.datasets.census): one ``error:`` line per split that falls short, naming the folder
or index file, the classes found, how many the run needs and why (the validation hold-out, a
batch, the test split), and the override that fits where one does; exit code 2."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from PIL import Image

from rambo.retrieval.config_check import fewest_training_classes, held_out, problems
from rambo.retrieval.datasets import ImageRetrievalDataset, generate_synthetic
from rambo.retrieval.train import CONFIG_DIR
from rambo.retrieval.validation_split import split_validation_classes

# the tiny profile: validation_fraction 0.25, batch_size 8, samples_per_class 2 (4 classes a batch)
TINY = (
    "validation_fraction=0.25 holds out 2 of the 6 (a validation split needs 2 classes), leaving 4 to train on, "
    "and a batch takes 4 classes (batch_size=8 / data.sampler.samples_per_class=2)"
)


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with the SHA-256 of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def folders(root: Path, classes: int, images: int = 3, prefix: str = "class") -> Path:
    """``classes`` class folders of ``images`` PNGs each under ``root``."""
    for c in range(classes):
        for i in range(images):
            (root / f"{prefix}{c:02d}").mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 16), (c * 15, i * 40, 100)).save(root / f"{prefix}{c:02d}" / f"{i}.png")
    return root


def sop(root: Path, train: list[tuple[int, int]], test: list[tuple[int, int]]) -> Path:
    """An SOP layout whose index files list ``(class_id, super_class_id)`` per image."""
    (root / "images").mkdir(parents=True)
    for split, rows in (("train", train), ("test", test)):
        lines = ["image_id class_id super_class_id path"]
        for number, (class_id, super_id) in enumerate(rows):
            name = f"images/{split}_{number}.png"
            Image.new("RGB", (16, 16), (class_id * 20, number * 10, 90)).save(root / name)
            lines.append(f"{number + 1} {class_id} {super_id} {name}")
        (root / f"Ebay_{split}.txt").write_text("\n".join(lines) + "\n")
    return root


def train(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rambo.retrieval.train", "wandb.mode=disabled", "progress=false", "epochs=1"]
    return subprocess.run([*command, *overrides], capture_output=True, text=True, timeout=300, cwd=cwd)


def refused(tmp_path: Path, root: Path, *overrides: str) -> str:
    """The stderr of a run on ``root`` refused with exit code 2, having created nothing anywhere."""
    before = tree_digest(tmp_path)
    done = train(tmp_path, *overrides, f"data.root={root}", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2, done.stderr[-3000:]
    assert tree_digest(tmp_path) == before and not (tmp_path / "run").exists()
    return done.stderr


def test_a_folder_of_one_class_says_how_many_it_holds_and_needs(tmp_path):
    root = folders(tmp_path / "photos", 1)
    assert refused(tmp_path, root, "profile=tiny", "data=imagefolder") == (
        f"error: data.root={root} holds 1 class folder with images: the first 0 in sorted order train, the other 1 "
        f"test; this run needs at least 12 class folders, the first 6 to train: {TINY}; add class folders\n"
    )


@pytest.mark.parametrize("classes", [2, 3])
def test_two_or_three_classes_are_refused_not_a_traceback(tmp_path, classes):
    root = folders(tmp_path / "photos", classes)
    assert refused(tmp_path, root, "profile=tiny", "data=imagefolder") == (
        f"error: data.root={root} holds {classes} class folders with images: the first 1 in sorted order train, "
        f"the other {classes - 1} test; this run needs at least 12 class folders, the first 6 to train: {TINY}; "
        "add class folders\n"
    )


def test_the_override_named_for_four_classes_trains(tmp_path):
    root = folders(tmp_path / "photos", 4)
    assert refused(tmp_path, root, "data=imagefolder") == (  # the mini profile: 12 classes a batch
        f"error: data.root={root} holds 4 class folders with images: the first 2 in sorted order train, the other 2 "
        "test; this run needs at least 30 class folders, the first 15 to train: validation_fraction=0.2 holds out 3 "
        "of the 15 (a validation split needs 2 classes), leaving 12 to train on, and a batch takes 12 classes "
        "(batch_size=48 / data.sampler.samples_per_class=4); add class folders, or train on these 2 with "
        "validation_fraction=0 batch_size=8\n"
    )
    before = tree_digest(root)
    done = train(
        tmp_path,
        "profile=tiny",
        "data=imagefolder",
        f"data.root={root}",
        "validation_fraction=0",
        "batch_size=4",  # the tiny profile's 2 a class: the same 2 classes a batch
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "metrics.json").is_file() and tree_digest(root) == before


def test_an_own_split_names_the_folder_that_falls_short(tmp_path):
    root = tmp_path / "photos"
    folders(root / "train", 8)
    folders(root / "test", 1, prefix="other")
    assert refused(tmp_path, root, "data=imagefolder") == (
        f"error: {root / 'train'} holds 8 class folders with images; this run needs at least 15: "
        "validation_fraction=0.2 holds out 3 of the 15 (a validation split needs 2 classes), leaving 12 to train "
        "on, and a batch takes 12 classes (batch_size=48 / data.sampler.samples_per_class=4); add class folders to "
        f"{root / 'train'}, or train on these 8 with batch_size=24\n"
        f"error: {root / 'test'} holds 1 class folder with images; the test split needs at least 2 (Recall@K ranks a "
        f"query's class among others): add class folders to {root / 'test'}\n"
    )


def test_an_own_split_of_one_training_class_and_an_empty_test_folder(tmp_path):
    root = tmp_path / "photos"
    folders(root / "train", 1)
    (root / "test").mkdir()
    assert refused(tmp_path, root, "profile=tiny", "data=imagefolder") == (
        f"error: {root / 'train'} holds 1 class folder with images; this run needs at least 6: {TINY}; add class "
        f"folders to {root / 'train'}\n"
        f"error: {root / 'test'} holds 0 class folders with images; the test split needs at least 2 (Recall@K ranks "
        f"a query's class among others): add class folders to {root / 'test'}\n"
    )


def test_a_train_folder_without_a_test_folder_is_named(tmp_path):
    root = tmp_path / "photos"
    folders(root / "train", 8)
    assert refused(tmp_path, root, "profile=tiny", "data=imagefolder") == (
        f"error: data=imagefolder data.root={root}: there is {root / 'train'} but no {root / 'test'} (expected class "
        f"folders of images: {root}/<class>/<image>, or {root}/train/<class>/<image> and {root}/test/<class>/<image>)."
        " Nothing was written there; the synthetic set stands in only where no data.root is given\n"
    )


def test_an_index_listing_one_image_a_split_is_refused_for_both(tmp_path):
    root = sop(tmp_path / "products", [(1, 1)], [(2, 1)])
    assert refused(tmp_path, root, "profile=tiny", "data=sop") == (
        f"error: {root / 'Ebay_train.txt'} lists 1 class in 1 super-label; training needs at least 2 (a rank loss "
        f"ranks other classes' images below a class's own): add classes to {root / 'Ebay_train.txt'}\n"
        f"error: {root / 'Ebay_test.txt'} lists 1 class; the test split needs at least 2 (Recall@K ranks a query's "
        f"class among others): add classes to {root / 'Ebay_test.txt'}\n"
    )


def config(*overrides: str):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=["profile=tiny", "output_dir=x", *overrides], return_hydra_config=True)


def lines(tmp_path: Path, *overrides: str) -> list[str]:
    """The config check's lines for ``overrides``, the files under ``tmp_path`` left as they were."""
    before = tree_digest(tmp_path)
    found = [str(problem) for problem in problems(config(*overrides))]
    assert tree_digest(tmp_path) == before
    return found


def test_the_hold_out_of_each_super_label_is_counted(tmp_path):
    two = sop(
        tmp_path / "two", [(c, c) for c in range(2) for _ in range(3)], [(c, c) for c in range(4) for _ in range(2)]
    )
    assert lines(tmp_path, "data=sop", f"data.root={two}") == [
        f"{two / 'Ebay_train.txt'} lists 2 classes in 2 super-labels; validation_fraction=0.25 holds out "
        "round(0.25 x n) of a super-label's n classes, 0 in all, and a validation split needs 2: train without one "
        f"with validation_fraction=0, or add classes to {two / 'Ebay_train.txt'}"
    ]
    six = sop(
        tmp_path / "six", [(c, c % 2) for c in range(6) for _ in range(2)], [(c, 0) for c in range(4) for _ in range(2)]
    )
    assert lines(tmp_path, "data=sop", f"data.root={six}", "validation_fraction=0.9") == [
        f"{six / 'Ebay_train.txt'} lists 6 classes in 2 super-labels; validation_fraction=0.9 holds out 6 of them, "
        "leaving 0 to train on, and training needs 2: lower validation_fraction (validation_fraction=0 trains on all 6)"
    ]


def test_one_super_label_names_the_sampler_that_fits(tmp_path):
    root = sop(
        tmp_path / "one", [(c, 7) for c in range(8) for _ in range(2)], [(c, 7) for c in range(4) for _ in range(2)]
    )
    assert lines(tmp_path, "data=sop", f"data.root={root}") == [
        f"{root / 'Ebay_train.txt'} lists 8 classes, all of 1 super-label after the validation hold-out, and "
        "data.sampler.name=super_label draws a batch from a pair of super-labels: data.sampler.name=m_per_class draws "
        "it from any classes"
    ]
    assert lines(tmp_path, "data=sop", f"data.root={root}", "data.sampler.name=m_per_class") == []


def test_classes_of_one_image_give_recall_nothing_to_find(tmp_path):
    root = folders(tmp_path / "photos", 16, images=1)
    assert lines(tmp_path, "data=imagefolder", f"data.root={root}") == [
        "validation_fraction=0.25 holds out 2 training classes (seed=0), all of 1 image; Recall@K on the validation "
        "split needs a class of at least 2 images (a query and its match): validation_fraction=0 trains without one",
        f"data.root={root} holds 16 class folders with images: the first 8 in sorted order train, the other 8 test; "
        "every test class has 1 image, and Recall@K needs a class of at least 2 (a query and its match): add images",
    ]


def test_a_cub_layout_counts_the_halves_of_its_class_list(tmp_path):
    root = tmp_path / "cub"
    (root / "images").mkdir(parents=True)
    (root / "classes.txt").write_text("".join(f"{c} {c:03d}.bird\n" for c in range(1, 5)))
    rows = [(i, c) for i, c in enumerate([c for c in range(1, 5) for _ in range(2)], start=1)]
    for image_id, c in rows:
        Image.new("RGB", (16, 16), (c * 40, image_id * 20, 50)).save(root / "images" / f"{image_id}.png")
    (root / "images.txt").write_text("".join(f"{i} {i}.png\n" for i, _ in rows))
    (root / "image_class_labels.txt").write_text("".join(f"{i} {c}\n" for i, c in rows))
    assert lines(tmp_path, "data=cub", f"data.root={root}", "validation_fraction=0") == [
        f"{root / 'classes.txt'} lists 4 classes with images: the first 2 train, the other 2 test; this run needs at "
        "least 8 classes, the first 4 to train: a batch takes 4 classes (batch_size=8 / "
        "data.sampler.samples_per_class=2); add classes, or train on these 2 with batch_size=4"
    ]


def test_an_inshop_gallery_without_the_query_items_is_refused(tmp_path):
    root = tmp_path / "inshop"
    rows = []
    for c, category in enumerate(["MEN/Denim", "WOMEN/Dresses"]):
        for i in range(6):
            item = f"id_{c:03d}{i:05d}"
            status = ["train"] * 3 if i < 4 else ["query"] * 2 if i == 4 else ["gallery"] * 2
            for j, split in enumerate(status):
                name = f"img/{category}/{item}/{j:02d}_front.jpg"
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                Image.new("RGB", (20, 20), (40 * c, 30 * i, 90)).save(root / name)
                rows.append(f"{name} {item} {split}")
    (root / "list_eval_partition.txt").write_text(
        "\n".join([str(len(rows)), "image_name item_id evaluation_status", *rows]) + "\n"
    )
    assert lines(tmp_path, "data=inshop", f"data.root={root}") == [
        f"{root / 'list_eval_partition.txt'} lists 2 gallery items, none of them an item of the 2 query items; "
        "Recall@K needs a query whose item is in the gallery"
    ]


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.2, 0.25, 0.3, 0.5, 0.75, 0.9])
@pytest.mark.parametrize("per_batch", [1, 2, 4, 12])
def test_the_fewest_training_classes_are_what_the_validation_split_and_a_batch_need(fraction, per_batch):
    """The count the message names, against the split the run makes (one super-label)."""
    need = fewest_training_classes(fraction, per_batch)

    def fits(classes: int) -> bool:
        dataset = ImageRetrievalDataset([f"{c}.png" for c in range(classes)], list(range(classes)))
        try:
            kept, validation = split_validation_classes(dataset, fraction, seed=0)
        except ValueError:  # an empty train or validation split
            return False
        return kept.num_classes >= max(2, per_batch) and (validation is None or validation.num_classes >= 2)

    assert fits(need) and not fits(need - 1)
    assert all(fits(classes) for classes in range(need, need + 40))
    assert held_out(fraction, need) == round(fraction * need)


def test_a_synthetic_stand_in_that_fits_is_not_refused(tmp_path):
    parameters = {"num_classes": 24, "images_per_class": 6, "image_size": 16, "num_super_classes": 4}
    generate_synthetic(tmp_path / "synthetic_tiny", seed=0, **parameters, show_progress=False)
    assert lines(tmp_path, f"data_dir={tmp_path}") == []
