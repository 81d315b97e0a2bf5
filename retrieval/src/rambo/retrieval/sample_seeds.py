"""Training augmentation drawn from the sample's own seed, so the worker count never changes a run.

A DataLoader worker has its own copy of torch's global generator, seeded per worker and per
epoch; the training process's generator is another one again, and it also draws the model's
initialisation and the losses' randomness. Augmentation drawn from "the generator of whichever
process loads the batch" therefore depends on `num_workers`: measured on the tiny profile, 0
and 2 workers ended at test R@1 0.1944 and 0.3472, and a run resumed with another worker count
matched neither.

Here every training sample draws its augmentation from a seed of its own,
[`sample_seed`][rambo.retrieval.sample_seeds.sample_seed] `(run seed, epoch, position)`, where `position` is the
sample's place in the epoch's stream of global batches (`0, 1, ...` over the epoch's batches in order). The
position, not the image's index, keys the draw: the samplers repeat an image within an epoch,
within a batch too (a class with fewer images than `samples_per_class`), and each repeat is a
different view. [`SeededBatches`][rambo.retrieval.sample_seeds.SeededBatches] puts the seed beside every index of its
batch sampler's batches (in the training process, before a batch is split among processes: several GPUs draw
what one would); [`SeededSamples`][rambo.retrieval.sample_seeds.SeededSamples] makes each item under that seed:

* images read from disk and augmented one at a time
  ([`transforms.train_transform`][rambo.retrieval.transforms.train_transform], whose torchvision transforms draw from
  torch's global generator): the item is made under `torch.random.fork_rng` seeded with the sample's seed, so the
  calling process's generator is left as it was;
* images held in memory and augmented a batch at a time (`data.in_memory`): the item carries its
  seed, and
  [`batch_transforms.BatchTrainAugmentation.collate`][rambo.retrieval.batch_transforms.BatchTrainAugmentation.collate]
  draws each image's crop and flip from it.

So 0, 2 or 8 workers give the same batches, byte for byte, and the training process's generator
draws only what the training step itself draws (a resumed run restores it from the checkpoint).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import torch

SEED_BITS = 63  # torch.manual_seed and torch.Generator take any of these


def sample_seed(seed: int, epoch: int, position: int) -> int:
    """The seed of the training sample at `position` of epoch `epoch` of the run seeded `seed`:
    a hash of the three (BLAKE2b), so neighbouring positions, epochs and runs draw unrelated streams."""
    digest = hashlib.blake2b(f"{int(seed)}/{int(epoch)}/{int(position)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> (64 - SEED_BITS)


class SeededBatches(torch.utils.data.Sampler):
    """`batch_sampler`'s batches with each index paired with its sample's seed: `[(index, seed), ...]`.

    `set_epoch` selects the epoch of both the batches (passed on to `batch_sampler`) and the seeds.
    """

    def __init__(self, batch_sampler, seed: int):
        self.batch_sampler, self.seed, self.epoch = batch_sampler, int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        """Select the batches and the seeds of epoch `epoch`."""
        self.epoch = int(epoch)
        if hasattr(self.batch_sampler, "set_epoch"):
            self.batch_sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        position = 0
        for batch in self.batch_sampler:
            keyed = []
            for index in batch:
                keyed.append((int(index), sample_seed(self.seed, self.epoch, position)))
                position += 1
            yield keyed


class SeededSamples(torch.utils.data.Dataset):
    """`dataset` read by `(index, seed)` keys ([`SeededBatches`][rambo.retrieval.sample_seeds.SeededBatches]).

    `carry_seed=False`: `dataset[index]`, made under torch's global generator seeded with
    `seed` inside `torch.random.fork_rng` (CPU only), which restores the generator after. For a
    dataset whose transform draws from the global generator (torchvision's random transforms).
    `carry_seed=True`: `(*dataset[index], seed)`, for a `collate_fn` that draws from the seeds.
    """

    def __init__(self, dataset, carry_seed: bool = False):
        self.dataset, self.carry_seed = dataset, carry_seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]):
        index, seed = key
        if self.carry_seed:
            return (*self.dataset[index], seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.dataset[index]
