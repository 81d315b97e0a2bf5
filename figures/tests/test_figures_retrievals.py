import json

import numpy as np
import pytest
from PIL import Image

from rambo.figures.figure_style import NEGATIVE
from rambo.figures.retrieval_examples import as_image, load_retrievals, thumbnail, with_border


def test_with_border_frames_the_image_in_the_colour():
    image = np.full((4, 6, 3), 7, dtype=np.uint8)
    framed = with_border(image, NEGATIVE, 2)
    assert framed.shape == (8, 10, 3)
    expected = [int(NEGATIVE[i : i + 2], 16) for i in (1, 3, 5)]
    for y, x in [(0, 0), (1, 5), (7, 9), (4, 0), (4, 9)]:
        assert framed[y, x].tolist() == expected
    assert (framed[2:6, 2:8] == 7).all()


def test_thumbnail_keeps_aspect_ratio_on_white():
    image = np.zeros((10, 40, 3), dtype=np.uint8)
    small = thumbnail(image, 20)
    assert small.shape == (20, 20, 3)
    assert (small[0] == 255).all() and (small[10] == 0).all()  # 20 x 5 picture centred vertically


def _tiny_images(folder, count):
    colours = np.random.default_rng(0).integers(0, 256, (count, 3))
    paths = []
    for i, colour in enumerate(colours):
        Image.fromarray(np.tile(colour.astype(np.uint8), (12, 16, 1))).save(folder / f"img_{i}.jpg")
        paths.append(f"img_{i}.jpg")
    return np.array(paths)


def test_fig4_script_from_paths(run_figure, tmp_path, assert_figure_written):
    paths = _tiny_images(tmp_path, 9)
    correct = np.array([[True, False, True, True], [False, False, True, False]])
    np.savez(tmp_path / "r.npz", query=paths[:2], results=paths[1:9].reshape(2, 4), correct=correct)
    out = run_figure(
        "fig4_retrievals",
        "--retrievals",
        str(tmp_path / "r.npz"),
        "--image-root",
        str(tmp_path),
        "--top-k",
        "3",
        "--size",
        "32",
    )
    assert_figure_written(out, "fig4_retrievals")
    numbers = json.loads((out / "fig4_retrievals.json").read_text())
    assert numbers["precision_per_query"] == pytest.approx([2 / 3, 1 / 3])
    assert numbers["first_result_correct"] == 0.5


def test_fig4_script_from_arrays(run_figure, tmp_path):
    rng = np.random.default_rng(1)
    np.savez(
        tmp_path / "r.npz",
        query=rng.integers(0, 256, (3, 10, 10, 3), dtype=np.uint8),
        results=rng.integers(0, 256, (3, 2, 8, 12, 3), dtype=np.uint8),
        correct=np.ones((3, 2), dtype=bool),
    )
    out = run_figure("fig4_retrievals", "--retrievals", str(tmp_path / "r.npz"), "--size", "24")
    assert json.loads((out / "fig4_retrievals.json").read_text())["precision"] == 1.0


def test_bad_retrieval_dumps_are_rejected(tmp_path):
    np.savez(tmp_path / "a.npz", query=np.array(["a"]), correct=np.ones((1, 2), bool))
    with pytest.raises(ValueError, match="results"):
        load_retrievals(tmp_path / "a.npz")
    np.savez(
        tmp_path / "b.npz", query=np.array(["a", "b"]), results=np.array([["c", "d"]]), correct=np.ones((1, 2), bool)
    )
    with pytest.raises(ValueError, match="disagree"):
        load_retrievals(tmp_path / "b.npz")
    with pytest.raises(ValueError, match="image-root"):
        as_image("nowhere.jpg", tmp_path)
