"""The region proposal network with mmdetection v1's `allowed_border`: anchors that cross the
image border take no part in the RPN's training losses.

mmdetection v1's VOC recipe (`train_cfg.rpn.allowed_border=0`; `mmdet/core/anchor/anchor_target.py`)
assigns and samples only the anchors inside the image: an anchor `(x1, y1, x2, y2)` is left out
(label weight 0 in the objectness and the box loss) when

    x1 < -b  or  y1 < -b  or  x2 >= w + b  or  y2 >= h + b,

with `b = allowed_border` and `(h, w)` the image's own size after resizing, before the batch
is padded; a negative `b` disables the check. torchvision's `RegionProposalNetwork` keeps
every anchor. [`BorderAwareRPN`][rambo.detection.rpn.BorderAwareRPN] subclasses it and changes only the target
assignment: the anchors of each image are matched to its ground truth among the inside anchors alone (so also the
"best anchor of each ground-truth box" rule, torchvision's low-quality matches and mmdetection's
`min_pos_iou`, picks an inside anchor, as mmdetection assigns only those), and every crossing
anchor gets label -1, which torchvision's sampler never draws: it is neither a positive nor a
negative, enters neither loss nor their normaliser (the number of sampled anchors). The size is
`ImageList.image_sizes` of each image, not the padded batch's. Proposals, inference and the
losses' formulas are the parent's; nothing in torchvision is patched.

The comparison is mmdetection's as written (`x2 >= w` crosses). mmdetection v1 writes boxes in
pixel-index coordinates (width `x2 - x1 + 1`) and torchvision in continuous ones (width
`x2 - x1`), and their anchor grids differ anyway (torchvision centres anchors on `stride * i`,
mmdetection v1 on `stride * i + (stride - 1) / 2`), so the rule is applied to torchvision's
anchors without translating that half-pixel convention.

`allowed_border=None` keeps every anchor (torchvision's behaviour, exactly the parent's).

Under DDP the two losses are the global batch's: the objectness loss is the mean over the sampled
anchors of every process's images and the box loss their sum over the positive ones divided by that
same global number ([`rambo.detection.distributed.global_mean`][rambo.detection.distributed.global_mean]), so several
processes give one process's losses and parameter gradients. In a single process they are the parent's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchvision.models.detection.rpn import RegionProposalNetwork

from .distributed import global_mean, world_size

RPN_BOX_BETA = 1.0 / 9.0  # the parent's smooth-L1 beta of the RPN box loss


def anchors_inside(anchors: torch.Tensor, image_size: tuple[int, int], allowed_border: int) -> torch.Tensor:
    """`anchors [A, 4]` (x1, y1, x2, y2) of an image of `image_size = (h, w)` -> `[A]` bool:
    the anchor lies within `allowed_border` pixels of the image (module docstring)."""
    height, width = image_size
    border = float(allowed_border)
    return (
        (anchors[:, 0] >= -border)
        & (anchors[:, 1] >= -border)
        & (anchors[:, 2] < width + border)
        & (anchors[:, 3] < height + border)
    )


class BorderAwareRPN(RegionProposalNetwork):
    """`RegionProposalNetwork` whose training targets ignore anchors crossing the image border.

    Takes the parent's arguments plus `allowed_border`: an int >= 0 (mmdetection v1's VOC recipe:
    0), or None to keep every anchor as torchvision does. A negative value is mmdetection's way to
    disable the check; here that is None (a negative int is refused, to keep one spelling)."""

    def __init__(self, *args, allowed_border: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if allowed_border is not None and (
            isinstance(allowed_border, bool) or not isinstance(allowed_border, int) or allowed_border < 0
        ):
            raise ValueError(f"allowed_border must be an int >= 0 or None (keep every anchor), got {allowed_border!r}")
        self.allowed_border = allowed_border
        self._image_sizes: list[tuple[int, int]] | None = None

    def forward(self, images, features, targets=None):
        # The parent's target assignment sees anchors and targets only; the images' own sizes are
        # held here for the duration of the call.
        self._image_sizes = list(images.image_sizes)
        try:
            return super().forward(images, features, targets)
        finally:
            self._image_sizes = None

    def assign_targets_to_anchors(self, anchors, targets):
        """The parent's assignment among each image's inside anchors; the crossing anchors label -1
        (ignored by the sampler) and a zero matched box (their regression target is never used)."""
        if self.allowed_border is None:
            return super().assign_targets_to_anchors(anchors, targets)
        if self._image_sizes is None or len(self._image_sizes) != len(anchors):
            raise RuntimeError("assign_targets_to_anchors with allowed_border needs the image sizes: call forward")
        labels, matched_gt_boxes = [], []
        for anchors_per_image, target, size in zip(anchors, targets, self._image_sizes):
            inside = anchors_inside(anchors_per_image, size, self.allowed_border)
            count = anchors_per_image.shape[0]
            # float32 as the parent's labels, float64 with float64 anchors (a float64 model's objectness loss)
            label_dtype = torch.promote_types(torch.float32, anchors_per_image.dtype)
            image_labels = torch.full((count,), -1.0, dtype=label_dtype, device=anchors_per_image.device)
            image_boxes = torch.zeros((count, 4), dtype=torch.float32, device=anchors_per_image.device)
            if bool(inside.any()):
                (inside_labels,), (inside_boxes,) = super().assign_targets_to_anchors(
                    [anchors_per_image[inside]], [target]
                )
                image_labels[inside] = inside_labels.to(image_labels.dtype)
                image_boxes = image_boxes.to(inside_boxes.dtype)
                image_boxes[inside] = inside_boxes
            labels.append(image_labels)
            matched_gt_boxes.append(image_boxes)
        return labels, matched_gt_boxes

    def compute_loss(self, objectness, pred_bbox_deltas, labels, regression_targets):
        """The parent's two losses; under DDP over the sampled anchors of every process (module docstring):
        `objectness [A, 1]`, `pred_bbox_deltas [A, 4]` (every image's anchors), per image
        `labels [A_i]` (1, 0 or -1: ignored) and `regression_targets [A_i, 4]` ->
        `(objectness loss, box loss)`."""
        if world_size() == 1:
            return super().compute_loss(objectness, pred_bbox_deltas, labels, regression_targets)
        positive, negative = (torch.cat(masks).bool() for masks in self.fg_bg_sampler(labels))
        sampled = positive | negative
        labels = torch.cat(labels)
        objectness_sum = F.binary_cross_entropy_with_logits(
            objectness.flatten()[sampled], labels[sampled], reduction="sum"
        )
        box_sum = F.smooth_l1_loss(
            pred_bbox_deltas[positive],
            torch.cat(regression_targets)[positive],
            beta=RPN_BOX_BETA,
            reduction="sum",
        )
        objectness_loss, box_loss = global_mean((objectness_sum, box_sum), sampled.sum())
        return objectness_loss, box_loss
