import os
import stat

import pytest
import torch

from rambo.harness.atomic import atomic_path, save_torch, write_json, write_text


def test_write_text_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "metrics.json"
    write_text(path, "one")
    write_text(path, "two")
    assert path.read_text() == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["metrics.json"]


def test_files_are_readable_like_any_other_output(tmp_path):
    """mkstemp creates 0600 files; an output must get 0666 less the umask (0644 under umask 022)."""
    previous = os.umask(0o022)
    try:
        write_json(tmp_path / "metrics.json", {"b": 1, "a": 2})
        save_torch({"epoch": 1}, tmp_path / "checkpoint.pt")
    finally:
        os.umask(previous)
    for name in ("metrics.json", "checkpoint.pt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
    assert (tmp_path / "metrics.json").read_text() == '{\n  "a": 2,\n  "b": 1\n}'  # sorted keys: stable diffs


def test_a_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_torch({"epoch": 1}, path)

    def crash(obj, f):
        f.write(b"half a file")  # through the open temporary file
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_torch({"epoch": 2}, path)
    monkeypatch.undo()
    assert torch.load(path)["epoch"] == 1
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


def test_atomic_path_keeps_the_suffix_a_writer_needs(tmp_path):
    with atomic_path(tmp_path / "scores.npz", suffix=".npz") as temporary:
        assert temporary.suffix == ".npz" and temporary.parent == tmp_path
        temporary.write_bytes(b"x")
    assert (tmp_path / "scores.npz").read_bytes() == b"x"


def test_folders_made_by_mkdtemp_get_default_permissions(tmp_path):
    import tempfile

    from rambo.harness.atomic import give_default_permissions

    folder = tempfile.mkdtemp(dir=tmp_path)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    previous = os.umask(0o022)
    try:
        give_default_permissions(folder)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o755
