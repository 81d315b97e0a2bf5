"""Put RaMBO's detection loss into your own torchvision Faster R-CNN.

What it shows: the minimal swap. Build the detector as usual
(``torchvision.models.detection.fasterrcnn_resnet50_fpn``), then replace ``model.roi_heads`` by a
``rambo.detection.roi_heads.ConfigurableLossRoIHeads`` made from the *same* parts (RoI pooling,
box head, predictor, sampling and matching settings) whose classifier loss is
``rambo.detection.rank_classifier_loss.RankClassifierLoss``: ``(1 - c) mAP-loss + c AP-C-loss``
over the RoI logits, c = 1/3, margin 0.15, lambda 0.5, a score memory of 7 batches (paper Sec. 5.2).
The RPN and the box-regression loss stay torchvision's. With ``score_function="logit"`` the
detections at inference are ranked by the logits the rank loss trained.

It then trains a few steps on images drawn by the project's synthetic VOC-layout generator
(``rambo.detection.synthetic.render_image``: 20 classes of coloured shapes on clutter), and runs
inference once. Replace ``synthetic_batch`` by your own images and targets
(``{"boxes": [n, 4] float xyxy, "labels": [n] int64 in 1..C}``, torchvision's convention).

Run (after ``pip install ./core ./harness ./detection``)::

    python examples/apps/detection_torchvision.py --steps 20 --image-size 256 --device cuda

``weights=None, weights_backbone=None``: nothing is downloaded; pass torchvision weights for real use.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torchvision.models.detection import fasterrcnn_resnet50_fpn
from torchvision.transforms.functional import pil_to_tensor

from rambo.detection.rank_classifier_loss import RankClassifierLoss
from rambo.detection.roi_heads import ConfigurableLossRoIHeads
from rambo.detection.synthetic import CLASS_SPECS, render_image


def with_rank_loss(model, num_classes: int, margin=0.15, lam=0.5, tau=7) -> torch.nn.Module:
    """``model`` (a torchvision Faster R-CNN) with its RoI classifier trained by the RaMBO rank loss."""
    old = model.roi_heads
    model.roi_heads = ConfigurableLossRoIHeads(
        old.box_roi_pool,
        old.box_head,
        old.box_predictor,
        fg_iou_thresh=old.proposal_matcher.high_threshold,
        bg_iou_thresh=old.proposal_matcher.low_threshold,
        batch_size_per_image=old.fg_bg_sampler.batch_size_per_image,
        positive_fraction=old.fg_bg_sampler.positive_fraction,
        bbox_reg_weights=old.box_coder.weights,
        score_thresh=old.score_thresh,
        nms_thresh=old.nms_thresh,
        detections_per_img=old.detections_per_img,
        # torchvision: background is label / logit column 0, objects are 1..C
        classifier_loss=RankClassifierLoss(num_classes, background_label=0, margin=margin, lam=lam, tau=tau),
        score_function="logit",  # rank detections by the scores the loss trained (no softmax threshold)
        candidates_per_image=10 * old.detections_per_img,
    )
    return model


def synthetic_batch(rng: np.random.Generator, batch_size: int, image_size: int, device):
    """Images ``[3, H, W]`` in [0, 1] and torchvision targets, from the synthetic VOC-layout generator."""
    images, targets = [], []
    for _ in range(batch_size):
        image, objects = render_image(rng, image_size)
        # VOC boxes are 1-based inclusive pixels; torchvision wants 0-based xyxy corners.
        boxes = [(x1 - 1, y1 - 1, x2, y2) for _, (x1, y1, x2, y2), _ in objects]
        images.append((pil_to_tensor(image).float() / 255).to(device))
        targets.append(
            {
                "boxes": torch.tensor(boxes, dtype=torch.float32, device=device).reshape(-1, 4),
                "labels": torch.tensor([c + 1 for c, _, _ in objects], dtype=torch.int64, device=device),
            }
        )
    return images, targets


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    device = torch.device(args.device)
    num_classes = len(CLASS_SPECS)  # C object classes; the predictor has C + 1 outputs

    # Your detector, as you would build it (min/max_size: the images are used at their own size here).
    model = fasterrcnn_resnet50_fpn(
        weights=None,
        weights_backbone=None,
        num_classes=num_classes + 1,
        min_size=args.image_size,
        max_size=args.image_size,
    )
    model = with_rank_loss(model, num_classes).to(device)
    optimizer = torch.optim.SGD(
        [p for p in model.parameters() if p.requires_grad], lr=args.lr, momentum=0.9, weight_decay=1e-4
    )

    model.train()
    for step in range(args.steps):
        images, targets = synthetic_batch(rng, args.batch_size, args.image_size, device)
        losses = model(images, targets)  # loss_classifier is the rank loss; the other three are torchvision's
        loss = sum(losses.values())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        terms = "  ".join(f"{name} {value.item():.4f}" for name, value in losses.items())
        print(f"step {step + 1}/{args.steps}  loss {loss.item():.4f}  ({terms})", flush=True)

    model.eval()
    with torch.no_grad():
        images, _ = synthetic_batch(rng, 1, args.image_size, device)
        detections = model(images)[0]
    print(
        f"inference: {len(detections['boxes'])} detections, ranked by class logit "
        f"(top score {detections['scores'].max().item() if len(detections['scores']) else float('nan'):.3f})"
    )
    return {"loss": loss.item(), "detections": len(detections["boxes"])}


if __name__ == "__main__":
    main()
