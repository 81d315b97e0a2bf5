from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from rambo.detection.voc import VOCDetectionDataset, collate_detection, parse_annotation, read_image_set

XML = """<annotation>
  <folder>VOC2007</folder><filename>{image_id}.jpg</filename>
  <size><width>40</width><height>30</height><depth>3</depth></size>
  {objects}
</annotation>"""
OBJECT = (
    "<object><name>{name}</name><pose>Left</pose><truncated>0</truncated>{difficult}"
    "<bndbox><xmin>{x1}</xmin><ymin>{y1}</ymin><xmax>{x2}</xmax><ymax>{y2}</ymax></bndbox></object>"
)


def write_voc(root: Path, images: dict[str, list[tuple]], image_set: str = "trainval") -> Path:
    """``images``: id -> [(name, x1, y1, x2, y2, difficult or None)] in VOC's 1-based inclusive pixels."""
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for image_id, objects in images.items():
        parts = []
        for name, x1, y1, x2, y2, difficult in objects:
            flag = "" if difficult is None else f"<difficult>{int(difficult)}</difficult>"
            parts.append(OBJECT.format(name=name, x1=x1, y1=y1, x2=x2, y2=y2, difficult=flag))
        (root / "Annotations" / f"{image_id}.xml").write_text(XML.format(image_id=image_id, objects="".join(parts)))
        Image.new("RGB", (40, 30), (10, 200, 30)).save(root / "JPEGImages" / f"{image_id}.jpg")
    (root / "ImageSets" / "Main" / f"{image_set}.txt").write_text("".join(f"{i}\n" for i in images))
    return root


def test_parse_annotation_keeps_difficult_and_converts_to_corners(tmp_path):
    root = write_voc(
        tmp_path, {"000005": [("cat", 1, 2, 10, 20, 0), ("dog", 5, 5, 7, 9, 1), ("cat", 3, 3, 3, 3, None)]}
    )
    annotation = parse_annotation(root / "Annotations" / "000005.xml")
    assert annotation.image_id == "000005" and annotation.filename == "000005.jpg"
    assert (annotation.width, annotation.height) == (40, 30)
    assert annotation.names == ["cat", "dog", "cat"]
    # 1-based inclusive [1, 10] is the continuous interval [0, 10]; a one-pixel box has width 1.
    np.testing.assert_array_equal(annotation.boxes, [[0, 1, 10, 20], [4, 4, 7, 9], [2, 2, 3, 3]])
    np.testing.assert_array_equal(annotation.difficult, [False, True, False])  # missing flag means 0


def test_parse_annotation_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text("<annotation><filename>")
    with pytest.raises(ValueError, match="not a valid VOC annotation"):
        parse_annotation(bad)
    inverted = write_voc(tmp_path / "inv", {"1": [("cat", 10, 2, 5, 20, 0)]})
    with pytest.raises(ValueError, match="max < min"):
        parse_annotation(inverted / "Annotations" / "1.xml")


def test_read_image_set_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="image set file not found"):
        read_image_set(tmp_path, "trainval")


def test_dataset_drops_difficult_in_training_only(tmp_path):
    classes = ("cat", "dog")
    root = write_voc(
        tmp_path, {"a": [("cat", 1, 2, 10, 20, 0), ("dog", 5, 5, 7, 9, 1)], "b": [("dog", 2, 2, 30, 25, 0)]}
    )
    train = VOCDetectionDataset(root, "trainval", classes, train=True)
    test = VOCDetectionDataset([root], "trainval", classes, train=False)
    image, target = train[0]
    assert image.shape == (3, 30, 40) and image.dtype == torch.float32 and 0 <= image.min() and image.max() <= 1
    assert target["labels"].tolist() == [1] and target["boxes"].tolist() == [[0, 1, 10, 20]]
    assert target["difficult"].tolist() == [False]
    _, target = test[0]
    assert target["labels"].tolist() == [1, 2] and target["difficult"].tolist() == [False, True]
    assert target["boxes"].dtype == torch.float32 and target["labels"].dtype == torch.int64
    images, targets = collate_detection([train[0], train[1]])
    assert len(images) == 2 and [t["image_id"] for t in targets] == ["a", "b"]


def test_dataset_joins_several_roots_and_rejects_unknown_classes(tmp_path):
    first = write_voc(tmp_path / "VOC2007", {"a": [("cat", 1, 1, 5, 5, 0)]})
    second = write_voc(tmp_path / "VOC2012", {"b": [("bird", 1, 1, 5, 5, 0)], "c": [("cat", 1, 1, 5, 5, 0)]})
    dataset = VOCDetectionDataset([first, second], "trainval", ("cat", "dog"))
    assert len(dataset) == 3
    with pytest.raises(ValueError, match="not in the class list"):
        dataset[1]
    assert len(VOCDetectionDataset([first, second], "trainval", ("cat",), max_images=2)) == 2


@pytest.mark.parametrize("given", ["VOC2007", "VOCdevkit"])
def test_a_data_root_one_level_too_deep_is_named(tmp_path, given):
    """``data.root=.../VOCdevkit/VOC2007`` (or ``.../VOCdevkit``): the config appends VOCdevkit/VOC2007 to it."""
    year = write_voc(tmp_path / "VOCdevkit" / "VOC2007", {"1": [("cat", 1, 2, 5, 20, 0)]})
    root = year if given == "VOC2007" else year.parent
    with pytest.raises(
        ValueError,
        match=rf"{root} looks like a VOC folder itself: data.root is the folder that holds VOCdevkit/VOC2007",
    ):
        read_image_set(root / "VOCdevkit" / "VOC2007", "trainval")
    assert read_image_set(tmp_path / "VOCdevkit" / "VOC2007", "trainval") == ["1"]
