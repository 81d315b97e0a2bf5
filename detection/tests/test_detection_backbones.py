import pytest
import torch
from torch import nn
from torchvision.ops import FrozenBatchNorm2d

from rambo.detection import backbones
from rambo.detection.backbones import (
    EvalModeBatchNorm2d,
    build_backbone,
    build_resnet,
    load_imagenet_weights,
    open_mmlab_to_torchvision,
)
from rambo.harness.pretrained import cache_path


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
    return {
        "state_dict": {
            k: torch.rand(v.shape).to(v.dtype) for k, v in reference.items() if not k.endswith("num_batches_tracked")
        }
    }


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
    backbone = build_backbone(
        "resnet18",
        pretrained=True,
        weights_path=str(path),
        trainable_layers=2,
        fpn_channels=16,
        backbone_norm="frozen_batchnorm",
    )
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


def pretrained_detector(tmp_path, backbone_norm: str):
    """A tiny ResNet-18 Faster R-CNN whose backbone loads a random "ImageNet" file (BN statistics far
    from 0 / 1, so normalising by batch statistics instead would show), mmdetection's frozen_stages=1."""
    from omegaconf import OmegaConf

    from rambo.detection.model import build_detector

    torch.manual_seed(0)
    weights = {k: v for k, v in build_resnet("resnet18").state_dict().items() if not k.endswith("num_batches_tracked")}
    for key, value in weights.items():
        if key.endswith("running_mean"):
            weights[key] = 0.1 * torch.randn_like(value)
        elif key.endswith("running_var"):
            weights[key] = 0.5 + torch.rand_like(value)
    checkpoint = {"state_dict": weights}
    torch.save(checkpoint, tmp_path / "r18.pth")
    model = OmegaConf.create(
        {
            "backbone": "resnet18",
            "pretrained": True,
            "weights_path": str(tmp_path / "r18.pth"),
            "trainable_layers": 3,
            "backbone_norm": backbone_norm,
            "fpn_channels": 16,
            "representation_size": 32,
            "min_size": 64,
            "max_size": 64,
            "anchor_sizes": [8, 16, 32, 64, 128],
            "rpn_pre_nms_top_n_train": 50,
            "rpn_post_nms_top_n_train": 20,
            "rpn_pre_nms_top_n_test": 50,
            "rpn_post_nms_top_n_test": 20,
            "box_batch_size_per_image": 16,
            "box_score_thresh": 0.0,
            "box_detections_per_img": 10,
        }
    )
    loss = OmegaConf.create(
        {"score_function": "softmax", "module": {"_target_": "rambo.detection.roi_heads.CrossEntropyClassifierLoss"}}
    )
    return build_detector(model, loss, num_classes=3), checkpoint["state_dict"]


def test_mmdetection_batchnorm_keeps_statistics_frozen_and_trains_affine_in_unfrozen_stages(tmp_path):
    """model.backbone_norm=bn_eval_mode_affine_trainable (mmdetection ResNet norm_eval=True,
    frozen_stages=1): after model.train() and an SGD step the running statistics are the loaded
    ones, layer3's BN weight moved, layer1's and the stem's did not (requires_grad False)."""
    detector, loaded = pretrained_detector(tmp_path, "bn_eval_mode_affine_trainable")
    body = detector.backbone.body
    batchnorms = {name: m for name, m in body.named_modules() if isinstance(m, nn.BatchNorm2d)}
    assert batchnorms and all(isinstance(m, EvalModeBatchNorm2d) for m in batchnorms.values())
    assert not any(isinstance(m, FrozenBatchNorm2d) for m in body.modules())
    detector.train()
    assert detector.training and body.layer3[0].conv1.training
    assert not any(m.training for m in batchnorms.values())  # model.train() left every BN in eval mode
    for name, m in batchnorms.items():
        frozen_stage = name == "bn1" or name.startswith("layer1.")
        assert m.weight.requires_grad is not frozen_stage and m.bias.requires_grad is not frozen_stage, name
    before = {k: v.clone() for k, v in body.state_dict().items()}
    optimizer = torch.optim.SGD([p for p in detector.parameters() if p.requires_grad], lr=0.1)
    images = [torch.rand(3, 64, 64), torch.rand(3, 64, 48)]
    targets = [
        {"boxes": torch.tensor([[4.0, 4.0, 40.0, 40.0]]), "labels": torch.tensor([1])},
        {"boxes": torch.tensor([[10.0, 8.0, 30.0, 50.0]]), "labels": torch.tensor([2])},
    ]
    losses = detector(images, targets)
    optimizer.zero_grad()
    sum(losses.values()).backward()
    optimizer.step()
    after = body.state_dict()
    for key in after:
        if key.endswith(("running_mean", "running_var", "num_batches_tracked")):
            assert torch.equal(after[key], before[key]), key  # statistics never updated
    for key in ("bn1.running_mean", "layer3.0.bn1.running_var", "layer4.1.bn2.running_mean"):
        torch.testing.assert_close(after[key], loaded[key])  # the loaded (ImageNet) statistics
    assert not torch.equal(after["layer3.0.bn1.weight"], before["layer3.0.bn1.weight"])
    assert not torch.equal(after["layer2.0.bn2.bias"], before["layer2.0.bn2.bias"])
    assert torch.equal(after["layer1.0.bn1.weight"], before["layer1.0.bn1.weight"])
    assert torch.equal(after["bn1.weight"], before["bn1.weight"])
    # eval mode means normalising by the stored statistics: BN(x) = (x - mean) / sqrt(var + eps) * w + b
    bn = body.layer3[0].bn1
    x = torch.randn(2, bn.num_features, 5, 5)
    expected = (x - bn.running_mean[:, None, None]) / torch.sqrt(bn.running_var[:, None, None] + bn.eps)
    torch.testing.assert_close(bn(x), expected * bn.weight[:, None, None] + bn.bias[:, None, None])


def test_frozen_batchnorm_option_freezes_the_affine_weights_too(tmp_path):
    detector, _ = pretrained_detector(tmp_path, "frozen_batchnorm")
    body = detector.backbone.body
    assert isinstance(body.layer3[0].bn1, FrozenBatchNorm2d)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in body.modules())
    assert not any(name.endswith(("bn1.weight", "bn2.weight")) for name, _ in body.named_parameters())  # buffers only
    with pytest.raises(ValueError, match="backbone_norm"):
        build_backbone("resnet18", backbone_norm="sync_bn")


def test_warm_start_crosses_between_the_two_batchnorms(tmp_path):
    """FrozenBatchNorm2d's state dict lacks BatchNorm2d's num_batches_tracked: a warm start (and
    the checkpoint of either kind) still loads every weight and statistic."""
    from rambo.detection.warm_start import load_initial_weights
    from rambo.harness.checkpoint import save_checkpoint

    frozen, _ = pretrained_detector(tmp_path, "frozen_batchnorm")
    with torch.no_grad():
        frozen.backbone.body.layer3[0].bn1.weight.mul_(3.0)  # a FrozenBatchNorm2d buffer
    save_checkpoint({"state": {"model": frozen.state_dict()}}, tmp_path / "frozen.pt")
    trainable, _ = pretrained_detector(tmp_path, "bn_eval_mode_affine_trainable")
    load_initial_weights(trainable, tmp_path / "frozen.pt")
    for key, value in frozen.state_dict().items():
        torch.testing.assert_close(trainable.state_dict()[key], value)
    save_checkpoint({"state": {"model": trainable.state_dict()}}, tmp_path / "trainable.pt")
    load_initial_weights(frozen, tmp_path / "trainable.pt")
