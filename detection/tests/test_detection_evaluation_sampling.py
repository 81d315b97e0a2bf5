"""AP50 on resampled and disjoint test images (rambo.detection.evaluation_sampling)."""

import numpy as np
import pytest

from rambo.detection.evaluation import evaluate_voc
from rambo.detection.evaluation_sampling import bootstrap_maps, disjoint_maps, map_of_images


def scene(images=12, classes=3, seed=0):
    """Random ground truth and detections (some matching, some not) on ``images`` images."""
    rng = np.random.default_rng(seed)
    predictions, truths = {}, {}
    for index in range(images):
        count = int(rng.integers(1, 4))
        corners = rng.uniform(0, 60, size=(count, 2))
        boxes = np.hstack([corners, corners + rng.uniform(10, 30, size=(count, 2))])
        labels = rng.integers(1, classes + 1, size=count)
        truths[f"{index:03d}"] = {"boxes": boxes, "labels": labels, "difficult": rng.uniform(size=count) < 0.1}
        jitter = boxes + rng.normal(0, 4, size=boxes.shape)
        noise = rng.uniform(0, 60, size=(2, 4))
        noise[:, 2:] = noise[:, :2] + 15
        predictions[f"{index:03d}"] = {
            "boxes": np.vstack([jitter, noise]),
            "scores": rng.uniform(size=count + 2),
            "labels": np.concatenate([labels, rng.integers(1, classes + 1, size=2)]),
        }
    return predictions, truths


def test_every_image_once_is_the_plain_ap_and_repeats_count_as_images_of_their_own():
    predictions, truths = scene()
    ids = sorted(truths)
    assert map_of_images(predictions, truths, ids, 3) == evaluate_voc(predictions, truths, 3)["map"]
    doubled = ids[:4] + ids[:4] + ids[7:]
    by_hand_predictions = {f"{i}-{k}": predictions[i] for k, i in enumerate(doubled)}
    by_hand_truths = {f"{i}-{k}": truths[i] for k, i in enumerate(doubled)}
    assert map_of_images(predictions, truths, doubled, 3) == pytest.approx(
        evaluate_voc(by_hand_predictions, by_hand_truths, 3)["map"], abs=1e-12
    )


def test_bootstrap_draws_are_seeded_resamples_of_the_images():
    predictions, truths = scene()
    first = bootstrap_maps(predictions, truths, 3, draws=5, seed=1)
    assert first.shape == (5,) and np.array_equal(first, bootstrap_maps(predictions, truths, 3, draws=5, seed=1))
    assert not np.array_equal(first, bootstrap_maps(predictions, truths, 3, draws=5, seed=2))
    ids = sorted(truths)
    picks = np.random.default_rng(1).integers(0, len(ids), size=(5, len(ids)))
    assert first[3] == map_of_images(predictions, truths, [ids[i] for i in picks[3]], 3)
    with pytest.raises(ValueError, match="draws"):
        bootstrap_maps(predictions, truths, 3, draws=0, seed=1)


def test_disjoint_parts_cover_the_sorted_images_in_order_without_the_remainder():
    predictions, truths = scene(images=14)
    ids = sorted(truths)
    parts = disjoint_maps(predictions, truths, 3, size=4)
    assert parts.tolist() == [map_of_images(predictions, truths, ids[s : s + 4], 3) for s in (0, 4, 8)]
    assert disjoint_maps(predictions, truths, 3, size=14).tolist() == [evaluate_voc(predictions, truths, 3)["map"]]
    with pytest.raises(ValueError, match="size must be in 1..14"):
        disjoint_maps(predictions, truths, 3, size=15)
