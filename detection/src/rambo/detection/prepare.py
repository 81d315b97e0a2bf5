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

from pathlib import Path

from rambo.harness import data_stage
from rambo.harness.numerics import start_command

from .backbones import weights_url
from .download import fetch
from .synthetic import generate

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


STAGE = data_stage.DataStage(
    "python -m rambo.detection.prepare",
    __doc__.split("\n")[0],
    CONFIG_DIR,
    DATASETS,
    prepare_one,
    task="detection",
    weights_url=weights_url,
    checker="rambo.detection.config_check:problems",
)
prepare, main = STAGE.prepare, STAGE.main  # prepare(data_dir, datasets, overrides=(), source=Source()); main(argv=None)


if __name__ == "__main__":
    start_command()  # the numerics mode in force, or one line naming what is missing (rambo.harness.numerics)
    raise SystemExit(main())
