"""model.rpn_allowed_border: the RPN's training targets leave out the anchors that cross each
image's own (resized, unpadded) border, as mmdetection v1's anchor_target with allowed_border."""

import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.rpn import RegionProposalNetwork, RPNHead, concat_box_prediction_layers

import rambo.detection
from rambo.detection.model import build_detector
from rambo.detection.rpn import BorderAwareRPN

CONFIGS = Path(rambo.detection.__file__).parent / "configs"
SIZES = [(48, 36), (30, 48)]  # (h, w) of each image; the batch is padded to 48 x 48
TARGETS = [
    {"boxes": torch.tensor([[2.0, 3.0, 20.0, 26.0], [14.0, 20.0, 35.0, 47.0]]), "labels": torch.tensor([1, 2])},
    {"boxes": torch.tensor([[20.0, 2.0, 46.0, 29.0]]), "labels": torch.tensor([3])},
]


def make_rpn(allowed_border, cls=BorderAwareRPN):
    torch.manual_seed(0)
    anchors = AnchorGenerator(((16,), (32,)), ((0.5, 1.0, 2.0),) * 2)
    kwargs = {} if cls is RegionProposalNetwork else {"allowed_border": allowed_border}
    head = RPNHead(4, 3)
    with (
        torch.no_grad()
    ):  # not torchvision's 0.01 init, whose objectness is ~0 everywhere (a loss of log 2 whatever the labels)
        for parameter in head.parameters():
            parameter.normal_(0.0, 0.3)
    return cls(
        anchors,
        head,
        0.7,
        0.3,
        32,
        0.5,
        {"training": 60, "testing": 60},
        {"training": 20, "testing": 20},
        0.7,
        **kwargs,
    ).train()


def inputs():
    torch.manual_seed(1)
    images = ImageList(torch.rand(2, 3, 48, 48), SIZES)
    features = {"0": torch.randn(2, 4, 12, 12), "1": torch.randn(2, 4, 6, 6)}  # strides 4 and 8
    return images, features


def brute_iou(a, b) -> float:
    inter = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0) * max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def brute_crossing(anchors, size, border):
    """mmdetection v1's rule, one anchor at a time: x1 < -b or y1 < -b or x2 >= w + b or y2 >= h + b."""
    height, width = size
    return [
        x1 < -border or y1 < -border or x2 >= width + border or y2 >= height + border
        for x1, y1, x2, y2 in anchors.tolist()
    ]


def brute_labels(anchors, target, crossing):
    """RPN labels by their definition among the inside anchors: 1 at best IoU >= 0.7, 0 below 0.3,
    -1 between; each ground-truth box's best inside anchors (ties too) positive, matched to their own
    best box; crossing anchors -1. Returns labels and matched ground-truth boxes per anchor."""
    gt = target["boxes"].tolist()
    labels, matched = [], []
    best_per_gt = [max(brute_iou(a, g) for a, out in zip(anchors.tolist(), crossing) if not out) for g in gt]
    for anchor, out in zip(anchors.tolist(), crossing):
        if out:
            labels.append(-1.0)
            matched.append([0.0] * 4)
            continue
        ious = [brute_iou(anchor, g) for g in gt]
        best = max(range(len(gt)), key=lambda k: ious[k])
        label = 1.0 if ious[best] >= 0.7 else 0.0 if ious[best] < 0.3 else -1.0
        if any(ious[k] == best_per_gt[k] for k in range(len(gt))):
            label = 1.0
        labels.append(label)
        matched.append(gt[best])
    return torch.tensor(labels), torch.tensor(matched)


def test_crossing_anchors_are_ignored_by_each_images_own_size():
    rpn = make_rpn(0)
    images, features = inputs()
    anchors = rpn.anchor_generator(images, list(features.values()))
    rpn._image_sizes = SIZES
    labels, matched = rpn.assign_targets_to_anchors(anchors, TARGETS)
    for image in range(2):
        crossing = brute_crossing(anchors[image], SIZES[image], 0)
        expected_labels, expected_matched = brute_labels(anchors[image], TARGETS[image], crossing)
        assert torch.equal(labels[image], expected_labels)
        positive = expected_labels == 1  # the matched boxes that enter a loss (others: argmax ties at IoU 0)
        torch.testing.assert_close(matched[image][positive], expected_matched[positive])
        assert 0 < sum(crossing) < len(crossing) and (expected_labels == 1).sum() >= 1
    # image 1 is 30 px high: anchors reaching below row 30 but inside the padded 48 are ignored there
    assert any(
        30 <= y2 < 48 and y1 >= 0 and x1 >= 0 and x2 < 48 for x1, y1, x2, y2 in anchors[1][labels[1] == -1].tolist()
    )
    # a border of 4 px keeps more anchors; None keeps all of them (torchvision's assignment, exactly)
    rpn.allowed_border = 4
    assert (rpn.assign_targets_to_anchors(anchors, TARGETS)[0][0] == -1).sum() < (labels[0] == -1).sum()
    rpn.allowed_border = None
    for got, want in zip(
        rpn.assign_targets_to_anchors(anchors, TARGETS)[0],
        RegionProposalNetwork.assign_targets_to_anchors(rpn, anchors, TARGETS)[0],
    ):
        assert torch.equal(got, want)


def brute_bce(logit: float, target: float) -> float:
    return max(logit, 0.0) - logit * target + math.log1p(math.exp(-abs(logit)))


def brute_smooth_l1(d: float, beta: float = 1.0 / 9.0) -> float:
    return 0.5 * d * d / beta if abs(d) < beta else abs(d) - 0.5 * beta


def test_rpn_loss_leaves_the_ignored_anchors_out():
    """The RPN losses equal ones computed by hand over the anchors sampled (same seed) from the
    brute-force labels, where the crossing anchors are never drawn; with allowed_border None they
    are torchvision's RPN losses exactly, and they differ from the bordered ones."""
    images, features = inputs()
    rpn = make_rpn(0)
    torch.manual_seed(5)
    _, losses = rpn(images, features, TARGETS)
    assert rpn._image_sizes is None  # released after the call

    levels = list(features.values())
    with torch.no_grad():
        objectness, deltas = concat_box_prediction_layers(*rpn.head(levels))
    anchors = rpn.anchor_generator(images, levels)
    labels, matched, crossing = [], [], []
    for image in range(2):
        crossing.append(torch.tensor(brute_crossing(anchors[image], SIZES[image], 0)))
        image_labels, image_matched = brute_labels(anchors[image], TARGETS[image], crossing[-1].tolist())
        labels.append(image_labels)
        matched.append(image_matched)
    torch.manual_seed(5)
    positives, negatives = rpn.fg_bg_sampler(labels)
    positives, negatives = torch.cat(positives).nonzero().squeeze(1), torch.cat(negatives).nonzero().squeeze(1)
    crossing = torch.cat(crossing)
    assert not crossing[positives].any() and not crossing[negatives].any() and len(positives) >= 2
    flat_labels = torch.cat(labels)
    targets = rpn.box_coder.encode(matched, anchors)
    targets = torch.cat(targets) if isinstance(targets, (list, tuple)) else targets
    count = len(positives) + len(negatives)
    objectness_loss = (
        sum(brute_bce(float(objectness[i]), float(flat_labels[i])) for i in torch.cat([positives, negatives])) / count
    )
    box_loss = sum(brute_smooth_l1(float(deltas[i, k] - targets[i, k])) for i in positives for k in range(4)) / count
    assert losses["loss_objectness"].item() == pytest.approx(objectness_loss, rel=1e-5)
    assert losses["loss_rpn_box_reg"].item() == pytest.approx(box_loss, rel=1e-5)

    kept, reference = make_rpn(None), make_rpn(None, RegionProposalNetwork)
    torch.manual_seed(5)
    _, keep_all = kept(images, features, TARGETS)
    torch.manual_seed(5)
    _, torchvision_losses = reference(images, features, TARGETS)
    for key in losses:
        assert torch.equal(keep_all[key], torchvision_losses[key])
    assert not torch.allclose(keep_all["loss_objectness"], losses["loss_objectness"])


def test_bad_borders_are_refused_and_an_image_entirely_crossed_ignores_all():
    for bad in (-1, 1.5, True, "0"):
        with pytest.raises(ValueError, match="allowed_border"):
            make_rpn(bad)
    rpn = make_rpn(0)
    anchors = [torch.tensor([[-4.0, 0.0, 10.0, 10.0], [0.0, 0.0, 12.0, 8.0]])]
    rpn._image_sizes = [(8, 8)]
    labels, _ = rpn.assign_targets_to_anchors(
        anchors, [{"boxes": torch.tensor([[0.0, 0.0, 6.0, 6.0]]), "labels": torch.tensor([1])}]
    )
    assert labels[0].tolist() == [-1.0, -1.0]
    rpn._image_sizes = None
    with pytest.raises(RuntimeError, match="image sizes"):
        rpn.assign_targets_to_anchors(
            anchors, [{"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.long)}]
        )


def test_the_model_configs_use_mmdetections_border_and_null_resumes_old_checkpoints():
    """model.rpn_allowed_border: 0 in every model config (mmdetection v1 train_cfg.rpn allowed_border=0),
    built into the detector's RPN with torchvision's other RPN numbers unchanged. At null (every
    anchor: the behaviour before the key) it is left out of the run identity (identity_defaults), so
    a checkpoint written before the key existed resumes; 0 changes the training, so not at 0."""
    from rambo.harness.resume import run_identity

    identities = {}
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        for name in ("mini", "tiny", "resnet50", "resnet101", "resnext101_32x4d"):
            assert compose(config_name="train", overrides=[f"model={name}"]).model.rpn_allowed_border == 0, name
        for border in ("0", "null"):
            cfg = compose(
                config_name="train", overrides=["experiment=mini_rambo", f"model.rpn_allowed_border={border}"]
            )
            OmegaConf.update(cfg, "output_dir", "out")
            config = OmegaConf.to_container(cfg, resolve=True)
            identities[border] = run_identity(config, cfg.resume_may_change, config["identity_defaults"])
            if border == "null":
                del config["model"]["rpn_allowed_border"]  # a config from before the key
                identities["before"] = run_identity(config, cfg.resume_may_change, config["identity_defaults"])
        cfg = compose(config_name="train", overrides=["experiment=tiny_rambo"])
    assert identities["null"] == identities["before"] != identities["0"]
    detector = build_detector(cfg.model, cfg.loss, num_classes=20)
    rpn = detector.rpn
    assert isinstance(rpn, BorderAwareRPN) and rpn.allowed_border == 0
    assert (rpn.proposal_matcher.high_threshold, rpn.proposal_matcher.low_threshold) == (0.7, 0.3)
    assert rpn.proposal_matcher.allow_low_quality_matches and rpn.nms_thresh == 0.7
    assert (rpn.fg_bg_sampler.batch_size_per_image, rpn.fg_bg_sampler.positive_fraction) == (256, 0.5)
    assert rpn._pre_nms_top_n == {"training": 100, "testing": 100} and rpn._post_nms_top_n == {
        "training": 50,
        "testing": 50,
    }
    detector.train()
    torch.manual_seed(0)
    images = [torch.rand(3, 64, 48), torch.rand(3, 48, 64)]
    losses = detector(
        images,
        [
            {"boxes": torch.tensor([[4.0, 4.0, 30.0, 40.0]]), "labels": torch.tensor([2])},
            {"boxes": torch.tensor([[10.0, 8.0, 60.0, 40.0]]), "labels": torch.tensor([5])},
        ],
    )
    assert all(torch.isfinite(value) for value in losses.values())
