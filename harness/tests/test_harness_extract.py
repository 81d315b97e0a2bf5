"""Extraction: the member check (lexical, the archive's own links followed), staging, merging."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from rambo.harness.extract import ArchiveClashError, ArchiveError, UnsafeArchiveError, check_members, extract
from rambo.harness.testing import listing


def make_tar(path: Path, members: list[tuple], mode: str = "w") -> Path:
    """``members``: ``(name, bytes)`` files, ``(name, "dir")``, ``(name, "sym"|"hard", target)``, ``(name, "chr"|"fifo")``."""
    with tarfile.open(path, mode) as archive:
        for name, kind, *rest in members:
            info = tarfile.TarInfo(name)
            if isinstance(kind, bytes):
                info.size = len(kind)
                archive.addfile(info, io.BytesIO(kind))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "sym": tarfile.SYMTYPE,
                "hard": tarfile.LNKTYPE,
                "chr": tarfile.CHRTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            if kind == "dir":
                info.mode = 0o755
            if rest:
                info.linkname = rest[0]
            archive.addfile(info)
    return path


def make_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.fixture
def target(tmp_path) -> Path:
    """A data folder that already holds a file; a refused archive must leave it exactly so."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "kept.txt").write_text("kept")
    return folder


@pytest.fixture
def without_data_filter(monkeypatch):
    """Behave as on a Python whose tarfile has no ``data`` filter: only the project's check remains."""
    calls = []
    original = tarfile.TarFile.extractall

    def spy(self, *args, **kwargs):
        calls.append(kwargs.get("filter"))
        return original(self, *args, **kwargs)

    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    monkeypatch.setattr(tarfile.TarFile, "extractall", spy)
    return calls


def test_extracts_a_tar_gz_and_leaves_no_staging_folder(tmp_path, target):
    archive = make_tar(
        tmp_path / "a.tgz",
        [("top", "dir"), ("top/a.txt", b"a"), ("top/sub/b.txt", b"b"), ("other.txt", b"o")],
        mode="w:gz",
    )
    assert extract(archive, target) == [target / "other.txt", target / "top"]
    assert listing(target) == ["kept.txt", "other.txt", "top", "top/a.txt", "top/sub", "top/sub/b.txt"]
    assert (target / "top/sub/b.txt").read_bytes() == b"b"
    assert check_members(archive) == ["top", "top/a.txt", "top/sub/b.txt", "other.txt"]


def test_links_that_stay_inside_are_extracted(tmp_path, target, without_data_filter):
    archive = make_tar(
        tmp_path / "links.tar",
        [
            ("v1/data.txt", b"payload"),
            ("latest", "sym", "v1"),
            ("v1/up", "sym", ".."),  # back to the target folder itself: inside
            ("latest/copy.txt", "hard", "v1/data.txt"),
            ("v1/up/v1/through-links.txt", b"via"),
        ],
    )
    extract(archive, target)
    assert without_data_filter == [None]  # really extracted without the filter
    assert (target / "latest").is_symlink() and (target / "latest/data.txt").read_bytes() == b"payload"
    assert (target / "v1/copy.txt").read_bytes() == b"payload"
    assert (target / "v1/through-links.txt").read_bytes() == b"via"


UNSAFE_TARS = {
    "dotdot": [("ok.txt", b"ok"), ("a/../../escape.txt", b"evil")],
    "absolute": [("ok.txt", b"ok"), ("/tmp/rambo-harness-absolute.txt", b"evil")],
    "symlink-out": [("ok.txt", b"ok"), ("a/passwd", "sym", "../../etc/passwd")],
    "symlink-absolute": [("ok.txt", b"ok"), ("passwd", "sym", "/etc/passwd")],
    "hardlink-out": [("ok.txt", b"ok"), ("a/passwd", "hard", "../outside.txt")],
    "hardlink-absolute": [("ok.txt", b"ok"), ("passwd", "hard", "/etc/passwd")],
    "device": [("ok.txt", b"ok"), ("dev/null", "chr")],
    "fifo": [("ok.txt", b"ok"), ("pipe", "fifo")],
    # Each link is harmless on its own; the second escapes only through the first one, and the
    # file is then written through both (outside the target).
    "symlink-chain": [
        ("ok.txt", b"ok"),
        ("sub", "dir"),
        ("sub/up", "sym", ".."),
        ("sub/up/escape", "sym", ".."),
        ("sub/up/escape/pwned.txt", b"evil"),
    ],
    "symlink-loop": [("ok.txt", b"ok"), ("a", "sym", "b"), ("b", "sym", "a"), ("a/x.txt", b"loop")],
    "replaces-target": [("ok.txt", b"ok"), ("sub/..", b"a file where the target folder is")],
}


@pytest.mark.parametrize("kind", sorted(UNSAFE_TARS))
def test_unsafe_tar_is_refused_without_the_data_filter(tmp_path, target, without_data_filter, kind):
    archive = make_tar(tmp_path / "evil.tar", UNSAFE_TARS[kind])
    with pytest.raises(UnsafeArchiveError, match="evil.tar"):
        extract(archive, target)
    with pytest.raises(UnsafeArchiveError):
        check_members(archive)
    assert listing(target) == ["kept.txt"]  # not even the harmless member, and no staging folder
    assert without_data_filter == []  # refused by the check, before tarfile extracted anything
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "evil.tar"]
    assert not Path("/tmp/rambo-harness-absolute.txt").exists()


def test_the_symlink_chain_really_escapes_an_unchecked_extraction(tmp_path):
    """The archive of the chain test is a real attack: plain tarfile writes outside its folder."""
    archive = make_tar(tmp_path / "evil.tar", UNSAFE_TARS["symlink-chain"])
    folder = tmp_path / "plain" / "data"
    folder.mkdir(parents=True)
    with tarfile.open(archive) as handle:
        if hasattr(tarfile, "fully_trusted_filter"):
            handle.extractall(folder, filter="fully_trusted")
        else:
            handle.extractall(folder)
    assert (tmp_path / "plain" / "pwned.txt").read_bytes() == b"evil"


@pytest.mark.parametrize("name", ["../evil.txt", "good/../../evil.txt", "/tmp/rambo-harness-zip.txt", "C:/evil.txt"])
def test_unsafe_zip_is_refused(tmp_path, target, name):
    archive = make_zip(tmp_path / "evil.zip", {"good/ok.txt": b"fine", name: b"evil"})
    with pytest.raises(UnsafeArchiveError, match="evil.zip"):
        extract(archive, target)
    assert listing(target) == ["kept.txt"]
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/rambo-harness-zip.txt").exists()


def test_a_refused_archive_does_not_create_the_target(tmp_path):
    archive = make_zip(tmp_path / "evil.zip", {"../evil.txt": b"evil"})
    with pytest.raises(UnsafeArchiveError):
        extract(archive, tmp_path / "new" / "data")
    assert not (tmp_path / "new").exists()


def test_the_data_filter_is_used_where_tarfile_has_it(tmp_path, target, monkeypatch):
    if not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python's tarfile has no data filter")
    calls = []
    original = tarfile.TarFile.extractall
    monkeypatch.setattr(
        tarfile.TarFile, "extractall", lambda self, *a, **k: calls.append(k.get("filter")) or original(self, *a, **k)
    )
    extract(make_tar(tmp_path / "a.tar", [("a.txt", b"a")]), target)
    assert calls == ["data"]


def test_corrupt_zip_is_a_named_error(tmp_path, target):
    archive = make_zip(tmp_path / "broken.zip", {"big/file.bin": bytes(range(256)) * 64})
    data = bytearray(archive.read_bytes())
    data[80] ^= 0xFF  # inside the compressed data: the CRC no longer matches
    archive.write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match="broken.zip is corrupt.*Delete it and download it again"):
        extract(archive, target)
    assert listing(target) == ["kept.txt"]


def test_truncated_zip_is_a_named_error(tmp_path, target):
    archive = make_zip(tmp_path / "short.zip", {"big/file.bin": bytes(range(256)) * 64})
    archive.write_bytes(archive.read_bytes()[:200])
    with pytest.raises(ArchiveError, match="short.zip is corrupt, truncated"):
        extract(archive, target)
    assert listing(target) == ["kept.txt"]


def test_truncated_tar_gz_is_a_named_error(tmp_path, target):
    payload = bytes(range(256)) * 200
    archive = make_tar(tmp_path / "short.tar.gz", [(f"d/f{i}", payload[i:]) for i in range(4)], mode="w:gz")
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(ArchiveError, match="short.tar.gz is corrupt.*Delete it and download it again"):
        extract(archive, target)
    assert listing(target) == ["kept.txt"]


def test_a_corrupted_byte_in_a_tar_gz_is_caught_by_its_crc(tmp_path, target):
    payload = bytes(range(256)) * 40
    archive = make_tar(tmp_path / "flipped.tgz", [(f"d/f{i}", payload) for i in range(3)], mode="w:gz")
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF  # deflate may still decode it: only the CRC at the end tells
    archive.write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match="flipped.tgz is corrupt"):
        extract(archive, target)
    assert listing(target) == ["kept.txt"]


def test_truncated_tar_is_a_named_error(tmp_path, target):
    archive = make_tar(tmp_path / "short.tar", [("d/f0", b"x" * 5000), ("d/f1", b"y" * 5000)])
    archive.write_bytes(archive.read_bytes()[:3000])  # inside the first member's data
    with pytest.raises(ArchiveError, match="short.tar is corrupt"):
        extract(archive, target)
    assert listing(target) == ["kept.txt"]


def test_a_file_that_is_not_an_archive_is_a_named_error(tmp_path, target):
    page = tmp_path / "CUB_200_2011.tgz"
    page.write_text("<html>quota exceeded</html>")
    with pytest.raises(ArchiveError, match="CUB_200_2011.tgz is corrupt, truncated or not an archive"):
        extract(page, target)
    assert listing(target) == ["kept.txt"]


def voc_tars(tmp_path: Path) -> tuple[Path, Path]:
    main = "VOCdevkit/VOC2007/ImageSets/Main"
    trainval = make_tar(
        tmp_path / "VOCtrainval.tar",
        [(f"{main}/trainval.txt", b"000005\n"), ("VOCdevkit/VOC2007/JPEGImages/000005.jpg", b"jpg5")],
    )
    test = make_tar(
        tmp_path / "VOCtest.tar",
        [(f"{main}/test.txt", b"000001\n"), ("VOCdevkit/VOC2007/JPEGImages/000001.jpg", b"jpg1")],
    )
    return trainval, test


def test_two_tars_are_merged_into_one_tree(tmp_path, target):
    trainval, test = voc_tars(tmp_path)
    extract(trainval, target)
    assert extract(test, target) == [target / "VOCdevkit"]
    assert listing(target / "VOCdevkit/VOC2007") == [
        "ImageSets",
        "ImageSets/Main",
        "ImageSets/Main/test.txt",
        "ImageSets/Main/trainval.txt",
        "JPEGImages",
        "JPEGImages/000001.jpg",
        "JPEGImages/000005.jpg",
    ]
    assert sorted(p.name for p in target.iterdir()) == ["VOCdevkit", "kept.txt"]  # no staging folder
    extract(test, target)  # the same files again: nothing to overwrite, nothing changes
    assert (target / "VOCdevkit/VOC2007/ImageSets/Main/test.txt").read_bytes() == b"000001\n"


def test_a_clash_with_a_different_file_is_refused_and_nothing_moves(tmp_path, target):
    _, test = voc_tars(tmp_path)
    existing = target / "VOCdevkit/VOC2007/ImageSets/Main/test.txt"
    existing.parent.mkdir(parents=True)
    existing.write_bytes(b"edited by hand\n")
    with pytest.raises(ArchiveClashError, match="would overwrite .*test.txt"):
        extract(test, target)
    assert existing.read_bytes() == b"edited by hand\n"
    assert not (target / "VOCdevkit/VOC2007/JPEGImages").exists()  # the non-clashing member did not move either
    assert listing(target) == [
        "VOCdevkit",
        "VOCdevkit/VOC2007",
        "VOCdevkit/VOC2007/ImageSets",
        "VOCdevkit/VOC2007/ImageSets/Main",
        "VOCdevkit/VOC2007/ImageSets/Main/test.txt",
        "kept.txt",
    ]


def test_a_file_where_the_archive_has_a_folder_is_a_clash(tmp_path, target):
    (target / "VOCdevkit").write_text("a file, not a folder")
    _, test = voc_tars(tmp_path)
    with pytest.raises(ArchiveClashError, match="VOCdevkit"):
        extract(test, target)
    assert (target / "VOCdevkit").read_text() == "a file, not a folder"


def test_the_merge_never_writes_through_a_link_already_on_disk(tmp_path, target):
    (target / "up").symlink_to("..")  # on disk, target/up/x.txt is outside the target
    archive = make_tar(tmp_path / "a.tar", [("up/x.txt", b"x")])
    assert check_members(archive) == ["up/x.txt"]  # inside, as far as the archive goes
    with pytest.raises(ArchiveClashError, match="up"):
        extract(archive, target)
    assert not (tmp_path / "x.txt").exists() and listing(target) == ["kept.txt", "up"]
