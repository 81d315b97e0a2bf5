import hashlib
import io
import tarfile
import urllib.error

import pytest

from rambo.detection import download as voc_download
from rambo.detection.download import ARCHIVES, Archive, DownloadError, download, fetch, main, safe_extract


def make_tar(path, members: dict[str, bytes], links: dict[str, str] | None = None):
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return path


def test_pinned_archives_are_the_official_ones():
    assert ARCHIVES["voc2007-test"].filename == "VOCtest_06-Nov-2007.tar"
    assert all(a.url.startswith("https://thor.robots.ox.ac.uk/pascal/VOC/") and len(a.md5) == 32 for a in ARCHIVES.values())


@pytest.mark.parametrize("name", ["../escape.txt", "VOCdevkit/../../escape.txt", "/tmp/absolute_escape.txt"])
def test_safe_extract_refuses_members_leaving_the_target(tmp_path, name):
    archive = make_tar(tmp_path / "evil.tar", {"VOCdevkit/ok.txt": b"ok", name: b"evil"})
    target = tmp_path / "out"
    target.mkdir()
    with pytest.raises(ValueError, match="outside"):
        safe_extract(archive, target)
    assert not (tmp_path / "escape.txt").exists() and not (target / "VOCdevkit" / "ok.txt").exists()


def test_safe_extract_refuses_links_out_and_extracts_good_archives(tmp_path):
    evil = make_tar(tmp_path / "link.tar", {}, links={"VOCdevkit/passwd": "../../../etc/passwd"})
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match="points outside"):
        safe_extract(evil, tmp_path / "out")
    good = make_tar(tmp_path / "good.tar", {"VOCdevkit/VOC2007/ImageSets/Main/test.txt": b"000001\n"})
    safe_extract(good, tmp_path / "out")
    assert (tmp_path / "out/VOCdevkit/VOC2007/ImageSets/Main/test.txt").read_bytes() == b"000001\n"


class FakeResponse(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_download_is_atomic_and_verified(tmp_path, monkeypatch):
    payload = b"voc archive bytes"
    monkeypatch.setattr(voc_download.urllib.request, "urlopen", lambda url, timeout: FakeResponse(payload))
    target = tmp_path / "a.tar"
    with pytest.raises(DownloadError, match="does not match"):
        download("https://example.invalid/a.tar", target, "0" * 32)
    assert list(tmp_path.iterdir()) == []  # neither the target nor a temporary file is left
    download("https://example.invalid/a.tar", target, hashlib.md5(payload).hexdigest())
    assert target.read_bytes() == payload and list(tmp_path.iterdir()) == [target]


def test_missing_network_gives_the_manual_steps(tmp_path, monkeypatch, capsys):
    def offline(url, timeout):
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(voc_download.urllib.request, "urlopen", offline)
    with pytest.raises(DownloadError) as error:
        fetch(tmp_path, ["voc2007-test"])
    message = str(error.value)
    assert "network is unreachable" in message and ARCHIVES["voc2007-test"].url in message
    assert ARCHIVES["voc2007-test"].md5 in message and "wget" in message
    assert main([str(tmp_path), "--sets", "voc2007-test"]) == 1
    assert "Fetch the archives by hand" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_fetch_uses_a_verified_local_archive_and_rejects_a_corrupt_one(tmp_path, monkeypatch):
    archive = make_tar(tmp_path / "VOCtest_06-Nov-2007.tar", {"VOCdevkit/VOC2007/ImageSets/Main/test.txt": b"000001\n"})
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    monkeypatch.setitem(ARCHIVES, "voc2007-test", Archive("https://example.invalid/VOCtest_06-Nov-2007.tar", md5, "VOCdevkit/VOC2007"))
    monkeypatch.setattr(voc_download.urllib.request, "urlopen", lambda *a, **k: pytest.fail("must not download"))
    assert fetch(tmp_path, ["voc2007-test"]) == [tmp_path / "VOCdevkit/VOC2007"]
    assert (tmp_path / "VOCdevkit/VOC2007/ImageSets/Main/test.txt").is_file()
    archive.write_bytes(b"truncated")
    with pytest.raises(DownloadError, match="md5"):
        fetch(tmp_path, ["voc2007-test"])
    with pytest.raises(ValueError, match="unknown VOC archive"):
        fetch(tmp_path, ["voc2099"])
