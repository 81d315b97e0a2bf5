"""The VOC table and CLI, through the harness downloader, without a network.

The download and extraction machinery itself is tested in harness/tests.
"""

import io
import tarfile

import pytest

from rambo.detection.download import ARCHIVES, DownloadError, fetch, main
from rambo.harness.download import DatasetFile
from rambo.harness.testing import listing, md5, no_network  # noqa: F401 (no_network: a fixture, taken by importing it)

MAIN = "VOCdevkit/VOC2007/ImageSets/Main"


def make_tar(path, members: dict[str, bytes]):
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def pin(monkeypatch, name: str, archive) -> None:
    """Point the table's entry ``name`` at a local ``archive`` with its real MD5."""
    item = ARCHIVES[name]
    replacement = DatasetFile(item.filename, (archive.as_uri(),), md5(archive), item.extract, item.ready)
    monkeypatch.setitem(ARCHIVES, name, replacement)


def test_pinned_archives_are_the_official_ones():
    assert ARCHIVES["voc2007-test"].filename == "VOCtest_06-Nov-2007.tar"
    assert all(
        a.urls[0].startswith("https://thor.robots.ox.ac.uk/pascal/VOC/") and len(a.md5) == 32 for a in ARCHIVES.values()
    )
    assert all(a.urls[0].endswith("/" + a.filename) and a.extract for a in ARCHIVES.values())
    # Two more servers of the same tars, tried in turn; one pinned MD5 decides for all of them.
    assert all(len(a.urls) == 3 and all(url.endswith("/" + a.filename) for url in a.urls) for a in ARCHIVES.values())
    assert ARCHIVES["voc2012-trainval"].urls[1:] == (
        "http://host.robots.ox.ac.uk/pascal/VOC/voc2012/VOCtrainval_11-May-2012.tar",
        "https://pjreddie.com/media/files/VOCtrainval_11-May-2012.tar",
    )
    assert {name: a.ready for name, a in ARCHIVES.items()} == {
        "voc2007-trainval": "VOCdevkit/VOC2007/ImageSets/Main/trainval.txt",
        "voc2007-test": "VOCdevkit/VOC2007/ImageSets/Main/test.txt",
        "voc2012-trainval": "VOCdevkit/VOC2012/ImageSets/Main/trainval.txt",
    }


def test_missing_network_gives_the_manual_steps(tmp_path, no_network, capsys):
    with pytest.raises(DownloadError) as error:
        fetch(tmp_path, ["voc2007-test"])
    message = str(error.value)
    assert "Temporary failure in name resolution" in message and ARCHIVES["voc2007-test"].urls[0] in message
    assert ARCHIVES["voc2007-test"].md5 in message and f"put it at {tmp_path / 'VOCtest_06-Nov-2007.tar'}" in message
    assert f"so that {tmp_path / MAIN / 'test.txt'} exists" in message
    assert main([str(tmp_path), "--sets", "voc2007-test", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: could not download VOCtest_06-Nov-2007.tar") and "Traceback" not in err
    assert listing(tmp_path) == []


def test_trainval_and_test_tars_fill_one_voc2007_folder(tmp_path, monkeypatch, capsys):
    served = tmp_path / "server"
    served.mkdir()
    trainval = make_tar(
        served / "trainval.tar", {f"{MAIN}/trainval.txt": b"000005\n", "VOCdevkit/VOC2007/JPEGImages/000005.jpg": b"5"}
    )
    test = make_tar(
        served / "test.tar", {f"{MAIN}/test.txt": b"000001\n", "VOCdevkit/VOC2007/JPEGImages/000001.jpg": b"1"}
    )
    pin(monkeypatch, "voc2007-trainval", trainval)
    pin(monkeypatch, "voc2007-test", test)
    root = tmp_path / "voc"
    assert main([str(root), "--sets", "voc2007-trainval", "voc2007-test", "--quiet"]) == 0
    assert capsys.readouterr().out.split() == [str(root / "VOCdevkit/VOC2007")]
    assert listing(root / "VOCdevkit/VOC2007/JPEGImages") == ["000001.jpg", "000005.jpg"]
    assert sorted(p.name for p in root.iterdir()) == [
        "VOCdevkit",
        "VOCtest_06-Nov-2007.tar",
        "VOCtrainval_06-Nov-2007.tar",
    ]


def test_an_extracted_voc_is_used_without_any_archive(tmp_path, no_network, monkeypatch):
    for ready in (f"{MAIN}/trainval.txt", f"{MAIN}/test.txt", "VOCdevkit/VOC2012/ImageSets/Main/trainval.txt"):
        (tmp_path / ready).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / ready).write_text("000001\n")
    monkeypatch.setattr("rambo.harness.download.extract", lambda *a: pytest.fail("extracted"))
    assert fetch(tmp_path) == [tmp_path / "VOCdevkit/VOC2007"] * 2 + [tmp_path / "VOCdevkit/VOC2012"]
    assert no_network == []


def test_fetch_uses_a_verified_local_archive_and_rejects_a_corrupt_one(tmp_path, monkeypatch, no_network):
    archive = make_tar(tmp_path / "VOCtest_06-Nov-2007.tar", {f"{MAIN}/test.txt": b"000001\n"})
    pin(monkeypatch, "voc2007-test", archive)
    assert fetch(tmp_path, ["voc2007-test"]) == [tmp_path / "VOCdevkit/VOC2007"]
    assert (tmp_path / MAIN / "test.txt").is_file() and no_network == []
    (tmp_path / MAIN / "test.txt").unlink()
    archive.write_bytes(b"truncated")
    with pytest.raises(DownloadError, match="MD5"):
        fetch(tmp_path, ["voc2007-test"])
    assert not (tmp_path / MAIN / "test.txt").exists()
    with pytest.raises(ValueError, match="unknown VOC archive"):
        fetch(tmp_path, ["voc2099"])


def test_cli_reports_a_refused_archive_without_a_traceback(tmp_path, monkeypatch, capsys):
    evil = make_tar(tmp_path / "evil.tar", {f"{MAIN}/test.txt": b"1\n", "VOCdevkit/../../escape.txt": b"evil"})
    pin(monkeypatch, "voc2007-test", evil)
    root = tmp_path / "voc"
    assert main([str(root), "--sets", "voc2007-test", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "would be written outside" in err and "Traceback" not in err
    assert listing(root) == ["VOCtest_06-Nov-2007.tar"] and not (tmp_path / "escape.txt").exists()
