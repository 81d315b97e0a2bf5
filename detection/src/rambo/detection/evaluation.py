"""Pascal VOC detection evaluation: AP at IoU 0.5 per class and its mean (the paper's AP50).

Protocol (VOC devkit): detections of a class are taken in decreasing score; each is a true positive
when its best-overlapping ground truth of that class has IoU > 0.5 and was not matched before, a
false positive otherwise; a detection whose best match is a *difficult* ground truth counts as
neither, and difficult objects are not counted in the recall's denominator.

Boxes are continuous corners `(x1, y1, x2, y2)` (the VOC parser turns the 1-based inclusive pixel
indices into these), so the IoU has no "+1": a devkit box `[1, 1, 10, 10]` is `[0, 0, 10, 10]`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

IOU_THRESHOLD = 0.5
AP_METHODS = ("area", "11point", "101point")


def box_iou(boxes: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU `[A, B]` of corner boxes `boxes [A, 4]` and `others [B, 4]`."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    others = np.asarray(others, dtype=np.float64).reshape(-1, 4)
    width = np.clip(
        np.minimum(boxes[:, None, 2], others[None, :, 2]) - np.maximum(boxes[:, None, 0], others[None, :, 0]), 0, None
    )
    height = np.clip(
        np.minimum(boxes[:, None, 3], others[None, :, 3]) - np.maximum(boxes[:, None, 1], others[None, :, 1]), 0, None
    )
    intersection = width * height
    area = lambda b: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])  # noqa: E731
    union = area(boxes)[:, None] + area(others)[None, :] - intersection
    return np.where(union > 0, intersection / np.where(union > 0, union, 1.0), 0.0)


def average_precision(recall: np.ndarray, precision: np.ndarray, method: str = "area") -> float:
    """AP from a precision/recall curve (detections in decreasing score).

    `area`: VOC 2010+ area under the monotone precision envelope,
    `sum_k (r_k - r_{k-1}) * max_{j >= k} p_j`.
    `11point`: VOC 2007, the mean over `t in {0, 0.1, ..., 1}` of `max_{r_j >= t} p_j` (0 if none).
    `101point`: COCO's sampling, the mean over `t in {0, 0.01, ..., 1}` of the envelope at the
    first `r_j >= t` (0 if none); given so that the matching can be checked against pycocotools.
    """
    if method not in AP_METHODS:
        raise ValueError(f"unknown AP method {method!r}; choose from {AP_METHODS}")
    recall = np.asarray(recall, dtype=np.float64)
    precision = np.asarray(precision, dtype=np.float64)
    if recall.shape != precision.shape or recall.ndim != 1:
        raise ValueError(f"recall {recall.shape} and precision {precision.shape} must be 1-d of the same length")
    if recall.size == 0:
        return 0.0
    # The envelope: precision at recall r is the best precision at any recall >= r.
    envelope = np.maximum.accumulate(precision[::-1])[::-1]
    if method == "area":
        steps = np.diff(np.concatenate([[0.0], recall]))
        return float(np.sum(steps * envelope))
    thresholds = np.linspace(0.0, 1.0, 11 if method == "11point" else 101)
    first = np.searchsorted(recall, thresholds, side="left")
    reached = first < recall.size
    values = np.where(reached, envelope[np.minimum(first, recall.size - 1)], 0.0)
    return float(values.mean())


@dataclass
class ClassCurve:
    """Per-class matching result: `tp`/`fp` flags of the counted detections in score order."""

    true_positive: np.ndarray
    false_positive: np.ndarray
    num_positives: int

    @property
    def recall(self) -> np.ndarray:
        return np.cumsum(self.true_positive) / max(self.num_positives, 1)

    @property
    def precision(self) -> np.ndarray:
        tp, fp = np.cumsum(self.true_positive), np.cumsum(self.false_positive)
        return tp / np.maximum(tp + fp, np.finfo(np.float64).eps)


def match_class(detections, ground_truths, iou_threshold: float = IOU_THRESHOLD) -> ClassCurve:
    """Match one class's detections to its ground truth (VOC protocol, see module docstring).

    Args:
        detections: list of `(image_id, score, box [4])`.
        ground_truths: dict `image_id -> (boxes [K, 4], difficult [K] bool)`.
    """
    order = sorted(range(len(detections)), key=lambda i: -float(detections[i][1]))  # stable on ties
    matched = {image: np.zeros(len(boxes), dtype=bool) for image, (boxes, _) in ground_truths.items()}
    hits = []  # one entry per counted detection, in score order: True = true positive
    for index in order:
        image_id, _, box = detections[index]
        boxes, difficult = ground_truths.get(image_id, (np.zeros((0, 4)), np.zeros(0, dtype=bool)))
        overlaps = box_iou(np.asarray(box)[None], boxes)[0]
        best = int(np.argmax(overlaps)) if len(overlaps) else -1
        if best < 0 or overlaps[best] <= iou_threshold:
            hits.append(False)
        elif difficult[best]:
            continue  # ignored: neither a hit nor a false alarm
        elif matched[image_id][best]:
            hits.append(False)  # a second detection of an object already found
        else:
            matched[image_id][best] = True
            hits.append(True)
    hits = np.asarray(hits, dtype=np.float64)
    num_positives = int(sum(int((~np.asarray(d, dtype=bool)).sum()) for _, d in ground_truths.values()))
    return ClassCurve(hits, 1.0 - hits, num_positives)


def evaluate_voc(
    predictions, ground_truths, num_classes: int, method: str = "area", iou_threshold: float = IOU_THRESHOLD
) -> dict:
    """AP per class and mAP over the classes that have a non-difficult ground truth object.

    Args:
        predictions: dict `image_id -> {"boxes": [D, 4], "scores": [D], "labels": [D] in 1..C}`.
        ground_truths: dict `image_id -> {"boxes": [K, 4], "labels": [K] in 1..C, "difficult": [K]}`.
        num_classes: C (labels run 1..C, torchvision's convention).
        method: `area` (VOC 2010+), `11point` (VOC 2007) or `101point` (COCO sampling).

    Returns `{"ap": [C] floats (NaN for a class without positives), "map": float}`.
    """
    if method not in AP_METHODS:
        raise ValueError(f"unknown AP method {method!r}; choose from {AP_METHODS}")
    unknown = sorted(set(predictions) - set(ground_truths))
    if unknown:
        raise ValueError(f"predictions for images without ground truth: {unknown[:5]}")
    per_class_detections = [[] for _ in range(num_classes)]
    for image_id, prediction in predictions.items():
        boxes = np.asarray(prediction["boxes"], dtype=np.float64).reshape(-1, 4)
        for box, score, label in zip(boxes, np.asarray(prediction["scores"]), np.asarray(prediction["labels"])):
            if not 1 <= int(label) <= num_classes:
                raise ValueError(f"{image_id}: predicted label {int(label)} outside 1..{num_classes}")
            per_class_detections[int(label) - 1].append((image_id, float(score), box))
    ap = []
    for label in range(1, num_classes + 1):
        class_truth = {}
        for image_id, truth in ground_truths.items():
            labels = np.asarray(truth["labels"])
            keep = labels == label
            class_truth[image_id] = (
                np.asarray(truth["boxes"], dtype=np.float64).reshape(-1, 4)[keep],
                np.asarray(truth["difficult"], dtype=bool)[keep],
            )
        curve = match_class(per_class_detections[label - 1], class_truth, iou_threshold)
        if curve.num_positives == 0:
            ap.append(float("nan"))
        else:
            ap.append(average_precision(curve.recall, curve.precision, method))
    valid = [value for value in ap if not np.isnan(value)]
    return {"ap": ap, "map": float(np.mean(valid)) if valid else float("nan")}
