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
