from pathlib import Path

import pytest
import yaml
from PIL import Image

from rambo.harness.data_stage import Source, rows_of_params
from rambo.retrieval import datasets
from rambo.retrieval.model import weights_url
from rambo.retrieval.prepare import STAGE, main, prepare


def test_prepare_generates_the_synthetic_set_where_the_runs_read_it(tmp_path, capsys):
    main(["--data-dir", str(tmp_path), "--data", "synthetic", "--", "profile=tiny"])
    root = tmp_path / "synthetic_tiny"  # dataset.root of profile=tiny
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(root)
    train = datasets.load_dataset("synthetic", root, "train")
    assert train.num_classes == 12 and len(train) == 12 * 6


def test_prepare_downloads_real_datasets_into_their_root(tmp_path, monkeypatch):
    calls = []

    def download(name, root, verify, mirror, archive_dir):
        calls.append((name, root, verify, mirror, archive_dir))
        return root

    monkeypatch.setattr("rambo.retrieval.prepare.download", download)
    prepare(str(tmp_path), ["sop", "inshop"], ["profile=paper"], Source(verify=False, mirror="m", archive_dir="k"))
    assert calls == [("sop", f"{tmp_path}/sop", False, "m", "k"), ("inshop", f"{tmp_path}/inshop", False, "m", "k")]


def test_unknown_dataset_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown datasets"):
        prepare(str(tmp_path), ["imagenet"])


def test_a_real_dataset_is_never_generated(tmp_path, capsys):
    """The bug this guards against: `prepare --data sop` under the default (mini) profile silently made
    synthetic data."""
    assert main(["--data-dir", str(tmp_path), "--data", "sop"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: sop: this profile trains every row on the synthetic set")
    assert "--data sop -- profile=paper" in err and list(tmp_path.iterdir()) == []


def test_a_dataset_folder_extracted_in_place_is_found_by_prepare_as_by_the_loader(tmp_path, capsys, monkeypatch):
    """`root/Ebay_test.txt` (the loader's layout) is in place; prepare does not go off to download."""
    monkeypatch.setattr("rambo.harness.download.fetch_file", lambda *a, **k: pytest.fail("downloaded"))
    root = tmp_path / "sop"
    root.mkdir()
    (root / "mug_final").mkdir()
    for split, image in (("train", 1), ("test", 2)):  # one image each: the stage then reads every image once
        Image.new("RGB", (8, 8)).save(root / "mug_final" / f"{image}.JPG")
        (root / f"Ebay_{split}.txt").write_text(
            f"image_id class_id super_class_id path\n{image} {image} 8 mug_final/{image}.JPG\n"
        )
    assert main(["--data-dir", str(tmp_path), "--data", "sop", "--", "profile=paper"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == [str(root)] and f"found {root / 'Ebay_test.txt'}" in captured.err


PROFILES = Path(__file__).resolve().parents[2] / "ablations" / "profiles"


def test_the_paper_rows_load_torchvisions_imagenet1k_v1_resnet50():
    """The file whose SHA-256 starts with the digits in its name (torch.hub's check)."""
    assert weights_url("resnet50") == "https://download.pytorch.org/models/resnet50-0676ba61.pth"
    with pytest.raises(ValueError, match="no ImageNet weights for backbone 'small_convnet'"):
        weights_url("small_convnet")


def test_the_data_stage_names_the_missing_resnet50_of_the_paper_rows(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    argv = ["--data-dir", str(tmp_path / "data"), "--rows-from", str(PROFILES / "paper.yaml"), "--data", "sop"]
    assert main([*argv, "--", "profile=paper"]) == 1
    err = capsys.readouterr().err
    cached = tmp_path / "torch" / "hub" / "checkpoints" / "resnet50-0676ba61.pth"
    assert err.startswith("error: 1 pretrained weights file(s) missing")
    assert f"resnet50 (rows sop_log, sop_loglog, sop_recallk_simix and 13 more): {cached} is missing" in err
    assert f"wget -O {cached} https://download.pytorch.org/models/resnet50-0676ba61.pth" in err
    assert not (tmp_path / "data").exists()  # stopped before any dataset


@pytest.mark.parametrize("profile", ["mini", "tiny"])
def test_the_small_profiles_need_no_weights(tmp_path, capsys, monkeypatch, profile):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty"))
    params = yaml.safe_load((PROFILES / f"{profile}.yaml").read_text())
    rows = rows_of_params(PROFILES / f"{profile}.yaml", "retrieval")
    assert STAGE.weights_files(rows, params["retrieval"]["overrides"].split()) == []
    assert len(rows) == len(params["retrieval"]["experiments"]) + len(params["retrieval"]["ablations"])
