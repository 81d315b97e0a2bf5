"""The small parts of the training loop: the flip augmentation, the per-epoch batches.
(W&B mode, checkpoints and resume are rambo.harness's, tested there.)"""

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from rambo.detection.augmentation import horizontal_flip, random_flips
from rambo.detection.group_sampler import GroupedBatchSampler, aspect_ratio_flag
from rambo.detection.train import epoch_batches, epoch_loader


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
    cfg = OmegaConf.create(
        {"seed": 3, "num_workers": 0, "schedule": {"batch_size": 4}, "data": {"batch_grouping": "none"}}
    )

    def batches(epoch, rank=0, processes=1):
        return [images for images, _ in epoch_loader(cfg, dataset, epoch, rank, processes)]

    assert batches(1) == batches(1) and batches(1) != batches(2)
    assert sorted(i for batch in batches(2) for i in batch) == list(range(10)) and [len(b) for b in batches(2)] == [
        4,
        4,
        2,
    ]
    # two processes: each takes its share of every global batch, together the one-process batch
    shards = [batches(2, rank, 2) for rank in (0, 1)]
    assert [a + b for a, b in zip(*shards)] == batches(2)
    # the one-process order is the one DataLoader(shuffle=True, generator=...) draws (the committed mini
    # tables' runs, from before data.batch_grouping's default became aspect_ratio)
    reference = torch.utils.data.DataLoader(
        list(range(10)), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3 * 1000 + 1)
    )
    assert [batch.tolist() for batch in reference] == batches(2)


def test_max_iterations_per_epoch_cuts_the_epoch_to_its_first_batches():
    """The loader's length is the epoch's iterations (the engine takes one step per batch): the
    first ``schedule.max_iterations_per_epoch`` batches of the uncut epoch, the same draws."""
    dataset = [(i, {"index": i}) for i in range(10)]
    cfg = OmegaConf.create(
        {
            "seed": 3,
            "num_workers": 0,
            "schedule": {"batch_size": 2, "max_iterations_per_epoch": None},
            "data": {"batch_grouping": "none"},
        }
    )
    whole = [images for images, _ in epoch_loader(cfg, dataset, 2, 0, 1)]
    cut = epoch_loader(OmegaConf.merge(cfg, {"schedule": {"max_iterations_per_epoch": 3}}), dataset, 2, 0, 1)
    assert len(whole) == 5 and len(cut) == 3 and [images for images, _ in cut] == whole[:3]
    longer = epoch_loader(OmegaConf.merge(cfg, {"schedule": {"max_iterations_per_epoch": 9}}), dataset, 2, 0, 1)
    assert len(longer) == 5 and [images for images, _ in longer] == whole


class _SizedImages(list):
    """(image, target) pairs that know their sizes, as VOCDetectionDataset (its annotations' <size>)."""

    def __init__(self, sizes):
        super().__init__((i, {"index": i}) for i in range(len(sizes)))
        self.sizes = sizes

    def aspect_ratio_groups(self):
        return [aspect_ratio_flag(w, h) for w, h in self.sizes]


def _brute_force_groups(sizes):
    return [1 if w / h > 1 else 0 for w, h in sizes]  # mmdetection _set_group_flag


SIZES = [
    (500, 375),
    (375, 500),
    (500, 333),
    (333, 500),
    (500, 500),
    (640, 480),
    (480, 640),
    (500, 281),
    (281, 500),
    (500, 400),
    (353, 500),
    (500, 366),
    (600, 601),
]  # 6 landscape, 7 not (square and portrait), VOC-like


@pytest.mark.parametrize("batch_size", [1, 2, 3, 4, 8])
def test_grouped_batches_are_one_group_each_and_cover_every_image_with_mmdetections_padding(batch_size):
    dataset = _SizedImages(SIZES)
    groups = _brute_force_groups(SIZES)
    assert dataset.aspect_ratio_groups() == groups and sum(groups) == 6
    batches = list(GroupedBatchSampler(groups, batch_size, seed=11))
    assert len(batches) == len(GroupedBatchSampler(groups, batch_size, seed=11))
    assert all(len(batch) == batch_size for batch in batches)  # padded: every batch full
    assert all(len({groups[i] for i in batch}) == 1 for batch in batches)  # one group per batch
    for group in (0, 1):
        members = [i for i, g in enumerate(groups) if g == group]
        seen = [i for batch in batches for i in batch if groups[i] == group]
        padded = -(-len(members) // batch_size) * batch_size
        assert set(seen) == set(members) and len(seen) == padded  # every image, plus the padding only
        extra = [i for i in set(seen) if seen.count(i) > 1]
        assert len(extra) == padded - len(members) and all(seen.count(i) == 2 for i in extra)
    # deterministic per seed; another seed another order
    assert batches == list(GroupedBatchSampler(groups, batch_size, seed=11))
    if batch_size < 8:
        assert batches != list(GroupedBatchSampler(groups, batch_size, seed=12))
    unpadded = list(GroupedBatchSampler(groups, batch_size, seed=11, pad=False))
    assert sorted(i for batch in unpadded for i in batch) == list(range(len(SIZES)))
    assert all(len({groups[i] for i in batch}) == 1 for batch in unpadded)


def test_a_group_smaller_than_its_padding_repeats_cyclically():
    batches = list(GroupedBatchSampler([0, 1, 1, 1, 1, 1], 4, seed=0))
    lone = [batch for batch in batches if 0 in batch]
    assert lone == [[0, 0, 0, 0]] and len(batches) == 3


def test_grouped_epoch_batches_shard_over_processes_one_group_per_process_batch():
    dataset = _SizedImages(SIZES)
    groups = _brute_force_groups(SIZES)
    cfg = OmegaConf.create(
        {"seed": 3, "num_workers": 0, "schedule": {"batch_size": 4}, "data": {"batch_grouping": "aspect_ratio"}}
    )

    def batches(epoch, rank=0, processes=1):
        return [images for images, _ in epoch_loader(cfg, dataset, epoch, rank, processes)]

    assert batches(1) == batches(1) and batches(1) != batches(2)
    assert batches(2) == list(GroupedBatchSampler(groups, 4, seed=3 * 1000 + 1))
    assert len(epoch_batches(cfg, dataset, 1)) == 4  # ceil(6 / 4) + ceil(7 / 4): the epoch's iterations
    for processes in (2, 3):
        shards = [batches(2, rank, processes) for rank in range(processes)]
        assert [sum(parts, []) for parts in zip(*shards)] == batches(2)
        assert all(len({groups[i] for i in batch}) == 1 for shard in shards for batch in shard)
    with pytest.raises(ValueError, match="batch_grouping"):
        epoch_batches(OmegaConf.merge(cfg, {"data": {"batch_grouping": "ratio"}}), dataset, 1)


def test_the_voc_dataset_groups_by_its_annotations_sizes(tmp_path):
    """On the synthetic set (VOC layout): sizes from the XML <size>, never from the images; the
    configs' default is mmdetection's grouping."""
    from hydra import compose, initialize_config_dir

    import rambo.detection
    from rambo.detection.synthetic import SYNTHETIC_CLASSES, generate
    from rambo.detection.voc import VOCDetectionDataset

    root = generate(tmp_path / "synthetic", seed=0, num_trainval=6, num_test=1, image_size=64)
    landscape = sorted((root / "Annotations").glob("*.xml"))[1]
    landscape.write_text(landscape.read_text().replace("<width>64</width>", "<width>96</width>"))
    dataset = VOCDetectionDataset([root], "trainval", SYNTHETIC_CLASSES, train=True)
    sizes = dataset.image_sizes()
    assert len(sizes) == 6 and sorted(set(sizes)) == [(64, 64), (96, 64)]
    assert dataset.aspect_ratio_groups() == _brute_force_groups(sizes) and sum(dataset.aspect_ratio_groups()) == 1
    batches = list(GroupedBatchSampler(dataset.aspect_ratio_groups(), 2, seed=0))
    assert len(batches) == 4 and all(len({dataset.aspect_ratio_groups()[i] for i in b}) == 1 for b in batches)
    conf = Path(rambo.detection.__file__).parent / "configs"
    for data in ("synthetic", "tiny", "voc07", "voc0712"):
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            assert compose(config_name="train", overrides=[f"data={data}"]).data.batch_grouping == "aspect_ratio"


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
    from rambo.harness.engine_options import EngineOptions

    model = _Quadratic(100.0)  # gradient 200 per entry: 2-norm 400
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    batch = ([torch.zeros(3, 4, 4)], [{"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.int64)}])
    train_one_epoch(
        model,
        [batch],
        optimizer,
        scheduler,
        torch.Generator().manual_seed(0),
        grad_clip_max_norm=clip,
        options=EngineOptions(device="cpu"),
    )
    return 1.0 - model.weight.detach()  # lr x the (clipped) gradient


def test_gradient_clipping_bounds_the_step_to_max_norm():
    """The paper profile's mmdetection recipe clips the gradient's 2-norm at 35 (schedule.grad_clip_max_norm)."""
    unclipped, clipped = _one_step(None), _one_step(35.0)
    assert torch.allclose(unclipped, torch.full((4,), 0.2))  # 0.001 x 200
    assert torch.allclose(clipped.norm(), torch.tensor(0.001 * 35.0), rtol=1e-5)
    assert torch.allclose(clipped / clipped.norm(), unclipped / unclipped.norm())  # direction kept
