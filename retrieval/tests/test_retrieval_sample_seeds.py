"""Each training sample's augmentation from its own seed (rambo.retrieval.sample_seeds)."""

import torch

from rambo.retrieval.batch_transforms import BatchTrainAugmentation
from rambo.retrieval.sample_seeds import SeededBatches, SeededSamples, sample_seed
from rambo.retrieval.transforms import train_transform


class Batches(torch.utils.data.Sampler):
    """Two batches, the first with a repeated index, whose content depends on the epoch."""

    def __init__(self):
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return 2

    def __iter__(self):
        yield [0, 0, 1]
        yield [self.epoch, 2]


def test_every_place_of_an_epoch_has_its_own_seed_a_repeat_too():
    batches = SeededBatches(Batches(), seed=3)
    batches.set_epoch(1)
    first = list(batches)
    assert first == [
        [(0, sample_seed(3, 1, 0)), (0, sample_seed(3, 1, 1)), (1, sample_seed(3, 1, 2))],
        [(1, sample_seed(3, 1, 3)), (2, sample_seed(3, 1, 4))],
    ]
    seeds = [seed for batch in first for _, seed in batch]
    assert len(set(seeds)) == 5  # the repeated image is another view
    batches.set_epoch(2)
    assert [index for batch in batches for index, _ in batch] == [0, 0, 1, 2, 2]  # the epoch reaches the sampler
    assert not {seed for batch in batches for _, seed in batch} & set(seeds)
    assert sample_seed(4, 1, 0) not in seeds and 0 <= sample_seed(3, 1, 0) < 2**63


def test_an_item_is_the_same_bytes_for_the_same_seed_and_leaves_the_callers_generator_alone():
    from PIL import Image

    class Images(torch.utils.data.Dataset):
        transform = train_transform(16)

        def __len__(self):
            return 1

        def __getitem__(self, index):
            pixels = torch.arange(20 * 24 * 3, dtype=torch.int64).remainder(251).to(torch.uint8).reshape(20, 24, 3)
            return self.transform(Image.fromarray(pixels.numpy())), 0, index

    items = SeededSamples(Images())
    torch.manual_seed(0)
    state = torch.get_rng_state()
    a, b, c = items[(0, 11)], items[(0, 11)], items[(0, 12)]
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a[0], b[0]) and a[1:] == (0, 0)
    assert not torch.equal(a[0], c[0])


def test_the_batch_augmentation_draws_each_image_from_its_seed_alone():
    images = torch.randint(0, 256, (3, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    augment = BatchTrainAugmentation(8)
    state = torch.get_rng_state()
    batch, labels, indices = augment.collate([(images[i], i, i, 100 + i) for i in range(3)])
    assert torch.equal(torch.get_rng_state(), state)
    assert labels.tolist() == indices.tolist() == [0, 1, 2]
    alone, _, _ = augment.collate([(images[1], 1, 1, 101)])  # the same image and seed in another batch
    assert torch.equal(alone[0], batch[1])
    other, _, _ = augment.collate([(images[1], 1, 1, 102)])
    assert not torch.equal(other[0], batch[1])
