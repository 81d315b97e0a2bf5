"""RoI heads whose classifier loss is chosen by config, and whose box-regression loss is smooth L1
with a configurable beta.

[`ConfigurableLossRoIHeads`][rambo.detection.roi_heads.ConfigurableLossRoIHeads] subclasses torchvision's `RoIHeads` and
replaces the classification term of the training loss: proposals are sampled, pooled and classified exactly as
in the parent. The box-regression term ([`box_regression_loss`][rambo.detection.roi_heads.box_regression_loss]) is
torchvision's `fastrcnn_loss` term with `beta` as a parameter: the sum over the positive RoIs' 4 encoded
coordinates (of their ground-truth class) of smooth L1, divided by the number of sampled RoIs of
the batch. That is mmdetection v1's `loss_bbox` too (`SmoothL1Loss(beta=1.0, loss_weight=1.0)`
with `avg_factor = bbox_targets.size(0)`, the sampled RoIs; target stds 0.1/0.1/0.2/0.2 =
torchvision's box-coder weights 10/10/5/5); the two differ only in beta: mmdetection 1.0,
torchvision 1/9 (`model.box_smooth_l1_beta`). Inference
is the parent's, except for the score that ranks detections, which must be the score the loss
trained (`score_function`): the softmax probability for cross-entropy, the object-class logit
for the rank loss. Nothing in torchvision is patched.

Which RoIs the classifier loss sees (`classifier_rois`, config `loss.classifier_rois`):

* `sampled` (the default; torchvision's and mmdetection v1's): the sampled RoIs, 512 per image
  with at most 25 % positives (`BalancedPositiveNegativeSampler`; mmdetection's RandomSampler
  `num=512, pos_fraction=0.25, add_gt_as_proposals=True`), the same RoIs as the box loss.
* `all_proposals`: the classifier loss sees every RoI of every image, the RPN's post-NMS
  proposals followed by the image's ground-truth boxes (mmdetection's `add_gt_as_proposals`),
  each labelled by the same matcher (IoU >= 0.5 with a ground-truth box: its class, else
  background: mmdetection v1's rcnn assigner `pos_iou_thr=neg_iou_thr=min_pos_iou=0.5`). The
  box head and predictor run on all of them; the box-regression loss is still computed on the
  sampled subset drawn exactly as in `sampled` (the same sampler, the same draws from the global
  generator) and divided by its size, so that term is the one of `sampled`. This is the paper
  profile's reading of Sec. 5.3, an inference and not a stated setting: the paper times the AP
  loss "for sequences with 320k elements as in the object detection experiments"; batch 8 x 2000
  post-NMS proposals (mmdetection v1 VOC `rpn_proposal max_num=2000`) x 20 classes is 320,000
  exactly, while the sampled RoIs give 8 x 512 x 20 = 81,920. The authors' detection code is not
  public. Under DDP the rank loss gathers these RoIs of every process as it gathers the sampled
  ones ([`rambo.detection.distributed`][rambo.detection.distributed]; the counts differ per process).

Under DDP every term is the global batch's: the rank loss ranks every process's RoIs, and the
box-regression and cross-entropy terms divide the sum over every process's RoIs by their number
([`rambo.detection.distributed.global_mean`][rambo.detection.distributed.global_mean]), so several processes give one
process's loss and parameter gradients whatever the number of images and RoIs each holds.

Under bfloat16 autocast (`precision: bfloat16`, [`rambo.harness.precision`][rambo.harness.precision]) the classifier's
logits and box regression are cast to float32 where they leave the predictor (a float64 model's
stay float64 in training), and the losses run outside autocast (whose matrix products would
otherwise compute in bf16 again): the rank loss never ranks bf16 scores, and detections are scored
and placed in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchvision.models.detection.roi_heads import RoIHeads
from torchvision.ops import boxes as box_ops

from .distributed import global_mean, world_size

SCORE_FUNCTIONS = ("softmax", "logit")
CLASSIFIER_ROIS = ("sampled", "all_proposals")
TORCHVISION_BOX_BETA = 1.0 / 9.0  # torchvision fastrcnn_loss; mmdetection v1's bbox head uses 1.0


def at_least_float32(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` in float32 when it is of a narrower type (bfloat16 under autocast), else itself
    (float64 stays float64)."""
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


def box_regression_loss(
    box_regression: torch.Tensor, labels: torch.Tensor, regression_targets: torch.Tensor, beta: float
) -> torch.Tensor:
    """`box_regression [N, 4 (C+1)]`, `labels [N]` (0 background), `regression_targets [N, 4]` ->
    `sum over positive RoIs i of smooth_l1_beta(box_regression[i, labels[i]] - target_i) / N`
    (module docstring). Fixed shapes, no host read: every RoI's own-class prediction is gathered and
    the background rows are masked out. Under DDP the sum and N are those of every process's RoIs
    ([`rambo.detection.distributed.global_mean`][rambo.detection.distributed.global_mean]; a collective)."""
    count = labels.numel()
    predicted = box_regression.reshape(count, -1, 4)
    predicted = predicted.gather(1, labels.long().view(count, 1, 1).expand(count, 1, 4)).squeeze(1)
    per_roi = F.smooth_l1_loss(predicted, regression_targets, beta=beta, reduction="none").sum(dim=1)
    total = torch.where(labels > 0, per_roi, 0.0).sum()
    if world_size() > 1:  # under DDP: the sum over every process's RoIs / their number (rambo.detection.distributed)
        return global_mean((total,), count, at_least_one=True)[0]
    return total / max(count, 1)


class CrossEntropyClassifierLoss(torch.nn.Module):
    """The baseline: softmax cross-entropy over C + 1 columns, `loss(class_logits [N, C+1], labels [N])`,
    the mean over the RoIs; under DDP over every process's RoIs
    ([`rambo.detection.distributed.global_mean`][rambo.detection.distributed.global_mean]).

    `num_classes` (C, optional) checks the logits' width, as
    [`RankClassifierLoss`][rambo.detection.rank_classifier_loss.RankClassifierLoss] does.
    """

    def __init__(self, num_classes: int | None = None):
        super().__init__()
        self.num_classes = num_classes

    def forward(self, class_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.num_classes is not None and (class_logits.dim() != 2 or class_logits.shape[1] != self.num_classes + 1):
            raise ValueError(f"class_logits must be [N, {self.num_classes + 1}], got {tuple(class_logits.shape)}")
        if world_size() > 1:  # under DDP: the mean over every process's RoIs (rambo.detection.distributed)
            return global_mean((F.cross_entropy(class_logits, labels, reduction="sum"),), labels.numel())[0]
        return F.cross_entropy(class_logits, labels)


class ConfigurableLossRoIHeads(RoIHeads):
    """`RoIHeads` with `classifier_loss(class_logits [N, C+1], labels [N])` in place of CE.

    Takes `RoIHeads`' arguments plus `classifier_loss`, `box_smooth_l1_beta` (the box loss's
    beta, torchvision's 1/9 unless given; the configs give mmdetection's 1.0) and `score_function`:

    * `softmax`: torchvision's post-processing (softmax over C + 1 columns, `score_thresh`).
    * `logit`: detections ranked by the object-class logits, the scores a rank loss trains. A
      rank loss fixes the order of scores, not their level, so no score threshold is applied;
      the `candidates_per_image` best (box, class) pairs go to NMS instead. Output `scores`
      are these logits (a sigmoid would keep the order but tie saturated values in float32).

    `classifier_rois`: `sampled` (default) or `all_proposals`, the RoIs the classifier loss
    is computed on in training (module docstring); inference is the same in both.

    Masks and keypoints are not supported.
    """

    def __init__(
        self,
        *args,
        classifier_loss: torch.nn.Module,
        score_function: str = "softmax",
        candidates_per_image: int = 1000,
        box_smooth_l1_beta: float = TORCHVISION_BOX_BETA,
        classifier_rois: str = "sampled",
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        if score_function not in SCORE_FUNCTIONS:
            raise ValueError(f"score_function must be one of {SCORE_FUNCTIONS}, got {score_function!r}")
        if classifier_rois not in CLASSIFIER_ROIS:
            raise ValueError(f"classifier_rois must be one of {CLASSIFIER_ROIS}, got {classifier_rois!r}")
        if (
            classifier_rois == "all_proposals"
            and self.proposal_matcher.high_threshold != self.proposal_matcher.low_threshold
        ):
            # between the two thresholds a RoI is "ignored" (label -1), which a classifier loss over all RoIs cannot take
            raise ValueError(
                "classifier_rois=all_proposals needs fg_iou_thresh == bg_iou_thresh (mmdetection's 0.5 and 0.5)"
            )
        self.classifier_rois = classifier_rois
        if not box_smooth_l1_beta > 0:
            raise ValueError(f"box_smooth_l1_beta must be > 0, got {box_smooth_l1_beta}")
        self.box_smooth_l1_beta = float(box_smooth_l1_beta)
        self.classifier_loss = classifier_loss
        self.score_function = score_function
        self.candidates_per_image = int(candidates_per_image)

    def postprocess_detections(self, class_logits, box_regression, proposals, image_shapes):
        """`class_logits [R, C+1]`, `box_regression [R, 4 (C+1)]` -> per image boxes, scores, labels
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
        if self.classifier_rois == "all_proposals":
            return self._all_proposals_losses(features, proposals, image_shapes, targets)
        proposals, _, labels, regression_targets = self.select_training_samples(proposals, targets)
        box_features = self.box_head(self.box_roi_pool(features, proposals, image_shapes))
        class_logits, box_regression = (at_least_float32(output) for output in self.box_predictor(box_features))
        with torch.autocast(class_logits.device.type, enabled=False):  # the losses in float32 (module docstring)
            labels = torch.cat(labels, dim=0)
            loss_box_reg = box_regression_loss(
                box_regression, labels, torch.cat(regression_targets, dim=0), self.box_smooth_l1_beta
            )
            loss_classifier = self.classifier_loss(class_logits, labels)
        return [], {"loss_classifier": loss_classifier, "loss_box_reg": loss_box_reg}

    def label_all_proposals(self, proposals, targets):
        """Every RoI of every image with its label and the sampled subset (`classifier_rois=all_proposals`).

        Returns `rois` (per image: its proposals, then its ground-truth boxes), `labels` (per
        image `[R_i]`: the matched ground truth's class at IoU >= 0.5, else 0), `sampled` (per
        image, the sorted indices into `rois` that `select_training_samples` would keep:
        the same sampler and the same draws) and `regression_targets` (per image, of the sampled
        RoIs only)."""
        self.check_targets(targets)
        dtype = proposals[0].dtype
        gt_boxes = [t["boxes"].to(dtype) for t in targets]
        rois = self.add_gt_proposals(proposals, gt_boxes)
        matched_idxs, labels = self.assign_targets_to_proposals(rois, gt_boxes, [t["labels"] for t in targets])
        sampled = self.subsample(labels)
        matched_gt_boxes = []
        for index, matched, boxes in zip(sampled, matched_idxs, gt_boxes):
            if boxes.numel() == 0:  # an image without objects: every RoI background, no regression
                boxes = torch.zeros((1, 4), dtype=dtype, device=index.device)
            matched_gt_boxes.append(boxes[matched[index]])
        regression_targets = self.box_coder.encode(matched_gt_boxes, [r[index] for r, index in zip(rois, sampled)])
        return rois, labels, sampled, regression_targets

    def _all_proposals_losses(self, features, proposals, image_shapes, targets):
        """The training losses with `classifier_rois=all_proposals` (module docstring)."""
        rois, labels, sampled, regression_targets = self.label_all_proposals(proposals, targets)
        box_features = self.box_head(self.box_roi_pool(features, rois, image_shapes))
        class_logits, box_regression = (at_least_float32(output) for output in self.box_predictor(box_features))
        offsets, start = [], 0
        for index, image_rois in zip(sampled, rois):
            offsets.append(index + start)
            start += len(image_rois)
        sampled = torch.cat(offsets)
        with torch.autocast(class_logits.device.type, enabled=False):  # the losses in float32 (module docstring)
            labels = torch.cat(labels, dim=0)
            loss_box_reg = box_regression_loss(
                box_regression[sampled], labels[sampled], torch.cat(regression_targets, dim=0), self.box_smooth_l1_beta
            )
            loss_classifier = self.classifier_loss(class_logits, labels)
        return [], {"loss_classifier": loss_classifier, "loss_box_reg": loss_box_reg}
