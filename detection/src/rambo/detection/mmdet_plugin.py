"""mmdetection plugin: the RaMBO classifier loss registered in `mmdet.registry.MODELS`.

Use in an mmdet 3.x config (install with `pip install rambo-detection[mmdet]`):

```python
custom_imports = dict(imports=["rambo.detection.mmdet_plugin"], allow_failed_imports=False)
model = dict(roi_head=dict(bbox_head=dict(
    loss_cls=dict(_delete_=True, type="RaMBOClassifierLoss", num_classes=20))))
```

The loss is called as mmdet calls `loss_cls`: `cls_score [N, C+1]` logits with background in
the last column, `labels [N]` with background = C, `label_weights [N]`, `avg_factor`. It ranks
the C object logits (see [`rambo.detection.rank_classifier_loss`][rambo.detection.rank_classifier_loss]), so it also
tells the bbox head how to score detections (`custom_cls_channels` / `get_activation`, the hook mmdet offers for
losses such as Seesaw): the sigmoid of the object logits, which keeps their order, with the unused
background column set to 0. A rank loss fixes the order of scores, not their level: set
`test_cfg.rcnn.score_thr=0.0`.

Several GPUs (mmdet's `dist_train.sh`): mmdet's `MMDistributedDataParallel` is torch's DDP, which
averages the parameter gradients, and each process's bbox head sees only its own images' RoIs. With
`global_batch=True` (the default) the loss ranks the RoIs of every process and scales the local
gradient by the world size ([`rambo.detection.distributed`][rambo.detection.distributed]), so it is the one-GPU loss of
the whole batch; `global_batch=False` ranks each process's RoIs (mmdet's usual per-GPU loss). The
gather is a collective: every process must call `loss_cls` at every step. mmdet's `BBoxHead.loss`
calls it only when `cls_score.numel() > 0`; its R-CNN sampler adds the ground-truth boxes as RoIs
(`add_gt_as_proposals`), so a process has RoIs whenever its images have objects. Not run here:
mmdetection needs its own environment (`environments/mmdet/`, `make test-mmdet`, one process).
"""

from __future__ import annotations

import torch
from mmdet.registry import MODELS

from .mmdet_inputs import select_weighted_rois
from .rank_classifier_loss import RankClassifierLoss


@MODELS.register_module()
class RaMBOClassifierLoss(torch.nn.Module):
    """`(1 - c) L_mAP + c L_AP-C` with score memory on L_mAP (paper 5.2, the authors' formulation);
    `loss_weight` scales the gradient after the rank, so lambda keeps its meaning.

    `avg_factor` and `reduction_override` are accepted and ignored: the rank losses are
    already means (over classes and relevant items), so there is nothing to normalise.
    """

    def __init__(
        self,
        num_classes: int,
        margin: float = 0.15,
        lam: float = 0.5,
        tau: int = 7,
        interclass_coef: float = 1.0 / 3.0,
        loss_weight: float = 1.0,
        global_batch: bool = True,
    ):
        super().__init__()
        self.loss = RankClassifierLoss(
            num_classes,
            background_label=num_classes,
            margin=margin,
            lam=lam,
            tau=tau,
            interclass_coef=interclass_coef,
            loss_weight=loss_weight,
            global_batch=global_batch,
        )

    custom_cls_channels = True  # mmdet then asks get_cls_channels and scores with get_activation
    custom_activation = False  # mmdet's usual accuracy is kept
    custom_accuracy = False

    def get_cls_channels(self, num_classes: int) -> int:
        return num_classes + 1

    def get_activation(self, cls_score: torch.Tensor) -> torch.Tensor:
        """`[N, C+1]` logits -> scores: sigmoid of the object logits, 0 in the background column."""
        scores = torch.sigmoid(cls_score)
        scores[:, -1] = 0.0
        return scores

    def forward(self, cls_score, label, weight=None, avg_factor=None, reduction_override=None, **kwargs):
        cls_score, label = select_weighted_rois(cls_score, label, weight)
        return self.loss(cls_score, label)
