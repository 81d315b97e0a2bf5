"""Data stage of the pipeline: put every dataset a profile trains on under one data folder
([`rambo.harness.data_stage`][rambo.harness.data_stage], shared with detection).

    python -m rambo.retrieval.prepare --data-dir data/retrieval --data synthetic -- profile=mini
    python -m rambo.retrieval.prepare --data-dir data/retrieval --data sop cub inshop -- profile=paper

A dataset with `data.generate` set (the synthetic set, and every dataset under the `mini`
profile) is generated; the others are downloaded with their pinned checksums, or found already
extracted under `data.root` (In-shop's files have no published checksum: they are used with a
warning). `--mirror DIR_OR_URL` takes the archives from a local copy instead of the
official URLs; `--archives DIR` keeps downloaded archives there (the pipeline: `data/archives`).
`--rows-from params.yaml` (or `--rows EXPERIMENT...`) first checks the ImageNet weights those
rows load (torchvision's ResNet-50: `rambo.harness.weights`); the pipeline passes it.

Then every image of the datasets is read once and every file that cannot be read is listed (exit
code 1), so no training job starts on a broken dataset. `--check` does only that, for datasets
already in place, as the runs compose them: a folder of yours is checked with

    python -m rambo.retrieval.prepare --check --data-dir data --data imagefolder -- data.root=DIR
"""

from __future__ import annotations

from pathlib import Path

from rambo.harness import data_stage
from rambo.harness.config_check import named_on_command_line
from rambo.harness.numerics import start_command

from .datasets import download, generate_synthetic, load_dataset
from .model import weights_url
from .own_data import layout_problem, use_own_data

CONFIG_DIR = Path(__file__).parent / "configs"
DATASETS = ("synthetic", "sop", "cub", "inshop", "imagefolder")


def prepare_one(name: str, data, source: data_stage.Source = data_stage.Source()) -> Path:
    """Generate (`data.generate`) or download dataset `name` into `data.root`. A real dataset
    (`sop`, `cub`, `inshop`) is never generated: under a profile that trains every row on the
    synthetic set (`mini`, `tiny`) preparing one is an error that says how to get it."""
    if name == "imagefolder" and data.get("generate") is None:
        raise data_stage.PrepareError(
            "imagefolder is a folder of yours: there is nothing to download or generate; "
            "`--check --data imagefolder -- data.root=DIR` reads every image of it"
        )
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


def unreadable(name: str, data, overrides=()) -> list[str]:
    """One line per image of dataset `name` (every split, composed as the runs compose it: a
    `data.root` in `overrides` is the user's folder) that cannot be read."""
    use_own_data(data, named=named_on_command_line("data.root", overrides))
    problem = layout_problem(data.format, data.root)
    if problem:
        raise data_stage.PrepareError(problem)
    lines = []
    for split in ("train", "query", "gallery") if data.format == "inshop" else ("train", "test"):
        for index, path, reason in load_dataset(data.format, data.root, split).unreadable():
            lines.append(f"{path} ({split} split, image {index}): {reason}")
    return lines


STAGE = data_stage.DataStage(
    "python -m rambo.retrieval.prepare",
    __doc__.split("\n")[0],
    CONFIG_DIR,
    DATASETS,
    prepare_one,
    task="retrieval",
    weights_url=weights_url,
    checker="rambo.retrieval.config_check:problems",
    unreadable=unreadable,
)
prepare, main = STAGE.prepare, STAGE.main  # prepare(data_dir, datasets, overrides=(), source=Source()); main(argv=None)


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    raise SystemExit(main())
