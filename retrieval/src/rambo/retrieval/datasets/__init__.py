"""Retrieval datasets in their official on-disk layouts, the embedded synthetic set, and downloads.

Public API:

- [`ImageRetrievalDataset`][rambo.retrieval.datasets.image_retrieval_dataset.ImageRetrievalDataset]`(image_paths,
  labels, super_labels=None, transform=None)`: items `(image, label, index)`
- [`load_sop`][rambo.retrieval.datasets.sop.load_sop]`(root, split)`: split in `{"train", "test"}`,
  `Ebay_train.txt` / `Ebay_test.txt`
- [`load_cub`][rambo.retrieval.datasets.cub.load_cub]`(root, split)`: split in `{"train", "test"}`, first / last
  100 classes
- [`load_inshop`][rambo.retrieval.datasets.inshop.load_inshop]`(root, split)`: split in
  `{"train", "query", "gallery"}`, `list_eval_partition.txt`
- [`load_imagefolder`][rambo.retrieval.datasets.imagefolder.load_imagefolder]`(root, split)`: split in
  `{"train", "test"}`, `DIR/<class>/<image>`: class halves
- [`load_dataset`][rambo.retrieval.datasets.loading.load_dataset]`(name, root, split, transform=None)`: name in
  `{"sop", "cub", "inshop", "synthetic", "imagefolder"}`
- [`generate_synthetic`][rambo.retrieval.datasets.synthetic.generate_synthetic]`(root, seed=0, ...) -> Path`: the
  embedded set, in the SOP layout
- [`download`][rambo.retrieval.datasets.download.download]`(name, root)`: official URLs, pinned checksums

CLIs: `python -m rambo.retrieval.datasets.synthetic ROOT --seed 0` and
`python -m rambo.retrieval.datasets.download NAME ROOT`.
"""

from .cub import load_cub
from .download import download
from .image_retrieval_dataset import ImageRetrievalDataset
from .imagefolder import load_imagefolder
from .inshop import load_inshop
from .loading import load_dataset
from .sop import load_sop


def __getattr__(name: str):
    # generate_synthetic is imported on first use (PEP 562) so that `python -m
    # rambo.retrieval.datasets.synthetic`, which the pipeline runs, does not load that module twice
    # (runpy warns when the package already imported it). `download` cannot be lazy: its module has
    # the same name, and importing the module would shadow the function.
    if name == "generate_synthetic":
        from .synthetic import generate_synthetic

        globals()[name] = generate_synthetic
        return generate_synthetic
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ImageRetrievalDataset",
    "download",
    "generate_synthetic",
    "load_cub",
    "load_dataset",
    "load_imagefolder",
    "load_inshop",
    "load_sop",
]
