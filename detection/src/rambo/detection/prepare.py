"""Data stage of the pipeline: generate or download every dataset a profile's detection runs read.

    python -m rambo.detection.prepare --data-dir data/detection --data synthetic
    python -m rambo.detection.prepare --data-dir data/detection --data voc07 voc0712 -- <Hydra overrides>

Each dataset's folder comes from the training config composed with the runs' own overrides (after
``--``), so the data stage and the runs agree on ``data.root``: a dataset with ``data.generate``
(synthetic, tiny) is generated; VOC is downloaded with pinned checksums (2007 trainval and test,
plus 2012 trainval for voc0712), printing the manual steps when that fails.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hydra import compose, initialize_config_dir

from .download import DownloadError, fetch
from .synthetic import generate

CONFIG_DIR = Path(__file__).parent / "configs"
VOC_ARCHIVES = {"voc07": ("voc2007-trainval", "voc2007-test"), "voc0712": ("voc2007-trainval", "voc2007-test", "voc2012-trainval")}
DATASETS = ("synthetic", "tiny", *VOC_ARCHIVES)


def prepare(data_dir: str | Path, datasets, overrides=()) -> list[Path]:
    """Generate or download each of ``datasets`` under ``data_dir``; returns their roots."""
    unknown = sorted(set(datasets) - set(DATASETS))
    if unknown:
        raise ValueError(f"unknown detection datasets {unknown}; choose from {DATASETS}")
    roots = []
    for name in datasets:
        with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
            cfg = compose("train", overrides=[f"data={name}", f"data_dir={data_dir}", *overrides])
        data = cfg.data
        if data.get("generate"):
            spec = data.generate
            roots.append(generate(data.root, seed=spec.seed, num_trainval=spec.trainval, num_test=spec.test, image_size=spec.size))
        else:
            fetch(data.root, VOC_ARCHIVES[name])
            roots.append(Path(data.root))
    return roots


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rambo.detection.prepare", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="the runs' data_dir")
    parser.add_argument("--data", nargs="+", required=True, choices=DATASETS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the runs, after --")
    args = parser.parse_args(argv)
    try:
        roots = prepare(args.data_dir, args.data, args.overrides)
    except DownloadError as error:
        print(error)
        return 1
    for root in roots:
        print(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
