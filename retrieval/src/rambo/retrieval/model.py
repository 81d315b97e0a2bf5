"""Embedding network (paper Sec. 5.1, App. A): a CNN backbone whose classifier is replaced by a
512-d embedding layer, with L2-normalised output.

Backbones: torchvision `resnet50` (the paper's), `resnet18`, and `small_convnet` (a four-block
conv net for the CPU `mini` profile). ImageNet weights are read from a local file or the
torchvision cache only; nothing is ever downloaded here.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torchvision

from rambo.core.pairwise import unit_rows
from rambo.harness.pretrained import find_weights

# Names of the ImageNet weights that torchvision's hub cache stores (torchvision.models.*_Weights).
_IMAGENET_WEIGHTS = {
    "resnet50": torchvision.models.ResNet50_Weights.IMAGENET1K_V1,
    "resnet18": torchvision.models.ResNet18_Weights.IMAGENET1K_V1,
}
BACKBONES = ("resnet50", "resnet18", "small_convnet")


def weights_url(backbone: str) -> str:
    """The official URL of `backbone`'s ImageNet weights (torchvision's IMAGENET1K_V1 file, whose name
    carries the first digits of its SHA-256); `ValueError` for a backbone that has none."""
    if backbone not in _IMAGENET_WEIGHTS:
        raise ValueError(f"no ImageNet weights for backbone {backbone!r}; set model.pretrained=false")
    return _IMAGENET_WEIGHTS[backbone].url


def load_imagenet_state_dict(backbone: str, weights_path: str | Path | None = None) -> dict:
    """ImageNet weights of `backbone` from `weights_path` or else the torchvision cache
    ([`rambo.harness.pretrained.find_weights`][rambo.harness.pretrained.find_weights]: never downloaded at run time)."""
    path = find_weights(backbone, weights_url(backbone), weights_path)
    return torch.load(path, map_location="cpu", weights_only=True)


class SmallConvNet(torch.nn.Module):
    """Four conv-BN-ReLU-pool blocks then global average pooling: `[B, 3, H, W] -> [B, width * 8]`.

    A backbone that trains in seconds on a CPU at 32-48 px (the `mini` profile).
    """

    def __init__(self, width: int = 32):
        super().__init__()
        layers = []
        channels = 3
        for out in (width, width * 2, width * 4, width * 8):
            layers += [
                torch.nn.Conv2d(channels, out, 3, padding=1, bias=False),
                torch.nn.BatchNorm2d(out),
                torch.nn.ReLU(inplace=True),
                torch.nn.MaxPool2d(2),
            ]
            channels = out
        self.features = torch.nn.Sequential(*layers)
        self.out_features = channels

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.features(images).mean(dim=(2, 3))


def _backbone(name: str, pretrained: bool, weights_path: str | None, width: int) -> tuple[torch.nn.Module, int]:
    """The feature extractor without classifier and its output width."""
    if name == "small_convnet":
        if pretrained:
            raise ValueError("small_convnet has no pretrained weights; set model.pretrained=false")
        net = SmallConvNet(width)
        return net, net.out_features
    if name not in _IMAGENET_WEIGHTS:
        raise ValueError(f"unknown backbone {name!r}; choose one of {BACKBONES}")
    net = getattr(torchvision.models, name)(weights=None)
    if pretrained:
        net.load_state_dict(load_imagenet_state_dict(name, weights_path))
    features = net.fc.in_features
    net.fc = torch.nn.Identity()  # the classifier is replaced by the embedding layer below
    return net, features


class EmbeddingNet(torch.nn.Module):
    """`images [B, 3, H, W] -> embeddings [B, embedding_dim]`, each row of unit L2 norm.

    Args:
        backbone: one of `BACKBONES`.
        embedding_dim: 512 in the paper.
        pretrained: load ImageNet weights (local file `weights_path` or the torchvision cache).
        freeze_batchnorm: keep every BatchNorm in eval mode (its running statistics frozen), so
            batch statistics of small per-class batches do not drift the ImageNet ones; the
            affine weights still train, as in the references (Roth et al.'s and the Recall@k
            code's ResNet-50: `module.eval()` only).
        width: channel width of `small_convnet`.
    """

    def __init__(
        self,
        backbone: str = "resnet50",
        embedding_dim: int = 512,
        pretrained: bool = True,
        weights_path: str | None = None,
        freeze_batchnorm: bool = False,
        width: int = 32,
    ):
        super().__init__()
        if int(embedding_dim) != embedding_dim or embedding_dim < 1:
            raise ValueError(f"embedding_dim must be a positive integer, got {embedding_dim}")
        self.backbone, features = _backbone(backbone, pretrained, weights_path, width)
        self.embedding = torch.nn.Linear(features, int(embedding_dim))
        self.freeze_batchnorm = bool(freeze_batchnorm)
        self.train()

    def _batchnorms(self):
        return [m for m in self.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]

    def train(self, mode: bool = True) -> EmbeddingNet:
        super().train(mode)
        if self.freeze_batchnorm:
            for module in self._batchnorms():
                module.eval()
        return self

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be [batch, 3, height, width], got shape {tuple(images.shape)}")
        return unit_rows(self.embedding(self.backbone(images)))

    def parameter_groups(self, lr: float, embedding_lr_multiplier: float = 10.0) -> list[dict]:
        """Optimizer groups: the backbone at `lr`, the new embedding layer at a higher rate
        (App. A: "higher learning rates for the embedding layer"), frozen parameters left out."""
        embedding = [p for p in self.embedding.parameters() if p.requires_grad]
        embedding_ids = {id(p) for p in embedding}
        backbone = [p for p in self.parameters() if p.requires_grad and id(p) not in embedding_ids]
        return [
            {"params": backbone, "lr": lr, "name": "backbone"},
            {"params": embedding, "lr": lr * embedding_lr_multiplier, "name": "embedding"},
        ]


def build_model(cfg) -> EmbeddingNet:
    """`EmbeddingNet` from a config mapping with the keys of `configs/model/*.yaml`."""
    return EmbeddingNet(
        backbone=cfg["backbone"],
        embedding_dim=cfg.get("embedding_dim", 512),
        pretrained=cfg.get("pretrained", False),
        weights_path=cfg.get("weights_path"),
        freeze_batchnorm=cfg.get("freeze_batchnorm", False),
        width=cfg.get("width", 32),
    )
