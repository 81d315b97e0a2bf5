import contextlib
import io

import numpy as np
import pytest

from rambo.detection.evaluation import average_precision, box_iou, evaluate_voc, match_class


def brute_iou(a, b):
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - width * height
    return width * height / union


def test_box_iou_matches_the_definition():
    rng = np.random.default_rng(0)
    corners = rng.uniform(0, 50, (7, 2))
    boxes = np.concatenate([corners, corners + rng.uniform(1, 30, (7, 2))], axis=1)
    expected = [[brute_iou(a, b) for b in boxes[:4]] for a in boxes]
    np.testing.assert_allclose(box_iou(boxes, boxes[:4]), expected)
    assert box_iou(boxes, np.zeros((0, 4))).shape == (7, 0)


def hand_case():
    """Class 1 (cat): the worked example below; class 2 (dog): ground truth, no detection; class 3: nothing."""
    truth = {
        "A": {"boxes": [[0, 0, 10, 10], [20, 20, 30, 30], [0, 0, 5, 5]], "labels": [1, 1, 2], "difficult": [0, 0, 0]},
        "B": {"boxes": [[0, 0, 10, 10], [50, 50, 60, 60]], "labels": [1, 1], "difficult": [1, 0]},
    }
    predictions = {
        # scores: 0.9 TP, 0.8 hits a difficult object (ignored), 0.7 duplicate (FP), 0.6 TP, 0.5 miss (FP)
        "A": {
            "boxes": [[0, 0, 10, 10], [0, 0, 10, 10], [100, 100, 110, 110]],
            "scores": [0.9, 0.7, 0.5],
            "labels": [1, 1, 1],
        },
        "B": {"boxes": [[0, 0, 10, 10], [50, 51, 60, 60]], "scores": [0.8, 0.6], "labels": [1, 1]},
    }
    return predictions, truth


@pytest.mark.parametrize(
    "method, expected_cat",
    [
        # counted: TP FP TP FP, 3 positives: recall 1/3 1/3 2/3 2/3, precision 1 1/2 2/3 1/2
        ("area", 1 / 3 * 1 + 1 / 3 * 2 / 3),  # = 5/9
        ("11point", (4 * 1 + 3 * 2 / 3) / 11),  # t = 0..0.3 -> 1, t = 0.4..0.6 -> 2/3, t >= 0.7 -> 0
        ("101point", (34 * 1 + 33 * 2 / 3) / 101),  # t = 0..0.33 -> 1, t = 0.34..0.66 -> 2/3
    ],
)
def test_hand_computed_case(method, expected_cat):
    predictions, truth = hand_case()
    result = evaluate_voc(predictions, truth, num_classes=3, method=method)
    assert result["ap"][0] == pytest.approx(expected_cat)
    assert result["ap"][1] == 0.0  # a class with ground truth and no detection
    assert np.isnan(result["ap"][2])  # no positives: left out of the mean
    assert result["map"] == pytest.approx(expected_cat / 2)


def test_matching_flags_of_the_hand_case():
    predictions, truth = hand_case()
    detections = [(i, s, b) for i, p in predictions.items() for b, s in zip(p["boxes"], p["scores"])]
    ground = {
        i: (
            np.asarray(t["boxes"])[np.asarray(t["labels"]) == 1],
            np.asarray(t["difficult"], bool)[np.asarray(t["labels"]) == 1],
        )
        for i, t in truth.items()
    }
    curve = match_class(detections, ground)
    assert curve.true_positive.tolist() == [1, 0, 1, 0] and curve.false_positive.tolist() == [0, 1, 0, 1]
    assert curve.num_positives == 3


def brute_ap(tp, npos, method):
    """AP by the definitions, one loop per threshold / step, no vectorisation."""
    precision, recall, hits = [], [], 0
    for k, flag in enumerate(tp, start=1):
        hits += flag
        precision.append(hits / k)
        recall.append(hits / npos)
    if method == "area":
        total, previous = 0.0, 0.0
        for k in range(len(tp)):
            total += (recall[k] - previous) * max(precision[k:])
            previous = recall[k]
        return total
    thresholds = [i / 10 for i in range(11)] if method == "11point" else [i / 100 for i in range(101)]
    values = []
    for t in thresholds:
        if method == "11point":
            values.append(max([p for p, r in zip(precision, recall) if r >= t], default=0.0))
        else:
            first = next((k for k, r in enumerate(recall) if r >= t), None)
            values.append(0.0 if first is None else max(precision[first:]))
    return sum(values) / len(values)


@pytest.mark.parametrize("method", ["area", "11point", "101point"])
def test_average_precision_matches_brute_force(method):
    rng = np.random.default_rng(1)
    for _ in range(50):
        npos = int(rng.integers(1, 8))
        tp = (rng.random(int(rng.integers(1, 15))) < 0.4).astype(int)
        tp = tp if tp.sum() <= npos else np.where(np.cumsum(tp) <= npos, tp, 0)
        recall = np.cumsum(tp) / npos
        precision = np.cumsum(tp) / np.arange(1, len(tp) + 1)
        assert average_precision(recall, precision, method) == pytest.approx(brute_ap(list(tp), npos, method))


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="unknown AP method"):
        average_precision(np.ones(2), np.ones(2), "12point")
    with pytest.raises(ValueError, match="same length"):
        average_precision(np.ones(2), np.ones(3))
    predictions, truth = hand_case()
    with pytest.raises(ValueError, match="outside 1..3"):
        evaluate_voc({"A": {"boxes": [[0, 0, 1, 1]], "scores": [1.0], "labels": [0]}}, truth, 3)
    with pytest.raises(ValueError, match="without ground truth"):
        evaluate_voc({"Z": predictions["A"]}, truth, 3)


def random_scene(rng, num_images=12, num_classes=3):
    """Ground truth boxes in separate 40-px cells (so no detection can overlap two of them by IoU >= 0.5,
    where VOC's and COCO's matching rules would differ) and detections jittered around them or random."""
    predictions, truth = {}, {}
    for image in range(num_images):
        boxes, labels = [], []
        for cell in rng.permutation(9)[: rng.integers(1, 5)]:
            x, y = 40 * (cell % 3), 40 * (cell // 3)
            x1, y1 = x + rng.uniform(0, 10), y + rng.uniform(0, 10)
            boxes.append([x1, y1, x1 + rng.uniform(12, 28), y1 + rng.uniform(12, 28)])
            labels.append(int(rng.integers(1, num_classes + 1)))
        det_boxes, det_labels = [], []
        for box, label in zip(boxes, labels):
            for _ in range(rng.integers(0, 3)):
                jitter = rng.normal(0, 4, 4)
                det_boxes.append(list(np.asarray(box) + jitter))
                det_labels.append(label if rng.random() < 0.8 else int(rng.integers(1, num_classes + 1)))
        for _ in range(rng.integers(0, 3)):
            x1, y1 = rng.uniform(0, 100, 2)
            det_boxes.append([x1, y1, x1 + rng.uniform(5, 30), y1 + rng.uniform(5, 30)])
            det_labels.append(int(rng.integers(1, num_classes + 1)))
        det_boxes = [[b[0], b[1], max(b[2], b[0] + 1), max(b[3], b[1] + 1)] for b in det_boxes]
        truth[f"im{image}"] = {
            "boxes": np.asarray(boxes).reshape(-1, 4),
            "labels": np.asarray(labels),
            "difficult": np.zeros(len(labels), bool),
        }
        predictions[f"im{image}"] = {
            "boxes": np.asarray(det_boxes).reshape(-1, 4),
            "scores": rng.random(len(det_boxes)),
            "labels": np.asarray(det_labels, dtype=int),
        }
    return predictions, truth


def coco_ap50(predictions, truth, num_classes):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    images = [{"id": k, "width": 200, "height": 200} for k in range(len(truth))]
    ids = {name: k for k, name in enumerate(truth)}
    annotations = []
    for name, t in truth.items():
        for box, label in zip(t["boxes"], t["labels"]):
            w, h = box[2] - box[0], box[3] - box[1]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": ids[name],
                    "category_id": int(label),
                    "bbox": [box[0], box[1], w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    results = [
        {
            "image_id": ids[name],
            "category_id": int(label),
            "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]],
            "score": float(s),
        }
        for name, p in predictions.items()
        for b, s, label in zip(p["boxes"], p["scores"], p["labels"])
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = {
            "images": images,
            "annotations": annotations,
            "categories": [{"id": c} for c in range(1, num_classes + 1)],
        }
        coco.createIndex()
        evaluator = COCOeval(coco, coco.loadRes(results), "bbox")
        evaluator.params.iouThrs = np.array([0.5])
        evaluator.evaluate()
        evaluator.accumulate()
    precision = evaluator.eval["precision"][0, :, :, 0, -1]  # [recall thresholds, classes], all areas, 100 dets
    return [float(precision[:, k].mean()) if (precision[:, k] > -1).all() else float("nan") for k in range(num_classes)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_pycocotools_at_iou_half(seed):
    """COCO samples the precision envelope at 101 recall points; with that sampling (``101point``),
    no difficult objects and no detection able to match two objects, the two definitions coincide."""
    predictions, truth = random_scene(np.random.default_rng(seed))
    ours = evaluate_voc(predictions, truth, 3, method="101point")["ap"]
    np.testing.assert_allclose(ours, coco_ap50(predictions, truth, 3), atol=1e-9)
