"""Run by test_detection_losses_distributed.py under torchrun (2 CPU processes, gloo); not a test module.

The whole detector (:func:`rambo.detection.model.build_detector`, float64, DDP) trains on fixed global
batches of images that ``ShardedBatchSampler(even=False)`` splits unevenly (``SPLITS``): each process
computes its losses on its own images only, and its RoIs and sampled anchors differ in number from
the other's. Per model (``MODELS``) and step it writes the losses each process reports and DDP's
averaged parameter gradients to ``OUT/rank{r}.pt``.

What makes one process and two comparable at all: the images of a global batch have one size (the
transform pads each process's batch to its own largest image), the backbone's BatchNorm uses its
stored statistics (``pretrained`` weights from ``WEIGHTS``, saved by the test: a batch's statistics
would depend on the split), and both samplers keep every candidate (``SAMPLE_ALL``: which anchors
and RoIs a random subset keeps depends on the global generator's draws, another sequence on each
process). The parameters are not updated between steps; the rank loss's score memory carries over.
"""

import sys

import torch
from omegaconf import OmegaConf

from rambo.detection.model import build_detector
from rambo.harness.distributed import ShardedBatchSampler, detect_setup, init_process_group

NUM_CLASSES = 3
SPLITS = [3, 5, 2]  # global batches of images: 2 + 1, 3 + 2, 1 + 1 on ranks 0 and 1
SIZE = 64
SAMPLE_ALL = 10**6  # both samplers' batch_size_per_image: every anchor and RoI is sampled (module docstring)
MODELS = {  # loss config group (as in configs/loss/) -> the detector's classifier loss and its RoIs
    "ce_sampled": {"name": "ce", "classifier_rois": "sampled"},
    "rambo_all_proposals": {"name": "rambo", "classifier_rois": "all_proposals"},
}


def model_config(weights: str):
    return OmegaConf.create(
        {
            "backbone": "resnet18",
            "pretrained": True,  # the stored BatchNorm statistics (module docstring)
            "weights_path": weights,
            "trainable_layers": 0,  # the body frozen (its gradients would be 11 M numbers per step); FPN and heads train
            "fpn_channels": 16,
            "representation_size": 32,
            "min_size": SIZE,
            "max_size": SIZE,
            "anchor_sizes": [8, 16, 32, 64, 128],
            "rpn_pre_nms_top_n_train": 100,
            "rpn_post_nms_top_n_train": 50,
            "rpn_pre_nms_top_n_test": 100,
            "rpn_post_nms_top_n_test": 50,
            "box_batch_size_per_image": SAMPLE_ALL,
            "box_score_thresh": 0.0,
            "box_detections_per_img": 20,
            "box_smooth_l1_beta": 1.0,
            "rpn_allowed_border": 0,
        }
    )


def loss_config(name: str, classifier_rois: str):
    from pathlib import Path

    import rambo.detection

    path = Path(rambo.detection.__file__).parent / "configs" / "loss" / f"{name}.yaml"
    loss = OmegaConf.create({"loss": OmegaConf.load(path)}).loss
    loss.classifier_rois = classifier_rois
    if name == "rambo":
        loss.tau = 2  # the memory fills and drops its oldest batch within the steps
    return loss


def make_model(name: str, weights: str) -> torch.nn.Module:
    """The float64 detector ``name`` of ``MODELS``, the same weights on every process."""
    torch.manual_seed(0)
    detector = build_detector(model_config(weights), loss_config(**MODELS[name]), NUM_CLASSES)
    detector.rpn.fg_bg_sampler.batch_size_per_image = SAMPLE_ALL
    return detector.double().train()


def global_batch(step: int):
    """The images ``[3, SIZE, SIZE]`` (float64) and targets of ``step``'s global batch: 0 to 3 objects
    per image (the first image of the first batch has none), labels 1..NUM_CLASSES."""
    g = torch.Generator().manual_seed(200 + step)
    images, targets = [], []
    for index in range(SPLITS[step]):
        images.append(torch.rand(3, SIZE, SIZE, generator=g, dtype=torch.float64))
        count = 0 if (step, index) == (0, 0) else int(torch.randint(1, 4, (1,), generator=g))
        corner = torch.rand(count, 2, generator=g, dtype=torch.float64) * (SIZE - 24)
        extent = 12 + torch.rand(count, 2, generator=g, dtype=torch.float64) * (SIZE - 12 - corner)
        boxes = torch.cat([corner, corner + extent], dim=1).clamp(max=SIZE)
        labels = torch.randint(1, NUM_CLASSES + 1, (count,), generator=g)
        targets.append({"boxes": boxes, "labels": labels})
    return images, targets


def shares(rank: int, world: int) -> list[list[int]]:
    """Per step, the indices of the images this rank takes (ShardedBatchSampler, uneven shares)."""
    batches = [list(range(n)) for n in SPLITS]
    return list(ShardedBatchSampler(batches, rank, world, even=False))


def main(out: str, weights: str) -> None:
    torch.set_num_threads(1)
    setup = detect_setup()
    init_process_group(setup, backend="gloo")
    result = {"setup": (setup.rank, setup.world_size), "shares": shares(setup.rank, setup.world_size)}
    for name in MODELS:
        model = torch.nn.parallel.DistributedDataParallel(make_model(name, weights), broadcast_buffers=False)
        result[name] = []
        for step, mine in enumerate(result["shares"]):
            images, targets = global_batch(step)
            losses = model([images[i] for i in mine], [targets[i] for i in mine])
            model.zero_grad(set_to_none=True)
            sum(losses.values()).backward()
            grads = {n: p.grad.clone() for n, p in model.module.named_parameters() if p.grad is not None}
            result[name].append({"losses": {k: v.detach() for k, v in losses.items()}, "grads": grads})
    torch.save(result, f"{out}/rank{setup.rank}.pt")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
