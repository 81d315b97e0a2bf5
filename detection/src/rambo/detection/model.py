"""Faster R-CNN with FPN (torchvision) whose RoI classifier loss is `ce` or `rambo` (paper 5.2)."""

from __future__ import annotations

import torch
from hydra.utils import instantiate
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.ops import MultiScaleRoIAlign

from .backbones import build_backbone
from .roi_heads import ConfigurableLossRoIHeads
from .rpn import BorderAwareRPN


def build_classifier_loss(loss, num_classes: int) -> torch.nn.Module:
    """The RoI classifier loss of the `loss` config group, built from its `module._target_`
    (`CrossEntropyClassifierLoss` or `RankClassifierLoss`) for `num_classes` object classes."""
    if "module" not in loss or "_target_" not in loss["module"]:
        raise ValueError(f"the loss config needs module._target_ (a classifier loss class), got {dict(loss)}")
    return instantiate(loss["module"], num_classes=num_classes)


def build_detector(model, loss, num_classes: int) -> FasterRCNN:
    """Faster R-CNN + FPN from the `model` and `loss` config groups (see `configs/`).

    `num_classes`: C object classes; the predictor has C + 1 outputs (torchvision: background 0).
    The RPN and the box head are torchvision's; the RPN
    ([`rambo.detection.rpn.BorderAwareRPN`][rambo.detection.rpn.BorderAwareRPN]) leaves the anchors crossing the image
    border out of its training targets by `model.rpn_allowed_border` (mmdetection's 0; null, also when absent: every
    anchor, as torchvision); the RoI heads
    ([`ConfigurableLossRoIHeads`][rambo.detection.roi_heads.ConfigurableLossRoIHeads]) swap the classifier loss, compute
    it on the RoIs `loss.classifier_rois` names (`sampled` when absent, or `all_proposals`), and take the box loss's
    smooth-L1 beta from `model.box_smooth_l1_beta` (mmdetection's 1.0 when absent; torchvision's is 1/9).
    """
    backbone = build_backbone(
        model["backbone"],
        pretrained=model["pretrained"],
        weights_path=model.get("weights_path"),
        trainable_layers=model["trainable_layers"],
        fpn_channels=model["fpn_channels"],
        backbone_norm=model.get("backbone_norm", "bn_eval_mode_affine_trainable"),
    )
    # One anchor size per FPN level (P2..P6) and three aspect ratios, as torchvision's default.
    anchor_sizes = tuple((int(size),) for size in model["anchor_sizes"])
    anchors = AnchorGenerator(anchor_sizes, ((0.5, 1.0, 2.0),) * len(anchor_sizes))
    roi_pool = MultiScaleRoIAlign(featmap_names=["0", "1", "2", "3"], output_size=7, sampling_ratio=2)
    box_head = TwoMLPHead(backbone.out_channels * 7 * 7, model["representation_size"])
    box_predictor = FastRCNNPredictor(model["representation_size"], num_classes + 1)
    detector = FasterRCNN(
        backbone,
        min_size=model["min_size"],
        max_size=model["max_size"],
        rpn_anchor_generator=anchors,
        rpn_pre_nms_top_n_train=model["rpn_pre_nms_top_n_train"],
        rpn_post_nms_top_n_train=model["rpn_post_nms_top_n_train"],
        rpn_pre_nms_top_n_test=model["rpn_pre_nms_top_n_test"],
        rpn_post_nms_top_n_test=model["rpn_post_nms_top_n_test"],
        box_roi_pool=roi_pool,
        box_head=box_head,
        box_predictor=box_predictor,
    )
    rpn = detector.rpn  # torchvision's, rebuilt with the same parts and numbers plus the border rule
    detector.rpn = BorderAwareRPN(
        rpn.anchor_generator,
        rpn.head,
        fg_iou_thresh=rpn.proposal_matcher.high_threshold,
        bg_iou_thresh=rpn.proposal_matcher.low_threshold,
        batch_size_per_image=rpn.fg_bg_sampler.batch_size_per_image,
        positive_fraction=rpn.fg_bg_sampler.positive_fraction,
        pre_nms_top_n=rpn._pre_nms_top_n,
        post_nms_top_n=rpn._post_nms_top_n,
        nms_thresh=rpn.nms_thresh,
        score_thresh=rpn.score_thresh,
        allowed_border=model.get("rpn_allowed_border"),
    )
    detector.roi_heads = ConfigurableLossRoIHeads(
        roi_pool,
        box_head,
        box_predictor,
        # torchvision's Faster R-CNN defaults for sampling and matching
        fg_iou_thresh=0.5,
        bg_iou_thresh=0.5,
        batch_size_per_image=model["box_batch_size_per_image"],
        positive_fraction=0.25,
        bbox_reg_weights=None,
        score_thresh=model["box_score_thresh"],
        nms_thresh=0.5,
        detections_per_img=model["box_detections_per_img"],
        classifier_loss=build_classifier_loss(loss, num_classes),
        # detections are ranked by the score the classifier loss trained (see ConfigurableLossRoIHeads)
        score_function=loss["score_function"],
        candidates_per_image=10 * model["box_detections_per_img"],
        box_smooth_l1_beta=model.get("box_smooth_l1_beta", 1.0),
        classifier_rois=loss.get("classifier_rois", "sampled"),
    )
    return detector
