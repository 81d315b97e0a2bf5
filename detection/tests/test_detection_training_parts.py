"""The small parts of the training loop: the flip augmentation, the per-epoch batches.
(W&B mode, checkpoints and resume are rambo.harness's, tested there.)"""

import torch
from omegaconf import OmegaConf

from rambo.detection.augmentation import horizontal_flip, random_flips
from rambo.detection.train import epoch_loader


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


def test_epoch_batches_depend_on_seed_and_epoch_and_shard_over_processes():
    dataset = [(i, {"index": i}) for i in range(10)]  # (image, target) pairs, as the VOC dataset yields
    cfg = OmegaConf.create({"seed": 3, "num_workers": 0, "schedule": {"batch_size": 4}})

    def batches(epoch, rank=0, processes=1):
        return [images for images, _ in epoch_loader(cfg, dataset, epoch, rank, processes)]

    assert batches(1) == batches(1) and batches(1) != batches(2)
    assert sorted(i for batch in batches(2) for i in batch) == list(range(10)) and [len(b) for b in batches(2)] == [4, 4, 2]
    # two processes: each takes its share of every global batch, together the one-process batch
    shards = [batches(2, rank, 2) for rank in (0, 1)]
    assert [a + b for a, b in zip(*shards)] == batches(2)
    # the one-process order is the one DataLoader(shuffle=True, generator=...) draws (the mini tables' runs)
    reference = torch.utils.data.DataLoader(list(range(10)), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3 * 1000 + 1))
    assert [batch.tolist() for batch in reference] == batches(2)


class _Quadratic(torch.nn.Module):
    """A "detector" whose loss is ``scale * sum(w^2)``: its gradient norm is known."""

    def __init__(self, scale: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((4,), 1.0))
        self.scale = scale

    def forward(self, images, targets):
        return {"loss_quadratic": self.scale * (self.weight**2).sum()}


def _one_step(clip):
    from rambo.detection.engine import train_one_epoch

    model = _Quadratic(100.0)  # gradient 200 per entry: 2-norm 400
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    batch = ([torch.zeros(3, 4, 4)], [{"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.int64)}])
    train_one_epoch(model, [batch], optimizer, scheduler, "cpu", torch.Generator().manual_seed(0), 1, grad_clip_max_norm=clip)
    return 1.0 - model.weight.detach()  # lr x the (clipped) gradient


def test_gradient_clipping_bounds_the_step_to_max_norm():
    """The paper profile's mmdetection recipe clips the gradient's 2-norm at 35 (schedule.grad_clip_max_norm)."""
    unclipped, clipped = _one_step(None), _one_step(35.0)
    assert torch.allclose(unclipped, torch.full((4,), 0.2))  # 0.001 x 200
    assert torch.allclose(clipped.norm(), torch.tensor(0.001 * 35.0), rtol=1e-5)
    assert torch.allclose(clipped / clipped.norm(), unclipped / unclipped.norm())  # direction kept
