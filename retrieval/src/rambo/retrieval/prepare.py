"""Data stage of the pipeline: put every dataset a profile trains on under one data folder.

    python -m rambo.retrieval.prepare --data-dir data/retrieval --datasets synthetic -- profile=mini
    python -m rambo.retrieval.prepare --data-dir data/retrieval --datasets sop cub inshop --no-verify -- profile=paper

Each dataset's folder and source come from the training config composed with the same Hydra
overrides the runs get (given after ``--``), so the data stage and the runs agree on
``data.root``: a dataset with ``data.generate`` set (the synthetic set, and every dataset
under the ``mini`` profile) is generated; the others are downloaded with their pinned checksums
(``--no-verify`` is needed for In-shop, whose files have no published checksum).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hydra import compose, initialize_config_dir

from .datasets import download, generate_synthetic

CONFIG_DIR = Path(__file__).parent / "configs"
DATASETS = ("synthetic", "sop", "cub", "inshop")


def prepare(data_dir: str, datasets, overrides=(), verify: bool = True) -> list[Path]:
    """Generate or download each of ``datasets`` under ``data_dir``; returns their folders."""
    unknown = sorted(set(datasets) - set(DATASETS))
    if unknown:
        raise ValueError(f"unknown datasets {unknown}; choose from {DATASETS}")
    roots = []
    for name in datasets:
        with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
            cfg = compose("train", overrides=[f"data={name}", f"data_dir={data_dir}", "output_dir=unused", *overrides])
        data = cfg.data
        if data.get("generate") is not None:
            roots.append(generate_synthetic(data.root, **data.generate))
        else:
            roots.append(download(data.format, data.root, verify=verify))
    return roots


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rambo.retrieval.prepare", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="the runs' data_dir")
    parser.add_argument("--datasets", nargs="+", required=True, choices=DATASETS)
    parser.add_argument("--no-verify", action="store_true", help="accept downloads without a pinned checksum")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the runs, after --")
    args = parser.parse_args(argv)
    for root in prepare(args.data_dir, args.datasets, args.overrides, verify=not args.no_verify):
        print(root)


if __name__ == "__main__":
    main()
