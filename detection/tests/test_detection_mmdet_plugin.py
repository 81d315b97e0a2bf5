"""The mmdetection plugin, called as mmdet's bbox head calls ``loss_cls``.

Runs where mmdetection's models import with mmcv's compiled ops (the environment of
environments/mmdet/, ``make test-mmdet``); skipped elsewhere, and an error instead of a skip when
``RAMBO_REQUIRE_MMDET=1`` (as ``make test-mmdet`` sets). The label conversion it relies on is tested
without mmdet in test_detection_rank_classifier_loss.py.
"""

import os

import pytest
import torch

if os.environ.get("RAMBO_REQUIRE_MMDET") == "1":
    import mmdet.models  # noqa: F401  (mmcv's compiled ops: what mmcv-lite lacks)
else:
    pytest.importorskip(
        "mmdet.models", reason="mmdetection with mmcv's compiled ops is not installed (make test-mmdet)"
    )
from mmdet import registry  # noqa: E402

from rambo.detection.rank_classifier_loss import RankClassifierLoss  # noqa: E402


def build(**kwargs):
    import rambo.detection.mmdet_plugin  # noqa: F401  (registers the loss, as custom_imports would)

    return registry.MODELS.build(dict(type="RaMBOClassifierLoss", num_classes=3, **kwargs))


def test_registered_loss_with_mmdet_arguments_matches_the_torchvision_convention():
    generator = torch.Generator().manual_seed(0)
    cls_score = torch.randn(12, 4, generator=generator, requires_grad=True)  # [N, C+1], background last
    labels = torch.tensor([3, 0, 1, 2, 3, 3, 0, 2, 1, 3, 0, 3])  # background = C = 3
    label_weights = torch.ones(12)
    label_weights[[4, 9]] = 0  # mmdet leaves these RoIs out
    loss = build(tau=0)
    value = loss(cls_score, labels, label_weights, avg_factor=12.0, reduction_override=None)
    keep = label_weights > 0
    torchvision_logits = cls_score.detach()[keep][:, [3, 0, 1, 2]]  # background first
    torchvision_labels = torch.where(labels[keep] == 3, 0, labels[keep] + 1)
    torchvision_logits.requires_grad_(True)
    expected = RankClassifierLoss(3, background_label=0, tau=0)(torchvision_logits, torchvision_labels)
    assert float(value) == pytest.approx(float(expected))
    value.backward()
    expected.backward()
    # the same gradient, column for column (background last here, first in torchvision)
    torch.testing.assert_close(cls_score.grad[keep][:, [3, 0, 1, 2]], torchvision_logits.grad)
    assert cls_score.grad[~keep].abs().sum() == 0 and cls_score.grad[keep].abs().sum() > 0


def test_loss_weight_scales_the_gradient_and_memory_is_kept():
    generator = torch.Generator().manual_seed(0)
    cls_score = 0.05 * torch.randn(40, 4, generator=generator)
    labels = torch.randint(0, 4, (40,), generator=generator)
    grads = []
    for loss in (build(tau=0), build(tau=0, loss_weight=2.0)):
        scores = cls_score.clone().requires_grad_(True)
        value = loss(scores, labels)
        value.backward()
        grads.append((float(value), scores.grad))
    (plain, plain_grad), (doubled, doubled_grad) = grads
    assert doubled == pytest.approx(plain)  # a gradient scale after the rank: value and lambda unchanged
    assert torch.allclose(doubled_grad, 2 * plain_grad) and plain_grad.abs().sum() > 0
    remembering = build(tau=7).train()
    remembering(cls_score, labels)
    assert len(remembering.loss.map_memory.state_dict()["_extra_state"]["batches"]) == 1


def test_bbox_head_hooks_score_by_the_ranked_logits():
    loss = build()
    assert loss.custom_cls_channels and loss.get_cls_channels(3) == 4
    cls_score = torch.tensor([[2.0, -1.0, 0.5, 9.0], [-3.0, 4.0, 0.0, -9.0]])
    scores = loss.get_activation(cls_score)
    assert torch.equal(scores[:, -1], torch.zeros(2))
    assert torch.equal(scores[:, :3].flatten().argsort(), cls_score[:, :3].flatten().argsort())
