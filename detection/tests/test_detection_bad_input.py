"""Bad input on the command line of ``python -m rambo.detection.train``: one ``error:`` line per
problem, exit code 2, found before Hydra makes the run's folder (rambo.detection.config_check)."""

from __future__ import annotations

import subprocess
import sys


def train(cwd, *overrides: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rambo.detection.train", "profile=tiny", "wandb.mode=disabled", "progress=false"]
    return subprocess.run([*command, *overrides], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_options_out_of_range_are_one_line_each_before_any_folder(tmp_path):
    done = train(tmp_path, "schedule.epochs=-1", "schedule.batch_size=-8", f"data_dir={tmp_path / 'data'}")
    assert done.returncode == 2
    assert done.stderr == (
        "error: schedule.epochs=-1: must be an integer >= 0 (training epochs; 0 evaluates the starting weights)\n"
        "error: schedule.batch_size=-8: must be an integer >= 1 (images per training batch)\n"
    )  # eval.batch_size (${schedule.batch_size}) is not listed again
    assert list(tmp_path.iterdir()) == []  # no run folder, no synthetic set generated


def test_a_named_data_root_is_read_never_generated_into(tmp_path):
    root = tmp_path / "mine"
    done = train(tmp_path, f"data.root={root}")
    assert done.returncode == 2
    assert done.stderr == (
        f"error: data.root={root}: {root}: no such folder; expected a VOC folder ({root}/ImageSets/Main/trainval.txt, "
        f"{root}/Annotations/ and {root}/JPEGImages/); a folder named on the command line is read, never written: "
        f"generate the set with `python -m rambo.detection.synthetic {root} --seed 0 --trainval 160 --test 80 "
        "--size 96`, or leave data.root out\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_voc_row_without_its_dataset_names_the_folder_and_the_download(tmp_path):
    done = train(tmp_path, "data=voc07", f"data_dir={tmp_path / 'data'}")
    voc, year = tmp_path / "data" / "voc", tmp_path / "data" / "voc" / "VOCdevkit" / "VOC2007"
    assert done.returncode == 2
    assert done.stderr == (
        f"error: data.root={voc}: {year}: no such folder; expected a VOC folder ({year}/ImageSets/Main/trainval.txt, "
        f"{year}/Annotations/ and {year}/JPEGImages/); download it with `python -m rambo.detection.download {voc}` "
        "(it prints the manual steps without a network)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_batch_larger_than_the_training_images_names_the_largest_that_fits(tmp_path):
    """Before the set is generated its size is the profile's ``data.generate.trainval``; once on
    disk, its image set file's lines, capped by ``data.max_train_images``."""
    done = train(tmp_path, "schedule.batch_size=100000", f"data_dir={tmp_path / 'data'}")
    assert done.returncode == 2
    assert done.stderr == (
        "error: schedule.batch_size=100000: more than the 160 training images (data.train_set=trainval), so every "
        "batch would repeat images to fill itself; the largest that fits is schedule.batch_size=160\n"
    )
    assert list(tmp_path.iterdir()) == []

    root = tmp_path / "mine"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rambo.detection.synthetic",
            str(root),
            "--trainval",
            "12",
            "--test",
            "4",
            "--size",
            "56",
        ],
        check=True,
        capture_output=True,
    )
    before = {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}
    done = train(tmp_path, f"data.root={root}", "schedule.batch_size=11", "data.max_train_images=10")
    assert done.returncode == 2
    assert done.stderr == (
        "error: schedule.batch_size=11: more than the 10 training images (data.train_set=trainval, "
        "data.max_train_images=10), so every batch would repeat images to fill itself; the largest that fits is "
        "schedule.batch_size=10\n"
    )
    assert {path: path.read_bytes() for path in root.rglob("*") if path.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_the_synthetic_set_command_refuses_counts_and_sizes_in_one_line_each(tmp_path):
    command = [sys.executable, "-m", "rambo.detection.synthetic", str(tmp_path / "set"), "--test", "0", "--size", "32"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == "error: --test 0: must be at least 1\nerror: --size 32: must be at least 56\n"
    assert list(tmp_path.iterdir()) == []
    done = train(tmp_path, "data.generate.size=32", f"data_dir={tmp_path / 'data'}")
    assert (done.returncode, done.stderr) == (
        2,
        "error: data.generate.size=32: must be an integer >= 56 (the generated images' side in pixels)\n",
    )
    assert list(tmp_path.iterdir()) == []
