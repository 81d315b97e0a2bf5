"""Images of every bit depth in a retrieval dataset (rambo.harness.images through the loaders): a
16-bit PNG reaches the model scaled to 8 bits, not clipped to white; a 32-bit integer or a
floating-point image is listed by ``prepare --check``, stops the run naming its file, and is left
out with ``data.skip_unreadable``."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from PIL import Image

from rambo.retrieval.datasets import load_dataset
from rambo.retrieval.datasets.image_retrieval_dataset import UnreadableImageError
from rambo.retrieval.own_data import use_own_data
from rambo.retrieval.train import CONFIG_DIR, build_splits
from rambo.retrieval.transforms import eval_transform_of

REFUSED = "have no fixed range to scale to 0..255; save the image with 8 or 16 bits per channel"


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with the SHA-256 of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def sixteen_bit_values() -> np.ndarray:
    """16 x 16 values over the whole 16-bit range."""
    return (np.arange(256, dtype=np.uint32).reshape(16, 16) * 257).astype(np.uint16)


def photos(root: Path) -> Path:
    """16 class folders of 4 RGB PNGs each (classes 00-07 train, 08-15 test)."""
    for c in range(16):
        for i in range(4):
            (root / f"class{c:02d}").mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 16), (c * 15, i * 40, 100)).save(root / f"class{c:02d}" / f"{i}.png")
    return root


@pytest.fixture
def deep(tmp_path) -> Path:
    """The photos, one test image of them a 16-bit grayscale PNG."""
    root = photos(tmp_path / "deep")
    Image.fromarray(sixteen_bit_values()).save(root / "class09" / "2.png")
    return root


@pytest.fixture
def wide(tmp_path) -> Path:
    """The photos, two test images of them a 32-bit integer and a floating-point TIFF."""
    root = photos(tmp_path / "wide")
    Image.fromarray(np.arange(256, dtype=np.int32).reshape(16, 16) * 1000).save(root / "class09" / "4.tif")
    Image.fromarray(np.linspace(0, 1, 256, dtype=np.float32).reshape(16, 16)).save(root / "class12" / "4.tif")
    return root


def test_a_sixteen_bit_png_reaches_the_model_scaled(deep):
    before = tree_digest(deep)
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["profile=tiny", "data=imagefolder", f"data.root={deep}", "output_dir=x"])
    use_own_data(cfg.data, named=True)  # as the run does with a data.root given on the command line
    test = build_splits(cfg)["test"]  # what the run evaluates, through the evaluation transform
    index = test.image_paths.index(deep / "class09" / "2.png")
    scaled = np.floor(sixteen_bit_values().astype(float) * 255 / 65535 + 0.5).astype(np.uint8)
    expected = eval_transform_of(cfg)(Image.fromarray(np.repeat(scaled[..., None], 3, axis=2)))
    torch.testing.assert_close(test[index][0], expected, rtol=0, atol=0)
    loaded = np.asarray(load_dataset("imagefolder", deep, "test")[index][0])
    assert (loaded == 255).mean() < 0.01  # convert("RGB") made 99.6 % of it white
    assert tree_digest(deep) == before


def check(cwd: Path, root: Path) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "rambo.retrieval.prepare",
        "--check",
        "--data-dir",
        "data",
        "--data",
        "imagefolder",
    ]
    return subprocess.run(
        [*command, "--", "profile=tiny", f"data.root={root}"], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def train(cwd: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rambo.retrieval.train", "profile=tiny", "wandb.mode=disabled", "progress=false"]
    return subprocess.run([*command, *overrides], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_the_check_reads_a_sixteen_bit_png_and_lists_integer_and_float_images(tmp_path, deep, wide):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    before = tree_digest(tmp_path)
    done = check(cwd, deep)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "images: every image of imagefolder can be read"
    listed = check(cwd, wide)
    assert listed.returncode == 1
    assert listed.stderr.splitlines() == [
        f"unreadable: imagefolder: {wide / 'class09' / '4.tif'} (test split, image 8): Pillow mode I: "
        f"32-bit integer pixels {REFUSED}",
        f"unreadable: imagefolder: {wide / 'class12' / '4.tif'} (test split, image 21): Pillow mode F: "
        f"floating-point pixels {REFUSED}",
        "error: 2 image(s) cannot be read (listed above): replace or remove them, or train with "
        "data.skip_unreadable=true to leave them out (counted in the run's metrics)",
    ]
    assert tree_digest(tmp_path) == before


def test_the_run_stops_at_an_integer_image_and_skips_it_when_asked(tmp_path, wide):
    before = tree_digest(wide)
    run = tmp_path / "run"
    done = train(tmp_path, "data=imagefolder", f"data.root={wide}", "epochs=1", f"hydra.run.dir={run}")
    assert done.returncode == 2
    assert done.stderr == (
        f"error: {wide / 'class09' / '4.tif'}: image 8 of 34 cannot be read (Pillow mode I: 32-bit integer pixels "
        f"{REFUSED}); list every unreadable image with `python -m rambo.retrieval.prepare --check --data-dir data "
        f"--data imagefolder -- profile=tiny data.root={wide}`, or skip such images with data.skip_unreadable=true\n"
    )
    skipped = tmp_path / "skipped"
    done = train(
        tmp_path,
        "data=imagefolder",
        f"data.root={wide}",
        "epochs=1",
        "data.skip_unreadable=true",
        f"hydra.run.dir={skipped}",
    )
    assert done.returncode == 0, done.stderr
    metrics = json.loads((skipped / "metrics.json").read_text())
    assert metrics["unreadable_images_skipped"] == {"train": 0, "test": 2} and metrics["complete"]
    assert tree_digest(wide) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "skipped", "wide"]


def test_the_dataset_names_the_image_and_the_mode(wide):
    test = load_dataset("imagefolder", wide, "test")
    index = test.image_paths.index(wide / "class12" / "4.tif")
    with pytest.raises(UnreadableImageError) as refused:
        test[index]
    assert str(refused.value) == (
        f"{wide / 'class12' / '4.tif'}: image {index} of {len(test)} cannot be read "
        f"(Pillow mode F: floating-point pixels {REFUSED})"
    )
