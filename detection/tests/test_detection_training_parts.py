"""The small parts of the training loop: W&B mode, atomic checkpoints, the flip augmentation."""

import pytest
import torch

from rambo.detection import checkpoint as checkpoint_module
from rambo.detection.augmentation import horizontal_flip, random_flips
from rambo.detection.checkpoint import load_checkpoint, save_checkpoint
from rambo.detection.wandb_run import init_wandb, resolve_wandb_mode


def test_wandb_mode_is_decided_before_init(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    assert resolve_wandb_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_wandb_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve_wandb_mode("auto") == "disabled" and resolve_wandb_mode("offline") == "offline"
    assert init_wandb("disabled", "p", "g", "n", {}, tmp_path) is None
    with pytest.raises(ValueError, match="wandb.mode"):
        resolve_wandb_mode("cloud")


def test_checkpoint_is_replaced_atomically(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint({"epoch": 1}, path)

    def crash(state, target):
        open(target, "wb").write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module.torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"epoch": 2}, path)
    monkeypatch.undo()
    assert load_checkpoint(path)["epoch"] == 1 and list(tmp_path.iterdir()) == [path]
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")


def test_horizontal_flip_mirrors_pixels_and_boxes():
    image = torch.arange(2 * 3 * 5, dtype=torch.float32).reshape(2, 3, 5)[:1].expand(3, 3, 5)
    target = {"boxes": torch.tensor([[0.0, 0.0, 2.0, 3.0], [1.0, 1.0, 5.0, 2.0]]), "labels": torch.tensor([1, 2])}
    flipped, flipped_target = horizontal_flip(image, target)
    for x in range(5):
        assert torch.equal(flipped[..., x], image[..., 4 - x])
    # a box covering columns [x1, x2) covers [W - x2, W - x1) after the flip
    assert flipped_target["boxes"].tolist() == [[3.0, 0.0, 5.0, 3.0], [0.0, 1.0, 4.0, 2.0]]
    assert target["boxes"].tolist()[0] == [0.0, 0.0, 2.0, 3.0]  # the input is not modified
    twice, twice_target = horizontal_flip(flipped, flipped_target)
    assert torch.equal(twice, image) and torch.equal(twice_target["boxes"], target["boxes"])
    images, _ = random_flips([image] * 64, [target] * 64, torch.Generator().manual_seed(0))
    count = sum(not torch.equal(i, image) for i in images)
    assert 16 < count < 48
