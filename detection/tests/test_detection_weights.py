"""The ImageNet weights the paper's detection rows load (Table 5: ResNet-50/101, ResNeXt-101 32x4d),
checked by the data stage before any dataset or run; the small profiles load none."""

from pathlib import Path

import pytest
import yaml

from rambo.detection.backbones import weights_url
from rambo.detection.prepare import STAGE, main
from rambo.harness.data_stage import rows_of_params

PROFILES = Path(__file__).resolve().parents[2] / "ablations" / "profiles"
OFFICIAL = {  # the file names carry the first digits of their SHA-256 (torch.hub's check)
    "resnet50": "https://download.pytorch.org/models/resnet50-0676ba61.pth",  # IMAGENET1K_V1
    "resnet101": "https://download.pytorch.org/models/resnet101-63fe2227.pth",  # IMAGENET1K_V1
    "resnext101_32x4d": "https://download.openmmlab.com/pretrain/third_party/resnext101_32x4d-a5af3160.pth",
}


def test_each_paper_backbone_names_its_official_file():
    assert {name: weights_url(name) for name in OFFICIAL} == OFFICIAL


def test_the_paper_rows_need_the_three_files_and_the_stage_names_every_missing_one(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    rows = rows_of_params(PROFILES / "paper.yaml", "detection")
    files = STAGE.weights_files(rows, [])
    assert {f.backbone: f.url for f in files} == OFFICIAL
    assert {f.backbone: len(f.rows) for f in files} == {"resnet50": 7, "resnet101": 2, "resnext101_32x4d": 2}
    assert (
        main(["--data-dir", str(tmp_path / "data"), "--rows-from", str(PROFILES / "paper.yaml"), "--data", "voc07"])
        == 1
    )
    err = capsys.readouterr().err
    assert err.startswith("error: 3 pretrained weights file(s) missing")
    for url in OFFICIAL.values():
        assert f"wget -O {tmp_path / 'torch' / 'hub' / 'checkpoints' / url.rsplit('/', 1)[1]} {url}" in err
    assert not (tmp_path / "data").exists()


def test_a_row_given_weights_path_is_checked_there(tmp_path):
    [item] = STAGE.weights_files(["table5_x101_voc0712_ce"], [f"model.weights_path={tmp_path / 'x101.pth'}"])
    assert item.path == tmp_path / "x101.pth" and item.filename == "resnext101_32x4d-a5af3160.pth"


@pytest.mark.parametrize("profile", ["mini", "tiny"])
def test_the_small_profiles_need_no_weights(profile):
    params = yaml.safe_load((PROFILES / f"{profile}.yaml").read_text())
    rows = rows_of_params(PROFILES / f"{profile}.yaml", "detection")
    assert params["detection"]["warm_start"]["experiments"] == ["mini_warm_start"] and "mini_warm_start" in rows
    assert STAGE.weights_files(rows, params["detection"]["overrides"].split()) == []
