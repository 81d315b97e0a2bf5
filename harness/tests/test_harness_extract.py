"""Extraction: the member check (lexical, the archive's own links followed), staging, merging."""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from rambo.harness.extract import (
    ArchiveClashError,
    ArchiveError,
    ArchiveNotFoundError,
    ArchiveTooLargeError,
    InconsistentArchiveError,
    NoSpaceError,
    UnsafeArchiveError,
    check_members,
    extract,
    remove_stale_staging,
)
from rambo.harness.testing import listing, small_disk  # noqa: F401 (small_disk: a fixture, taken by importing it)


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


# --- Members that contradict each other, special files: one named error each ---------------------------------

DAMAGED = "nothing was extracted. The archive is damaged or not the expected file: delete it and download it again."

INCONSISTENT_TARS = {
    "hard-link-to-an-absent-name": (
        [("ok.txt", b"ok"), ("copy", "hard", "absent.txt")],
        "hard link 'copy' -> 'absent.txt' names no file stored before it in the archive",
    ),
    "hard-link-before-its-file": (
        [("copy", "hard", "later.txt"), ("later.txt", b"x")],
        "hard link 'copy' -> 'later.txt' names no file stored before it in the archive",
    ),
    "hard-link-to-a-folder": ([("d", "dir"), ("copy", "hard", "d")], "hard link 'copy' -> 'd' links to a folder"),
    "hard-link-over-a-file": (
        [("f", b"x"), ("g", b"y"), ("g", "hard", "f")],
        "hard link 'g' -> 'f' would replace 'g', stored before it in the archive",
    ),
    "file-then-below-it": (
        [("a", b"file"), ("a/b", b"sub")],
        "member 'a/b' needs 'a' to be a folder, but the archive has 'a' as a file",
    ),
    "below-then-file": ([("a/b", b"sub"), ("a", b"file")], "member 'a' is a file, but the archive has 'a' as a folder"),
    "folder-over-a-file": ([("a", b"file"), ("a", "dir")], "member 'a' is a folder, but the archive has 'a' as a file"),
    "link-over-a-folder": (
        [("d/x", b"x"), ("d", "sym", "e")],
        "link 'd' -> 'e' would replace the folder 'd' of the archive",
    ),
    "below-a-link-to-a-file": (
        [("f", b"x"), ("l", "sym", "f"), ("l/y", b"y")],
        "member 'l/y' needs 'f' to be a folder, but the archive has 'f' as a file",
    ),
}


@pytest.mark.parametrize("kind", sorted(INCONSISTENT_TARS))
def test_members_that_contradict_each_other_are_one_named_error(tmp_path, target, kind):
    members, problem = INCONSISTENT_TARS[kind]
    archive = make_tar(tmp_path / "odd.tar", members)
    with pytest.raises(InconsistentArchiveError) as error:
        extract(archive, target)
    assert str(error.value) == f"{archive}: {problem}; {DAMAGED}"
    with pytest.raises(InconsistentArchiveError):
        check_members(archive)
    assert listing(target) == ["kept.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "odd.tar"]


@pytest.mark.parametrize(
    "members, problem",
    [
        ({"a": b"file", "a/b": b"sub"}, "member 'a/b' needs 'a' to be a folder, but the archive has 'a' as a file"),
        ({"a/b": b"sub", "a": b"file"}, "member 'a' is a file, but the archive has 'a' as a folder"),
        ({"a": b"file", "a/": b""}, "member 'a/' is a folder, but the archive has 'a' as a file"),
    ],
    ids=["file-then-below-it", "below-then-file", "folder-over-a-file"],
)
def test_zip_members_that_contradict_each_other_are_one_named_error(tmp_path, target, members, problem):
    archive = make_zip(tmp_path / "odd.zip", members)
    with pytest.raises(InconsistentArchiveError) as error:
        extract(archive, target)
    assert str(error.value) == f"{archive}: {problem}; {DAMAGED}"
    assert listing(target) == ["kept.txt"]


@pytest.mark.parametrize(
    "kind, named", [("fifo", "a FIFO (a named pipe)"), ("chr", "a character device"), ("blk", "a block device")]
)
def test_special_files_are_named_for_what_they_are(tmp_path, target, kind, named):
    archive = tmp_path / "special.tar"
    with tarfile.open(archive, "w") as handle:
        info = tarfile.TarInfo("ok.txt")
        info.size = 2
        handle.addfile(info, io.BytesIO(b"ok"))
        info = tarfile.TarInfo("special")
        info.type = {"fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE}[kind]
        handle.addfile(info)
    with pytest.raises(UnsafeArchiveError) as error:
        extract(archive, target)
    assert str(error.value) == (
        f"{archive}: member 'special' is {named}, a special file that is never extracted; nothing was extracted"
    )
    assert listing(target) == ["kept.txt"]


def test_a_member_that_cannot_be_written_is_a_named_error(tmp_path, target):
    """A member below a link that points nowhere passes the check (it stays inside) and fails on disk."""
    archive = make_tar(tmp_path / "dangling.tar", [("ok.txt", b"ok"), ("l", "sym", "nowhere"), ("l/y", b"y")])
    with pytest.raises(ArchiveError) as error:
        extract(archive, target)
    assert str(error.value) == (
        f"{archive}: member 'l/y' cannot be written to {target}/l/y (File exists); nothing was extracted. "
        f"Check that {target} can be written; if it can, the archive is damaged: delete it and download it again."
    )
    assert listing(target) == ["kept.txt"]


def test_a_missing_archive_is_a_named_error(tmp_path, target):
    with pytest.raises(ArchiveNotFoundError) as error:
        extract(tmp_path / "absent.tgz", target)
    assert str(error.value) == (
        f"{tmp_path / 'absent.tgz'} does not exist: there is no archive to extract; nothing was extracted. "
        "Download it again, or put it there by hand."
    )
    assert isinstance(error.value, FileNotFoundError)
    assert listing(target) == ["kept.txt"]


# --- Limits on the declared sizes: a zip bomb, the free disk -------------------------------------------------


def zeros_zip(path: Path, size: int) -> Path:
    """A zip holding ``size`` zero bytes: about a thousandth of that on disk."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        with archive.open("zeros.bin", "w") as member:
            for _ in range(size >> 20):
                member.write(bytes(1 << 20))
    return path


def test_a_zip_bomb_is_refused_by_the_default_ratio_limit(tmp_path, target):
    archive = zeros_zip(tmp_path / "bomb.zip", 64 << 20)  # 64 MiB of zeros in about 64 KiB
    size = archive.stat().st_size
    assert size < 200_000
    with pytest.raises(ArchiveTooLargeError) as error:
        extract(archive, target)
    ratio = (64 << 20) / size
    assert re.fullmatch(
        re.escape(f"{archive} declares 64.0 MiB of files in {size / 1024:.1f} KiB ({ratio:.0f} times its size), ")
        + re.escape("more than the 16.0 MiB allowed (100 times its size, at least 16.0 MiB; ")
        + r"\d+\.\d [KMGT]iB"
        + re.escape(
            f" free on the disk of {target}): a zip bomb or a damaged archive; nothing was extracted. "
            "Delete it and download it again; extract it by hand only if you trust it."
        ),
        str(error.value),
    )
    assert listing(target) == ["kept.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.zip", "data"]


def test_the_ratio_limit_and_its_floor_are_parameters(tmp_path, target):
    archive = zeros_zip(tmp_path / "zeros.zip", 2 << 20)
    extract(archive, target)  # 2 MiB: below the floor, whatever its ratio
    assert (target / "zeros.bin").stat().st_size == 2 << 20
    (target / "zeros.bin").unlink()
    with pytest.raises(
        ArchiveTooLargeError, match=r"declares 2\.0 MiB of files in .*allowed \(10 times its size, at least 0 bytes;"
    ):
        extract(archive, target, max_ratio=10, ratio_floor=0)
    assert listing(target) == ["kept.txt"]
    extract(archive, target, max_ratio=None, ratio_floor=0)  # no ratio limit
    assert (target / "zeros.bin").read_bytes() == bytes(2 << 20)


def test_an_archive_larger_than_the_free_disk_is_refused(tmp_path, target):
    archive = make_tar(tmp_path / "a.tar", [("top/a.bin", bytes(range(256)) * 4)])
    reserve = shutil.disk_usage(target).free + (1 << 40)  # more than is free: no byte may be written
    with pytest.raises(ArchiveTooLargeError) as error:
        extract(archive, target, reserve=reserve)
    assert re.fullmatch(
        re.escape(f"{archive} declares 1.0 KiB of files, more than the limit of 0 bytes on the disk of {target} (")
        + r"\d+\.\d [KMGT]iB free, less a reserve of \d+\.\d [KMGT]iB\); nothing was extracted\. "
        + re.escape("Free space there, or extract it into a folder on a larger disk."),
        str(error.value),
    )
    assert listing(target) == ["kept.txt"]


def test_the_disk_limit_is_the_free_space_less_the_reserve(tmp_path, small_disk):  # noqa: F811 (a fixture)
    target = small_disk / "data"
    archive = make_tar(tmp_path / "a.tar", [("top/a.bin", os.urandom(900 << 10))])
    assert shutil.disk_usage(small_disk).free == 1 << 20
    with pytest.raises(ArchiveTooLargeError) as error:
        extract(archive, target, reserve=256 << 10)
    assert str(error.value) == (
        f"{archive} declares 900.0 KiB of files, more than the limit of 768.0 KiB on the disk of {target} "
        "(1.0 MiB free, less a reserve of 256.0 KiB); nothing was extracted. "
        "Free space there, or extract it into a folder on a larger disk."
    )
    assert listing(small_disk) == []  # not even the target folder
    extract(archive, target, reserve=64 << 10)
    assert listing(target) == ["top", "top/a.bin"]


def test_a_disk_that_fills_up_is_one_line_naming_the_file_and_the_space(tmp_path, small_disk):  # noqa: F811 (a fixture)
    target = small_disk / "data"
    target.mkdir()
    archive = make_tar(tmp_path / "a.tar", [("top/small.txt", b"small"), ("top/big.bin", os.urandom(2 << 20))])
    with pytest.raises(NoSpaceError) as error:
        extract(archive, target, reserve=None)  # no disk limit: the disk really fills up
    assert str(error.value) == (
        f"{archive}: no space left on the disk of {target} while writing {target}/top/big.bin: extracting it needs "
        "2.0 MiB (the members' declared sizes, plus file system overhead), 1.0 MiB is free; nothing was extracted. "
        "Free space there, or extract it into a folder on another disk."
    )
    assert listing(small_disk) == ["data"]  # the partial extraction is gone
    assert shutil.disk_usage(small_disk).free == 1 << 20


# --- A rerun removes the staging folder of a killed extraction -----------------------------------------------

KILLED_EXTRACTION = """
import sys, tarfile, time
from rambo.harness.extract import extract

write = tarfile.TarFile.makefile

def write_then_hang(self, member, path):
    write(self, member, path)
    if member.name == "top/f1.bin":  # half of the archive is in the staging folder
        print(path, flush=True)
        time.sleep(600)

tarfile.TarFile.makefile = write_then_hang
extract(sys.argv[1], sys.argv[2])
"""


def test_a_rerun_removes_the_staging_folder_of_a_killed_extraction(tmp_path, target, capsys):
    payload = {f"top/f{i}.bin": bytes([i]) * 5000 for i in range(4)}
    archive = make_tar(tmp_path / "a.tar", list(payload.items()))
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_EXTRACTION, str(archive), str(target)], stdout=subprocess.PIPE, text=True
    )
    try:
        written = Path(child.stdout.readline().strip())
    finally:
        child.kill()  # SIGKILL: no finally, no atexit
        child.wait()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    staging = target / written.relative_to(target).parts[0]
    assert staging.name.startswith(".a.tar.extracting-") and written.read_bytes() == payload["top/f1.bin"]
    host, pid, start, _ = staging.name.removeprefix(".a.tar.extracting-").rsplit("-", 3)
    assert int(pid) == child.pid
    # Beside it: another archive's staging folder, a file that is not a staging folder, and a staging
    # folder of this archive whose process runs (this one): none of them is touched.
    others = [
        target / f".b.tar.extracting-{host}-{child.pid}-{start}-abcdefgh",
        target
        / f".a.tar.extracting-{host}-{os.getpid()}-{Path(f'/proc/{os.getpid()}/stat').read_text().rsplit(')', 1)[1].split()[19]}-abcdefgh",
    ]
    for folder in others:
        folder.mkdir()
        (folder / "partial.bin").write_bytes(b"partial")
    (target / ".a.tar.extracting-notes").write_text("not a folder")

    assert extract(archive, target) == [target / "top"]

    assert not staging.exists()
    assert f"removed {staging}: the staging folder of an extraction of a.tar whose process {child.pid} has ended" in (
        capsys.readouterr().err
    )
    assert {f"top/{name}": (target / "top" / name).read_bytes() for name in sorted(os.listdir(target / "top"))} == (
        payload
    )
    assert all((folder / "partial.bin").read_bytes() == b"partial" for folder in others)
    assert listing(target) == sorted(
        ["kept.txt", ".a.tar.extracting-notes", "top", *payload]
        + [p for folder in others for p in (folder.name, f"{folder.name}/partial.bin")]
    )


def test_a_staging_folder_that_may_belong_to_a_running_extraction_is_left(tmp_path, target, capsys):
    archive = make_tar(tmp_path / "a.tar", [("top/a.txt", b"a")])
    elsewhere = target / ".a.tar.extracting-other-host.example-4242-123-abcdefgh"
    unrecorded = target / ".a.tar.extracting-k2j4_x9q"  # made by a version that did not record its process
    for folder in (elsewhere, unrecorded):
        folder.mkdir()
    assert remove_stale_staging(archive, target) == []
    extract(archive, target)
    assert elsewhere.is_dir() and unrecorded.is_dir() and (target / "top/a.txt").read_bytes() == b"a"
    warnings = [
        f"warning: {unrecorded} is left as it is: the staging folder of an extraction of a.tar by a process an "
        f"earlier version did not record, which may still run; delete it if no extraction of a.tar into {target} runs",
        f"warning: {elsewhere} is left as it is: the staging folder of an extraction of a.tar by process 4242 on "
        f"other-host.example, which may still run; delete it if no extraction of a.tar into {target} runs",
    ]
    assert capsys.readouterr().err.splitlines() == warnings * 2  # by remove_stale_staging, then by extract
