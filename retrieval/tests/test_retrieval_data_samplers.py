"""Batch samplers: exact batch shape, super-label pairs, determinism, epochs, DataLoader use."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from rambo.retrieval.samplers import MPerClassBatchSampler, SuperLabelBatchSampler, build_batch_sampler


def make_labels(num_classes: int = 30, seed: int = 0, low: int = 2, high: int = 12):
    """Class sizes like SOP (2-11 images); classes listed in shuffled order; super = class mod 5."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(num_classes), rng.integers(low, high, size=num_classes))
    labels = labels[rng.permutation(len(labels))]
    return labels, labels % 5


def check_batch_shape(batch, labels, classes_per_batch, samples_per_class):
    """Brute force: count every class in the batch."""
    counts = Counter(int(labels[i]) for i in batch)
    assert len(batch) == classes_per_batch * samples_per_class
    assert len(counts) == classes_per_batch
    assert set(counts.values()) == {samples_per_class}
    sizes = Counter(labels.tolist())
    for label in counts:
        members = [i for i in batch if labels[i] == label]
        # Repeats only where the class is too small to fill its slots.
        assert len(set(members)) == min(samples_per_class, sizes[label])


@pytest.mark.parametrize("batch_size, samples_per_class", [(24, 4), (24, 6), (24, 2), (16, 8), (12, 1)])
def test_m_per_class_batches_have_exact_shape(batch_size, samples_per_class):
    labels, _ = make_labels()
    sampler = MPerClassBatchSampler(labels, batch_size, samples_per_class, seed=1)
    batches = list(sampler)
    assert len(batches) == len(sampler) == len(labels) // batch_size
    for batch in batches:
        assert all(isinstance(i, int) and 0 <= i < len(labels) for i in batch)
        check_batch_shape(batch, labels, batch_size // samples_per_class, samples_per_class)


def test_samples_per_class_is_not_classes_per_batch():
    # 24 = 4 classes x 6 images, and 24 = 6 classes x 4 images: the two must not be swapped.
    labels = np.repeat(np.arange(10), 8)
    six_each = next(iter(MPerClassBatchSampler(labels, batch_size=24, samples_per_class=6)))
    four_each = next(iter(MPerClassBatchSampler(labels, batch_size=24, samples_per_class=4)))
    assert sorted(Counter(labels[six_each].tolist()).values()) == [6, 6, 6, 6]
    assert sorted(Counter(labels[four_each].tolist()).values()) == [4, 4, 4, 4, 4, 4]


def test_m_per_class_visits_classes_and_images_evenly():
    labels = np.repeat(np.arange(12), 8)  # 12 classes x 8 images, batches of 3 classes x 4
    batches = list(MPerClassBatchSampler(labels, batch_size=12, samples_per_class=4, seed=3, batches_per_epoch=8))
    # Batches are grouped by class: items 0-3, 4-7, 8-11 are one class each.
    class_visits = Counter(int(labels[batch[k]]) for batch in batches for k in (0, 4, 8))
    assert set(class_visits.values()) == {2}  # 8 batches x 3 classes = 2 full permutations of 12
    image_visits = Counter(i for batch in batches for i in batch)
    assert set(image_visits.values()) == {1} and len(image_visits) == 96  # every image exactly once


def test_deterministic_for_a_seed_and_different_across_epochs_and_seeds():
    labels, _ = make_labels()
    first = MPerClassBatchSampler(labels, 16, 4, seed=5)
    second = MPerClassBatchSampler(torch.as_tensor(labels), 16, 4, seed=5)
    assert list(first) == list(second)
    assert list(first) == list(first)  # iterating again without set_epoch repeats the epoch
    epoch0 = list(first)
    first.set_epoch(1)
    assert list(first) != epoch0
    second.set_epoch(1)
    assert list(first) == list(second)
    assert list(MPerClassBatchSampler(labels, 16, 4, seed=6)) != epoch0


def test_works_as_dataloader_batch_sampler():
    labels = torch.arange(40) // 4
    dataset = torch.utils.data.TensorDataset(torch.arange(40), labels)
    sampler = MPerClassBatchSampler(labels, 8, 4, batches_per_epoch=3)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)
    batches = list(loader)
    assert len(batches) == len(loader) == 3
    for indices, batch_labels in batches:
        assert torch.equal(batch_labels, labels[indices])
        assert sorted(torch.bincount(batch_labels).tolist())[-2:] == [4, 4]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(batch_size=10, samples_per_class=4), r"batch_size \(10\) must be a multiple of samples_per_class \(4\)"),
        (dict(batch_size=0, samples_per_class=4), "batch_size must be an integer >= 1"),
        (dict(batch_size=8, samples_per_class=0), "samples_per_class must be an integer >= 1"),
        (dict(batch_size=64, samples_per_class=2), "needs 32 distinct classes .* only 30"),
        (dict(batch_size=8, samples_per_class=4, batches_per_epoch=0), "batches_per_epoch must be an integer >= 1"),
    ],
)
def test_m_per_class_rejects_bad_shapes(kwargs, message):
    labels, _ = make_labels()
    with pytest.raises(ValueError, match=message):
        MPerClassBatchSampler(labels, **kwargs)


@pytest.mark.parametrize("labels", [[], [[0, 1]], [0.5, 1.0]])
def test_rejects_bad_labels(labels):
    with pytest.raises(ValueError, match="labels must"):
        MPerClassBatchSampler(labels, 2, 1)


@pytest.mark.parametrize("batches_per_super_pair", [1, 3, 10])
def test_super_label_batches_come_in_runs_from_one_pair(batches_per_super_pair):
    labels, super_labels = make_labels(num_classes=60)
    sampler = SuperLabelBatchSampler(labels, super_labels, 16, 4, batches_per_super_pair, seed=2, batches_per_epoch=25)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 25
    runs = [batches[k : k + batches_per_super_pair] for k in range(0, 25, batches_per_super_pair)]
    pairs = []
    for run in runs:
        supers = {int(super_labels[i]) for batch in run for i in batch}
        # Brute force: the run's super-labels are those of one pair (a batch may by chance use one of the two).
        assert len(supers) <= 2
        pairs.append(supers)
        for batch in run:
            check_batch_shape(batch, labels, 4, 4)
    # Runs move on to other pairs (10 possible pairs of 5 super-labels).
    assert len({frozenset(p) for p in pairs}) > 1


def test_super_label_run_boundaries_change_pair():
    labels, super_labels = make_labels(num_classes=60)
    batches = list(SuperLabelBatchSampler(labels, super_labels, 16, 4, 4, seed=0, batches_per_epoch=40))
    run_supers = [frozenset(int(super_labels[i]) for b in batches[k : k + 4] for i in b) for k in range(0, 40, 4)]
    assert all(len(s) == 2 for s in run_supers)  # 4 batches of 4 classes from 24 classes: both appear
    assert all(a != b for a, b in zip(run_supers, run_supers[1:]))  # a new pair per run within an epoch


def test_super_label_sampler_is_deterministic_and_changes_with_epoch():
    labels, super_labels = make_labels(num_classes=60)
    make = lambda seed: SuperLabelBatchSampler(labels, super_labels, 16, 4, 3, seed=seed)  # noqa: E731
    sampler = make(0)
    epoch0 = list(sampler)
    assert epoch0 == list(make(0))
    sampler.set_epoch(1)
    assert list(sampler) != epoch0
    assert list(make(1)) != epoch0


def test_super_label_sampler_skips_pairs_too_small_for_a_batch():
    # Super-labels 0 and 1 hold 2 classes each; 2 holds 6: only pairs with 2 can fill 6 classes.
    labels = np.repeat(np.arange(10), 4)
    super_labels = np.repeat([0, 0, 1, 1, 2, 2, 2, 2, 2, 2], 4)
    sampler = SuperLabelBatchSampler(labels, super_labels, 24, 4, 2, batches_per_epoch=12)
    assert sampler.pairs == [(0, 2), (1, 2)]
    for batch in sampler:
        assert 2 in {int(super_labels[i]) for i in batch}


@pytest.mark.parametrize(
    "labels, super_labels, message",
    [
        (np.repeat(np.arange(8), 4), np.zeros(32, dtype=int), "at least 2 distinct super-labels"),
        (np.repeat(np.arange(8), 4), np.tile([0, 1], 16), r"every class needs one super-label; classes \[0, 1"),
        (np.repeat(np.arange(8), 4), np.zeros(31, dtype=int), "32 labels but 31 super_labels"),
        (np.repeat(np.arange(4), 4), np.repeat([0, 1, 2, 3], 4), "no pair of super-labels holds 3 classes"),
    ],
)
def test_super_label_sampler_rejects_bad_input(labels, super_labels, message):
    with pytest.raises(ValueError, match=message):
        SuperLabelBatchSampler(labels, super_labels, 12, 4, 2)


def test_halves_split_takes_half_the_classes_from_each_super_label():
    """FastAP's train_hard.m: 'equal # of imgs from both meta-class' (ablations/paper_settings.yaml)."""
    labels, super_labels = make_labels(num_classes=60)
    sampler = SuperLabelBatchSampler(labels, super_labels, 32, 4, 3, seed=1, batches_per_epoch=30, split="halves")
    for k, batch in enumerate(sampler):
        check_batch_shape(batch, labels, 8, 4)
        per_super = Counter(int(super_labels[i]) for i in batch)
        assert len(per_super) == 2 and set(per_super.values()) == {16}, (k, per_super)  # 4 classes x 4 each
    # The union split on the same data draws unequal halves at times (the project's old default).
    union = SuperLabelBatchSampler(labels, super_labels, 32, 4, 3, seed=1, batches_per_epoch=30)
    assert any(set(Counter(int(super_labels[i]) for i in b).values()) != {16} for b in union)


def test_halves_split_skips_pairs_with_a_super_label_too_small_for_its_half():
    # 6 classes per batch: 3 from each super-label. Super-label 0 has 2 classes, 1 and 2 have 4.
    labels = np.repeat(np.arange(10), 4)
    super_labels = np.repeat([0, 0, 1, 1, 1, 1, 2, 2, 2, 2], 4)
    assert SuperLabelBatchSampler(labels, super_labels, 24, 4, 2, split="halves").pairs == [(1, 2)]
    assert SuperLabelBatchSampler(labels, super_labels, 24, 4, 2).pairs == [(0, 1), (0, 2), (1, 2)]
    with pytest.raises(ValueError, match="even number of classes per batch"):
        SuperLabelBatchSampler(labels, super_labels, 12, 4, 2, split="halves")
    with pytest.raises(ValueError, match="split must be"):
        SuperLabelBatchSampler(labels, super_labels, 24, 4, 2, split="thirds")


def test_an_epoch_of_every_super_pair_is_pairs_times_batches_per_pair():
    """FastAP's epoch: numPairs x batchesPerMetaPair batches (SOP: C(12, 2) x 10 = 660)."""
    labels, super_labels = make_labels(num_classes=60)  # 5 super-labels: 10 pairs
    sampler = SuperLabelBatchSampler(
        labels, super_labels, 16, 4, 3, batches_per_epoch="every_super_pair", split="halves"
    )
    assert len(sampler.pairs) == 10 and len(sampler) == len(list(sampler)) == 30
    runs = [frozenset(int(super_labels[i]) for b in list(sampler)[k : k + 3] for i in b) for k in range(0, 30, 3)]
    assert len(set(runs)) == 10  # every pair once per epoch
    with pytest.raises(ValueError, match="every_super_pair"):
        SuperLabelBatchSampler(labels, super_labels, 16, 4, 3, batches_per_epoch="all")


def test_fixed_pair_order_visits_the_pairs_as_itertools_combinations_every_epoch():
    """The code behind App. A (kunhe/Deep-Metric-Learning-Baselines datasets.py) visits
    ``itertools.combinations`` of the super-labels in one order, every epoch; the
    classes inside the batches are still drawn afresh each epoch."""
    import itertools

    labels, super_labels = make_labels(num_classes=60)
    sampler = SuperLabelBatchSampler(
        labels, super_labels, 16, 4, 3, batches_per_epoch="every_super_pair", split="halves", pair_order="fixed"
    )
    expected = list(itertools.combinations(sorted(set(super_labels.tolist())), 2))
    epochs = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        pairs = [tuple(sorted({int(super_labels[i]) for i in b})) for b in batches]
        assert pairs == [pair for pair in expected for _ in range(3)]
        epochs.append(batches)
    assert epochs[0] != epochs[1]
    shuffled = SuperLabelBatchSampler(
        labels, super_labels, 16, 4, 3, batches_per_epoch="every_super_pair", split="halves"
    )
    assert [tuple(sorted({int(super_labels[i]) for i in b})) for b in shuffled][::3] != expected
    with pytest.raises(ValueError, match="pair_order must be"):
        SuperLabelBatchSampler(labels, super_labels, 16, 4, 3, pair_order="random")


def sampler_config(name: str, **sampler) -> DictConfig:
    return OmegaConf.create(
        {
            "batch_size": 8,
            "seed": 3,
            "steps_per_epoch": None,
            "data": {"sampler": {"name": name, "samples_per_class": 2, "batches_per_super_pair": 2, **sampler}},
        }
    )


def test_build_batch_sampler_follows_the_config():
    labels = torch.arange(12).repeat_interleave(3)
    supers = torch.arange(12).div(4, rounding_mode="floor").repeat_interleave(3)
    with_supers = SimpleNamespace(labels=labels, super_labels=supers)
    without = SimpleNamespace(labels=labels, super_labels=None)
    sampler = build_batch_sampler(sampler_config("super_label", split="halves"), with_supers)
    assert isinstance(sampler, SuperLabelBatchSampler) and sampler.split == "halves" and sampler.seed == 3
    assert isinstance(build_batch_sampler(sampler_config("super_label"), without), MPerClassBatchSampler)
    assert isinstance(build_batch_sampler(sampler_config("m_per_class"), with_supers), MPerClassBatchSampler)
    with pytest.raises(ValueError, match="data.sampler.name must be"):
        build_batch_sampler(sampler_config("random"), without)
    with pytest.raises(ValueError, match="largest that fits is batch_size=24"):
        build_batch_sampler(OmegaConf.merge(sampler_config("m_per_class"), {"batch_size": 26}), without)
