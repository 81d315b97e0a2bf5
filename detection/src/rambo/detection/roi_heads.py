"""RoI heads whose classifier loss is chosen by config, and whose box-regression loss is smooth L1
with a configurable beta.

:class:`ConfigurableLossRoIHeads` subclasses torchvision's ``RoIHeads`` and replaces the
classification term of the training loss: proposals are sampled, pooled and classified exactly as
in the parent. The box-regression term (:func:`box_regression_loss`) is torchvision's
``fastrcnn_loss`` term with ``beta`` as a parameter: the sum over the positive RoIs' 4 encoded
coordinates (of their ground-truth class) of smooth L1, divided by the number of sampled RoIs of
the batch. That is mmdetection v1's ``loss_bbox`` too (``SmoothL1Loss(beta=1.0, loss_weight=1.0)``
with ``avg_factor = bbox_targets.size(0)``, the sampled RoIs; target stds 0.1/0.1/0.2/0.2 =
torchvision's box-coder weights 10/10/5/5); the two differ only in beta: mmdetection 1.0,
torchvision 1/9 (``model.box_smooth_l1_beta``). Inference
is the parent's, except for the score that ranks detections, which must be the score the loss
trained (``score_function``): the softmax probability for cross-entropy, the object-class logit
for the rank loss. Nothing in torchvision is patched.

Under bfloat16 autocast (``precision: bfloat16``, :mod:`rambo.harness.precision`) the classifier's
logits and box regression are cast to float32 where they leave the predictor, and the losses run
outside autocast (whose matrix products would otherwise compute in bf16 again): the rank loss
never ranks bf16 scores, and detections are scored and placed in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchvision.models.detection.roi_heads import RoIHeads
from torchvision.ops import boxes as box_ops

SCORE_FUNCTIONS = ("softmax", "logit")
TORCHVISION_BOX_BETA = 1.0 / 9.0  # torchvision fastrcnn_loss; mmdetection v1's bbox head uses 1.0


def box_regression_loss(box_regression: torch.Tensor, labels: torch.Tensor, regression_targets: torch.Tensor,
                        beta: float) -> torch.Tensor:  # fmt: skip
    """``box_regression [N, 4 (C+1)]``, ``labels [N]`` (0 background), ``regression_targets [N, 4]`` ->
    ``sum over positive RoIs i of smooth_l1_beta(box_regression[i, labels[i]] - target_i) / N``
    (module docstring). Fixed shapes, no host read: every RoI's own-class prediction is gathered and
    the background rows are masked out."""
    count = labels.numel()
    predicted = box_regression.reshape(count, -1, 4)
    predicted = predicted.gather(1, labels.long().view(count, 1, 1).expand(count, 1, 4)).squeeze(1)
    per_roi = F.smooth_l1_loss(predicted, regression_targets, beta=beta, reduction="none").sum(dim=1)
    return torch.where(labels > 0, per_roi, 0.0).sum() / max(count, 1)


class CrossEntropyClassifierLoss(torch.nn.Module):
    """The baseline: softmax cross-entropy over C + 1 columns, ``loss(class_logits [N, C+1], labels [N])``.

    ``num_classes`` (C, optional) checks the logits' width, as :class:`RankClassifierLoss` does.
    """

    def __init__(self, num_classes: int | None = None):
        super().__init__()
        self.num_classes = num_classes

    def forward(self, class_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.num_classes is not None and (class_logits.dim() != 2 or class_logits.shape[1] != self.num_classes + 1):
            raise ValueError(f"class_logits must be [N, {self.num_classes + 1}], got {tuple(class_logits.shape)}")
        return F.cross_entropy(class_logits, labels)


class ConfigurableLossRoIHeads(RoIHeads):
    """``RoIHeads`` with ``classifier_loss(class_logits [N, C+1], labels [N])`` in place of CE.

    Takes ``RoIHeads``' arguments plus ``classifier_loss``, ``box_smooth_l1_beta`` (the box loss's
    beta, torchvision's 1/9 unless given; the configs give mmdetection's 1.0) and ``score_function``:

    * ``softmax``: torchvision's post-processing (softmax over C + 1 columns, ``score_thresh``).
    * ``logit``: detections ranked by the object-class logits, the scores a rank loss trains. A
      rank loss fixes the order of scores, not their level, so no score threshold is applied;
      the ``candidates_per_image`` best (box, class) pairs go to NMS instead. Output ``scores``
      are these logits (a sigmoid would keep the order but tie saturated values in float32).

    Masks and keypoints are not supported.
    """

    def __init__(self, *args, classifier_loss: torch.nn.Module, score_function: str = "softmax",
                 candidates_per_image: int = 1000, box_smooth_l1_beta: float = TORCHVISION_BOX_BETA, **kwargs):
        super().__init__(*args, **kwargs)
        if score_function not in SCORE_FUNCTIONS:
            raise ValueError(f"score_function must be one of {SCORE_FUNCTIONS}, got {score_function!r}")
        if not box_smooth_l1_beta > 0:
            raise ValueError(f"box_smooth_l1_beta must be > 0, got {box_smooth_l1_beta}")
        self.box_smooth_l1_beta = float(box_smooth_l1_beta)
        self.classifier_loss = classifier_loss
        self.score_function = score_function
        self.candidates_per_image = int(candidates_per_image)

    def postprocess_detections(self, class_logits, box_regression, proposals, image_shapes):
        """``class_logits [R, C+1]``, ``box_regression [R, 4 (C+1)]`` -> per image boxes, scores, labels
        (in float32, also under bfloat16 autocast)."""
        class_logits, box_regression = class_logits.float(), box_regression.float()
        if self.score_function == "softmax":
            return super().postprocess_detections(class_logits, box_regression, proposals, image_shapes)
        num_classes = class_logits.shape[1] - 1
        counts = [len(p) for p in proposals]
        decoded = self.box_coder.decode(box_regression, proposals).reshape(-1, num_classes + 1, 4)
        all_boxes, all_scores, all_labels = [], [], []
        for boxes, logits, shape in zip(decoded.split(counts), class_logits.split(counts), image_shapes):
            # Every (RoI, object class) pair is a candidate detection; column 0 (background) is unused.
            boxes = box_ops.clip_boxes_to_image(boxes[:, 1:], shape).reshape(-1, 4)
            scores = logits[:, 1:].reshape(-1)
            labels = torch.arange(1, num_classes + 1, device=logits.device).repeat(logits.shape[0])
            best = scores.topk(min(self.candidates_per_image, scores.numel())).indices
            boxes, scores, labels = boxes[best], scores[best], labels[best]
            keep = box_ops.remove_small_boxes(boxes, min_size=1e-2)
            boxes, scores, labels = boxes[keep], scores[keep], labels[keep]
            keep = box_ops.batched_nms(boxes, scores, labels, self.nms_thresh)[: self.detections_per_img]
            all_boxes.append(boxes[keep])
            all_scores.append(scores[keep])
            all_labels.append(labels[keep])
        return all_boxes, all_scores, all_labels

    def forward(self, features, proposals, image_shapes, targets=None):
        if not self.training:
            return super().forward(features, proposals, image_shapes, targets)
        if targets is None:
            raise ValueError("targets are required in training mode")
        proposals, _, labels, regression_targets = self.select_training_samples(proposals, targets)
        box_features = self.box_head(self.box_roi_pool(features, proposals, image_shapes))
        class_logits, box_regression = (output.float() for output in self.box_predictor(box_features))
        with torch.autocast(class_logits.device.type, enabled=False):  # the losses in float32 (module docstring)
            labels = torch.cat(labels, dim=0)
            loss_box_reg = box_regression_loss(box_regression, labels, torch.cat(regression_targets, dim=0),
                                               self.box_smooth_l1_beta)  # fmt: skip
            loss_classifier = self.classifier_loss(class_logits, labels)
        return [], {"loss_classifier": loss_classifier, "loss_box_reg": loss_box_reg}
