"""A user's folder under the mini/tiny profiles (rambo.retrieval.own_data): ``data=<layout>
data.root=DIR`` trains on DIR, and nothing else is taken for it or written into it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from rambo.retrieval.datasets import generate_synthetic, load_dataset
from rambo.retrieval.own_data import use_own_data
from rambo.retrieval.train import CONFIG_DIR

TINY = {"seed": 0, "num_classes": 24, "images_per_class": 6, "image_size": 16, "num_super_classes": 4}


@pytest.fixture(scope="module")
def user_sop(tmp_path_factory) -> Path:
    """A folder in the SOP layout that is not a synthetic set (the generator's files, manifest removed)."""
    root = generate_synthetic(tmp_path_factory.mktemp("user") / "products", **TINY, show_progress=False)
    (root / "synthetic.json").unlink()
    return root


@pytest.fixture(scope="module")
def user_imagefolder(user_sop, tmp_path_factory) -> Path:
    """The same images as class folders, DIR/<class>/<image>."""
    root = tmp_path_factory.mktemp("user") / "photos"
    for split in ("train", "test"):
        dataset = load_dataset("sop", user_sop, split)
        for path, label in zip(dataset.image_paths, dataset.labels.tolist()):
            folder = root / f"{split}_{label:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, folder / path.name)
    return root


def data_config(*overrides):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=["profile=tiny", "output_dir=x", *overrides]).data


def test_a_folder_in_the_rows_layout_is_trained_on(user_sop):
    data = data_config("data=sop", f"data.root={user_sop}")
    assert (data.format, data.in_memory) == ("synthetic", True)  # what the profile composes
    message = use_own_data(data)
    assert (data.format, data.generate, data.in_memory, data.root) == ("sop", None, False, str(user_sop))
    assert message == f"data: training on sop at {user_sop} (your folder; the profile's scale, images read from disk)"
    assert not (user_sop / "synthetic.json").exists()


def test_an_imagefolder_tree_is_trained_on(user_imagefolder):
    data = data_config("data=imagefolder", f"data.root={user_imagefolder}")
    assert use_own_data(data).startswith("data: training on imagefolder at")
    assert data.format == "imagefolder" and data.sampler.name == "m_per_class"


@pytest.mark.parametrize("state", ["absent", "empty", "synthetic"])
def test_the_synthetic_set_stays_the_stand_in_where_it_belongs(tmp_path, state):
    root = tmp_path / "data"
    if state != "absent":
        root.mkdir()
    if state == "synthetic":
        generate_synthetic(root, **TINY, show_progress=False)
    data = data_config("data=sop", f"data.root={root}")
    assert "stands in for sop" in use_own_data(data)
    assert data.format == "synthetic" and data.generate is not None


def test_the_synthetic_rows_and_the_paper_profile_are_left_as_composed(user_sop):
    data = data_config(f"data.root={user_sop}")  # data=synthetic: the synthetic set is what is asked for
    assert use_own_data(data) is None and data.format == "synthetic"
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        paper = compose("train", overrides=["profile=paper", "data=sop", f"data.root={user_sop}", "output_dir=x"]).data
    assert use_own_data(paper) is None and paper.format == "sop"


def test_a_folder_of_another_layout_names_the_override_that_fits(user_sop, tmp_path):
    with pytest.raises(
        ValueError,
        match=rf"data=cub data.root={user_sop}: no cub layout there .*images.txt.*"
        rf"holds the sop layout: data=sop data.root={user_sop} trains on it",
    ):
        use_own_data(data_config("data=cub", f"data.root={user_sop}"))
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="no imagefolder layout there .*class folders of images.*Nothing was written"):
        use_own_data(data_config("data=imagefolder", f"data.root={tmp_path}"))
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_the_synthetic_generator_names_the_one_override_for_a_users_folder(user_sop):
    with pytest.raises(ValueError, match=rf"holds a dataset in the sop layout.*data=sop data.root={user_sop}") as error:
        generate_synthetic(user_sop, **TINY, show_progress=False)
    assert "delete" not in str(error.value)


def test_the_documented_command_trains_on_the_users_folder(user_sop, tmp_path):
    """``python -m rambo.retrieval.train data=sop data.root=DIR`` (here at the tiny profile's scale)."""
    command = [
        sys.executable,
        "-m",
        "rambo.retrieval.train",
        "profile=tiny",
        "data=sop",
        f"data.root={user_sop}",
        f"hydra.run.dir={tmp_path}",
        "epochs=1",
        "scheduler.milestones=[1]",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"data: training on sop at {user_sop}" in (tmp_path / "train.log").read_text()
    assert (tmp_path / "metrics.json").is_file() and not (user_sop / "synthetic.json").exists()
