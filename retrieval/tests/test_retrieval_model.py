import pytest
import torch
import torchvision

from rambo.retrieval.model import EmbeddingNet, build_model, load_imagenet_state_dict

torch.set_num_threads(1)


def test_embeddings_have_unit_norm_and_requested_width():
    net = EmbeddingNet("small_convnet", embedding_dim=16, pretrained=False, width=4)
    out = net(torch.randn(5, 3, 32, 32))
    assert out.shape == (5, 16)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(5))


def test_resnet50_classifier_replaced_by_512d_embedding():
    net = EmbeddingNet("resnet50", pretrained=False)
    assert isinstance(net.backbone.fc, torch.nn.Identity)
    assert net.embedding.in_features == 2048 and net.embedding.out_features == 512


def test_frozen_batchnorm_keeps_its_statistics_and_trains_its_affine_weights():
    """As the references do (Roth et al.'s and the Recall@k code's ResNet-50: BatchNorm in eval
    mode, its weight and bias still trained; the settings ledger)."""
    net = EmbeddingNet("small_convnet", embedding_dim=8, pretrained=False, width=4, freeze_batchnorm=True)
    net.train()
    bn = net.backbone.features[1]
    before = bn.running_mean.clone()
    net(torch.randn(4, 3, 32, 32) * 5 + 3)
    assert not bn.training
    torch.testing.assert_close(bn.running_mean, before)
    assert all(p.requires_grad for p in bn.parameters())
    net(torch.randn(4, 3, 32, 32)).sum().backward()
    assert bn.weight.grad is not None and bn.weight.grad.abs().sum() > 0
    # without freezing, the same forward moves the running mean
    free = EmbeddingNet("small_convnet", embedding_dim=8, pretrained=False, width=4)
    free.train()
    free(torch.randn(4, 3, 32, 32) * 5 + 3)
    assert not torch.allclose(free.backbone.features[1].running_mean, before)


def test_parameter_groups_give_embedding_layer_higher_lr_and_cover_all_trainable():
    net = EmbeddingNet("small_convnet", embedding_dim=8, pretrained=False, width=4, freeze_batchnorm=True)
    groups = net.parameter_groups(lr=1e-5, embedding_lr_multiplier=10)
    assert groups[0]["lr"] == 1e-5 and groups[1]["lr"] == pytest.approx(1e-4)
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in net.embedding.parameters()}
    grouped = [id(p) for g in groups for p in g["params"]]
    assert sorted(grouped) == sorted(id(p) for p in net.parameters() if p.requires_grad)
    assert len(grouped) == len(set(grouped))


def test_pretrained_weights_from_local_file(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    reference = torchvision.models.resnet18(weights=None)
    path = tmp_path / "r18.pth"
    torch.save(reference.state_dict(), path)
    net = build_model({"backbone": "resnet18", "pretrained": True, "weights_path": str(path)})
    torch.testing.assert_close(net.backbone.conv1.weight, reference.conv1.weight)


def test_pretrained_weights_from_torchvision_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    reference = torchvision.models.resnet18(weights=None)
    url = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.url
    cached = tmp_path / "hub" / "checkpoints" / url.rsplit("/", 1)[-1]
    cached.parent.mkdir(parents=True)
    torch.save(reference.state_dict(), cached)
    state = load_imagenet_state_dict("resnet18")
    torch.testing.assert_close(state["conv1.weight"], reference.conv1.weight)


def test_missing_weights_give_clear_error_and_no_download(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))

    def no_download(*args, **kwargs):
        raise AssertionError("a download was attempted")

    monkeypatch.setattr(torch.hub, "download_url_to_file", no_download)
    with pytest.raises(FileNotFoundError, match="model.pretrained=false"):
        EmbeddingNet("resnet50", pretrained=True, weights_path=str(tmp_path / "missing.pth"))


def test_bad_input_raises_value_error():
    with pytest.raises(ValueError, match="backbone"):
        EmbeddingNet("vgg", pretrained=False)
    net = EmbeddingNet("small_convnet", embedding_dim=8, pretrained=False, width=4)
    with pytest.raises(ValueError, match="images"):
        net(torch.randn(3, 32, 32))
