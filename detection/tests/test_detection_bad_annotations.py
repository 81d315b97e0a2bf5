"""A Pascal VOC annotation that is no VOC annotation (cut short, without ``<size>`` or ``<bndbox>``, a
coordinate that is not a number) and an image that cannot be decoded: ``prepare --check`` lists each by
file (exit code 1), training stops with one ``error:`` line naming the file (exit code 2); neither
changes a byte of the data (rambo.detection.voc, rambo.detection.prepare).

Before: each annotation ended training in a traceback (exit code 1; ``could not convert string to float:
'abc'`` without a file name), and ``prepare --check`` opened neither annotations nor images (exit code 0)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rambo.detection.voc import BadAnnotation, parse_annotation
from rambo.harness.testing import tree_digest

FIX = "replace it with a whole copy (download or generate the dataset again), or take image 000000 out of {sets}/*.txt"
BROKEN = {  # how annotation 000000 is broken -> what the messages say is wrong
    "truncated": (lambda xml: xml[:100], "not a valid VOC annotation XML (no element found: line 1, column 100)"),
    "no size": (lambda xml: re.sub(r"<size>.*?</size>", "", xml), "no <size> (the image's <width> and <height>)"),
    "no bndbox": (lambda xml: re.sub(r"<bndbox>.*?</bndbox>", "", xml, count=1), "<object> 1 has no <bndbox>"),
    "not a number": (
        lambda xml: re.sub(r"<xmin>\d+", "<xmin>abc", xml, count=1),
        "<bndbox><xmin> is 'abc', not a number",
    ),
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("generated") / "voc"
    command = [sys.executable, "-m", "rambo.detection.synthetic", str(root), "--trainval", "12", "--test", "4"]
    subprocess.run([*command, "--size", "56"], check=True, capture_output=True)
    return root


def voc(tmp_path: Path, generated: Path) -> Path:
    root = tmp_path / "voc"
    shutil.copytree(generated, root)
    return root


def check(cwd: Path, root: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rambo.detection.prepare", "--check", "--data-dir", "data", "--data", "synthetic"]
    return subprocess.run([*command, "--", f"data.root={root}"], capture_output=True, text=True, timeout=300, cwd=cwd)


def train(cwd: Path, root: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rambo.detection.train", "profile=tiny", "wandb.mode=disabled", "progress=false"]
    command += ["threads=1", "data_dir=data", f"data.root={root}", f"hydra.run.dir={cwd / 'run'}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_annotation_is_named_by_the_reader(tmp_path, generated, kind):
    root = voc(tmp_path, generated)
    path = root / "Annotations" / "000000.xml"
    path.write_text(BROKEN[kind][0](path.read_text()))
    with pytest.raises(BadAnnotation) as raised:
        parse_annotation(path)
    sets = root / "ImageSets" / "Main"
    assert raised.value.line() == f"{path}: {BROKEN[kind][1]}; {FIX.format(sets=sets)}"


@pytest.mark.parametrize("kind", BROKEN)
def test_a_broken_annotation_is_listed_by_the_check_and_stops_training_in_one_line(tmp_path, generated, kind):
    root = voc(tmp_path, generated)
    path = root / "Annotations" / "000000.xml"
    path.write_text(BROKEN[kind][0](path.read_text()))
    before = tree_digest(tmp_path)
    done = check(tmp_path, root)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr == (
        f"unreadable: synthetic: {path} (trainval set, image 0): {BROKEN[kind][1]}\n"
        "error: 1 image(s) or annotation(s) cannot be read (listed above): replace them with whole copies (download "
        "or generate the dataset again), or take their ids out of ImageSets/Main/*.txt\n"
    )
    assert tree_digest(tmp_path) == before

    done = train(tmp_path, root)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr == (
        f"error: {path}: {BROKEN[kind][1]}; {FIX.format(sets=root / 'ImageSets' / 'Main')}; list every bad "
        "annotation and image with `python -m rambo.detection.prepare --check --data-dir data --data synthetic -- "
        f"profile=tiny data.root={root}`\n"
    )
    after = tree_digest(tmp_path)
    assert {name: value for name, value in after.items() if not name.startswith("run/")} == before
    assert sorted(name for name in after if name.startswith("run/")) == [
        "run/.hydra/config.yaml",
        "run/.hydra/hydra.yaml",
        "run/.hydra/overrides.yaml",
        "run/train.log",
    ]  # the refused run's own folder: its configuration and the log that says why it stopped


def test_the_check_decodes_every_image_and_names_the_ones_that_cannot_be(tmp_path, generated):
    root = voc(tmp_path, generated)
    cut, empty = root / "JPEGImages" / "000003.jpg", root / "JPEGImages" / "000001.jpg"
    cut.write_bytes(cut.read_bytes()[:200])
    empty.write_bytes(b"")
    before = tree_digest(tmp_path)
    done = check(tmp_path, root)
    assert done.returncode == 1, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert [line.split(": ", 2)[:2] for line in lines[:-1]] == [
        ["unreadable", "synthetic"],
        ["unreadable", "synthetic"],
    ]
    assert lines[0].startswith(f"unreadable: synthetic: {empty} (trainval set, image 1): ")
    assert lines[1].startswith(f"unreadable: synthetic: {cut} (trainval set, image 3): ")
    assert lines[-1].startswith("error: 2 image(s) or annotation(s) cannot be read (listed above)")
    assert tree_digest(tmp_path) == before


def test_the_check_of_an_intact_set_says_so(tmp_path, generated):
    root = voc(tmp_path, generated)
    done = check(tmp_path, root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == "images: every image of synthetic can be read\n"
