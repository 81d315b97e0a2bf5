from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torchvision.models.detection.roi_heads import RoIHeads
from torchvision.ops import box_iou

import rambo.detection
from rambo.detection.model import build_classifier_loss, build_detector
from rambo.detection.rank_classifier_loss import RankClassifierLoss
from rambo.detection.roi_heads import ConfigurableLossRoIHeads, box_regression_loss

MODEL = OmegaConf.create(
    {
        "backbone": "resnet18",
        "pretrained": False,
        "weights_path": None,
        "trainable_layers": 5,
        "fpn_channels": 16,
        "representation_size": 32,
        "min_size": 64,
        "max_size": 64,
        "anchor_sizes": [8, 16, 32, 64, 128],
        "rpn_pre_nms_top_n_train": 100,
        "rpn_post_nms_top_n_train": 50,
        "rpn_pre_nms_top_n_test": 100,
        "rpn_post_nms_top_n_test": 50,
        "box_batch_size_per_image": 32,
        "box_score_thresh": 0.0,
        "box_detections_per_img": 20,
        "box_smooth_l1_beta": 1.0 / 9.0,  # torchvision's, so that the parent's losses are the reference
    }
)
LOSSES = Path(rambo.detection.__file__).parent / "configs" / "loss"


def loss_config(name: str):
    """The loss group's own file (its interpolations point at ``loss.*``)."""
    return OmegaConf.create({"loss": OmegaConf.load(LOSSES / f"{name}.yaml")}).loss


RAMBO = loss_config("rambo")
CE = loss_config("ce")


def heads_inputs(detector):
    torch.manual_seed(0)
    images = [torch.rand(3, 64, 64), torch.rand(3, 64, 64)]
    targets = [
        {"boxes": torch.tensor([[4.0, 4.0, 30.0, 30.0], [30.0, 20.0, 60.0, 50.0]]), "labels": torch.tensor([1, 3])},
        {"boxes": torch.tensor([[10.0, 10.0, 40.0, 50.0]]), "labels": torch.tensor([2])},
    ]
    image_list, targets = detector.transform(images, targets)
    features = detector.backbone(image_list.tensors)
    proposals = [
        torch.tensor(
            [[0.0, 0.0, 32.0, 32.0], [5.0, 5.0, 28.0, 31.0], [20.0, 20.0, 60.0, 60.0], [1.0, 40.0, 20.0, 60.0]]
        )
    ] * 2
    return features, proposals, image_list.image_sizes, targets


def parent_and_child_losses(loss_config, seed: int = 0):
    torch.manual_seed(seed)  # the detector's initial weights
    detector = build_detector(MODEL, loss_config, num_classes=3).train()
    features, proposals, sizes, targets = heads_inputs(detector)
    torch.manual_seed(1)  # the RoI sampler draws from the global generator
    _, parent = RoIHeads.forward(detector.roi_heads, features, proposals, sizes, targets)
    torch.manual_seed(1)
    _, child = detector.roi_heads(features, proposals, sizes, targets)
    return detector, parent, child


def test_ce_configuration_reproduces_torchvision_losses_exactly():
    detector, parent, child = parent_and_child_losses(CE)
    assert isinstance(detector.roi_heads, ConfigurableLossRoIHeads)
    assert parent.keys() == child.keys() == {"loss_classifier", "loss_box_reg"}
    for key in parent:
        torch.testing.assert_close(child[key], parent[key])


def brute_force_box_loss(box_regression, labels, targets, beta):
    """mmdetection v1's bbox loss by its definition: for each positive sampled RoI, smooth L1
    (0.5 d^2 / beta if |d| < beta else |d| - 0.5 beta) of its ground-truth class's 4 deltas against
    the targets, summed, divided by avg_factor = the number of sampled RoIs."""
    total = 0.0
    for i in range(len(labels)):
        if int(labels[i]) == 0:
            continue
        for k in range(4):
            d = abs(float(box_regression[i, 4 * int(labels[i]) + k]) - float(targets[i, k]))
            total += 0.5 * d * d / beta if d < beta else d - 0.5 * beta
    return total / len(labels)


@pytest.mark.parametrize("beta", [1.0, 1.0 / 9.0, 0.3])
def test_box_regression_loss_is_smooth_l1_over_positive_rois_by_brute_force(beta):
    torch.manual_seed(3)
    labels = torch.tensor([0, 2, 1, 0, 3, 2, 0])
    box_regression = 2.0 * torch.randn(7, 4 * 4)  # deltas on both sides of beta
    targets = torch.randn(7, 4)
    value = box_regression_loss(box_regression, labels, targets, beta)
    assert float(value) == pytest.approx(brute_force_box_loss(box_regression, labels, targets, beta), rel=1e-6)
    assert float(box_regression_loss(box_regression, torch.zeros(7, dtype=torch.long), targets, beta)) == 0.0


def test_the_configs_box_loss_is_mmdetections_beta_1():
    """model.box_smooth_l1_beta = 1.0 in every model config (mmdetection v1's SmoothL1Loss(beta=1.0));
    the heads' training loss is then the brute-force loss of their own sampled RoIs."""
    for name in ("mini", "tiny", "resnet50", "resnet101", "resnext101_32x4d"):
        with initialize_config_dir(config_dir=str(LOSSES.parent), version_base="1.3"):
            cfg = compose(config_name="train", overrides=[f"model={name}"])
        assert cfg.model.box_smooth_l1_beta == 1.0, name
    torch.manual_seed(0)
    model = OmegaConf.merge(MODEL, {"box_smooth_l1_beta": 1.0})
    detector = build_detector(model, CE, num_classes=3).train()
    assert detector.roi_heads.box_smooth_l1_beta == 1.0
    features, proposals, sizes, targets = heads_inputs(detector)
    heads = detector.roi_heads
    torch.manual_seed(1)
    sampled, _, labels, regression_targets = heads.select_training_samples([p.clone() for p in proposals], targets)
    _, box_regression = heads.box_predictor(heads.box_head(heads.box_roi_pool(features, sampled, sizes)))
    expected = brute_force_box_loss(box_regression.detach(), torch.cat(labels), torch.cat(regression_targets), 1.0)
    torch.manual_seed(1)
    _, losses = heads(features, proposals, sizes, targets)
    assert (torch.cat(labels) > 0).sum() >= 3 and expected > 0  # positives (the ground truth joins the proposals)
    assert losses["loss_box_reg"].item() == pytest.approx(expected, rel=1e-5)


def test_rambo_configuration_changes_only_the_classifier_loss():
    # lambda 5: in these few RoIs the paper's 0.5 may swap no rank, and the blackbox gradient be 0
    large_lambda = loss_config("rambo")
    large_lambda.lam = 5.0  # set in place: the module's ${loss.lam} follows it
    detector, parent, child = parent_and_child_losses(large_lambda)
    assert detector.roi_heads.classifier_loss.apc_loss.lam == 5.0
    assert isinstance(detector.roi_heads.classifier_loss, RankClassifierLoss)
    torch.testing.assert_close(child["loss_box_reg"], parent["loss_box_reg"])  # box regression untouched
    assert not torch.allclose(child["loss_classifier"], parent["loss_classifier"])
    child["loss_classifier"].backward()
    assert detector.roi_heads.box_predictor.cls_score.weight.grad.abs().sum() > 0
    assert detector.roi_heads.box_predictor.bbox_pred.weight.grad is None  # the rank loss reaches only scores


def test_ce_inference_is_torchvision_inference():
    detector = build_detector(MODEL, CE, num_classes=3).eval()
    assert detector.roi_heads.score_function == "softmax"
    features, proposals, sizes, _ = heads_inputs(detector)
    with torch.no_grad():
        ours, _ = detector.roi_heads(features, proposals, sizes)
        reference, _ = RoIHeads.forward(detector.roi_heads, features, proposals, sizes)
    for a, b in zip(ours, reference):
        for key in ("boxes", "scores", "labels"):
            torch.testing.assert_close(a[key], b[key])
    with pytest.raises(ValueError, match="targets are required"):
        detector.roi_heads.train()(features, proposals, sizes)


def test_loss_is_built_from_its_target_and_a_config_without_one_is_a_clear_error():
    assert isinstance(build_classifier_loss(RAMBO, 3), RankClassifierLoss)
    assert RAMBO.score_function == "logit" and CE.score_function == "softmax"
    with pytest.raises(ValueError, match="needs module._target_"):
        build_classifier_loss({"name": "focal"}, 3)


def brute_logit_detections(heads, class_logits, box_regression, proposals, image_shape):
    """The definition, one (RoI, class) pair at a time: decode, clip, best candidates, NMS per class."""
    decoded = heads.box_coder.decode(box_regression, [proposals]).reshape(len(proposals), -1, 4)
    candidates = []
    for roi in range(len(proposals)):
        for label in range(1, class_logits.shape[1]):
            box = decoded[roi, label].clone()
            box[0::2] = box[0::2].clamp(0, image_shape[1])
            box[1::2] = box[1::2].clamp(0, image_shape[0])
            candidates.append((float(class_logits[roi, label]), label, box))
    candidates.sort(key=lambda c: -c[0])
    candidates = [
        c
        for c in candidates[: heads.candidates_per_image]
        if (c[2][2] - c[2][0]) >= 1e-2 and (c[2][3] - c[2][1]) >= 1e-2
    ]
    kept = []
    for score, label, box in candidates:  # greedy NMS within each class
        if all(other[1] != label or float(box_iou(box[None], other[2][None])) <= heads.nms_thresh for other in kept):
            kept.append((score, label, box))
    return kept[: heads.detections_per_img]


def test_rambo_inference_ranks_by_the_trained_object_logits():
    detector = build_detector(MODEL, RAMBO, num_classes=3).eval()
    heads = detector.roi_heads
    assert heads.score_function == "logit" and heads.candidates_per_image == 200
    generator = torch.Generator().manual_seed(4)
    proposals = torch.rand(30, 2, generator=generator) * 40
    proposals = torch.cat([proposals, proposals + 4 + torch.rand(30, 2, generator=generator) * 20], dim=1)
    class_logits = torch.randn(30, 4, generator=generator) * 3
    box_regression = torch.randn(30, 16, generator=generator) * 0.1
    heads.detections_per_img, heads.candidates_per_image = 15, 40
    boxes, scores, labels = heads.postprocess_detections(class_logits, box_regression, [proposals], [(64, 64)])
    expected = brute_logit_detections(heads, class_logits, box_regression, proposals, (64, 64))
    assert [round(s, 5) for s in scores[0].tolist()] == [round(e[0], 5) for e in expected]
    assert labels[0].tolist() == [e[1] for e in expected]
    torch.testing.assert_close(boxes[0], torch.stack([e[2] for e in expected]))
    with pytest.raises(ValueError, match="score_function"):
        ConfigurableLossRoIHeads(
            heads.box_roi_pool,
            heads.box_head,
            heads.box_predictor,
            0.5,
            0.5,
            8,
            0.25,
            None,
            0.0,
            0.5,
            10,
            classifier_loss=heads.classifier_loss,
            score_function="sigmoid",
        )


# ---- classifier_rois: all_proposals (the rank loss over every proposal + gt; the box loss on the sampled RoIs)


class RecordingLoss(torch.nn.Module):
    """A classifier loss that records what it is given and delegates to ``inner``."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner, self.calls = inner, []

    def forward(self, class_logits, labels):
        self.calls.append((class_logits, labels))
        return self.inner(class_logits, labels)


def many_proposals(count: int = 40, seed: int = 7):
    """``count`` random proposals per image (2 images of 64 x 64), some overlapping the ground truth
    of :func:`heads_inputs` at IoU >= 0.5 (jittered copies), more than the 32 RoIs sampled per image."""
    generator = torch.Generator().manual_seed(seed)
    result = []
    for gt in (
        torch.tensor([[4.0, 4.0, 30.0, 30.0], [30.0, 20.0, 60.0, 50.0]]),
        torch.tensor([[10.0, 10.0, 40.0, 50.0]]),
    ):
        corners = torch.rand(count // 2, 2, generator=generator) * 44
        free = torch.cat([corners, corners + 4 + torch.rand(count // 2, 2, generator=generator) * 16], dim=1)
        near = gt[torch.randint(0, len(gt), (count // 2,), generator=generator)] + torch.randn(
            count // 2, 4, generator=generator
        )
        result.append(torch.cat([free, near]).clamp(0, 64))
    return result


def brute_iou(a, b) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(width, 0.0) * max(height, 0.0)
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def brute_all_rois_and_labels(proposals, targets):
    """mmdetection v1's rcnn assignment by its definition, one RoI at a time: each image's proposals
    then its ground-truth boxes (add_gt_as_proposals); a RoI whose best IoU with a ground-truth box
    is >= 0.5 takes that box's class, any other is background (0)."""
    rois, labels = [], []
    for image_proposals, target in zip(proposals, targets):
        gt = target["boxes"].tolist()
        for roi in image_proposals.tolist() + gt:
            ious = [brute_iou(roi, box) for box in gt]
            best = max(range(len(gt)), key=lambda k: ious[k])
            rois.append(roi)
            labels.append(int(target["labels"][best]) if ious[best] >= 0.5 else 0)
    return torch.tensor(rois), torch.tensor(labels)


def all_proposals_heads(loss_config, seed: int = 0):
    torch.manual_seed(seed)
    detector = build_detector(MODEL, loss_config, num_classes=3).train()
    features, _, sizes, targets = heads_inputs(detector)
    heads = detector.roi_heads
    heads.classifier_loss = RecordingLoss(heads.classifier_loss)
    return heads, features, many_proposals(), sizes, targets


def test_all_proposals_feeds_every_proposal_and_gt_box_with_its_label_to_the_classifier_loss():
    """(a) the classifier loss receives exactly every RoI of every image (its proposals, then its
    ground truth), labelled as the brute-force IoU matching labels them; its logits are the box
    head's on those boxes. The sampled mode's receives the sampled RoIs only (at most 2 x 32)."""
    heads, features, proposals, sizes, targets = all_proposals_heads(CE)
    heads.classifier_rois = "all_proposals"
    _, losses = heads(features, [p.clone() for p in proposals], sizes, targets)
    ((logits, labels),) = heads.classifier_loss.calls
    rois, expected_labels = brute_all_rois_and_labels(proposals, targets)
    assert len(rois) == 40 + 2 + 40 + 1 and logits.shape == (len(rois), 4) and logits.dtype == torch.float32
    assert torch.equal(labels, expected_labels)
    assert (labels > 0).sum() >= 10 and (labels == 0).sum() >= 10 and set(labels.tolist()) == {0, 1, 2, 3}
    reference, _ = heads.box_predictor(heads.box_head(heads.box_roi_pool(features, [rois[:42], rois[42:]], sizes)))
    torch.testing.assert_close(logits, reference)
    expected_ce = torch.nn.functional.cross_entropy(reference, expected_labels)
    assert losses["loss_classifier"].item() == pytest.approx(expected_ce.item(), rel=1e-5)
    heads.classifier_rois = "sampled"
    torch.manual_seed(1)
    heads(features, [p.clone() for p in proposals], sizes, targets)
    torch.manual_seed(1)
    _, _, sampled_labels, _ = heads.select_training_samples([p.clone() for p in proposals], targets)
    assert torch.equal(heads.classifier_loss.calls[1][1], torch.cat(sampled_labels))
    assert len(torch.cat(sampled_labels)) <= 2 * MODEL.box_batch_size_per_image < len(rois)


def test_all_proposals_keeps_the_sampled_box_loss():
    """(b) with the same seed the box loss is the sampled mode's, to the bit of the sampled RoIs'
    brute-force smooth L1 (the same sampler, the same draws; divided by the sampled count)."""
    heads, features, proposals, sizes, targets = all_proposals_heads(CE)
    losses = {}
    for mode in ("sampled", "all_proposals"):
        heads.classifier_rois = mode
        torch.manual_seed(1)
        _, losses[mode] = heads(features, [p.clone() for p in proposals], sizes, targets)
    torch.manual_seed(1)
    sampled, _, labels, regression_targets = heads.select_training_samples([p.clone() for p in proposals], targets)
    _, box_regression = heads.box_predictor(heads.box_head(heads.box_roi_pool(features, sampled, sizes)))
    expected = brute_force_box_loss(
        box_regression.detach(), torch.cat(labels), torch.cat(regression_targets), MODEL.box_smooth_l1_beta
    )
    assert len(torch.cat(labels)) <= 64 and (torch.cat(labels) > 0).sum() >= 4 and expected > 0
    torch.testing.assert_close(losses["all_proposals"]["loss_box_reg"], losses["sampled"]["loss_box_reg"])
    assert losses["all_proposals"]["loss_box_reg"].item() == pytest.approx(expected, rel=1e-5)
    assert not torch.allclose(losses["all_proposals"]["loss_classifier"], losses["sampled"]["loss_classifier"])


def test_all_proposals_rank_loss_is_the_core_loss_on_every_roi():
    """(c) the RaMBO classifier loss in all_proposals mode is (1 - c) L_mAP + c L_AP-C of rambo.core
    applied by hand to the object logits of all RoIs and their brute-force relevance (first call: an
    empty score memory), and its gradient reaches the classifier."""
    from rambo.core import APCLoss, MAPLoss

    large_lambda = loss_config("rambo")
    large_lambda.lam = 5.0
    large_lambda.classifier_rois = "all_proposals"
    torch.manual_seed(0)
    assert build_detector(MODEL, large_lambda, num_classes=3).roi_heads.classifier_rois == "all_proposals"
    heads, features, proposals, sizes, targets = all_proposals_heads(large_lambda)
    heads.classifier_rois = "all_proposals"
    _, losses = heads(features, [p.clone() for p in proposals], sizes, targets)
    ((logits, labels),) = heads.classifier_loss.calls
    _, expected_labels = brute_all_rois_and_labels(proposals, targets)
    assert torch.equal(labels, expected_labels) and len(labels) == 83
    relevant = torch.zeros(len(labels), 3, dtype=torch.bool)
    for i, label in enumerate(labels.tolist()):
        if label > 0:
            relevant[i, label - 1] = True
    scores = logits.detach()[:, 1:]
    c = large_lambda.interclass_coef
    by_hand = (1 - c) * MAPLoss(large_lambda.margin, 5.0)(scores, relevant) + c * APCLoss(large_lambda.margin, 5.0)(
        scores, relevant
    )
    assert losses["loss_classifier"].item() == pytest.approx(by_hand.item(), rel=1e-6)
    (losses["loss_classifier"] + losses["loss_box_reg"]).backward()
    assert heads.box_predictor.cls_score.weight.grad.abs().sum() > 0


def test_all_proposals_under_bfloat16_autocast_has_float32_losses():
    heads, features, proposals, sizes, targets = all_proposals_heads(RAMBO)
    heads.classifier_rois = "all_proposals"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, losses = heads(features, [p.clone() for p in proposals], sizes, targets)
    ((logits, labels),) = heads.classifier_loss.calls
    assert logits.dtype == torch.float32 and len(labels) == 83
    assert all(value.dtype == torch.float32 and torch.isfinite(value) for value in losses.values())


def test_all_proposals_inference_is_unchanged_and_bad_values_are_refused():
    heads, features, proposals, sizes, _ = all_proposals_heads(CE)
    heads.eval()
    with torch.no_grad():
        sampled, _ = heads(features, proposals, sizes)
        heads.classifier_rois = "all_proposals"
        every, _ = heads(features, proposals, sizes)
    for a, b in zip(sampled, every):
        for key in ("boxes", "scores", "labels"):
            torch.testing.assert_close(a[key], b[key])
    args = (heads.box_roi_pool, heads.box_head, heads.box_predictor)
    with pytest.raises(ValueError, match="classifier_rois must be one of"):
        ConfigurableLossRoIHeads(
            *args,
            0.5,
            0.5,
            8,
            0.25,
            None,
            0.0,
            0.5,
            10,
            classifier_loss=heads.classifier_loss,
            classifier_rois="everything",
        )
    with pytest.raises(ValueError, match="fg_iou_thresh == bg_iou_thresh"):
        ConfigurableLossRoIHeads(
            *args,
            0.5,
            0.4,
            8,
            0.25,
            None,
            0.0,
            0.5,
            10,
            classifier_loss=heads.classifier_loss,
            classifier_rois="all_proposals",
        )


PAPER_RAMBO_ROWS = [
    "table5_r50_voc07_rambo",
    "table5_r50_voc0712_rambo",
    "table5_r101_voc0712_rambo",
    "table5_x101_voc0712_rambo",
    "table8_lam0p1_margin",
    "table8_lam0p5_margin",
    "table8_lam0p5_nomargin",
    "table8_lam2p5_margin",
]


def test_the_paper_rambo_rows_rank_all_proposals_and_every_other_row_the_sampled_rois():
    """loss.classifier_rois: all_proposals in the paper's RaMBO rows; sampled in the CE rows (mmdetection's
    CE on the sampled RoIs) and the mini/tiny rows. At sampled it is left out of the run identity
    (identity_defaults), so a checkpoint written before the key existed still resumes."""
    from rambo.harness.resume import run_identity

    experiments = sorted(path.stem for path in (LOSSES.parent / "experiment").glob("*.yaml"))
    assert set(PAPER_RAMBO_ROWS) <= set(experiments)
    identities = {}
    with initialize_config_dir(config_dir=str(LOSSES.parent), version_base="1.3"):
        for name in experiments:
            cfg = compose(config_name="train", overrides=[f"experiment={name}"])
            expected = "all_proposals" if name in PAPER_RAMBO_ROWS else "sampled"
            assert cfg.loss.classifier_rois == expected, name
        for mode in ("sampled", "all_proposals"):
            cfg = compose(config_name="train", overrides=["experiment=mini_rambo", f"loss.classifier_rois={mode}"])
            OmegaConf.update(cfg, "output_dir", "out")
            config = OmegaConf.to_container(cfg, resolve=True)
            identities[mode] = run_identity(config, cfg.resume_may_change, config["identity_defaults"])
            if mode == "sampled":
                del config["loss"]["classifier_rois"]  # a config from before the key
                identities["before"] = run_identity(config, cfg.resume_may_change, config["identity_defaults"])
    assert identities["sampled"] == identities["before"] != identities["all_proposals"]
