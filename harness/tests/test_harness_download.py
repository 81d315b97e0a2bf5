"""Downloads without a network: checksums, atomic writes, manual steps, and ensure_dataset."""

from __future__ import annotations

import http.client
import io
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from rambo.harness import download as download_module
from rambo.harness.download import DatasetFile, DownloadError, ensure_dataset, fetch_file, md5_of
from rambo.harness.extract import ArchiveError, UnsafeArchiveError
from rambo.harness.testing import listing, md5, small_disk  # noqa: F401 (small_disk: a fixture, taken by importing it)


def served(tmp_path: Path, name: str, data: bytes) -> Path:
    """A file that a ``file://`` URL serves, outside the data folder."""
    folder = tmp_path / "server"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    return path


def tar_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class FakeResponse(io.BytesIO):
    """What ``urlopen`` returns, with chosen headers."""

    def __init__(self, data: bytes, headers: dict[str, str] | None = None):
        super().__init__(data)
        self.headers = headers or {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture
def urlopen_fails(monkeypatch):
    """``urlopen`` must not be called; a call fails the test."""

    def fail(url, *args, **kwargs):
        pytest.fail(f"downloaded {url}")

    monkeypatch.setattr(urllib.request, "urlopen", fail)


def test_md5_of_reads_the_whole_file_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(download_module, "CHUNK_BYTES", 7)
    data = bytes(range(256)) * 3
    (tmp_path / "f").write_bytes(data)
    assert md5_of(tmp_path / "f") == md5(data)


def test_download_is_verified_renamed_and_world_readable(tmp_path):
    data = b"archive bytes" * 1000
    source = served(tmp_path, "a.tar", data)
    target = tmp_path / "data" / "a.tar"
    previous = os.umask(0o022)
    try:
        assert fetch_file(target, [source.as_uri()], md5(data), show_progress=False) == target
    finally:
        os.umask(previous)
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # not mkstemp's 0o600
    assert listing(target.parent) == ["a.tar"]  # no temporary file left


def test_the_next_url_is_tried_when_one_fails(tmp_path):
    data = b"payload"
    source = served(tmp_path, "a.bin", data)
    target = tmp_path / "data" / "a.bin"
    fetch_file(target, [(tmp_path / "missing.bin").as_uri(), source.as_uri()], md5(data), show_progress=False)
    assert target.read_bytes() == data


def test_checksum_mismatch_is_discarded_with_the_manual_steps(tmp_path):
    data = b"not the official file"
    source = served(tmp_path, "a.tar", data)
    target = tmp_path / "data" / "a.tar"
    with pytest.raises(DownloadError) as error:
        fetch_file(target, [source.as_uri()], "0" * 32, show_progress=False)
    message = str(error.value)
    assert f"MD5 {md5(data)}, expected {'0' * 32}" in message
    assert f"put it at {target} (its MD5 must be {'0' * 32})" in message
    assert listing(target.parent) == []


def test_a_file_put_there_by_hand_is_verified_not_replaced(tmp_path, urlopen_fails):
    target = tmp_path / "a.tar"
    target.write_bytes(b"copied by hand")
    assert fetch_file(target, ["https://example.invalid/a.tar"], md5(b"copied by hand")) == target
    assert target.read_bytes() == b"copied by hand"
    with pytest.raises(DownloadError) as error:
        fetch_file(target, ["https://example.invalid/a.tar"], "1" * 32)
    message = str(error.value)
    assert f"has MD5 {md5(b'copied by hand')}, expected {'1' * 32}" in message and "Delete it" in message
    assert target.read_bytes() == b"copied by hand"  # the user's file is left as it was


@pytest.mark.parametrize(
    "failure",
    [
        urllib.error.URLError("[Errno -3] Temporary failure in name resolution"),
        urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")),
        urllib.error.HTTPError("https://example.invalid/a.tar", 503, "Service Unavailable", {}, None),
        TimeoutError("timed out"),
        ConnectionRefusedError(111, "Connection refused"),
        http.client.RemoteDisconnected("Remote end closed connection without response"),
        ValueError("unknown url type: 'htps'"),
    ],
    ids=["offline", "refused-url", "http-503", "timeout", "refused", "disconnected", "bad-url"],
)
def test_every_network_failure_becomes_a_download_error_with_the_manual_steps(tmp_path, monkeypatch, failure):
    calls = []

    def offline(url, *args, **kwargs):
        calls.append((url, kwargs.get("timeout")))
        raise failure

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    urls = ["https://example.invalid/a.tar", "http://mirror.invalid/a.tar"]
    target = tmp_path / "data" / "a.tar"
    with pytest.raises(DownloadError) as error:
        fetch_file(target, urls, "2" * 32, homepage="https://dataset.invalid/", show_progress=False)
    message = str(error.value)
    assert str(failure) in message
    assert all(f"    {url}" in message for url in urls)
    assert f"put it at {target} (its MD5 must be {'2' * 32})" in message
    assert "(dataset page: https://dataset.invalid/)" in message
    assert calls == [(url, download_module.TIMEOUT_S) for url in urls]
    assert listing(target.parent) == []


def test_an_interrupted_transfer_leaves_no_partial_file(tmp_path, monkeypatch):
    class Broken(FakeResponse):
        def read(self, size=-1):
            if self.tell() > 0:
                raise ConnectionResetError("connection reset by peer")
            return super().read(4)

    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: Broken(b"0123456789"))
    with pytest.raises(DownloadError, match="connection reset by peer"):
        fetch_file(tmp_path / "a.bin", ["https://example.invalid/a.bin"], show_progress=False)
    assert listing(tmp_path) == []


def test_a_short_transfer_is_refused(tmp_path, monkeypatch):
    response = FakeResponse(b"half", {"Content-Length": "8"})
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: response)
    with pytest.raises(DownloadError, match="ended after 4 of 8 bytes"):
        fetch_file(tmp_path / "a.bin", ["https://example.invalid/a.bin"], show_progress=False)
    assert listing(tmp_path) == []


def test_a_web_page_served_instead_of_the_file_is_refused(tmp_path, monkeypatch):
    page = served(tmp_path, "quota.html", b"<html>Google Drive - quota exceeded</html>")
    target = tmp_path / "data" / "img.zip"
    with pytest.raises(DownloadError, match="web page \\(Content-Type text/html"):
        fetch_file(target, [page.as_uri()], show_progress=False)
    # The same page without a telling Content-Type is recognised by its first bytes.
    body = b"\n  <!DOCTYPE html><html><body>Sign in</body></html>"
    monkeypatch.setattr(
        urllib.request, "urlopen", lambda *a, **k: FakeResponse(body, {"Content-Type": "application/octet-stream"})
    )
    with pytest.raises(DownloadError, match="got a web page instead of the file"):
        fetch_file(target, ["https://example.invalid/img.zip"], show_progress=False)
    assert listing(target.parent) == []


def test_a_web_page_is_accepted_when_it_is_the_file_asked_for(tmp_path):
    page = served(tmp_path, "index.html", b"<html>the dataset's own page</html>")
    target = fetch_file(tmp_path / "data" / "index.html", [page.as_uri()], show_progress=False)
    assert target.read_bytes() == page.read_bytes()


def test_the_progress_bar_is_shown_only_on_a_terminal(tmp_path, monkeypatch):
    shown = []

    class SpyBar:
        def __init__(self, *args, disable=False, **kwargs):
            shown.append(not disable)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n):
            pass

    monkeypatch.setattr(download_module, "tqdm", SpyBar)
    source = served(tmp_path, "a.bin", b"x")
    monkeypatch.setattr(download_module.sys.stderr, "isatty", lambda: False, raising=False)
    fetch_file(tmp_path / "1.bin", [source.as_uri()])
    monkeypatch.setattr(download_module.sys.stderr, "isatty", lambda: True, raising=False)
    fetch_file(tmp_path / "2.bin", [source.as_uri()])
    fetch_file(tmp_path / "3.bin", [source.as_uri()], show_progress=False)
    assert shown == [False, True, False]


def cub_spec(urls: tuple[str, ...], checksum: str | None) -> DatasetFile:
    return DatasetFile("CUB.tgz", urls, checksum, True, "CUB/images.txt")


CUB = {"CUB/images.txt": b"1 a.jpg\n", "CUB/images/a.jpg": b"jpeg"}


def test_ensure_dataset_downloads_extracts_and_keeps_the_archive(tmp_path, monkeypatch, capsys):
    data = tar_bytes(CUB)
    source = served(tmp_path, "CUB.tgz", data)
    root = tmp_path / "data"
    assert ensure_dataset(root, [cub_spec((source.as_uri(),), md5(data))], show_progress=False) == [
        root / "CUB/images.txt"
    ]
    assert listing(root) == ["CUB", "CUB.tgz", "CUB/images", "CUB/images.txt", "CUB/images/a.jpg"]
    # Second call: in place, so neither fetched nor extracted (nor checksummed) again.
    monkeypatch.setattr(download_module, "extract", lambda *a: pytest.fail("extracted again"))
    monkeypatch.setattr(download_module, "fetch_file", lambda *a, **k: pytest.fail("fetched again"))
    monkeypatch.setattr(download_module, "md5_of", lambda *a: pytest.fail("checksummed again"))
    ensure_dataset(root, [cub_spec((source.as_uri(),), md5(data))])
    assert f"found {root / 'CUB/images.txt'}" in capsys.readouterr().err


def test_already_extracted_data_is_accepted_without_any_archive(tmp_path, monkeypatch, urlopen_fails, capsys):
    root = tmp_path / "shared"
    (root / "CUB").mkdir(parents=True)
    (root / "CUB/images.txt").write_text("extracted by hand\n")
    monkeypatch.setattr(download_module, "extract", lambda *a: pytest.fail("extracted"))
    assert ensure_dataset(root, [cub_spec(("https://example.invalid/CUB.tgz",), "3" * 32)]) == [root / "CUB/images.txt"]
    assert listing(root) == ["CUB", "CUB/images.txt"]
    assert f"found {root / 'CUB/images.txt'}" in capsys.readouterr().err


def test_a_hand_placed_archive_is_verified_and_extracted(tmp_path, urlopen_fails):
    data = tar_bytes(CUB)
    root = tmp_path / "data"
    root.mkdir()
    (root / "CUB.tgz").write_bytes(data)
    ensure_dataset(root, [cub_spec(("https://example.invalid/CUB.tgz",), md5(data))])
    assert (root / "CUB/images/a.jpg").read_bytes() == b"jpeg"
    (root / "CUB/images.txt").unlink()
    (root / "CUB.tgz").write_bytes(data[:-10])  # a hand-copied archive that is incomplete
    with pytest.raises(DownloadError, match="expected .*nothing was extracted"):
        ensure_dataset(root, [cub_spec(("https://example.invalid/CUB.tgz",), md5(data))])
    assert not (root / "CUB/images.txt").exists()


def test_unpinned_files_are_used_with_a_warning_and_their_md5(tmp_path, capsys):
    """In-shop publishes no checksum: its files are fetched, and the user is told they are unverified."""
    data = tar_bytes(CUB)
    source = served(tmp_path, "CUB.tgz", data)
    root = tmp_path / "data"
    ensure_dataset(root, [cub_spec((source.as_uri(),), None)], show_progress=False, homepage="https://example.org/cub")
    assert (root / "CUB/images.txt").exists()
    err = capsys.readouterr().err
    assert (
        "warning: CUB.tgz have no published checksum: they are used unverified" in err
        and "https://example.org/cub" in err
    )
    assert f"CUB.tgz: MD5 {md5(data)} (not verified)" in err
    # A copy put there by hand is used as well, and its MD5 printed.
    (root / "CUB").rename(tmp_path / "moved")
    ensure_dataset(root, [cub_spec(("https://example.invalid/CUB.tgz",), None)], show_progress=False)
    assert f"CUB.tgz: MD5 {md5(data)} (not verified: no pinned checksum)" in capsys.readouterr().err


def test_dataset_files_are_found_in_their_official_layouts(tmp_path, capsys):
    """A dataset's own download folder (e.g. In-shop's Drive folder: Img/img.zip, Eval/list.txt) is
    used where it lies: a marker there means in place; an archive there is extracted into its folder."""
    root = tmp_path / "data"
    (root / "Eval").mkdir(parents=True)
    (root / "Eval/list.txt").write_text("index")
    zipped = root / "Img/img.zip"
    zipped.parent.mkdir()
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("img/a.jpg", b"jpeg")
    files = [
        DatasetFile(
            "list.txt", ("https://example.invalid/list.txt",), None, False, "list.txt", found_at=("Eval/list.txt",)
        ),
        DatasetFile(
            "img.zip",
            ("https://example.invalid/img.zip",),
            md5(zipped.read_bytes()),
            True,
            "img",
            found_at=("Img/img",),
            archive_at=("Img/img.zip",),
        ),
    ]
    assert ensure_dataset(root, files, show_progress=False) == [root / "Eval/list.txt", root / "Img/img"]
    assert (root / "Img/img/a.jpg").read_bytes() == b"jpeg" and not (root / "img").exists()
    assert f"found {root / 'Eval/list.txt'}" in capsys.readouterr().err
    # The pinned checksum of an archive lying there is checked all the same.
    (root / "Img/img/a.jpg").unlink()
    (root / "Img/img").rmdir()
    zipped.write_bytes(b"PK\x03\x04 not the file")
    with pytest.raises(DownloadError, match="expected"):
        ensure_dataset(root, files, show_progress=False)


def test_an_encrypted_archive_is_refused_with_the_dataset_page(tmp_path):
    from rambo.harness.extract import EncryptedArchiveError

    zipped = tmp_path / "img.zip"
    zipped.write_bytes(encrypted_zip({"img/a.jpg": b"jpeg"}))
    root = tmp_path / "data"
    spec = DatasetFile("img.zip", (zipped.as_uri(),), None, True, "img")
    with pytest.raises(
        EncryptedArchiveError,
        match=r"password-protected \(1 encrypted members, e.g. 'img/a.jpg'\).*"
        r"The dataset page: https://example.org/inshop",
    ):
        ensure_dataset(root, [spec], show_progress=False, homepage="https://example.org/inshop")
    assert not (root / "img").exists()


def encrypted_zip(members: dict[str, bytes]) -> bytes:
    """A zip whose members carry the 'encrypted' flag (zipfile writes no encryption; the flag is
    what readers go by: Python's zipfile then asks for a password)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    data = bytearray(buffer.getvalue())
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # local and central headers' flags
        at = data.find(signature)
        while at != -1:
            data[at + offset] |= 0x1
            at = data.find(signature, at + 4)
    return bytes(data)


def test_an_archive_without_the_ready_path_is_an_error(tmp_path):
    data = tar_bytes({"Other/readme.txt": b"wrong dataset"})
    source = served(tmp_path, "CUB.tgz", data)
    with pytest.raises(ArchiveError, match="CUB/images.txt is still missing"):
        ensure_dataset(tmp_path / "data", [cub_spec((source.as_uri(),), md5(data))], show_progress=False)


def test_a_refused_archive_leaves_only_the_download(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("CUB/images.txt")
        info.size = 1
        archive.addfile(info, io.BytesIO(b"1"))
        link = tarfile.TarInfo("CUB/passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    source = served(tmp_path, "CUB.tgz", buffer.getvalue())
    root = tmp_path / "data"
    with pytest.raises(UnsafeArchiveError, match="CUB/passwd"):
        ensure_dataset(root, [cub_spec((source.as_uri(),), md5(buffer.getvalue()))], show_progress=False)
    assert listing(root) == ["CUB.tgz"]


def test_plain_files_are_fetched_without_extraction(tmp_path, monkeypatch):
    source = served(tmp_path, "list.txt", b"a b c\n")
    monkeypatch.setattr(download_module, "extract", lambda *a: pytest.fail("a plain file was extracted"))
    spec = DatasetFile("list.txt", (source.as_uri(),), md5(b"a b c\n"), False, "list.txt")
    assert ensure_dataset(tmp_path / "data", [spec], show_progress=False) == [tmp_path / "data/list.txt"]
    assert (tmp_path / "data/list.txt").read_bytes() == b"a b c\n"


def test_archives_are_kept_in_their_own_folder_and_plain_files_go_to_the_data(tmp_path):
    data = tar_bytes(CUB)
    archive = served(tmp_path, "CUB.tgz", data)
    listed = served(tmp_path, "list.txt", b"a b c\n")
    root, kept = tmp_path / "data", tmp_path / "archives"
    files = [
        cub_spec((archive.as_uri(),), md5(data)),
        DatasetFile("list.txt", (listed.as_uri(),), md5(b"a b c\n"), False, "list.txt"),
    ]
    ensure_dataset(root, files, show_progress=False, archive_dir=kept)
    assert listing(kept) == ["CUB.tgz"]
    assert listing(root) == ["CUB", "CUB/images", "CUB/images.txt", "CUB/images/a.jpg", "list.txt"]
    # The extracted copy deleted (as by a stage rerun): extracted again from the kept archive, offline.
    shutil.rmtree(root)
    archive.unlink()
    listed.unlink()
    root.mkdir()
    (root / "list.txt").write_bytes(b"a b c\n")
    ensure_dataset(root, files, show_progress=False, archive_dir=kept)
    assert (root / "CUB/images/a.jpg").read_bytes() == b"jpeg"


# --- Pins as written by hand; failures of this machine's disk -----------------------------------------------


@pytest.mark.parametrize("written", ["upper", "newline", "spaces"])
def test_a_pinned_md5_is_compared_case_insensitively_whitespace_stripped(tmp_path, written):
    data = b"official bytes\n" * 100
    pin = {"upper": md5(data).upper(), "newline": md5(data) + "\n", "spaces": f"  {md5(data).upper()} \r\n"}[written]
    by_hand = tmp_path / "hand" / "a.tar"
    by_hand.parent.mkdir()
    by_hand.write_bytes(data)
    assert fetch_file(by_hand, ["https://example.invalid/a.tar"], pin) == by_hand
    source = served(tmp_path, "a.tar", data)
    downloaded = fetch_file(tmp_path / "data" / "a.tar", [source.as_uri()], pin, show_progress=False)
    assert downloaded.read_bytes() == data
    assert DatasetFile("a.tar", (source.as_uri(),), pin, False, "a.tar").md5 == md5(data)


def test_a_wrong_pin_in_upper_case_still_refuses_the_file(tmp_path):
    data = b"not the official file"
    by_hand = tmp_path / "a.tar"
    by_hand.write_bytes(data)
    with pytest.raises(DownloadError) as error:
        fetch_file(by_hand, ["https://example.invalid/a.tar"], "ABCDEF" * 5 + "AB\n")
    assert str(error.value).startswith(f"{by_hand} has MD5 {md5(data)}, expected {'abcdef' * 5 + 'ab'}: ")
    assert by_hand.read_bytes() == data


def test_a_pin_that_is_not_an_md5_is_a_named_error(tmp_path, urlopen_fails):
    with pytest.raises(DownloadError) as error:
        fetch_file(tmp_path / "a.tar", ["https://example.invalid/a.tar"], "see the dataset page")
    assert str(error.value) == (
        "the MD5 pinned for a.tar, 'see the dataset page', is not 32 hexadecimal digits: nothing can be verified "
        "against it. Correct the pin (md5sum prints the MD5 of a copy you trust)."
    )
    assert listing(tmp_path) == []


def test_a_disk_that_fills_up_stops_the_download_at_once(tmp_path, small_disk):
    data = os.urandom(2 << 20)
    source = served(tmp_path, "big.bin", data)
    urls = [source.as_uri(), "https://mirror.invalid/big.bin"]  # the second is never tried
    target = small_disk / "big.bin"
    with pytest.raises(DownloadError) as error:
        fetch_file(target, urls, md5(data), show_progress=False)
    assert str(error.value) == (
        f"{target} was not downloaded from {urls[0]}: no space left on the disk of {small_disk} (it needs 2.0 MiB, "
        f"1.0 MiB free); nothing was kept. Free space there and run the same command again, or\n"
        + download_module.manual_steps(target, urls, md5(data))
    )
    assert listing(small_disk) == []


def test_a_target_that_cannot_be_written_is_a_named_error(tmp_path, urlopen_fails):
    (tmp_path / "data").write_text("a file where the data folder should be")
    target = tmp_path / "data" / "a.tar"
    with pytest.raises(DownloadError) as error:
        fetch_file(target, ["https://example.invalid/a.tar"], "3" * 32)
    assert str(error.value) == (
        f"{target} cannot be written (File exists: {tmp_path / 'data'}); nothing was downloaded. "
        "Choose a data folder you can write to."
    )
    assert listing(tmp_path) == ["data"]
    with pytest.raises(DownloadError) as error:
        ensure_dataset(tmp_path / "data", [cub_spec(("https://example.invalid/CUB.tgz",), "3" * 32)])
    assert str(error.value).startswith(f"{tmp_path / 'data'} cannot be made (File exists); nothing was downloaded.")


def test_a_target_that_cannot_be_read_is_a_named_error(tmp_path, urlopen_fails):
    target = tmp_path / "a.tar"
    target.mkdir()
    with pytest.raises(DownloadError) as error:
        fetch_file(target, ["https://example.invalid/a.tar"], "3" * 32)
    assert str(error.value) == (
        f"{target} cannot be read (Is a directory); it was left as it is and nothing was extracted. "
        "Move it away and run again, or\n"
        + download_module.manual_steps(target, ["https://example.invalid/a.tar"], "3" * 32)
    )


def test_ensure_dataset_removes_a_killed_extractions_staging_folder_where_the_data_is_in_place(tmp_path, capsys):
    root = tmp_path / "data"
    (root / "CUB").mkdir(parents=True)
    (root / "CUB/images.txt").write_text("in place\n")
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())
    stale = root / f".CUB.tgz.extracting-{host}-{ended.pid}-none-abcdefgh"
    (stale / "CUB").mkdir(parents=True)
    ensure_dataset(root, [cub_spec(("https://example.invalid/CUB.tgz",), "3" * 32)])
    assert not stale.exists()
    assert f"removed {stale}: " in capsys.readouterr().err
    assert listing(root) == ["CUB", "CUB/images.txt"]
