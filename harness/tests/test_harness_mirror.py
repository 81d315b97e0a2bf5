"""Mirrors: archives from a local folder or URL, with the checksums of its MD5SUMS."""

from __future__ import annotations

import hashlib

import pytest

from rambo.harness.download import DatasetFile, DownloadError, ensure_dataset
from rambo.harness.mirror import from_mirror, mirror_url, parse_md5sums, read_md5sums, write_md5sums

PINNED = DatasetFile("a.txt", ("https://example.invalid/a.txt",), "0" * 32, False, "a.txt")
OTHER = DatasetFile("b.txt", ("https://example.invalid/b.txt",), "1" * 32, False, "b.txt")


def test_a_local_folder_is_a_file_url_and_a_missing_one_is_an_error(tmp_path):
    assert mirror_url(tmp_path) == tmp_path.resolve().as_uri()
    assert mirror_url("https://host/archive/") == "https://host/archive"
    with pytest.raises(DownloadError, match="is not a folder"):
        mirror_url(tmp_path / "absent")


def test_md5sums_round_trip_and_bad_lines_are_named(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"stand-in")
    (tmp_path / "MD5SUMS").write_text(f"{'2' * 32}  b.txt\n")
    write_md5sums(tmp_path, [tmp_path / "a.txt"])
    expected = {"a.txt": hashlib.md5(b"stand-in").hexdigest(), "b.txt": "2" * 32}
    assert read_md5sums(tmp_path) == expected
    assert read_md5sums(tmp_path.as_uri()) == expected
    assert parse_md5sums(f"{'3' * 32} *c.tar\n\n") == {"c.tar": "3" * 32}
    with pytest.raises(DownloadError, match="MD5SUMS:2: expected"):
        parse_md5sums(f"{'3' * 32}  c.tar\nnot-a-checksum c.tar\n")
    with pytest.raises(ValueError, match="not a file directly in"):
        write_md5sums(tmp_path / "sub", [tmp_path / "a.txt"])


def test_files_come_from_the_mirror_with_its_checksums_where_listed(tmp_path, capsys):
    (tmp_path / "a.txt").write_bytes(b"stand-in")
    write_md5sums(tmp_path, [tmp_path / "a.txt"])
    a, b = from_mirror([PINNED, OTHER], tmp_path)
    assert a.urls == (f"{tmp_path.resolve().as_uri()}/a.txt",) and a.md5 == hashlib.md5(b"stand-in").hexdigest()
    assert b.urls == (f"{tmp_path.resolve().as_uri()}/b.txt",) and b.md5 == "1" * 32  # not listed: pinned
    assert "checksums of a.txt from" in capsys.readouterr().err
    # Without MD5SUMS every pinned checksum is kept.
    (tmp_path / "MD5SUMS").unlink()
    assert [item.md5 for item in from_mirror([PINNED], tmp_path)] == ["0" * 32]


def test_a_mirrored_file_is_verified_against_the_mirror_checksum(tmp_path):
    mirror, root = tmp_path / "mirror", tmp_path / "data"
    mirror.mkdir()
    (mirror / "a.txt").write_bytes(b"stand-in")
    with pytest.raises(DownloadError, match="MD5 .* expected 0000"):
        ensure_dataset(root, from_mirror([PINNED], mirror), show_progress=False)  # the pinned MD5 refuses it
    write_md5sums(mirror, [mirror / "a.txt"])
    ensure_dataset(root, from_mirror([PINNED], mirror), show_progress=False)
    assert (root / "a.txt").read_bytes() == b"stand-in"
