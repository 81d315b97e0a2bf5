import pytest
import torch
from torch import nn
from torchvision.ops import FrozenBatchNorm2d

from rambo.detection import backbones
from rambo.harness.pretrained import cache_path
from rambo.detection.backbones import build_backbone, build_resnet, load_imagenet_weights, open_mmlab_to_torchvision


def uninitialised(name: str) -> nn.Module:
    """The network without its (slow) random initialisation: built on the meta device, then allocated."""
    with torch.device("meta"):
        network = build_resnet(name)
    return network.to_empty(device="cpu")


def test_resnext101_32x4d_architecture():
    with torch.device("meta"):
        network = build_resnet("resnext101_32x4d")
    assert [len(getattr(network, f"layer{k}")) for k in range(1, 5)] == [3, 4, 23, 3]
    first = network.layer1[0]
    assert first.conv2.groups == 32 and first.conv2.in_channels == 128  # 32 groups x 4 channels
    assert network.layer4[0].conv3.out_channels == 2048
    # Published size of ResNeXt-101 32x4d: 44.18 M parameters (with the 1000-way classifier).
    assert sum(p.numel() for p in network.parameters()) == pytest.approx(44.18e6, rel=2e-3)


def open_mmlab_style_state_dict(name: str) -> dict:
    """What the open-mmlab file holds: ``{"state_dict": {conv1.weight, bn1.*, layerK.J.*, fc.*}}``."""
    reference = uninitialised(name).state_dict()
    return {"state_dict": {k: torch.rand(v.shape).to(v.dtype) for k, v in reference.items() if not k.endswith("num_batches_tracked")}}


def test_open_mmlab_key_mapping_covers_every_torchvision_key():
    checkpoint = open_mmlab_style_state_dict("resnext101_32x4d")
    mapped = open_mmlab_to_torchvision(checkpoint)
    network = uninitialised("resnext101_32x4d")
    missing, unexpected = network.load_state_dict(mapped, strict=False)
    assert unexpected == [] and all(k.startswith("fc.") or k.endswith("num_batches_tracked") for k in missing)
    assert not any(k.startswith("fc.") for k in mapped)
    torch.testing.assert_close(network.layer3[22].conv2.weight, checkpoint["state_dict"]["layer3.22.conv2.weight"])
    prefixed = {"module.backbone." + k: v for k, v in checkpoint["state_dict"].items()}
    assert open_mmlab_to_torchvision(prefixed).keys() == mapped.keys()


def test_weights_load_from_a_local_file_into_frozen_batchnorm(tmp_path):
    checkpoint = open_mmlab_style_state_dict("resnet18")
    path = tmp_path / "r18.pth"
    torch.save(checkpoint, path)
    backbone = build_backbone("resnet18", pretrained=True, weights_path=str(path), trainable_layers=2, fpn_channels=16)
    body = backbone.body
    torch.testing.assert_close(body.layer4[1].conv2.weight, checkpoint["state_dict"]["layer4.1.conv2.weight"])
    torch.testing.assert_close(body.bn1.running_var, checkpoint["state_dict"]["bn1.running_var"])
    assert isinstance(body.bn1, FrozenBatchNorm2d)
    assert body.layer4[0].conv1.weight.requires_grad and body.layer3[0].conv1.weight.requires_grad
    assert not body.layer2[0].conv1.weight.requires_grad and not body.conv1.weight.requires_grad


def test_missing_weights_never_download_and_say_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", lambda *a, **k: pytest.fail("no downloads"))
    with pytest.raises(FileNotFoundError, match="never downloaded") as error:
        build_backbone("resnet50", pretrained=True)
    assert "resnet50-0676ba61.pth" in str(error.value) and "model.pretrained=false" in str(error.value)
    with pytest.raises(FileNotFoundError, match="resnext101_32x4d-a5af3160.pth"):
        load_imagenet_weights(build_resnet("resnet18"), "resnext101_32x4d")


def test_wrong_checkpoint_and_unknown_names_are_clear_errors(tmp_path):
    path = tmp_path / "r18.pth"
    torch.save(open_mmlab_style_state_dict("resnet18"), path)
    with pytest.raises(ValueError, match="not a resnet50 checkpoint"):
        load_imagenet_weights(uninitialised("resnet50"), "resnet50", str(path))
    with pytest.raises(ValueError, match="unknown backbone"):
        build_resnet("vgg16")
    with pytest.raises(ValueError, match="trainable_layers"):
        build_backbone("resnet18", trainable_layers=6)


def test_torchvision_cache_is_used(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    path = cache_path(backbones.weights_url("resnet18"))
    assert path == tmp_path / "checkpoints" / "resnet18-f37072fd.pth"
    path.parent.mkdir()
    torch.save(build_resnet("resnet18").state_dict(), path)  # torchvision's files are bare state dicts
    build_backbone("resnet18", pretrained=True)


def test_random_init_uses_ordinary_batchnorm_and_trains_everything():
    backbone = build_backbone("resnet18", pretrained=False, fpn_channels=16)
    assert isinstance(backbone.body.bn1, nn.BatchNorm2d)
    assert all(p.requires_grad for p in backbone.parameters())
    features = backbone(torch.rand(1, 3, 64, 64))
    assert list(features) == ["0", "1", "2", "3", "pool"] and features["0"].shape == (1, 16, 16, 16)
