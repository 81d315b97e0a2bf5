"""VOC images read as their RGB values (rambo.harness.images through VOCDetectionDataset): a 16-bit
image scaled to 0..1, not clipped to white; an image that cannot be read named with its file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from rambo.detection.voc import VOCDetectionDataset
from rambo.harness.images import UnreadableImage

XML = """<annotation><filename>{filename}</filename><size><width>6</width><height>4</height><depth>3</depth></size>
<object><name>cat</name><difficult>0</difficult><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>3</xmax><ymax>3</ymax></bndbox></object>
</annotation>"""


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with the SHA-256 of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def voc(root: Path, images: dict[str, Image.Image]) -> Path:
    """A VOC folder whose trainval set is ``images`` (id -> image, saved as JPEGImages/<id>)."""
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for filename, image in images.items():
        image.save(root / "JPEGImages" / filename)
        (root / "Annotations" / f"{Path(filename).stem}.xml").write_text(XML.format(filename=filename))
    (root / "ImageSets" / "Main" / "trainval.txt").write_text("".join(f"{Path(f).stem}\n" for f in images))
    return root


def test_a_sixteen_bit_image_reaches_the_detector_scaled_to_0_1(tmp_path):
    v = np.array([[0, 128, 129, 32896, 65406, 65535]] * 4, dtype=np.uint16)
    root = voc(tmp_path / "VOC2007", {"deep.png": Image.frombytes("I;16", (6, 4), v.astype("<u2").tobytes())})
    before = tree_digest(tmp_path)
    pixels, target = VOCDetectionDataset(root, "trainval")[0]
    expected = torch.from_numpy(np.floor(v.astype(float) * 255 / 65535 + 0.5)).float() / 255.0
    torch.testing.assert_close(pixels, expected.expand(3, 4, 6), rtol=0, atol=0)
    assert target["labels"].tolist() == [8]  # cat
    assert tree_digest(tmp_path) == before


@pytest.mark.parametrize("kind", ["float", "truncated"])
def test_an_image_that_cannot_be_read_is_named(tmp_path, kind):
    if kind == "float":
        root = voc(tmp_path / "VOC2007", {"depth.tif": Image.fromarray(np.zeros((4, 6), dtype=np.float32))})
        path = root / "JPEGImages" / "depth.tif"
        reason = (
            "Pillow mode F: floating-point pixels have no fixed range to scale to 0..255; "
            "save the image with 8 or 16 bits per channel"
        )
    else:
        root = voc(tmp_path / "VOC2007", {"cut.png": Image.new("RGB", (6, 4), (9, 99, 199))})
        path = root / "JPEGImages" / "cut.png"
        path.write_bytes(path.read_bytes()[:50])  # the header and part of the pixel data
        reason = "OSError: image file is truncated"
    before = tree_digest(tmp_path)
    with pytest.raises(UnreadableImage) as refused:
        VOCDetectionDataset(root, "trainval")[0]
    assert str(refused.value) == f"{path}: {reason}"
    assert tree_digest(tmp_path) == before
