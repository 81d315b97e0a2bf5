"""ResNet / ResNeXt + FPN backbones for Faster R-CNN, with ImageNet weights from local files only.

Backbones: `resnet18` (the small one of the mini profile), `resnet50`, `resnet101` and
`resnext101_32x4d`. torchvision ships no ResNeXt-101 32x4d (only 32x8d and 64x4d); it is
`ResNet(Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=4)`, and the paper's ImageNet
weights for it are open-mmlab's file (`OPEN_MMLAB_RESNEXT101_32X4D`), whose keys
[`open_mmlab_to_torchvision`][rambo.detection.backbones.open_mmlab_to_torchvision] maps.

Weights are never downloaded here: they come from `weights_path` or from the torchvision cache
(`torch.hub.get_dir()/checkpoints`); when neither has them the error says how to get them.
Normalisation with ImageNet weights (`backbone_norm`, `BACKBONE_NORMS`):

* `bn_eval_mode_affine_trainable` (the default, mmdetection's ResNet with `norm_eval=True` and
  `norm_cfg=dict(type='BN', requires_grad=True)`):
  [`EvalModeBatchNorm2d`][rambo.detection.backbones.EvalModeBatchNorm2d], ordinary BatchNorm2d that stays in eval mode
  whatever `model.train()` says, so the ImageNet running statistics are used and never updated, while its affine weight
  and bias train in the stages that are not frozen (`trainable_layers`; mmdetection's `frozen_stages=1` freezes the stem
  and `layer1` entirely, BatchNorm affine included). Statistics that never change need no SyncBN
  under DDP.
* `frozen_batchnorm`: torchvision's FrozenBatchNorm2d, statistics *and* affine frozen everywhere
  (torchvision's detection models; this project's behaviour before the option existed). Its state
  dict has no `num_batches_tracked` entries; [`warm_start`][rambo.detection.warm_start] ignores that difference.

With random initialisation ordinary, training BatchNorm2d whatever `backbone_norm` says, because
frozen statistics of a random network (mean 0, var 1) let activations blow up (R50 gave NaN at
iteration 2).
"""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models import resnet
from torchvision.models.detection.backbone_utils import BackboneWithFPN
from torchvision.ops import FrozenBatchNorm2d

from rambo.harness.pretrained import find_weights

# open-mmlab's ImageNet ResNeXt-101 32x4d (mmcv model zoo "open-mmlab://resnext101_32x4d").
OPEN_MMLAB_RESNEXT101_32X4D = "https://download.openmmlab.com/pretrain/third_party/resnext101_32x4d-a5af3160.pth"

TORCHVISION_WEIGHTS = {
    "resnet18": resnet.ResNet18_Weights.IMAGENET1K_V1,
    "resnet50": resnet.ResNet50_Weights.IMAGENET1K_V1,
    "resnet101": resnet.ResNet101_Weights.IMAGENET1K_V1,
}
BACKBONES = ("resnet18", "resnet50", "resnet101", "resnext101_32x4d")
BACKBONE_NORMS = ("bn_eval_mode_affine_trainable", "frozen_batchnorm")


class EvalModeBatchNorm2d(nn.BatchNorm2d):
    """`BatchNorm2d` that is always in eval mode: `train(True)` (which `model.train()` calls on
    every submodule) leaves it in eval mode, so it normalises with its running statistics and never
    updates them (`num_batches_tracked` stays as loaded). Its weight and bias are ordinary
    parameters (trainable unless `requires_grad` is switched off). State-dict keys are
    `BatchNorm2d`'s."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.training = False  # from construction on, not only after the first train()/eval()

    def train(self, mode: bool = True):
        return super().train(False)


def build_resnet(name: str, norm_layer=nn.BatchNorm2d) -> resnet.ResNet:
    """The classification network `name` (random init) with the given normalisation layer."""
    if name == "resnext101_32x4d":
        return resnet.ResNet(resnet.Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=4, norm_layer=norm_layer)
    if name in TORCHVISION_WEIGHTS:
        return getattr(resnet, name)(weights=None, norm_layer=norm_layer)
    raise ValueError(f"unknown backbone {name!r}; choose from {BACKBONES}")


def weights_url(name: str) -> str:
    """The official URL of backbone `name`'s ImageNet weights (torchvision's IMAGENET1K_V1 files,
    open-mmlab's ResNeXt-101 32x4d), each file name carrying the first digits of its SHA-256."""
    if name == "resnext101_32x4d":
        return OPEN_MMLAB_RESNEXT101_32X4D
    if name in TORCHVISION_WEIGHTS:
        return TORCHVISION_WEIGHTS[name].url
    raise ValueError(f"unknown backbone {name!r}; choose from {BACKBONES}")


def open_mmlab_to_torchvision(state_dict: dict) -> dict:
    """Rename an open-mmlab ImageNet ResNet/ResNeXt checkpoint into torchvision `ResNet` keys.

    The file holds `{"state_dict": {...}}` (or the bare dict). mmdet/mmcv's ResNet names its
    modules as torchvision does (`conv1`, `bn1`, `layerK.J.conv{1,2,3}`, `bn{1,2,3}`,
    `downsample.{0,1}`); what differs is the wrapping: a `state_dict` entry, the `module.`
    prefix of DataParallel and `backbone.` of detector checkpoints. The classifier `fc` is
    dropped (the detector does not use it).
    """
    if "state_dict" in state_dict and isinstance(state_dict["state_dict"], dict):
        state_dict = state_dict["state_dict"]
    mapped = {}
    for key, value in state_dict.items():
        for prefix in ("module.", "backbone."):
            if key.startswith(prefix):
                key = key[len(prefix) :]
        if key.startswith("fc."):
            continue
        mapped[key] = value
    return mapped


def load_imagenet_weights(network: resnet.ResNet, name: str, weights_path: str | None = None) -> None:
    """Load ImageNet weights into `network` from `weights_path` or the torchvision cache.

    Raises `FileNotFoundError` with the download command when the file is in neither place, and
    `ValueError` when keys are missing (a file for another architecture).
    """
    path = find_weights(name, weights_url(name), weights_path)
    state_dict = torch.load(path, map_location="cpu", weights_only=True)
    state_dict = open_mmlab_to_torchvision(state_dict)
    expected = {k for k in network.state_dict() if not k.startswith("fc.") and not k.endswith("num_batches_tracked")}
    missing = sorted(expected - set(state_dict))
    if missing:
        raise ValueError(f"{path} is not a {name} checkpoint: {len(missing)} missing keys, e.g. {missing[:3]}")
    network.load_state_dict(state_dict, strict=False)


def build_backbone(
    name: str,
    pretrained: bool = False,
    weights_path: str | None = None,
    trainable_layers: int = 3,
    fpn_channels: int = 256,
    backbone_norm: str = "bn_eval_mode_affine_trainable",
) -> BackboneWithFPN:
    """ResNet + FPN over `layer1..layer4` (plus the max-pool level), as torchvision's Faster R-CNN.

    `trainable_layers` counts from the top (`layer4` first; 5 adds the stem, `conv1` and
    `bn1`) and applies to pretrained networks, every parameter of the other stages frozen
    (BatchNorm affine included); a randomly initialised network trains every layer (nothing to
    preserve). `backbone_norm`: the pretrained network's BatchNorm (module docstring).
    """
    if not 0 <= trainable_layers <= 5:
        raise ValueError(f"trainable_layers must be in 0..5, got {trainable_layers}")
    if backbone_norm not in BACKBONE_NORMS:
        raise ValueError(f"backbone_norm must be one of {BACKBONE_NORMS}, got {backbone_norm!r}")
    if pretrained:
        if backbone_norm == "bn_eval_mode_affine_trainable":
            network = build_resnet(name, EvalModeBatchNorm2d)
            load_imagenet_weights(network, name, weights_path)
        else:
            # Load into ordinary BatchNorm first, then freeze: FrozenBatchNorm2d takes the same keys.
            network = build_resnet(name, nn.BatchNorm2d)
            load_imagenet_weights(network, name, weights_path)
            frozen = build_resnet(name, FrozenBatchNorm2d)
            frozen.load_state_dict(
                {k: v for k, v in network.state_dict().items() if not k.endswith("num_batches_tracked")}
            )
            network = frozen
        trainable = ["layer4", "layer3", "layer2", "layer1", "conv1", "bn1"][
            : trainable_layers + (trainable_layers == 5)
        ]
        for parameter_name, parameter in network.named_parameters():
            if not any(parameter_name.startswith(layer) for layer in trainable):
                parameter.requires_grad_(False)
    else:
        network = build_resnet(name, nn.BatchNorm2d)
    stage2_channels = network.inplanes // 8  # 64 (BasicBlock) or 256 (Bottleneck)
    return BackboneWithFPN(
        network,
        return_layers={f"layer{k}": str(k - 1) for k in range(1, 5)},
        in_channels_list=[stage2_channels * 2 ** (k - 1) for k in range(1, 5)],
        out_channels=fpn_channels,
    )
