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
