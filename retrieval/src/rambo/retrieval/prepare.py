"""Data stage of the pipeline: put every dataset a profile trains on under one data folder
(:mod:`rambo.harness.data_stage`, shared with detection).

    python -m rambo.retrieval.prepare --data-dir data/retrieval --data synthetic -- profile=mini
    python -m rambo.retrieval.prepare --data-dir data/retrieval --data sop cub inshop -- profile=paper

A dataset with ``data.generate`` set (the synthetic set, and every dataset under the ``mini``
profile) is generated; the others are downloaded with their pinned checksums, or found already
extracted under ``data.root`` (In-shop's files have no published checksum: they are used with a
warning). ``--mirror DIR_OR_URL`` takes the archives from a local copy instead of the
official URLs; ``--archives DIR`` keeps downloaded archives there (the pipeline: ``data/archives``).
``--rows-from params.yaml`` (or ``--rows EXPERIMENT...``) first checks the ImageNet weights those
rows load (torchvision's ResNet-50: ``rambo.harness.weights``); the pipeline passes it.
"""

from __future__ import annotations

from pathlib import Path

from rambo.harness import data_stage

from .datasets import download, generate_synthetic
from .model import weights_url

CONFIG_DIR = Path(__file__).parent / "configs"
DATASETS = ("synthetic", "sop", "cub", "inshop")


def prepare_one(name: str, data, source: data_stage.Source = data_stage.Source()) -> Path:
    """Generate (``data.generate``) or download dataset ``name`` into ``data.root``. A real dataset
    (``sop``, ``cub``, ``inshop``) is never generated: under a profile that trains every row on the
    synthetic set (``mini``, ``tiny``) preparing one is an error that says how to get it."""
    if data.get("generate") is not None:
        if name != "synthetic":
            raise data_stage.PrepareError(
                f"{name}: this profile trains every row on the synthetic set (data.generate is set), so preparing "
                f"{name} here would generate synthetic images, not {name}. Prepare the real dataset under the paper "
                f"profile (`python -m rambo.retrieval.prepare --data-dir DIR --data {name} -- profile=paper`), or "
                "prepare `synthetic`"
            )
        return generate_synthetic(data.root, **data.generate)
    return download(data.format, data.root, verify=source.verify, mirror=source.mirror, archive_dir=source.archive_dir)


STAGE = data_stage.DataStage(
    "python -m rambo.retrieval.prepare",
    __doc__.split("\n")[0],
    CONFIG_DIR,
    DATASETS,
    prepare_one,
    task="retrieval",
    weights_url=weights_url,
)
prepare, main = STAGE.prepare, STAGE.main  # prepare(data_dir, datasets, overrides=(), source=Source()); main(argv=None)


if __name__ == "__main__":
    raise SystemExit(main())
