import hashlib

import numpy as np
import pytest

from rambo.detection.evaluation import box_iou
from rambo.detection.synthetic import CLASS_SPECS, SYNTHETIC_CLASSES, generate, main
from rambo.detection.voc import VOCDetectionDataset, parse_annotation, read_image_set


def digest(root):
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_twenty_distinct_classes():
    assert len(SYNTHETIC_CLASSES) == len(set(SYNTHETIC_CLASSES)) == 20
    assert len(set(CLASS_SPECS)) == 20


def test_generation_is_deterministic_from_the_seed(tmp_path):
    a = digest(generate(tmp_path / "a", seed=3, num_trainval=6, num_test=3, image_size=64))
    b = digest(generate(tmp_path / "b", seed=3, num_trainval=6, num_test=3, image_size=64))
    c = digest(generate(tmp_path / "c", seed=4, num_trainval=6, num_test=3, image_size=64))
    assert a == b and a != c
    assert len([k for k in a if k.startswith("JPEGImages/")]) == 9


def test_written_in_the_voc_layout_with_the_properties_asked_for(tmp_path):
    root = generate(tmp_path, seed=0, num_trainval=60, num_test=20, image_size=96)
    assert len(read_image_set(root, "trainval")) == 60 and len(read_image_set(root, "test")) == 20
    annotations = [parse_annotation(p) for p in sorted((root / "Annotations").glob("*.xml"))]
    counts = [len(a.names) for a in annotations]
    difficult = np.concatenate([a.difficult for a in annotations])
    assert min(counts) >= 1 and np.mean(counts) >= 2.5  # several objects per image
    assert 0.02 < difficult.mean() < 0.3  # a few difficult ones
    assert set().union(*(a.names for a in annotations)) == set(SYNTHETIC_CLASSES)
    overlapping = sum(
        bool((np.triu(box_iou(a.boxes, a.boxes), k=1) > 0.05).any()) for a in annotations if len(a.names) > 1
    )
    assert overlapping >= 5  # some objects overlap
    for a in annotations:
        assert (a.width, a.height) == (96, 96)
        assert (a.boxes[:, 2] > a.boxes[:, 0]).all() and (a.boxes >= 0).all() and (a.boxes <= 96).all()
    image, target = VOCDetectionDataset(root, "test", SYNTHETIC_CLASSES)[0]
    assert image.shape == (3, 96, 96) and target["labels"].min() >= 1


def test_cli_and_bad_arguments(tmp_path, capsys):
    assert main([str(tmp_path / "cli"), "--seed", "1", "--trainval", "2", "--test", "1", "--size", "64"]) == 0
    assert (tmp_path / "cli" / "ImageSets" / "Main" / "test.txt").read_text() == "000002\n"
    assert str(tmp_path / "cli") in capsys.readouterr().out
    with pytest.raises(ValueError, match="image_size"):
        generate(tmp_path / "small", image_size=32)
    with pytest.raises(ValueError, match="at least one"):
        generate(tmp_path / "empty", num_trainval=0)
