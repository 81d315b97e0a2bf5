"""Bad input on the command line of ``python -m rambo.retrieval.train``: one ``error:`` line per
problem, exit code 2, found before Hydra makes the run's folder, and nothing written where the
user pointed (rambo.harness.config_check, rambo.retrieval.config_check, rambo.retrieval.own_data)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from rambo.retrieval.datasets import generate_synthetic

TINY = {"seed": 0, "num_classes": 24, "images_per_class": 6, "image_size": 16, "num_super_classes": 4}


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``folder`` with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def train(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rambo.retrieval.train", "profile=tiny", "wandb.mode=disabled", "progress=false"]
    return subprocess.run([*command, *overrides], capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    """A data_dir holding the tiny profile's synthetic set (what the stand-in reads)."""
    root = tmp_path_factory.mktemp("data")
    generate_synthetic(root / "synthetic_tiny", **TINY, show_progress=False)
    return root


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """16 class folders of 4 PNGs each, one of them cut short (a truncated file)."""
    root = tmp_path_factory.mktemp("user") / "photos"
    for c in range(16):
        for i in range(4):
            (root / f"class{c:02d}").mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 16), (c * 15, i * 40, 100)).save(root / f"class{c:02d}" / f"{i}.png")
    broken = root / "class03" / "2.png"
    broken.write_bytes(broken.read_bytes()[:60])
    return root


@pytest.mark.parametrize("state", ["absent", "empty"])
def test_a_named_folder_that_is_missing_or_empty_is_refused_and_left_alone(tmp_path, state):
    root = tmp_path / "no" / "such" / "dir"
    if state == "empty":
        root.mkdir(parents=True)
    before = snapshot(tmp_path)
    done = train(tmp_path, "data=imagefolder", f"data.root={root}", f"hydra.run.dir={tmp_path / 'run'}")
    what = "no such folder" if state == "absent" else "is an empty folder"
    sentence = ". Nothing was created there" if state == "absent" else ". Nothing was written there"
    separator = ": " if state == "absent" else " "
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"error: data.root={root}{separator}{what}; expected the imagefolder layout (class folders of images: "
        f"{root}/<class>/<image>, or {root}/train/<class>/<image> and {root}/test/<class>/<image>){sentence}; "
        "the synthetic set stands in only where no data.root is given\n"
    )
    assert snapshot(tmp_path) == before  # no run folder, nothing in or at the named path


def test_without_a_data_root_the_stand_in_is_said_in_the_first_log_line(tmp_path, data_dir):
    before = snapshot(data_dir)
    done = train(tmp_path, "data=sop", f"data_dir={data_dir}", "epochs=0", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 0, done.stderr
    first = (tmp_path / "run" / "train.log").read_text().splitlines()[0]
    assert first.endswith(
        f"data: the synthetic set in {data_dir / 'synthetic_tiny'} stands in for sop (this profile trains every "
        "row on it; no data.root was given); to train on a copy of sop, set data.root to its folder"
    )
    assert snapshot(data_dir) == before


def test_a_named_root_is_never_generated_into_even_for_the_synthetic_set(tmp_path):
    root = tmp_path / "mine"
    done = train(tmp_path, f"data.root={root}", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2
    assert done.stderr == (
        f"error: data.root={root}: no such folder; a folder named on the command line is read, never written: "
        f"generate the set with `python -m rambo.retrieval.datasets.synthetic {root} --seed 0 --num-classes 24 "
        "--images-per-class 6 --image-size 16 --num-super-classes 4`, or leave data.root out (the set is then "
        "generated under data_dir)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_options_out_of_range_are_one_line_each_before_any_folder(tmp_path, data_dir):
    done = train(tmp_path, f"data_dir={data_dir}", "epochs=-1", "batch_size=-8", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2
    assert done.stderr == (
        "error: epochs=-1: must be an integer >= 0 (training epochs; 0 evaluates the untrained model)\n"
        "error: batch_size=-8: must be an integer >= 2 (images per training batch; a rank needs two)\n"
    )  # eval_batch_size (${batch_size} in the tiny profile) is not listed again
    assert not (tmp_path / "run").exists()
    done = train(tmp_path, f"data_dir={data_dir}", "num_workers=-1", "optimizer.lr=0", "batch_size=7")
    assert done.returncode == 2
    assert done.stderr == (
        "error: num_workers=-1: must be an integer >= 0 (DataLoader worker processes; 0 loads in the training process)\n"
        "error: optimizer.lr=0: must be a number > 0 (learning rate)\n"
        "error: batch_size=7: must be a multiple of data.sampler.samples_per_class=2 (a batch is classes x 2 "
        "images), e.g. batch_size=6 or 8\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nor the default outputs/ folder


def test_a_batch_the_classes_cannot_fill_names_the_largest_that_fits(tmp_path, data_dir):
    done = train(tmp_path, f"data_dir={data_dir}", "batch_size=64", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2
    assert done.stderr == (
        "error: no pair of super-labels holds 32 classes (batch_size 64 / samples_per_class 2); lower the batch "
        "size: the largest that fits is batch_size=8 (4 classes)\n"
    )
    assert not (tmp_path / "run").exists()


def test_a_paper_row_without_its_dataset_names_the_folder_and_the_download(tmp_path):
    done = train(tmp_path, "profile=paper", "experiment=sop_log", f"data_dir={tmp_path / 'data'}")
    sop = tmp_path / "data" / "sop"
    assert done.returncode == 2
    assert done.stderr == (
        f"error: data.root={sop}: no such folder; expected the sop layout ({sop}/Ebay_train.txt or "
        f"{sop}/Stanford_Online_Products/Ebay_train.txt). Nothing was created there; download it with "
        f"`python -m rambo.retrieval.datasets.download sop {sop}`\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_unreadable_image_is_named_listed_by_the_check_and_skipped_only_when_asked(tmp_path, photos):
    before = snapshot(photos)
    broken = photos / "class03" / "2.png"
    done = train(tmp_path, "data=imagefolder", f"data.root={photos}", "epochs=1", f"hydra.run.dir={tmp_path / 'a'}")
    assert done.returncode == 2
    assert done.stderr == (
        f"error: {broken}: image 10 of 24 cannot be read (OSError: image file is truncated); list every unreadable "
        f"image with `python -m rambo.retrieval.prepare --check --data-dir data --data imagefolder -- profile=tiny "
        f"data.root={photos}`, or skip such images with data.skip_unreadable=true\n"
    )
    assert "error:" in (tmp_path / "a" / "train.log").read_text()  # the run's log says why it stopped

    check = [sys.executable, "-m", "rambo.retrieval.prepare", "--check", "--data-dir", "data", "--data", "imagefolder"]
    listed = subprocess.run(
        [*check, "--", "profile=tiny", f"data.root={photos}"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert listed.returncode == 1
    assert listed.stderr.splitlines() == [
        f"unreadable: imagefolder: {broken} (train split, image 14): OSError: image file is truncated",
        "error: 1 image(s) cannot be read (listed above): replace or remove them, or train with "
        "data.skip_unreadable=true to leave them out (counted in the run's metrics)",
    ]

    skipped = train(
        tmp_path,
        "data=imagefolder",
        f"data.root={photos}",
        "epochs=1",
        "data.skip_unreadable=true",
        f"hydra.run.dir={tmp_path / 'b'}",
    )
    assert skipped.returncode == 0, skipped.stderr
    metrics = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert metrics["unreadable_images_skipped"] == {"train": 1, "test": 0} and metrics["complete"]
    assert snapshot(photos) == before


def test_splits_that_skipping_left_too_small_are_refused_with_their_counts(tmp_path):
    """The split check before a run counts the folders' classes; `data.skip_unreadable` can leave
    fewer: the splits it leaves are checked again, in one line naming the skipped count."""
    root = tmp_path / "photos"
    for split, classes in (("train", 8), ("test", 2)):
        for c in range(classes):
            (root / split / f"class{c}").mkdir(parents=True)
            for i in range(4):
                Image.new("RGB", (16, 16), (c * 30, i * 40, 100)).save(root / split / f"class{c}" / f"{i}.png")
    for i in range(4):  # every image of the second test class cut short
        broken = root / "test" / "class1" / f"{i}.png"
        broken.write_bytes(broken.read_bytes()[:60])
    before = snapshot(root)
    run = tmp_path / "run"
    done = train(
        tmp_path,
        "data=imagefolder",
        f"data.root={root}",
        "epochs=1",
        "data.skip_unreadable=true",
        f"hydra.run.dir={run}",
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "error: after data.skip_unreadable left out 4 unreadable images, the test split holds 1 class; the test split "
        "needs at least 2 (Recall@K ranks a query's class among others): add whole copies of the unreadable images "
        "(the log names them)\n"
    )
    assert snapshot(root) == before
    assert not (run / "metrics.json").exists() and not (run / "checkpoint.pt").exists()
