import pytest

from rambo.harness.data_stage import Source
from rambo.retrieval import datasets
from rambo.retrieval.prepare import main, prepare


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
    """Issue 22: `prepare --data sop` under the default (mini) profile silently made synthetic data."""
    assert main(["--data-dir", str(tmp_path), "--data", "sop"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: sop: this profile trains every row on the synthetic set")
    assert "--data sop -- profile=paper" in err and list(tmp_path.iterdir()) == []


def test_a_dataset_folder_extracted_in_place_is_found_by_prepare_as_by_the_loader(tmp_path, capsys, monkeypatch):
    """`root/Ebay_test.txt` (the loader's layout) is in place; prepare does not go off to download."""
    monkeypatch.setattr("rambo.harness.download.fetch_file", lambda *a, **k: pytest.fail("downloaded"))
    root = tmp_path / "sop"
    root.mkdir()
    for split in ("train", "test"):
        (root / f"Ebay_{split}.txt").write_text("image_id class_id super_class_id path\n")
    assert main(["--data-dir", str(tmp_path), "--data", "sop", "--", "profile=paper"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == [str(root)] and f"found {root / 'Ebay_test.txt'}" in captured.err
