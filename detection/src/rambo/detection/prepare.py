"""Data stage of the pipeline: generate or download every dataset a profile's detection runs read
([`rambo.harness.data_stage`][rambo.harness.data_stage], shared with retrieval).

    python -m rambo.detection.prepare --data-dir data/detection --data synthetic
    python -m rambo.detection.prepare --data-dir data/detection --data voc07 voc0712 -- <Hydra overrides>

A dataset with `data.generate` (synthetic, tiny) is generated; VOC (2007 trainval and test, plus
2012 trainval for voc0712) is found already extracted under `data.root`, or downloaded with
pinned checksums (or from `--mirror`) and extracted, printing the manual steps when that fails;
`--archives DIR` keeps the tars there. `--rows-from params.yaml` (or `--rows EXPERIMENT...`)
first checks the ImageNet weights those rows load (ResNet-50/101, ResNeXt-101 32x4d:
`rambo.harness.weights`); the pipeline passes it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from rambo.harness import data_stage
from rambo.harness.config_check import override_key
from rambo.harness.images import UnreadableImage, rgb_image
from rambo.harness.numerics import start_command

from .backbones import weights_url
from .config_check import voc_problem
from .download import fetch
from .synthetic import generate
from .voc import BadAnnotation, parse_annotation, read_image_set

CONFIG_DIR = Path(__file__).parent / "configs"
VOC_ARCHIVES = {
    "voc07": ("voc2007-trainval", "voc2007-test"),
    "voc0712": ("voc2007-trainval", "voc2007-test", "voc2012-trainval"),
}
DATASETS = ("synthetic", "tiny", *VOC_ARCHIVES)


def prepare_one(name: str, data, source: data_stage.Source = data_stage.Source()) -> Path:
    """Generate (`data.generate`) or fetch dataset `name` into `data.root`. VOC's archives all
    have pinned checksums, so `source.verify` changes nothing here."""
    if data.get("generate"):
        spec = data.generate
        return generate(data.root, seed=spec.seed, num_trainval=spec.trainval, num_test=spec.test, image_size=spec.size)
    fetch(data.root, VOC_ARCHIVES[name], mirror=source.mirror, archive_dir=source.archive_dir)
    return Path(data.root)


def unreadable(name: str, data, overrides=()) -> list[str]:
    """One line per annotation (`Annotations/<id>.xml`) that is no VOC annotation and per image
    (`JPEGImages/`) that cannot be decoded, over every image set the runs of dataset `name` read (composed as
    they compose it: a `data.root` in `overrides` is the user's folder)."""
    folders = [(Path(root), data.train_set) for root in data.train_roots] + [(Path(data.test_root), data.test_set)]
    lines = []
    for root, image_set in dict.fromkeys(folders):  # the synthetic set's one root holds both sets
        problem = voc_problem(root, image_set)
        if problem:
            raise data_stage.PrepareError(f"data.root={data.root}: {problem}")
        for index, image_id in enumerate(read_image_set(root, image_set)):
            where = f"({image_set} set, image {index})"
            try:
                annotation = parse_annotation(root / "Annotations" / f"{image_id}.xml")
            except BadAnnotation as error:
                lines.append(f"{error.path} {where}: {error.reason}")
                continue
            try:
                rgb_image(root / "JPEGImages" / annotation.filename)
            except UnreadableImage as error:
                lines.append(f"{root / 'JPEGImages' / annotation.filename} {where}: {error.reason}")
    return lines


def check_hint(data, data_dir, overrides) -> str:
    """The command that reads every annotation and image of a run's dataset once and lists the bad ones
    (`overrides`: the run's command line; the ones that decide its dataset are passed on)."""
    given = " ".join(
        shlex.quote(item)
        for item in overrides
        if override_key(item) in ("profile", "experiment", "data") or override_key(item).startswith("data.")
    )
    command = f"python -m rambo.detection.prepare --check --data-dir {shlex.quote(str(data_dir))} --data {data.name}"
    return f"list every bad annotation and image with `{command}{' -- ' + given if given else ''}`"


STAGE = data_stage.DataStage(
    "python -m rambo.detection.prepare",
    __doc__.split("\n")[0],
    CONFIG_DIR,
    DATASETS,
    prepare_one,
    task="detection",
    weights_url=weights_url,
    checker="rambo.detection.config_check:problems",
    unreadable=unreadable,
    unreadable_summary="{count} image(s) or annotation(s) cannot be read (listed above): replace them with whole "
    "copies (download or generate the dataset again), or take their ids out of ImageSets/Main/*.txt",
)
prepare, main = STAGE.prepare, STAGE.main  # prepare(data_dir, datasets, overrides=(), source=Source()); main(argv=None)


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    raise SystemExit(main())
