"""The stand-in Pascal VOC tars: the same bytes for a seed, and the real path reads them.

The tars are served from ``file://`` URLs through the project's downloader (``fetch``: MD5 check,
extraction, both 2007 tars merged into one folder), then read by the VOC parser and dataset.
"""

from __future__ import annotations

import dataclasses
import tarfile
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import torch

from rambo.detection import download, stand_in
from rambo.detection.voc import VOC_CLASSES, VOCDetectionDataset, parse_annotation, read_image_set
from rambo.harness.download import md5_of

IMAGE_COUNTS = {("VOC2007", "trainval"): 8, ("VOC2007", "test"): 6, ("VOC2012", "trainval"): 6}


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict[str, Path]:
    paths = stand_in.write_archives(tmp_path_factory.mktemp("served"), seed=0)
    return {path.name: path for path in paths}


@pytest.fixture(scope="module")
def voc_root(served, tmp_path_factory) -> Path:
    """Every stand-in fetched and extracted by ``rambo.detection.download.fetch`` (MD5s verified)."""
    root = tmp_path_factory.mktemp("data") / "voc"
    with pytest.MonkeyPatch.context() as patch:
        for name, item in download.ARCHIVES.items():
            path = served[item.filename]
            patch.setitem(download.ARCHIVES, name, dataclasses.replace(item, urls=(path.as_uri(),), md5=md5_of(path)))
        folders = download.fetch(root, show_progress=False)
    assert folders == [root / "VOCdevkit/VOC2007"] * 2 + [root / "VOCdevkit/VOC2012"]
    return root


def test_writes_the_table_tars_with_the_same_bytes_for_a_seed(served, tmp_path, capsys):
    names = [item.filename for item in download.ARCHIVES.values()]
    assert list(served) == names
    assert stand_in.main([str(tmp_path), "--seed", "0"]) == 0
    printed = [Path(line) for line in capsys.readouterr().out.split()]
    assert printed == [tmp_path / name for name in names]
    assert {path.name: md5_of(path) for path in printed} == {name: md5_of(path) for name, path in served.items()}
    other = stand_in.write_archives(tmp_path / "other", seed=1)
    assert all(md5_of(a) != md5_of(b) for a, b in zip(other, printed))


def test_members_are_the_real_layout(served):
    with tarfile.open(served["VOCtrainval_06-Nov-2007.tar"]) as tar:
        trainval = {member.name: member for member in tar.getmembers()}
    with tarfile.open(served["VOCtest_06-Nov-2007.tar"]) as tar:
        test = {member.name: member for member in tar.getmembers()}
    assert list(trainval)[:3] == ["VOCdevkit", "VOCdevkit/VOC2007", "VOCdevkit/VOC2007/Annotations"]
    # The two 2007 tars fill one folder: they share folders only.
    assert all(trainval[name].isdir() for name in set(trainval) & set(test))
    main = "VOCdevkit/VOC2007/ImageSets/Main"
    sets = ("train", "val", "trainval", "aeroplane_trainval", "tvmonitor_val")
    assert {f"{main}/{name}.txt" for name in sets} <= set(trainval)
    assert {f"{main}/test.txt", f"{main}/person_test.txt", "VOCdevkit/VOC2007/JPEGImages/000001.jpg"} <= set(test)
    assert all(m.mtime == 1194307200 and m.uid == m.gid == 0 for m in trainval.values())


def test_voc_dataset_reads_every_split(voc_root):
    classes_seen, difficult, truncated = set(), 0, 0
    for (year, image_set), count in IMAGE_COUNTS.items():
        folder = voc_root / "VOCdevkit" / year
        ids = read_image_set(folder, image_set)
        assert len(ids) == count and all(len(i) == (6 if year == "VOC2007" else 11) for i in ids)
        if image_set == "trainval":
            train, val = read_image_set(folder, "train"), read_image_set(folder, "val")
            assert sorted(train + val) == ids and not set(train) & set(val)
        evaluation = VOCDetectionDataset(folder, image_set, train=False)
        training = VOCDetectionDataset(folder, image_set, train=True)
        assert len(evaluation) == len(training) == count
        for index in range(count):
            image, target = evaluation[index]
            assert image.shape == (3, 96, 128) and float(image.min()) >= 0.0 and float(image.max()) <= 1.0
            boxes, labels = target["boxes"], target["labels"]
            assert boxes.dtype == torch.float32 and labels.dtype == torch.int64 and len(boxes) == len(labels) >= 1
            assert bool((boxes[:, 2:] > boxes[:, :2]).all()) and bool((boxes >= 0).all())
            assert bool((boxes[:, 2] <= 128).all()) and bool((boxes[:, 3] <= 96).all())
            assert int(labels.min()) >= 1 and int(labels.max()) <= len(VOC_CLASSES)
            # Training drops difficult objects; every image keeps at least one.
            kept = training[index][1]
            assert len(kept["boxes"]) == int((~target["difficult"]).sum()) >= 1
            difficult += int(target["difficult"].sum())
            classes_seen |= set(labels.tolist())
            xml = ET.parse(folder / "Annotations" / f"{target['image_id']}.xml").getroot()
            assert xml.findtext("folder") == year and xml.findtext("size/depth") == "3"
            truncated += sum(obj.findtext("truncated") == "1" for obj in xml.iter("object"))
        # Per-class lists: 1 = a plain instance, 0 = only difficult ones, -1 = none.
        for name in VOC_CLASSES:
            lines = (folder / "ImageSets/Main" / f"{name}_{image_set}.txt").read_text().splitlines()
            rows = dict(line.split() for line in lines)
            assert list(rows) == ids
            for image_id, flag in rows.items():
                annotation = parse_annotation(folder / "Annotations" / f"{image_id}.xml")
                flags = [d for n, d in zip(annotation.names, annotation.difficult) if n == name]
                assert int(flag) == (-1 if not flags else 0 if all(flags) else 1)
    assert difficult >= 3 and truncated >= 3 and len(classes_seen) >= 8
    roots = [voc_root / "VOCdevkit/VOC2007", voc_root / "VOCdevkit/VOC2012"]
    assert len(VOCDetectionDataset(roots, "trainval", train=True)) == 14  # the 07+12 training set of voc0712


def test_annotations_follow_each_years_format(voc_root):
    old = ET.parse(voc_root / "VOCdevkit/VOC2007/Annotations/000005.xml").getroot()
    assert [child.tag for child in old][:6] == ["folder", "filename", "source", "owner", "size", "segmented"]
    assert [child.tag for child in old.find("object")] == ["name", "pose", "truncated", "difficult", "bndbox"]
    new = ET.parse(voc_root / "VOCdevkit/VOC2012/Annotations/2008_000008.xml").getroot()
    tags = ["name", "bndbox", "difficult", "occluded", "pose", "truncated"]  # alphabetical after the name
    assert [child.tag for child in new.find("object")] == tags
    assert [child.tag for child in new.find("object/bndbox")] == ["xmax", "xmin", "ymax", "ymin"]
    assert new.findtext("source/database") == "The VOC2008 Database"
    annotation = parse_annotation(voc_root / "VOCdevkit/VOC2012/Annotations/2008_000008.xml")
    assert annotation.filename == "2008_000008.jpg" and (annotation.width, annotation.height) == (128, 96)
