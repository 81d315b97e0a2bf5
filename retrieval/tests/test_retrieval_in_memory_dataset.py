"""``InMemoryImageDataset``: a dataset's items computed once and served from memory, and the
training splits built that way (``data.in_memory``) against the ones read from disk."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from PIL import Image
from torchvision.transforms import PILToTensor

from rambo.retrieval.batch_transforms import BatchTrainAugmentation
from rambo.retrieval.datasets import ImageRetrievalDataset
from rambo.retrieval.in_memory_dataset import InMemoryImageDataset
from rambo.retrieval.train import CONFIG_DIR, build_splits, train_collate
from rambo.retrieval.transforms import eval_transform


def write_images(folder, sizes: list[tuple[int, int]]) -> list:
    """One PNG of each ``(width, height)`` in ``sizes``, coloured by its position; their paths."""
    paths = []
    for i, size in enumerate(sizes):
        path = folder / f"{i}.png"
        Image.new("RGB", size, (20 * i, 255 - 20 * i, 7 * i)).save(path)
        paths.append(path)
    return paths


def test_items_are_those_of_the_dataset_computed_once(tmp_path):
    """Images (through the dataset's transform), labels, super-labels and indices are the on-disk
    dataset's; negative indices wrap, and indices past the end raise ``IndexError``."""
    on_disk = ImageRetrievalDataset(
        write_images(tmp_path, [(12, 10)] * 4), [0, 0, 1, 1], [3, 3, 5, 5], eval_transform(8)
    )
    in_memory = InMemoryImageDataset(on_disk)
    assert len(in_memory) == 4 and in_memory.images.shape == (4, 3, 8, 8) and in_memory.num_classes == 2
    for index in range(4):
        image, label, returned_index = in_memory[index]
        expected = on_disk[index]
        assert torch.equal(image, expected[0]) and (label, returned_index) == expected[1:]
    assert in_memory[-1][2] == 3
    assert torch.equal(in_memory.super_labels, on_disk.super_labels) and in_memory.image_paths == on_disk.image_paths
    with pytest.raises(IndexError):
        in_memory[4]


def test_uint8_images_feed_the_batched_augmentation_through_a_data_loader(tmp_path):
    """``PILToTensor`` items in memory, collated by :class:`BatchTrainAugmentation`: float batches
    of the output size with the items' labels."""
    paths = write_images(tmp_path, [(16, 16)] * 6)
    dataset = InMemoryImageDataset(ImageRetrievalDataset(paths, [0, 1, 2, 0, 1, 2], transform=PILToTensor()))
    assert dataset.images.dtype == torch.uint8
    loader = torch.utils.data.DataLoader(dataset, batch_size=3, collate_fn=BatchTrainAugmentation(8).collate)
    images, labels, indices = next(iter(loader))
    assert images.shape == (3, 3, 8, 8) and images.dtype == torch.float32
    assert labels.tolist() == [0, 1, 2] and indices.tolist() == [0, 1, 2]


def test_images_of_different_sizes_or_not_tensors_are_refused(tmp_path):
    """One tensor needs one shape (real datasets' images differ in size) and tensor items."""
    paths = write_images(tmp_path, [(16, 16), (16, 12)])
    with pytest.raises(ValueError, match="one shape"):
        InMemoryImageDataset(ImageRetrievalDataset(paths, [0, 1], transform=PILToTensor()))
    with pytest.raises(ValueError, match="tensor"):
        InMemoryImageDataset(ImageRetrievalDataset(paths, [0, 1]))  # PIL images
    with pytest.raises(ValueError, match="empty"):
        InMemoryImageDataset(ImageRetrievalDataset([], []))


def test_in_memory_splits_hold_the_images_the_on_disk_splits_give(tmp_path):
    """The tiny profile with and without ``data.in_memory``: the same classes in every split, the
    evaluation splits' tensors equal to the on-disk ones, the training images raw ``uint8`` and
    augmented by the loader's ``collate_fn`` (none on disk, where the dataset augments)."""
    overrides = ["profile=tiny", f"data_dir={tmp_path}", f"output_dir={tmp_path / 'out'}"]
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        in_memory_cfg = compose("train", overrides=overrides)
        on_disk_cfg = compose("train", overrides=[*overrides, "data.in_memory=false"])
    in_memory, on_disk = build_splits(in_memory_cfg), build_splits(on_disk_cfg)
    assert in_memory.keys() == on_disk.keys() == {"train", "validation", "test"}
    for name, split in in_memory.items():
        assert isinstance(split, InMemoryImageDataset) and torch.equal(split.labels, on_disk[name].labels)
    for name in ("validation", "test"):
        assert torch.equal(in_memory[name].images, torch.stack([image for image, _, _ in on_disk[name]]))
    assert in_memory["train"].images.dtype == torch.uint8
    assert train_collate(in_memory_cfg) is not None and train_collate(on_disk_cfg) is None
