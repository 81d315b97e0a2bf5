"""How much of an AP50 is the test set's draw: AP50 on resampled and disjoint sets of test images.

The mini's test set is 80 small images; two models that differ by a point may differ by the
images they were scored on. Given one model's detections on a large test set, these measure the
evaluation-sampling part of the variance of its AP50:

* [`map_of_images`][rambo.detection.evaluation_sampling.map_of_images]: the VOC AP50
  ([`evaluation.evaluate_voc`][rambo.detection.evaluation.evaluate_voc]) of a *multiset* of test
  images: an image drawn twice counts twice (its copies are evaluated as separate images);
* [`bootstrap_maps`][rambo.detection.evaluation_sampling.bootstrap_maps]: AP50 over bootstrap resamples of the test
  images (drawn with replacement, `size` each, by a seeded generator), whose standard deviation is the sampling
  error of an AP50 measured on `size` images;
* [`disjoint_maps`][rambo.detection.evaluation_sampling.disjoint_maps]: AP50 on each of the disjoint consecutive
  `size`-image parts of the test set: independent test sets of that size, as a new draw of the data would give.

A paired comparison (RaMBO minus CE on the same images) resamples the same image indices for
both models: pass one `generator` seed to both, or the differences of
[`disjoint_maps`][rambo.detection.evaluation_sampling.disjoint_maps].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .evaluation import evaluate_voc


def map_of_images(
    predictions: Mapping, ground_truths: Mapping, images: Sequence[str], num_classes: int, method: str = "area"
) -> float:
    """AP50 (`method` as [`evaluate_voc`][rambo.detection.evaluation.evaluate_voc]) of the test images `images`, repeats
    counted: the `k`-th copy of an image is evaluated as an image of its own (`<id>#k`)."""
    chosen_predictions, chosen_truths, seen = {}, {}, {}
    for image in images:
        copy = seen.get(image, 0)
        seen[image] = copy + 1
        name = f"{image}#{copy}"
        chosen_predictions[name], chosen_truths[name] = predictions[image], ground_truths[image]
    return evaluate_voc(chosen_predictions, chosen_truths, num_classes, method)["map"]


def bootstrap_maps(
    predictions: Mapping,
    ground_truths: Mapping,
    num_classes: int,
    draws: int,
    seed: int,
    size: int | None = None,
    method: str = "area",
) -> np.ndarray:
    """AP50 of `draws` bootstrap resamples of `size` images (default: as many as there are),
    drawn with replacement by `numpy.random.default_rng(seed)` from the sorted image ids."""
    images = sorted(ground_truths)
    size = len(images) if size is None else size
    if draws < 1 or not 1 <= size:
        raise ValueError(f"need draws >= 1 and size >= 1, got {draws} and {size}")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(images), size=(draws, size))
    return np.array(
        [map_of_images(predictions, ground_truths, [images[i] for i in row], num_classes, method) for row in picks]
    )


def disjoint_maps(
    predictions: Mapping, ground_truths: Mapping, num_classes: int, size: int, method: str = "area"
) -> np.ndarray:
    """AP50 of each consecutive `size`-image part of the sorted image ids (a remainder smaller
    than `size` is left out)."""
    images = sorted(ground_truths)
    if not 1 <= size <= len(images):
        raise ValueError(f"size must be in 1..{len(images)} (the test images), got {size}")
    parts = [images[start : start + size] for start in range(0, len(images) - size + 1, size)]
    return np.array([map_of_images(predictions, ground_truths, part, num_classes, method) for part in parts])
