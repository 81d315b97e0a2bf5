"""The retrieval dataset table and CLI, through the harness downloader, without a network.

The download and extraction machinery itself is tested in harness/tests.
"""

from __future__ import annotations

import importlib
import io
import re
import tarfile
import urllib.request
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from rambo.harness.download import DatasetFile, DownloadError
from rambo.harness.testing import listing, md5, no_network  # noqa: F401 (no_network: a fixture, taken by importing it)
from rambo.retrieval.datasets import load_cub, load_inshop, load_sop

download_module = importlib.import_module("rambo.retrieval.datasets.download")


def jpeg_bytes(colour=(200, 10, 10)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), colour).save(buffer, format="JPEG")
    return buffer.getvalue()


def sop_zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for split, class_id in (("train", 1), ("test", 2)):
            name = f"bike_final/{class_id}_0.JPG"
            archive.writestr(f"Stanford_Online_Products/{name}", jpeg_bytes())
            archive.writestr(
                f"Stanford_Online_Products/Ebay_{split}.txt",
                f"image_id class_id super_class_id path\n{class_id} {class_id} 1 {name}\n",
            )
    return path


def cub_tgz(path: Path) -> Path:
    files = {
        "CUB_200_2011/classes.txt": b"1 001.A\n2 002.B\n",
        "CUB_200_2011/images.txt": b"1 001.A/a.jpg\n2 002.B/b.jpg\n",
        "CUB_200_2011/image_class_labels.txt": b"1 1\n2 2\n",
        "CUB_200_2011/images/001.A/a.jpg": jpeg_bytes(),
        "CUB_200_2011/images/002.B/b.jpg": jpeg_bytes((0, 0, 255)),
    }
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def use_table(monkeypatch, name: str, *files: DatasetFile) -> None:
    monkeypatch.setitem(download_module.DATASETS, name, tuple(files))


def sop_entry(urls: tuple[str, ...], checksum: str) -> DatasetFile:
    return DatasetFile("Stanford_Online_Products.zip", urls, checksum, True, "Stanford_Online_Products/Ebay_test.txt")


def test_pinned_table_is_well_formed():
    assert set(download_module.DATASETS) == {"cub", "sop", "inshop"}
    for files in download_module.DATASETS.values():
        for item in files:
            assert item.urls and all(url.startswith(("https://", "http://")) for url in item.urls)
            assert item.md5 is None or re.fullmatch(r"[0-9a-f]{32}", item.md5)
    assert download_module.DATASETS["cub"][0].md5 == "97eceeb196236b17998738112f37df78"
    assert download_module.DATASETS["sop"][0].md5 == "7f73d41a2f44250d4779881525aea32e"
    # Drive files shared before 2021 (ids 0B...) need their resource key, or Google answers 404.
    for item in download_module.DATASETS["inshop"]:
        assert all("id=0B7EVK8r0v71p" in url and "&resourcekey=0-" in url for url in item.urls), item.urls


def test_download_verifies_renames_and_extracts(tmp_path, monkeypatch):
    archive = sop_zip(tmp_path / "served.zip")
    use_table(monkeypatch, "sop", sop_entry((archive.as_uri(),), md5(archive)))
    root = tmp_path / "data"
    assert download_module.download("sop", root, show_progress=False) == root
    assert listing(root) == [
        "Stanford_Online_Products",
        "Stanford_Online_Products.zip",
        "Stanford_Online_Products/Ebay_test.txt",
        "Stanford_Online_Products/Ebay_train.txt",
        "Stanford_Online_Products/bike_final",
        "Stanford_Online_Products/bike_final/1_0.JPG",
        "Stanford_Online_Products/bike_final/2_0.JPG",
    ]
    assert md5(root / "Stanford_Online_Products.zip") == md5(archive)
    assert load_sop(root, "train")[0][0].size == (4, 4)
    # Second call: already in place, nothing fetched.
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: pytest.fail("fetched again"))
    download_module.download("sop", root, show_progress=False)


def test_download_tries_the_next_url_and_extracts_tar(tmp_path, monkeypatch):
    archive = cub_tgz(tmp_path / "served.tgz")
    urls = ((tmp_path / "missing.tgz").as_uri(), archive.as_uri())
    entry = DatasetFile("CUB_200_2011.tgz", urls, md5(archive), True, "CUB_200_2011/images.txt")
    use_table(monkeypatch, "cub", entry)
    root = download_module.download("cub", tmp_path / "data", show_progress=False)
    assert len(load_cub(root, "train")) == len(load_cub(root, "test")) == 1


def test_offline_stops_with_manual_steps_and_leaves_nothing(tmp_path, no_network):
    root = tmp_path / "data"
    with pytest.raises(DownloadError) as error:
        download_module.download("cub", root, show_progress=False)
    message = str(error.value)
    assert "Temporary failure in name resolution" in message
    assert f"put it at {root / 'CUB_200_2011.tgz'}" in message
    assert "data.caltech.edu/records/65de6-vp158/files/CUB_200_2011.tgz" in message
    assert no_network == list(download_module.DATASETS["cub"][0].urls)
    assert listing(root) == []


def test_local_archive_with_wrong_checksum_is_not_extracted(tmp_path, no_network):
    root = tmp_path / "data"
    root.mkdir()
    local = sop_zip(root / "Stanford_Online_Products.zip")  # a real zip, but not the official one
    with pytest.raises(DownloadError) as error:
        download_module.download("sop", root, show_progress=False)
    message = str(error.value)
    assert f"has MD5 {md5(local)}, expected 7f73d41a2f44250d4779881525aea32e" in message
    assert "nothing was extracted" in message and f"put it at {local}" in message
    assert listing(root) == ["Stanford_Online_Products.zip"]  # the user's file is left as it was
    assert no_network == []  # a file put there by hand is never replaced by a download


def test_local_archive_with_right_checksum_is_used(tmp_path, monkeypatch, no_network):
    root = tmp_path / "data"
    root.mkdir()
    local = sop_zip(root / "Stanford_Online_Products.zip")
    use_table(monkeypatch, "sop", sop_entry(("https://example.invalid/x.zip",), md5(local)))
    download_module.download("sop", root, show_progress=False)
    assert len(load_sop(root, "test")) == 1 and no_network == []


def inshop_files(folder: Path) -> tuple[Path, Path]:
    """img.zip and list_eval_partition.txt as the official Drive folder holds them."""
    images = folder / "img.zip"
    with zipfile.ZipFile(images, "w") as archive:
        archive.writestr("img/MEN/Denim/id_00000001/01_1_front.jpg", jpeg_bytes())
        archive.writestr("img/MEN/Denim/id_00000001/01_2_side.jpg", jpeg_bytes())
    partition = folder / "list_eval_partition.txt"
    partition.write_text(
        "2\nimage_name item_id evaluation_status\n"
        "img/MEN/Denim/id_00000001/01_1_front.jpg id_00000001 query\n"
        "img/MEN/Denim/id_00000001/01_2_side.jpg id_00000001 gallery\n"
    )
    return images, partition


def test_inshop_has_no_checksum_and_is_used_with_a_warning(tmp_path, monkeypatch, capsys):
    """CUB and SOP are always verified; In-shop publishes no MD5: used, and the user told so."""
    images, partition = inshop_files(tmp_path)
    use_table(
        monkeypatch,
        "inshop",
        DatasetFile("img.zip", (images.as_uri(),), None, True, "img"),
        DatasetFile("list_eval_partition.txt", (partition.as_uri(),), None, False, "list_eval_partition.txt"),
    )
    root = download_module.download("inshop", tmp_path / "data", show_progress=False)
    assert load_inshop(root, "query").labels.tolist() == load_inshop(root, "gallery").labels.tolist() == [0]
    err = capsys.readouterr().err
    assert "warning: img.zip, list_eval_partition.txt have no published checksum: they are used unverified" in err
    assert f"img.zip: MD5 {md5(images)} (not verified" in err


def test_the_official_inshop_folder_is_used_where_it_lies(tmp_path, no_network, capsys):
    """The Drive folder as a user downloads it: Eval/list_eval_partition.txt and Img/img.zip."""
    root = tmp_path / "inshop"
    (root / "Eval").mkdir(parents=True)
    (root / "Img").mkdir()
    inshop_files(root / "Img")
    (root / "Img/list_eval_partition.txt").rename(root / "Eval/list_eval_partition.txt")
    assert download_module.download("inshop", root, show_progress=False) == root
    assert (root / "Img/img/MEN/Denim/id_00000001/01_1_front.jpg").is_file() and no_network == []
    query = load_inshop(root, "query")
    assert len(query) == 1 and query[0][0] is not None  # the image loads (it is under Img/img/)
    # Already extracted by hand there: found, nothing extracted again.
    assert download_module.download("inshop", root, show_progress=False) == root
    assert f"found {root / 'Img/img'}" in capsys.readouterr().err


def test_inshop_high_resolution_release_is_refused_by_name(tmp_path):
    root = tmp_path / "inshop"
    (root / "img_highres/MEN").mkdir(parents=True)
    _, partition = inshop_files(tmp_path)
    partition.rename(root / "list_eval_partition.txt")
    with pytest.raises(FileNotFoundError, match="img_highres.zip.*use img.zip"):
        load_inshop(root, "query")
    (root / "img_highres").rename(root / "elsewhere")
    with pytest.raises(FileNotFoundError, match="no img/ folder in"):
        load_inshop(root, "query")


def test_an_encrypted_inshop_zip_names_the_dataset_page(tmp_path, monkeypatch, capsys):
    images, partition = inshop_files(tmp_path)
    data = bytearray(images.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # mark the members encrypted
        at = data.find(signature)
        while at != -1:
            data[at + offset] |= 0x1
            at = data.find(signature, at + 4)
    images.write_bytes(bytes(data))
    use_table(
        monkeypatch,
        "inshop",
        DatasetFile("img.zip", (images.as_uri(),), None, True, "img"),
        DatasetFile("list_eval_partition.txt", (partition.as_uri(),), None, False, "list_eval_partition.txt"),
    )
    assert download_module.main(["inshop", str(tmp_path / "data"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "is password-protected" in err and download_module.HOMEPAGES["inshop"] in err and "Traceback" not in err


def test_cli_reports_manual_steps(tmp_path, no_network, capsys):
    assert download_module.main(["sop", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: could not download Stanford_Online_Products.zip")
    assert f"put it at {tmp_path / 'Stanford_Online_Products.zip'}" in err
    with pytest.raises(ValueError, match="unknown dataset 'synthetic'"):
        download_module.download("synthetic", tmp_path)


def test_an_extracted_dataset_is_used_without_its_archive(tmp_path, monkeypatch, no_network, capsys):
    """A shared copy extracted by hand: the loader's layout is recognised, nothing is fetched."""
    shared = tmp_path / "shared"
    with zipfile.ZipFile(sop_zip(tmp_path / "sop.zip")) as archive:
        archive.extractall(shared)
    monkeypatch.setattr("rambo.harness.download.extract", lambda *a: pytest.fail("extracted again"))
    assert download_module.download("sop", shared) == shared
    assert len(load_sop(shared, "train")) == 1 and no_network == []
    assert f"found {shared / 'Stanford_Online_Products/Ebay_test.txt'}" in capsys.readouterr().err


def evil_zip(path: Path, name: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("good/ok.txt", "fine")
        archive.writestr(name, "pwned")
    return path


def test_cli_reports_refused_and_corrupt_archives_without_a_traceback(tmp_path, monkeypatch, capsys):
    archive = evil_zip(tmp_path / "served.zip", "../evil.txt")
    use_table(monkeypatch, "sop", sop_entry((archive.as_uri(),), md5(archive)))
    root = tmp_path / "data"
    assert download_module.main(["sop", str(root), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'../evil.txt' would be written outside" in err
    assert listing(root) == ["Stanford_Online_Products.zip"] and not (tmp_path / "evil.txt").exists()

    (root / "Stanford_Online_Products.zip").write_bytes(b"PK\x03\x04 cut short")  # a copy that broke off
    # (pinned to its own MD5, so that the checksum lets it through to the extraction)
    use_table(monkeypatch, "sop", sop_entry((archive.as_uri(),), md5(root / "Stanford_Online_Products.zip")))
    assert download_module.main(["sop", str(root), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {root / 'Stanford_Online_Products.zip'} is corrupt")
    assert "Delete it and download it again" in err and "Traceback" not in err
    assert listing(root) == ["Stanford_Online_Products.zip"]
